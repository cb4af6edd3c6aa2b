-- When a send of the row to a far end started (unix ms), set just before a platform call and
-- cleared by any answer: a row leased again with it set may have reached the far end before a
-- crash (an unknown outcome), and its channel reconciles it instead of replaying it blindly.
ALTER TABLE queue_rows ADD COLUMN send_started INTEGER;
