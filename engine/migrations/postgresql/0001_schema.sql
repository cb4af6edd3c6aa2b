-- relayq's schema on PostgreSQL: the SQLite schema as its 14 migrations leave it (see
-- ../*.sql for why each column is there), with PostgreSQL's types: every time and count a
-- BIGINT (unix milliseconds, as on SQLite), flags BOOLEAN, ids from an identity that is never
-- reused. A test holds both schemas to the same tables and columns.

CREATE TABLE queue_rows (
    id               BIGINT  GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue            TEXT    NOT NULL,
    key              TEXT    NOT NULL,
    dedup_key        TEXT,
    payload          TEXT    NOT NULL,
    state            TEXT    NOT NULL DEFAULT 'pending'
                     CHECK (state IN ('pending', 'leased', 'delivered', 'dead', 'expired')),
    attempts         BIGINT  NOT NULL DEFAULT 0,
    created_at       BIGINT  NOT NULL,
    next_attempt_at  BIGINT  NOT NULL,
    lease_owner      TEXT,
    lease_token      BIGINT  NOT NULL DEFAULT 0,
    lease_expires_at BIGINT,
    last_error       TEXT,
    finished_at      BIGINT,
    reason           TEXT,
    receipt          TEXT,
    took_ms          BIGINT,
    send_started     BIGINT
);
CREATE UNIQUE INDEX queue_rows_dedup ON queue_rows (queue, dedup_key) WHERE dedup_key IS NOT NULL;
CREATE INDEX queue_rows_active_key ON queue_rows (queue, key, id) WHERE state IN ('pending', 'leased');
CREATE INDEX queue_rows_pending ON queue_rows (queue, id) WHERE state = 'pending';
CREATE INDEX queue_rows_leased ON queue_rows (lease_expires_at) WHERE state = 'leased';
CREATE INDEX queue_rows_due ON queue_rows (queue, next_attempt_at) WHERE state = 'pending';
CREATE INDEX queue_rows_finished ON queue_rows (queue, state, finished_at)
    WHERE state NOT IN ('pending', 'leased');
CREATE INDEX queue_rows_dead ON queue_rows (id) WHERE state = 'dead';

CREATE TABLE sessions (
    key                    TEXT    PRIMARY KEY,
    agent                  TEXT    NOT NULL,
    native_session_id      TEXT,
    cwd                    TEXT,
    transcript_path        TEXT,
    state                  TEXT    NOT NULL DEFAULT 'active' CHECK (state IN ('active', 'ended')),
    started_at             BIGINT  NOT NULL,
    ended_at               BIGINT,
    last_activity_at       BIGINT  NOT NULL,
    last_user_input        TEXT,
    current_turn           BIGINT  NOT NULL DEFAULT 0,
    turn_running           BOOLEAN NOT NULL DEFAULT FALSE,
    last_assistant_message TEXT,
    agent_state            TEXT
        CHECK (agent_state IN ('starting', 'ready', 'working', 'awaiting_approval', 'gone')),
    agent_state_since      BIGINT,
    agent_hooks            BOOLEAN NOT NULL DEFAULT FALSE,
    pane                   TEXT,
    -- The node a session's agent runs on (its hooks' node): only that node delivers the
    -- session's inbound rows. NULL: any node.
    node                   TEXT
);

CREATE TABLE session_origins (
    session    TEXT   PRIMARY KEY,
    origin     TEXT   NOT NULL,
    chat       TEXT   NOT NULL,
    thread     TEXT,
    updated_at BIGINT NOT NULL
);

CREATE TABLE source_offsets (
    source     TEXT   PRIMARY KEY,
    "offset"   TEXT   NOT NULL,
    updated_at BIGINT NOT NULL
);

CREATE TABLE channel_penalties (
    channel TEXT   PRIMARY KEY,
    until   BIGINT NOT NULL,
    reason  TEXT   NOT NULL
);

CREATE TABLE pauses (
    queue     TEXT   NOT NULL,
    key       TEXT   NOT NULL,
    paused_at BIGINT NOT NULL,
    PRIMARY KEY (queue, key)
);

CREATE TABLE approvals (
    id             TEXT   PRIMARY KEY,
    session        TEXT   NOT NULL,
    agent          TEXT   NOT NULL,
    tool           TEXT,
    action         TEXT   NOT NULL,
    means          TEXT   NOT NULL CHECK (means IN ('hook', 'keys')),
    waiter_pid     BIGINT,
    session_rules  TEXT,
    origin         TEXT,
    chat           TEXT,
    thread         TEXT,
    question_row   BIGINT,
    asked_at       BIGINT NOT NULL,
    expires_at     BIGINT NOT NULL,
    state          TEXT   NOT NULL DEFAULT 'asked'
                   CHECK (state IN ('asked', 'allowed', 'denied', 'expired', 'withdrawn')),
    scope          TEXT   CHECK (scope IN ('once', 'session')),
    answered_by    TEXT,
    answered_by_id TEXT,
    answered_via   TEXT,
    answered_at    BIGINT,
    note           TEXT,
    reached_at     BIGINT,
    told_at        BIGINT,
    pressed_at     BIGINT,
    unreached      TEXT
);
CREATE INDEX approvals_open ON approvals (expires_at) WHERE state = 'asked';
CREATE INDEX approvals_untold ON approvals (answered_at) WHERE state <> 'asked' AND told_at IS NULL;
CREATE INDEX approvals_by_session ON approvals (session, asked_at);
CREATE INDEX approvals_keys_due ON approvals (answered_at)
    WHERE means = 'keys' AND state <> 'asked' AND reached_at IS NULL AND unreached IS NULL;

-- The daemons sharing this database, each a node with a name: who it is now (its instance,
-- the owner written on its leases), when it started and last said it was alive.
CREATE TABLE nodes (
    name       TEXT   PRIMARY KEY,
    instance   TEXT   NOT NULL,
    started_at BIGINT NOT NULL,
    seen_at    BIGINT NOT NULL,
    stopped_at BIGINT
);

-- A source that must have one reader (Telegram's getUpdates) is read by the node holding its
-- lease, renewed while it reads; another node takes it once it expires.
CREATE TABLE source_leases (
    source     TEXT   PRIMARY KEY,
    node       TEXT   NOT NULL,
    instance   TEXT   NOT NULL,
    expires_at BIGINT NOT NULL
);

-- Shared pacing (a generic cell rate algorithm): per budget (a bot, a chat), the time the
-- next send is due at; every node takes its turns here.
CREATE TABLE budgets (
    key TEXT   PRIMARY KEY,
    tat BIGINT NOT NULL
);

-- Wake-ups across nodes: a row written pending (by any node, the CLI, a hook) or revived from
-- the dead is announced on channel `relayq_rows` as "QUEUE KEY" when its transaction commits;
-- every daemon listens and wakes the key's worker. Best effort: the sweep is the backstop (and
-- a key too long for a notification's payload waits for it).
CREATE FUNCTION relayq_rows_written() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF length(NEW.key) < 7000 THEN
        PERFORM pg_notify('relayq_rows', NEW.queue || ' ' || NEW.key);
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER queue_rows_written AFTER INSERT ON queue_rows
    FOR EACH ROW WHEN (NEW.state = 'pending') EXECUTE FUNCTION relayq_rows_written();
CREATE TRIGGER queue_rows_revived AFTER UPDATE OF state ON queue_rows
    FOR EACH ROW WHEN (OLD.state = 'dead' AND NEW.state = 'pending')
    EXECUTE FUNCTION relayq_rows_written();
