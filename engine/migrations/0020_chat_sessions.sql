-- Sessions from the chat (engine/src/chat_sessions/, every statement in
-- engine/src/storage/chat_sessions.rs). Times are unix milliseconds.

-- A session command a person typed in a chat (`/new`, `/stop`, `/resume`), written with the
-- batch that read it, before anything starts: a crash neither starts two agents nor forgets
-- the request. The node it names carries it out and writes the outcome.
CREATE TABLE session_commands (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    origin      TEXT    NOT NULL,   -- the source's origin (telegram:NAME)
    chat        TEXT    NOT NULL,
    thread      TEXT,               -- the topic it was typed in
    message_id  TEXT,               -- the platform's id of the message (a second read is one command)
    user_id     TEXT,
    user_name   TEXT    NOT NULL,
    command     TEXT    NOT NULL,   -- the ChatCommand, as JSON
    state       TEXT    NOT NULL
        CHECK (state IN ('confirming', 'ready', 'running', 'listed', 'done', 'failed')),
    node        TEXT,               -- the node that carries it out; NULL: none yet
    session     TEXT,               -- the session it makes or ends
    detail      TEXT,               -- what it found (JSON: the conversations `/resume` listed)
    outcome     TEXT,               -- what the chat was told at the end
    lease_owner TEXT,               -- the daemon carrying it out, until lease_until
    lease_until INTEGER,
    asked_at    INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL
);
CREATE UNIQUE INDEX session_commands_message ON session_commands (origin, chat, message_id);
CREATE INDEX session_commands_open ON session_commands (node, state)
    WHERE state IN ('ready', 'running');

-- A session started (or resumed) from a chat, and where it talks: its topic, or the chat.
CREATE TABLE chat_sessions (
    session    TEXT    PRIMARY KEY, -- the relayq session key, also its tmux session's name
    origin     TEXT    NOT NULL,
    chat       TEXT    NOT NULL,
    thread     TEXT,                -- its topic (forum topic id, Slack thread ts); NULL: the chat
    project    TEXT    NOT NULL,
    agent      TEXT    NOT NULL,
    node       TEXT    NOT NULL,    -- where its agent runs
    command    INTEGER NOT NULL,    -- the session_commands row that made it
    state      TEXT    NOT NULL CHECK (state IN ('starting', 'running', 'ended')),
    resumed    TEXT,                -- the agent's own conversation id it resumed
    created_at INTEGER NOT NULL,
    ended_at   INTEGER
);
CREATE UNIQUE INDEX chat_sessions_topic ON chat_sessions (origin, chat, thread)
    WHERE thread IS NOT NULL;
CREATE INDEX chat_sessions_chat ON chat_sessions (origin, chat, created_at);

-- The session a chat without topics talks to now (its last `/new`, or a tap in `/sessions`).
CREATE TABLE chat_current (
    origin  TEXT    NOT NULL,
    chat    TEXT    NOT NULL,
    session TEXT    NOT NULL,
    set_at  INTEGER NOT NULL,
    PRIMARY KEY (origin, chat)
);

-- The projects each node's config defines (`[projects.NAME]`), published at start and at each
-- reload, so the node that reads a chat knows what another node hosts.
CREATE TABLE projects (
    name          TEXT    PRIMARY KEY,
    node          TEXT    NOT NULL,  -- the node that hosts it
    agents        TEXT    NOT NULL,  -- the agents allowed there, comma-separated, the default first
    published_at  INTEGER NOT NULL
);
