-- An operator's pause: a queue, or one key of it (a session, an outbound destination), whose
-- rows are not leased until it is resumed. Kept here so a pause holds across a restart.
-- engine/src/pauses.rs holds every statement on it.
CREATE TABLE pauses (
    queue     TEXT    NOT NULL,
    key       TEXT    NOT NULL,         -- '' pauses the whole queue
    paused_at INTEGER NOT NULL,         -- unix ms
    PRIMARY KEY (queue, key)
);
