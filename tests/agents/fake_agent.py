#!/usr/bin/env python3
"""A fast stand-in for an agent CLI in a tmux pane, for relayq's tests: it reproduces, on
purpose and on demand, each behaviour of the real CLIs that relayq must handle (see
shared/design/REAL-AGENTS.md and tests/agents/README.md). It runs relayq's hook command as the
real CLIs do, with payloads shaped like tests/fixtures/<agent>/captured/.

Settings (environment):
  FAKE_AGENT          claude | codex | gemini: event names and payload shapes
  FAKE_HOOK           JSON list: the hook command (relayq ... hook --agent X)
  FAKE_LOG            file: one JSON line per thing that happened (turns, approvals, hooks)
  FAKE_TURN_MS        how long a turn takes (default 300; a prompt with "slow" takes 3000)
  FAKE_PASTE_WINDOW_MS  an Enter this soon after a paste ends is a newline (Gemini; default 0)
  FAKE_BUSY           queue | fold: input entered during a turn (Claude queues it as a turn of
                      its own; Codex folds it into the running turn)
  FAKE_IDLE_MS        after a turn, an idle reminder this much later (Claude; 0: none)
  FAKE_SIDE_THREAD    1: on the first prompt, a side thread's notify (Codex's task title)
  FAKE_NOTIFY         JSON list: Codex's notify program (gets the JSON as last argument)
  FAKE_HOOKS          0: no hooks at all (only notify)
  FAKE_PROMPT_HOOK    0: no prompt-submit hook (a lost or failing one)
  FAKE_DIALOG_LATE_MS Gemini: the dialog is drawn this long after its Notification hook ran
  FAKE_START_DELAY_MS a slow start: this long before its SessionStart hook runs
  FAKE_EXIT_DELAY_MS  a slow exit: this long between /exit (or /quit) and leaving
  FAKE_STEP_MS        how long each tool step of a "steps N" prompt takes (default 400)

Conversations: with FAKE_CONVERSATIONS=1, each turn is kept as Claude Code keeps it,
in $HOME/.claude/projects/<cwd, each character but A-Z a-z 0-9 made ->/<session id>.jsonl;
`--resume ID` (Claude, Gemini) or `resume ID` (Codex) goes on with that conversation, and an
answer then names the conversation's first prompt ("earlier: ...").

Prompts: "/exit" and "/quit" end it as the CLIs' own exit commands do; "/clear" starts a new
conversation in the same process (SessionEnd with reason "clear", then SessionStart with
source "clear", under a new session id); "tool" asks for a permission in a dialog whose highlighted default is Yes (Enter
approves, typed text is ignored, Escape denies); Claude and Codex also run their
PermissionRequest hook and take its decision output (Claude while the dialog is drawn, Codex
before it); "long" answers 10 000 characters; "lose"
ends its turn without the turn-end hook (a crash, a failed hook); "steps N" runs N tool steps
(a shell command each, with its pre- and post-tool hooks) before it answers; "stream" writes
its answer a line at a time first (Claude's MessageDisplay, Gemini's AfterModel hooks);
"lengthy" answers 9 000 characters that begin with the prompt. While a turn runs, the
bottom line says "esc to interrupt", as the real CLIs do.
"""
import json, os, select, subprocess, sys, termios, threading, time, tty, uuid

