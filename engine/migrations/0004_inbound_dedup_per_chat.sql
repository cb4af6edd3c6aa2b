-- Telegram message ids and Slack `ts` are unique per chat only, so an inbound message's dedup
-- key now includes its source channel (chat) id when it has one: ["origin","chat","id"]
-- (engine/src/inbound.rs builds it). Rows written before keep deduplicating retries of the
-- same message: their keys are rewritten to the new form.
UPDATE queue_rows
SET dedup_key = json_array(json_extract(payload, '$.origin'),
                           json_extract(payload, '$.source_channel_id'),
                           json_extract(payload, '$.source_message_id'))
WHERE queue = 'inbound' AND dedup_key IS NOT NULL
  AND json_extract(payload, '$.source_channel_id') IS NOT NULL;
