-- Progress on the phone (engine/src/progress/, every statement in
-- engine/src/storage/progress.rs). Times are unix milliseconds.

-- The reaction a chat message should show (the setting calls it a receipt): set in the transaction that
-- records what became of the message, so it is never guessed and survives a crash; `tried`
-- is the state last sent (or given up on), `shown` the one the platform confirmed.
CREATE TABLE reactions (
    row_id     INTEGER PRIMARY KEY, -- the inbound queue row
    session    TEXT    NOT NULL,
    origin     TEXT    NOT NULL,    -- the source's origin (telegram:NAME)
    chat       TEXT    NOT NULL,
    message    TEXT    NOT NULL,    -- the platform's id of the person's message
    wanted     TEXT    NOT NULL CHECK (wanted IN ('taken', 'done', 'failed')),
    tried      TEXT,
    shown      TEXT,
    updated_at INTEGER NOT NULL
);
CREATE INDEX reactions_untried ON reactions (updated_at)
    WHERE tried IS NULL OR tried <> wanted;
CREATE INDEX reactions_session ON reactions (session) WHERE wanted = 'taken';

-- What a chat asked to see while its agent works (`/progress`), over its source's setting.
CREATE TABLE chat_settings (
    origin   TEXT    NOT NULL,
    chat     TEXT    NOT NULL,
    progress TEXT    NOT NULL CHECK (progress IN ('off', 'receipts', 'steps', 'stream')),
    set_at   INTEGER NOT NULL,
    PRIMARY KEY (origin, chat)
);
