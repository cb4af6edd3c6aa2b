#!/usr/bin/env bash
# Installs the real agent CLIs the tests run (tests/real_agents.rs), pinned, outside the
# project tree: $RELAYQ_AGENTS_DIR, else ~/.cache/relayq-test-agents. Needs Node.js and npm.
#
# Kept current by hand: `npm view @anthropic-ai/claude-code version` (and the others) says the
# newest release; `RELAYQ_AGENTS=latest tests/agents/install.sh` installs the newest of each
# into $RELAYQ_AGENTS_DIR (give it a folder of its own) to run `cargo test real_agents` on them
# before moving the pins below. CI runs the pins, so a release cannot break it overnight.
set -euo pipefail
dir="${RELAYQ_AGENTS_DIR:-$HOME/.cache/relayq-test-agents}"
versions=(@anthropic-ai/claude-code@2.1.332 @openai/codex@0.171.0 @google/gemini-cli@0.61.0)
if [ "${RELAYQ_AGENTS:-}" = latest ]; then
  versions=(@anthropic-ai/claude-code@latest @openai/codex@latest @google/gemini-cli@latest)
fi
if [ -x "$dir/node_modules/.bin/claude" ] && [ -x "$dir/node_modules/.bin/codex" ] \
   && [ -x "$dir/node_modules/.bin/gemini" ] && [ "$(cat "$dir/.versions" 2>/dev/null)" = "${versions[*]}" ]; then
  exit 0
fi
mkdir -p "$dir"
# Not --ignore-scripts: Claude Code's postinstall places its native binary.
npm install --prefix "$dir" --no-audit --no-fund --loglevel=error "${versions[@]}"
echo "${versions[*]}" > "$dir/.versions"
