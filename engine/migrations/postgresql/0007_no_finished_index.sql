-- Every delivered row wrote an entry to this index, a quarter of what recording it cost the
-- server (`relayq-bench tune-outbound-pg`); it served only the prune, which runs every few
-- minutes and now reads the table instead (see `PRUNE_SQL`). SQLite keeps its own: an entry
-- there costs little beside a scan of the file.
DROP INDEX IF EXISTS queue_rows_finished;
