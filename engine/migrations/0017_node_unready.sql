-- What on each node cannot work now and why (a channel whose platform refused its token, a
-- source that keeps failing), as a JSON list of sentences, written with its heartbeat: `relayq
-- status`, `/v1/status` and the dashboard show it.
ALTER TABLE nodes ADD COLUMN unready TEXT;
