-- Who may do what in a chat beyond what config.toml names (engine/src/storage/access.rs):
-- people added by pairing, per source; the pairing codes given; and what is rate-limited
-- (a stranger told, a /pair answered, a wrong code guessed). Times are unix milliseconds.
CREATE TABLE chat_users (
    origin     TEXT    NOT NULL, -- the source's origin (discord:NAME)
    user_id    TEXT    NOT NULL, -- the platform's id of the person
    user_name  TEXT    NOT NULL,
    role       TEXT    NOT NULL, -- writer | approver
    added_by   TEXT    NOT NULL, -- who approved the code (a chat user, or the operator)
    added_at   INTEGER NOT NULL,
    PRIMARY KEY (origin, user_id)
);
CREATE TABLE pair_codes (
    code       TEXT    PRIMARY KEY, -- 6 characters, given once
    origin     TEXT    NOT NULL,
    chat       TEXT    NOT NULL,    -- where /pair was typed (told once approved)
    thread     TEXT,
    user_id    TEXT    NOT NULL,
    user_name  TEXT    NOT NULL,
    created_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL,
    used_at    INTEGER
);
CREATE INDEX pair_codes_user ON pair_codes (origin, user_id, expires_at);
CREATE TABLE access_events (
    origin  TEXT    NOT NULL,
    subject TEXT    NOT NULL, -- a chat (a stranger told) or a person (a /pair, a wrong code)
    kind    TEXT    NOT NULL, -- stranger_told | pair_answered | wrong_code
    at      INTEGER NOT NULL
);
CREATE INDEX access_events_by ON access_events (origin, subject, kind, at);
