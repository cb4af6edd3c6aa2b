-- What each session's agent is doing, as its own hook events tell (engine/src/agent_state.rs
-- has the table of which event moves which state), and since when; whether the agent's own
-- hooks report (Codex `notify` is then a duplicate); the tmux pane its hooks ran in.
-- engine/src/sessions.rs holds every statement on these columns.
ALTER TABLE sessions ADD COLUMN agent_state TEXT
    CHECK (agent_state IN ('starting', 'ready', 'working', 'awaiting_approval', 'gone'));
ALTER TABLE sessions ADD COLUMN agent_state_since INTEGER;           -- unix ms
ALTER TABLE sessions ADD COLUMN agent_hooks INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN pane TEXT;                            -- $TMUX_PANE of its hooks