AGENT = os.environ.get("FAKE_AGENT", "claude")
HOOK = json.loads(os.environ.get("FAKE_HOOK", "[]"))
LOG = os.environ.get("FAKE_LOG")
TURN_MS = int(os.environ.get("FAKE_TURN_MS", "300"))
PASTE_WINDOW = int(os.environ.get("FAKE_PASTE_WINDOW_MS", "0")) / 1000
BUSY = os.environ.get("FAKE_BUSY", "queue")
IDLE_MS = int(os.environ.get("FAKE_IDLE_MS", "0"))
SIDE_THREAD = os.environ.get("FAKE_SIDE_THREAD") == "1"
NOTIFY = json.loads(os.environ.get("FAKE_NOTIFY", "[]"))
HOOKS = os.environ.get("FAKE_HOOKS", "1") == "1"
PROMPT_HOOK = os.environ.get("FAKE_PROMPT_HOOK", "1") == "1"
DIALOG_LATE_MS = int(os.environ.get("FAKE_DIALOG_LATE_MS", "0"))
START_DELAY = int(os.environ.get("FAKE_START_DELAY_MS", "0")) / 1000
EXIT_DELAY = int(os.environ.get("FAKE_EXIT_DELAY_MS", "0")) / 1000
STEP_MS = int(os.environ.get("FAKE_STEP_MS", "400"))
MARKER = {"claude": "❯", "codex": "›", "gemini": ">"}[AGENT]
# The permission dialog as each CLI draws it (Gemini CLI 0.61 frames it and numbers its
# choices: 1 and 2 allow, 3 or Escape deny; the others: Enter allows, Escape denies).
DIALOG = {
    "gemini": "╭────────────────────────────────────╮\n"
              "│ ? Shell  touch probe.txt           │\n"
              "│ Allow execution of [Shell]?        │\n"
              "│ ● 1. Allow once                    │\n"
              "│   2. Allow for this session        │\n"
              "│   3. No, suggest changes (esc)     │\n"
              "╰────────────────────────────────────╯",
}.get(AGENT, " Do you want to proceed?\n ❯ 1. Yes\n   2. No")
SESSION = str(uuid.uuid4())
CWD = os.getcwd()
ARGS = sys.argv[1:]
RESUMED = None
for flag in ("--resume", "resume"):
    if flag in ARGS and ARGS.index(flag) + 1 < len(ARGS):
        RESUMED = ARGS[ARGS.index(flag) + 1]
        SESSION = RESUMED


def transcript():
    home = os.environ.get("HOME")
    if os.environ.get("FAKE_CONVERSATIONS") != "1" or not home:
        return None
    munged = "".join(c if c.isalnum() and c.isascii() else "-" for c in CWD)
    return os.path.join(home, ".claude", "projects", munged, SESSION + ".jsonl")


def earlier_prompts():
    path = transcript()
    if not path or not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(l)["message"]["content"] for l in f
                if l.strip() and json.loads(l).get("type") == "user"]


EARLIER = earlier_prompts() if RESUMED else []


def keep_turn(prompt, answer):
    path = transcript()
    if not path:
        return
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "a") as f:
        f.write(json.dumps({"type": "user", "sessionId": SESSION,
                            "message": {"role": "user", "content": prompt}}) + "\n")
        f.write(json.dumps({"type": "assistant", "sessionId": SESSION,
                            "message": {"role": "assistant", "content": answer}}) + "\n")

lock = threading.RLock()
out = sys.stdout
state = {"buf": bytearray(), "busy": False, "dialog": None, "queued": [], "folded": [],
         "thread_inputs": [], "turns": 0, "idle_timer": None}


def log(**what):
    if LOG:
        with open(LOG, "a") as f:
            f.write(json.dumps(what) + "\n")


