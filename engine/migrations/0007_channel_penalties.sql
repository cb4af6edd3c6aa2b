-- A far end's "stop sending, all of you, until T" (a channel-wide 429): kept here so it holds
-- for every destination of the channel and across a restart. engine/src/penalties.rs holds
-- every statement on it.
CREATE TABLE channel_penalties (
    channel TEXT PRIMARY KEY,
    until   INTEGER NOT NULL            -- unix ms
);
