-- Where each session's conversation is: the chat its last inbound message came from (one that
-- named its chat), so the session's notices can be answered there (`to = "origin"` routes).
-- engine/src/sessions.rs holds every statement on it. A session may have an origin before the
-- registry has seen any of its hook events, hence a table of its own.
CREATE TABLE session_origins (
    session    TEXT PRIMARY KEY,
    origin     TEXT    NOT NULL,   -- the message's origin, e.g. telegram:mybot
    chat       TEXT    NOT NULL,   -- its source_channel_id (Telegram chat id)
    thread     TEXT,               -- its source_thread_id (a forum topic, a Slack thread)
    updated_at INTEGER NOT NULL    -- unix ms
);
