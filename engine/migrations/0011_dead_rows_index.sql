-- Dead letters in id order, for their list's pages (`GET /v1/dead`, the dashboard): a page
-- walks this index to its limit instead of every row of the table.
CREATE INDEX queue_rows_dead ON queue_rows (id) WHERE state = 'dead';
