-- The daemons serving this database, each a node with a name (`[node] name`, the host name by
-- default): who it is now (its instance, the owner written on its leases), when it started and
-- last said it was alive. On a SQLite file there is one; on PostgreSQL there may be several.
CREATE TABLE nodes (
    name       TEXT    PRIMARY KEY,
    instance   TEXT    NOT NULL,
    started_at INTEGER NOT NULL,
    seen_at    INTEGER NOT NULL,
    stopped_at INTEGER
);
-- The node a session's agent runs on (its hooks' node): only that node delivers the session's
-- inbound rows, since its pane is there. NULL: any node.
ALTER TABLE sessions ADD COLUMN node TEXT;
-- A source that must have one reader (Telegram's getUpdates) is read by the node holding its
-- lease, renewed while it reads; another node takes it once it expires.
CREATE TABLE source_leases (
    source     TEXT    PRIMARY KEY,
    node       TEXT    NOT NULL,
    instance   TEXT    NOT NULL,
    expires_at INTEGER NOT NULL
);
-- Shared pacing (a generic cell rate algorithm): per budget (a bot, a chat), the time the
-- next send is due at if sends came at the budget's rate; every node takes its turns here.
CREATE TABLE budgets (
    key TEXT    PRIMARY KEY,
    tat INTEGER NOT NULL
);
