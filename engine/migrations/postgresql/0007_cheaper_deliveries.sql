-- Recording deliveries for less (`relayq-bench tune-outbound-pg`, the server's time per row).
--
-- Every delivered row wrote an entry to this index, a quarter of what recording it cost; it
-- served only the prune, which runs every few minutes and now reads the table instead (see
-- `PRUNE_SQL`). SQLite keeps its own: an entry there costs little beside a scan of the file.
DROP INDEX IF EXISTS queue_rows_finished;

-- One answer of a statement that records many rows at once, sent as an array of these in
-- binary (`Answers`) rather than as JSON text the server parses twice.
CREATE TYPE relayq_answer AS (id BIGINT, token BIGINT, receipt TEXT, took_ms BIGINT);
