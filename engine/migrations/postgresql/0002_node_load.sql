-- How busy each node's writer is (operations waiting, averaged; written with its heartbeat): a
-- busy node leaves a session that has just become due to an idle one for a moment.
ALTER TABLE nodes ADD COLUMN backlog BIGINT NOT NULL DEFAULT 0;
