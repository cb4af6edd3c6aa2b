-- An agent's permission question answered from the chat: one row per question, from the time
-- the agent asks until the answer reached it (engine/src/approvals.rs holds every statement
-- on this table, and the states' meaning).
CREATE TABLE approvals (
    id           TEXT PRIMARY KEY,      -- short, random, typeable: `/allow k3x9p`
    session      TEXT    NOT NULL,
    agent        TEXT    NOT NULL,      -- claude | codex | gemini
    tool         TEXT,                  -- Bash, Edit, run_shell_command…
    action       TEXT    NOT NULL,      -- what it will do: the command, the file, a diff summary
    means        TEXT    NOT NULL CHECK (means IN ('hook', 'keys')),
    waiter_pid   INTEGER,               -- the `relayq hook` process waiting to print the answer
    session_rules TEXT,                 -- JSON: what "allow for this session" applies; NULL: not offered
    origin       TEXT,                  -- where it is asked: the session's chat
    chat         TEXT,
    thread       TEXT,
    question_row INTEGER,               -- the outbound row of the question (its receipt: the message id)
    asked_at     INTEGER NOT NULL,      -- unix ms
    expires_at   INTEGER NOT NULL,
    state        TEXT    NOT NULL DEFAULT 'asked'
                 CHECK (state IN ('asked', 'allowed', 'denied', 'expired', 'withdrawn')),
    scope        TEXT CHECK (scope IN ('once', 'session')),
    answered_by  TEXT,                  -- a person's name (or `relayq approvals`, `expiry`)
    answered_by_id TEXT,                -- their platform id
    answered_via TEXT,                  -- telegram:bot, cli, api, expiry, agent
    answered_at  INTEGER,
    note         TEXT,                  -- why it was withdrawn or expired
    reached_at   INTEGER,               -- when the agent got the answer
    told_at      INTEGER                -- when the chat was told the outcome
);
CREATE INDEX approvals_open ON approvals (expires_at) WHERE state = 'asked';
CREATE INDEX approvals_untold ON approvals (answered_at) WHERE state <> 'asked' AND told_at IS NULL;
CREATE INDEX approvals_by_session ON approvals (session, asked_at);
