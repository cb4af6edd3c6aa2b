-- The session registry: one row per agent session, kept current by the hook-event handlers
-- (engine/src/sessions.rs holds every statement on it). Times are unix milliseconds.
CREATE TABLE sessions (
    key                    TEXT PRIMARY KEY,          -- relayq session key (hook rows are ordered by it)
    agent                  TEXT    NOT NULL,          -- claude, codex, gemini
    native_session_id      TEXT,                      -- the agent's own session id
    cwd                    TEXT,
    transcript_path        TEXT,
    state                  TEXT    NOT NULL DEFAULT 'active' CHECK (state IN ('active', 'ended')),
    started_at             INTEGER NOT NULL,          -- first event seen (or session_start)
    ended_at               INTEGER,
    last_activity_at       INTEGER NOT NULL,
    last_user_input        TEXT,
    current_turn           INTEGER NOT NULL DEFAULT 0, -- turns started (user_prompt_submit) so far
    turn_running           INTEGER NOT NULL DEFAULT 0, -- 1 from user_prompt_submit to agent_stop
    last_assistant_message TEXT
);

-- The earliest due time of a queue's pending rows: when a claimer must look again.
CREATE INDEX queue_rows_due ON queue_rows (queue, next_attempt_at) WHERE state = 'pending';
