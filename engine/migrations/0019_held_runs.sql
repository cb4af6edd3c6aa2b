-- A run held by its first row: the leased row whose `run_through` is set holds the key's
-- pending rows after it, up to that id, for its owner, without leasing each (see
-- `Queue::lease_held_run_in`). Read only while the row is leased.
ALTER TABLE queue_rows ADD COLUMN run_through INTEGER;
