-- Two fixes to queue_rows, found by profiling the write path:
-- 1. SQLite evaluates `state IN (three or more values)` through a temporary b-tree built for
--    every row written. The state CHECK and the finished-rows index each had such a list, so
--    every insert, lease and completion built two or three of them. The CHECK is now a chain
--    of comparisons and the index condition a two-value NOT IN, which SQLite inlines.
-- 2. Pruning asked for `state IN ('delivered', 'expired')`, which the old index's condition
--    did not match, so every prune scanned the whole table. The new index carries the state
--    and prune asks for one state at a time with the index's exact condition.
-- A CHECK cannot be altered in place: the table is rebuilt, keeping ids and the AUTOINCREMENT
-- high-water mark (ids are never reused, even those of pruned rows).
CREATE TABLE queue_rows_new (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    queue            TEXT    NOT NULL,
    key              TEXT    NOT NULL,
    dedup_key        TEXT,
    payload          TEXT    NOT NULL,
    state            TEXT    NOT NULL DEFAULT 'pending'
                     CHECK (state = 'pending' OR state = 'leased' OR state = 'delivered'
                            OR state = 'dead' OR state = 'expired'),
    attempts         INTEGER NOT NULL DEFAULT 0,
    created_at       INTEGER NOT NULL,
    next_attempt_at  INTEGER NOT NULL,
    lease_owner      TEXT,
    lease_token      INTEGER NOT NULL DEFAULT 0,
    lease_expires_at INTEGER,
    last_error       TEXT,
    finished_at      INTEGER,
    reason           TEXT
);

INSERT INTO queue_rows_new
    (id, queue, key, dedup_key, payload, state, attempts, created_at, next_attempt_at,
     lease_owner, lease_token, lease_expires_at, last_error, finished_at, reason)
SELECT id, queue, key, dedup_key, payload, state, attempts, created_at, next_attempt_at,
       lease_owner, lease_token, lease_expires_at, last_error, finished_at, reason
FROM queue_rows;

DELETE FROM sqlite_sequence WHERE name = 'queue_rows_new';
INSERT INTO sqlite_sequence (name, seq)
    SELECT 'queue_rows_new', seq FROM sqlite_sequence WHERE name = 'queue_rows';

DROP TABLE queue_rows;
ALTER TABLE queue_rows_new RENAME TO queue_rows;

CREATE UNIQUE INDEX queue_rows_dedup ON queue_rows (queue, dedup_key) WHERE dedup_key IS NOT NULL;
CREATE INDEX queue_rows_active_key ON queue_rows (queue, key, id) WHERE state IN ('pending', 'leased');
CREATE INDEX queue_rows_pending ON queue_rows (queue, id) WHERE state = 'pending';
CREATE INDEX queue_rows_leased ON queue_rows (lease_expires_at) WHERE state = 'leased';
CREATE INDEX queue_rows_due ON queue_rows (queue, next_attempt_at) WHERE state = 'pending';
-- Prune's queries repeat this condition word for word: SQLite uses a partial index only then.
CREATE INDEX queue_rows_finished ON queue_rows (queue, state, finished_at)
    WHERE state NOT IN ('pending', 'leased');
