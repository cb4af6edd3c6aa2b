-- PostgreSQL twin of ../0022_progress_lanes.sql. Which daemon sends a chat's progress
-- (engine/src/storage/progress.rs), where several share a database: every node hears every
-- step, and only the lane's holder shows it, so a turn has one progress message and a
-- reaction is set once. A node's own table, not copied by `relayq migrate`.
-- Times are unix milliseconds.
CREATE TABLE progress_lanes (
    channel    TEXT    NOT NULL,
    chat       TEXT    NOT NULL,
    instance   TEXT    NOT NULL,    -- the daemon holding it (nodes.instance)
    expires_at BIGINT  NOT NULL,
    PRIMARY KEY (channel, chat)
);
