#!/usr/bin/env bash
# The job-queue peer of the PostgreSQL benchmark: graphile-worker 0.16.6 (the newest that runs
# on Debian's Node.js 20), pinned, from npm, into ~/.cache/relayq-bench-graphile (outside the tree).
set -euo pipefail
dir="${HOME}/.cache/relayq-bench-graphile"
mkdir -p "$dir"
cd "$dir"
[ -f package.json ] || echo '{"name":"relayq-bench-graphile","private":true}' > package.json
npm install --no-audit --no-fund --silent graphile-worker@0.16.6
echo "$dir/node_modules"
