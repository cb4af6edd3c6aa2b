-- A channel that must not send until a time, for every destination: the far end said so (a
-- channel-wide 429), or relayq's circuit breaker opened after the channel failed again and
-- again. Kept here so it holds across a restart and `relayq status` shows it.
-- engine/src/penalties.rs holds every statement on it.
CREATE TABLE channel_penalties (
    channel TEXT PRIMARY KEY,
    until   INTEGER NOT NULL,           -- unix ms
    reason  TEXT    NOT NULL
);
