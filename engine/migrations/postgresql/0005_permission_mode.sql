-- The agent's permission mode, as its hook events say it (Claude Code's `permission_mode`:
-- default, auto, acceptEdits, plan, bypassPermissions): in auto mode no question reaches the chat.
ALTER TABLE sessions ADD COLUMN permission_mode TEXT;
