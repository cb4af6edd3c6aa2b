-- How far each inbound source (`[sources.NAME]`) has read its platform: Telegram's update
-- offset, a file's byte position. engine/src/sources.rs holds every statement on it. The
-- offset is written in the transaction that writes the rows read up to it, so a crash neither
-- loses a batch (rows without offset) nor repeats one (offset without rows).
CREATE TABLE source_offsets (
    source     TEXT PRIMARY KEY,
    "offset"   TEXT    NOT NULL,
    updated_at INTEGER NOT NULL        -- unix ms
);
