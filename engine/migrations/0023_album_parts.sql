-- An album's messages (Telegram's media_group_id) become one row, one prompt
-- (engine/src/storage/albums.rs): each message of an album that joined a row, by its dedup
-- key, so a message read twice joins once, and the album's latest row, which the next message
-- joins while it waits. Pruned a day after. Times are unix milliseconds.
CREATE TABLE album_parts (
    dedup_key  TEXT    PRIMARY KEY, -- the message's, as queue_rows.dedup_key
    album      TEXT    NOT NULL,    -- JSON [origin, chat, media_group_id]
    row_id     INTEGER NOT NULL,    -- queue_rows.id of the row it joined
    created_at INTEGER NOT NULL
);
CREATE INDEX album_parts_album ON album_parts (album, row_id);