def hook(name, **fields):
    if not HOOKS or not HOOK:
        return
    payload = {"session_id": SESSION, "transcript_path": f"/tmp/{SESSION}.jsonl", "cwd": CWD,
               "hook_event_name": name, **fields}
    subprocess.run(HOOK, input=json.dumps(payload).encode(), stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    log(hook=name, at=time.time())


def ask_hook(**fields):
    """Runs the PermissionRequest hook and reads its decision output, as Claude Code and Codex
    do: True (allow), False (deny), or None (no decision: the dialog decides)."""
    if not HOOKS or not HOOK:
        return None
    payload = {"session_id": SESSION, "transcript_path": f"/tmp/{SESSION}.jsonl", "cwd": CWD,
               "hook_event_name": "PermissionRequest", **fields}
    done = subprocess.run(HOOK, input=json.dumps(payload).encode(), stdout=subprocess.PIPE,
                          stderr=subprocess.DEVNULL)
    out_text = done.stdout.decode(errors="replace").strip()
    log(hook="PermissionRequest", hook_output=out_text)
    if not out_text:
        return None
    try:
        behavior = json.loads(out_text)["hookSpecificOutput"]["decision"]["behavior"]
    except (ValueError, KeyError, TypeError):
        log(hook_output_unreadable=out_text)
        return None
    return behavior == "allow"


def notify(thread, inputs, answer):
    if AGENT != "codex" or not NOTIFY:
        return
    payload = {"type": "agent-turn-complete", "thread-id": thread, "turn-id": str(uuid.uuid4()),
               "cwd": CWD, "client": "codex-tui", "input-messages": inputs,
               "last-assistant-message": answer}
    subprocess.run(NOTIFY + [json.dumps(payload)], stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    log(notify=thread == SESSION and "main" or "side")


def draw(line=None):
    """Prints a conversation line (if any), then the input box on the bottom line."""
    with lock:
        out.write("\r\033[K")
        if state.get("dialog_drawn"):
            # a closed dialog leaves the screen, as in the real CLIs
            out.write(f"\033[{DIALOG.count(chr(10))}A\r\033[J")
            state["dialog_drawn"] = False
        if line is not None:
            out.write(line.replace("\n", "\r\n") + "\r\n")
        if state["dialog"]:
            out.write(DIALOG.replace("\n", "\r\n"))
            state["dialog_drawn"] = True
        else:
            busy = "  (esc to interrupt)" if state["busy"] else ""
            out.write(f"{MARKER} " + text().replace("\n", " ⏎ ") + busy)
        out.flush()


def text():
    return state["buf"].decode("utf-8", "replace")


def answer_to(prompt):
    if "lengthy" in prompt:
        para = ("word " * 99 + "end.\n\n")
        return (prompt + "\n\n" + para * 21)[:9000]
    if "long" in prompt:
        para = ("word " * 99 + "end.\n\n")
        return (para * 21)[:10000]
    if EARLIER:
        return f"echo: {prompt} (earlier: {EARLIER[0]})"
    return f"echo: {prompt}"


def notify_permission():
    """Gemini CLI's only word that a dialog asks: a Notification hook (no hook decides)."""
    hook("Notification", notification_type="ToolPermission",
         message="Tool Confirm Shell Command requires execution",
         details={"type": "exec", "command": "touch probe.txt"})


def turn(prompt):
    """One turn: a prompt-submit hook, maybe a dialog, the answer, the turn-end hook."""
    with lock:
        state["busy"] = True
        state["turns"] += 1
        first = state["turns"] == 1
        state["thread_inputs"].append(prompt)
    log(turn_start=prompt)
    if state["idle_timer"]:
        state["idle_timer"].cancel()
    if AGENT == "gemini":
        if PROMPT_HOOK:
            hook("BeforeAgent", prompt=prompt)
    else:
        if first and AGENT == "codex":
            hook("SessionStart", source="startup")
        if PROMPT_HOOK:
            hook("UserPromptSubmit", prompt=prompt)
    draw(f"{MARKER} {prompt}")
    time.sleep((3000 if "slow" in prompt else TURN_MS) / 1000)
    run_steps(prompt)
    if "tool" in prompt:
        decided = threading.Event()
        ask = dict(tool_name="Bash",
                   tool_input={"command": "touch probe.txt", "description": "Create the probe file"})
        if AGENT == "claude":
            ask["permission_suggestions"] = [
                {"type": "addDirectories", "directories": [CWD], "destination": "session"}]
        # Codex runs its PermissionRequest hook before any dialog: a decision skips it.
        told = ask_hook(**ask) if AGENT == "codex" else None
        if told is not None:
            state["dialog_answer"] = told
            decided.set()
        if AGENT == "gemini" and DIALOG_LATE_MS:
            # Gemini CLI under load: the hook has run before the dialog is drawn.
            notify_permission()
            time.sleep(DIALOG_LATE_MS / 1000)
        with lock:
            state["dialog"] = None if told is not None else decided
        draw()
        if told is None:
            log(dialog_shown=True)
        if told is not None:
            pass
        elif AGENT == "gemini":
            if not DIALOG_LATE_MS:
                notify_permission()
        else:
            # Claude Code draws the dialog while the hook runs; whichever answers first wins.
            def from_hook():
                allowed = ask_hook(**ask)
                with lock:
                    if allowed is not None and state["dialog"] is decided and not decided.is_set():
                        state["dialog_answer"] = allowed
                        decided.set()
            threading.Thread(target=from_hook, daemon=True).start()
        decided.wait()
        with lock:
            approved = state["dialog_answer"]
            state["dialog"] = None
        log(approved=approved)
        if approved:
            open(os.path.join(CWD, f"approved-{state['turns']}"), "w").close()
            hook("PostToolUse", tool_name="Bash", tool_input={"command": "touch probe.txt"})
        else:
            with lock:
                state["busy"] = False
            draw("  ⎿  Interrupted · What should the agent do instead?")
            return finish_turn(None)
    while True:
        with lock:
            folded, state["folded"] = state["folded"], []
        if not folded:
            break
        prompt = prompt + "\n" + "\n".join(folded)
        time.sleep(TURN_MS / 1000)
    answer = answer_to(prompt)
    if "stream" in prompt:
        answer = "\n".join(f"line {k} of the answer to: {prompt}" for k in range(1, 5))
        stream(answer)
    keep_turn(prompt, answer)
    draw(f"● {answer}")
    if SIDE_THREAD and first:
        notify(str(uuid.uuid4()), ["Generate a concise, single-line task title of at most "
                                   "36 characters.\n\nUser prompt:\n" + prompt], "Reply to the user")
    if "lose" in prompt:
        log(turn_end_unreported=prompt)
    elif AGENT == "gemini":
        hook("AfterAgent", prompt=prompt, prompt_response=answer)
    else:
        hook("Stop", last_assistant_message=answer, stop_hook_active=False)
    notify(SESSION, list(state["thread_inputs"]), answer)
    log(turn_end=prompt, answer_chars=len(answer))
    finish_turn(answer)


def run_steps(prompt):
    """ "steps N": N tool calls, each announced and finished by the agent's tool hooks."""
    words = prompt.split()
    if "steps" not in words or words.index("steps") + 1 >= len(words):
        return
    try:
        n = int(words[words.index("steps") + 1])
    except ValueError:
        return
    before, after, tool = (("BeforeTool", "AfterTool", "run_shell_command") if AGENT == "gemini"
                           else ("PreToolUse", "PostToolUse", "Bash"))
    for k in range(1, n + 1):
        command = {"command": f"echo step {k} of {n}"}
        hook(before, tool_name=tool, tool_input=command)
        draw(f"● {tool}({command['command']})")
        time.sleep(STEP_MS / 1000)
        hook(after, tool_name=tool, tool_input=command, tool_response={"success": True})
    log(steps=n)


def stream(answer):
    """The answer written a line at a time, as the CLIs display it while it streams."""
    for k, line in enumerate(answer.split("\n")):
        if AGENT == "gemini":
            hook("AfterModel", llm_response={"candidates": [
                {"content": {"role": "model", "parts": [{"text": line + "\n"}]}}]})
        elif AGENT == "claude":
            hook("MessageDisplay", turn_id="t", message_id="m", index=k, final=False,
                 delta=line + "\n")
        draw(f"  {line}")
        time.sleep(STEP_MS / 1000)


def finish_turn(answer):
    with lock:
        state["busy"] = False
        queued = state["queued"].pop(0) if state["queued"] else None
    draw()
    if queued is not None:
        return turn(queued)
    if IDLE_MS and answer is not None and AGENT == "claude":
        t = threading.Timer(IDLE_MS / 1000, lambda: hook(
            "Notification", message="Claude is waiting for your input",
            notification_type="idle_prompt"))
        state["idle_timer"] = t
        t.start()


def submit():
    """A prompt entered; False when it was the CLI's own exit command (`/exit`, `/quit`)."""
    with lock:
        prompt = text().strip()
        state["buf"] = bytearray()
        busy = state["busy"]
        if prompt in ("/exit", "/quit"):
            log(exit_command=prompt)
            time.sleep(EXIT_DELAY)
            return False
        if prompt == "/clear" and AGENT != "codex":
            # As Claude Code and Gemini CLI do: the conversation ends and a new one starts in
            # the same process, under a new session id.
            global SESSION
            hook("SessionEnd", reason="clear")
            SESSION = str(uuid.uuid4())
            hook("SessionStart", source="clear")
            log(cleared=SESSION)
            draw()
            return True
        if not prompt:
            draw()
            return True
        if busy:
            log(mid_turn=prompt, busy=BUSY)
            (state["folded"] if BUSY == "fold" else state["queued"]).append(prompt)
            draw()
            return True
    threading.Thread(target=turn, args=(prompt,), daemon=True).start()
    return True


def main():
    fd = sys.stdin.fileno()
    saved = termios.tcgetattr(fd)
    tty.setraw(fd)
    out.write("\033[?2004h")
    log(started=SESSION, argv=ARGS, resumed=RESUMED, at=time.time())
    time.sleep(START_DELAY)
    log(start_up_done=time.time())
    if AGENT != "codex":
        hook("SessionStart", source="startup")
    draw("fake agent ready")
    pasting, paste_end, data = False, 0.0, b""
    try:
        while True:
            chunk = os.read(fd, 4096)
            if not chunk:
                break
            data += chunk
            while data:
                if data.startswith(b"\033[200~"):
                    pasting, data = True, data[6:]
                    continue
                if data.startswith(b"\033[201~"):
                    pasting, data, paste_end = False, data[6:], time.monotonic()
                    log(pasted=text())
                    draw()
                    continue
                if len(data) < 6 and b"\033[20"[:len(data)] == data[:4]:
                    # Maybe the start of a paste marker: wait briefly for the rest, else it is
                    # a key (Escape).
                    if select.select([fd], [], [], 0.05)[0]:
                        break
                byte, data = data[:1], data[1:]
                dialog = state["dialog"]
                if dialog is not None and not pasting:
                    if byte in (b"\r", b"\n") or (AGENT == "gemini" and byte in (b"1", b"2")):
                        state["dialog_answer"] = True
                        dialog.set()
                    elif byte == b"\033" or (AGENT == "gemini" and byte == b"3"):
                        state["dialog_answer"] = False
                        dialog.set()
                    else:
                        log(ignored_by_dialog=byte.decode(errors="replace"))
                    continue
                if byte == b"\x03":
                    return
                if byte in (b"\r", b"\n") and not pasting:
                    if time.monotonic() - paste_end < PASTE_WINDOW:
                        state["buf"] += b"\n"
                        log(enter_as_newline=True)
                        draw()
                    elif not submit():
                        return
                    continue
                if byte in (b"\r", b"\n"):
                    state["buf"] += b"\n"
                    continue
                if byte == b"\x7f":
                    state["buf"] = state["buf"][:-1]
                else:
                    state["buf"] += byte
                if not pasting:
                    draw()
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)
        if AGENT != "codex":
            hook("SessionEnd", reason="exit")


if __name__ == "__main__":
    main()
