-- Gemini CLI's questions are answered by the daemon pressing the dialog's keys: when it
-- started pressing (a send-started mark, kept across a crash), and, when the answer could not
-- reach the agent (the dialog had closed, or asks something else), why.
ALTER TABLE approvals ADD COLUMN pressed_at INTEGER;
ALTER TABLE approvals ADD COLUMN unreached TEXT;
CREATE INDEX approvals_keys_due ON approvals (answered_at)
    WHERE means = 'keys' AND state <> 'asked' AND reached_at IS NULL AND unreached IS NULL;
