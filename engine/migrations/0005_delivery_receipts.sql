-- What the far end said when it took a row: the platform's message id (a Telegram
-- message_id, a Slack ts, a Discord message id) and how long the send took. Set only on
-- delivered rows that went through a channel; `relayq show` prints them.
ALTER TABLE queue_rows ADD COLUMN receipt TEXT;
ALTER TABLE queue_rows ADD COLUMN took_ms INTEGER;
