-- One table carries every queue (inbound, hook events, outbound); `queue` says which.
-- Times are unix milliseconds, always passed in by the engine's clock.
CREATE TABLE queue_rows (
    id               INTEGER PRIMARY KEY AUTOINCREMENT, -- FIFO order within a key; never reused
    queue            TEXT    NOT NULL,
    key              TEXT    NOT NULL,                  -- ordering key: session id, or channel + destination
    dedup_key        TEXT,                              -- a second enqueue with the same key is not written
    payload          TEXT    NOT NULL,                  -- the message, as JSON
    state            TEXT    NOT NULL DEFAULT 'pending'
                     CHECK (state IN ('pending', 'leased', 'delivered', 'dead', 'expired')),
    attempts         INTEGER NOT NULL DEFAULT 0,        -- how many times the row was leased
    created_at       INTEGER NOT NULL,
    next_attempt_at  INTEGER NOT NULL,
    lease_owner      TEXT,                              -- instance id of the process holding the lease
    lease_token      INTEGER NOT NULL DEFAULT 0,        -- bumped at every lease: the fence
    lease_expires_at INTEGER,
    last_error       TEXT,
    finished_at      INTEGER,
    reason           TEXT                               -- why a row is terminal (e.g. coalesced, session expired)
);

-- Duplicate enqueues: unique among rows that carry a dedup key.
CREATE UNIQUE INDEX queue_rows_dedup ON queue_rows (queue, dedup_key) WHERE dedup_key IS NOT NULL;

-- Active rows only (partial indexes): the cost of a lease does not grow with delivered history.
CREATE INDEX queue_rows_active_key ON queue_rows (queue, key, id) WHERE state IN ('pending', 'leased');
CREATE INDEX queue_rows_pending ON queue_rows (queue, id) WHERE state = 'pending';
CREATE INDEX queue_rows_leased ON queue_rows (lease_expires_at) WHERE state = 'leased';

-- Retention pruning of terminal rows.
CREATE INDEX queue_rows_finished ON queue_rows (queue, finished_at) WHERE state IN ('delivered', 'dead', 'expired');
