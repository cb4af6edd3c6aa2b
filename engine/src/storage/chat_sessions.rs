//! The tables of sessions from the chat (`engine/migrations/0020_chat_sessions.sql`): the
//! session commands people typed, the sessions they started and where each talks (its topic,
//! or the chat's current session), and the projects each node hosts. Every statement on them
//! lives here; writes take the caller's transaction.

use serde::Serialize;

use crate::error::Result;
use crate::params;
use crate::storage::sql::{Executor, Query, Row, Sql};
use crate::storage::tx::Tx;

crate::words! {
    /// Where a session command is.
    pub enum CommandState("session command state") {
        /// `/stop` asked; waits for its confirmation button.
        Confirming = "confirming",
        /// To be carried out by its node.
        Ready = "ready",
        /// Its node is carrying it out (its lease says until when).
        Running = "running",
        /// `/resume` listed the agent's conversations; waits for a tap on one.
        Listed = "listed",
        Done = "done",
        Failed = "failed",
    }
}

crate::words! {
    /// Where a session started from a chat is.
    pub enum ChatSessionState("chat session state") {
        /// Its agent is being started.
        Starting = "starting",
        /// Its agent runs (its hooks reached relayq).
        Running = "running",
        /// Stopped, or its start failed.
        Ended = "ended",
    }
}

/// A session command as written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CommandRow {
    pub id: i64,
    pub origin: String,
    pub chat: String,
    pub thread: Option<String>,
    pub message_id: Option<String>,
    pub user_id: Option<String>,
    pub user_name: String,
    /// The [`ChatCommand`](crate::chat_sessions::ChatCommand) as JSON.
    pub command: String,
    pub state: CommandState,
    pub node: Option<String>,
    pub session: Option<String>,
    pub detail: Option<String>,
    pub outcome: Option<String>,
    pub asked_at: i64,
    pub updated_at: i64,
}

/// A session command to write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewCommand<'a> {
    pub origin: &'a str,
    pub chat: &'a str,
    pub thread: Option<&'a str>,
    pub message_id: Option<&'a str>,
    pub user_id: Option<&'a str>,
    pub user_name: &'a str,
    pub command: String,
    pub state: CommandState,
    pub node: Option<&'a str>,
    pub session: Option<&'a str>,
    pub detail: Option<&'a str>,
    pub outcome: Option<&'a str>,
}

/// A session started from a chat.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ChatSession {
    pub session: String,
    pub origin: String,
    pub chat: String,
    /// Its topic; `None`: it talks in the chat itself.
    pub thread: Option<String>,
    pub project: String,
    pub agent: String,
    pub node: String,
    /// The command that made it.
    pub command: i64,
    pub state: ChatSessionState,
    /// The agent's own conversation id it resumed.
    pub resumed: Option<String>,
    pub created_at: i64,
    pub ended_at: Option<i64>,
}

/// A project as its node publishes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProjectEntry {
    pub name: String,
    pub node: String,
    /// The agents allowed there, the default first.
    pub agents: Vec<String>,
}

const INSERT_COMMAND_SQL: Sql = Sql::two(
    "INSERT INTO session_commands (origin, chat, thread, message_id, user_id, user_name, command,
                                   state, node, session, detail, outcome, asked_at, updated_at)
     VALUES (:origin, :chat, :thread, :message, :user_id, :user_name, :command, :state, :node,
             :session, :detail, :outcome, :now, :now)
     ON CONFLICT DO NOTHING",
    "INSERT INTO session_commands (origin, chat, thread, message_id, user_id, user_name, command,
                                   state, node, session, detail, outcome, asked_at, updated_at)
     VALUES (:origin, :chat, :thread, :message, :user_id, :user_name, :command, :state, :node,
             :session, :detail, :outcome, :now, :now)
     ON CONFLICT DO NOTHING RETURNING id",
);
const COMMAND_SQL: Sql = Sql::same(
    "SELECT id, origin, chat, thread, message_id, user_id, user_name, command, state, node,
            session, detail, outcome, asked_at, updated_at
     FROM session_commands WHERE id = :id",
);
/// Commands a node is to carry out or carries out now, oldest first (`relayq status`).
const WAITING_COMMANDS_SQL: Sql = Sql::same(
    "SELECT id, origin, chat, thread, message_id, user_id, user_name, command, state, node,
            session, detail, outcome, asked_at, updated_at
     FROM session_commands WHERE state IN ('ready', 'running') ORDER BY id LIMIT :limit",
);
const COMMAND_OF_MESSAGE_SQL: Sql = Sql::same(
    "SELECT id FROM session_commands
     WHERE origin = :origin AND chat = :chat AND message_id = :message",
);
const SET_COMMAND_SQL: Sql = Sql::same(
    "UPDATE session_commands
     SET state = :state, node = COALESCE(:node, node), session = COALESCE(:session, session),
         detail = COALESCE(:detail, detail), outcome = COALESCE(:outcome, outcome),
         lease_owner = NULL, lease_until = NULL, updated_at = :now
     WHERE id = :id AND state = :from",
);
/// The commands node `:node` is to carry out: ready ones, and running ones whose lease lapsed
/// (their daemon died): oldest first.
const DUE_COMMANDS_SQL: Sql = Sql::same(
    "SELECT id FROM session_commands
     WHERE node = :node AND (state = 'ready' OR (state = 'running' AND lease_until < :now))
     ORDER BY id LIMIT 16",
);
const LEASE_COMMAND_SQL: Sql = Sql::same(
    "UPDATE session_commands
     SET state = 'running', lease_owner = :owner, lease_until = :until, updated_at = :now
     WHERE id = :id AND (state = 'ready' OR (state = 'running' AND lease_until < :now))",
);

/// A node's commands that an earlier daemon of it was carrying out when it stopped (killed):
/// ready again, so this one carries them out.
const RECLAIM_COMMANDS_SQL: Sql = Sql::same(
    "UPDATE session_commands SET state = 'ready', lease_owner = NULL, lease_until = NULL
     WHERE node = :node AND state = 'running' AND lease_owner <> :owner",
);

const INSERT_SESSION_SQL: Sql = Sql::same(
    "INSERT INTO chat_sessions (session, origin, chat, thread, project, agent, node, command,
                                state, resumed, created_at)
     VALUES (:session, :origin, :chat, :thread, :project, :agent, :node, :command, 'starting',
             :resumed, :now)
     ON CONFLICT DO NOTHING",
);
macro_rules! select_chat_sessions {
    ($where_:literal) => {
        concat!(
            "SELECT session, origin, chat, thread, project, agent, node, command, state, resumed,
                    created_at, ended_at
             FROM chat_sessions ",
            $where_
        )
    };
}
const SESSION_SQL: Sql = Sql::same(select_chat_sessions!("WHERE session = :session"));
const BY_TOPIC_SQL: Sql = Sql::same(select_chat_sessions!(
    "WHERE origin = :origin AND chat = :chat AND thread = :thread"
));
const OF_CHAT_SQL: Sql = Sql::same(select_chat_sessions!(
    "WHERE origin = :origin AND chat = :chat
     ORDER BY created_at DESC, command DESC LIMIT :limit OFFSET :skip"
));
const LIVE_IN_CHAT_SQL: Sql = Sql::same(
    "SELECT COUNT(*) FROM chat_sessions
     WHERE origin = :origin AND chat = :chat AND state <> 'ended'",
);
const COUNT_IN_CHAT_SQL: Sql =
    Sql::same("SELECT COUNT(*) FROM chat_sessions WHERE origin = :origin AND chat = :chat");
const SET_SESSION_STATE_SQL: Sql = Sql::same(
    "UPDATE chat_sessions
     SET state = :state,
         ended_at = CASE WHEN :state = 'ended' THEN COALESCE(ended_at, :now) ELSE ended_at END
     WHERE session = :session",
);
const SET_THREAD_SQL: Sql =
    Sql::same("UPDATE chat_sessions SET thread = :thread WHERE session = :session");

const SET_CURRENT_SQL: Sql = Sql::two(
    "INSERT INTO chat_current (origin, chat, session, set_at) VALUES (:origin, :chat, :session, :now)
     ON CONFLICT (origin, chat) DO UPDATE SET session = excluded.session, set_at = excluded.set_at",
    "INSERT INTO chat_current (origin, chat, session, set_at) VALUES (:origin, :chat, :session, :now)
     ON CONFLICT (origin, chat) DO UPDATE SET session = EXCLUDED.session, set_at = EXCLUDED.set_at",
);
const CURRENT_SQL: Sql =
    Sql::same("SELECT session FROM chat_current WHERE origin = :origin AND chat = :chat");

const UNPUBLISH_SQL: Sql = Sql::same("DELETE FROM projects WHERE node = :node");
const PUBLISH_SQL: Sql = Sql::two(
    "INSERT INTO projects (name, node, agents, published_at) VALUES (:name, :node, :agents, :now)
     ON CONFLICT (name) DO UPDATE SET node = excluded.node, agents = excluded.agents,
                                      published_at = excluded.published_at",
    "INSERT INTO projects (name, node, agents, published_at) VALUES (:name, :node, :agents, :now)
     ON CONFLICT (name) DO UPDATE SET node = EXCLUDED.node, agents = EXCLUDED.agents,
                                      published_at = EXCLUDED.published_at",
);
const PROJECT_SQL: Sql = Sql::same("SELECT name, node, agents FROM projects WHERE name = :name");
const PROJECTS_SQL: Sql = Sql::same("SELECT name, node, agents FROM projects ORDER BY name");

fn command_from_row(r: &Row<'_>) -> Result<CommandRow> {
    let state: String = r.get("state")?;
    Ok(from_columns! { r => CommandRow {
        id, origin, chat, thread, message_id, user_id, user_name, command, node, session,
        detail, outcome, asked_at, updated_at;
        state: state.parse()?,
    } })
}

fn session_from_row(r: &Row<'_>) -> Result<ChatSession> {
    let state: String = r.get("state")?;
    Ok(from_columns! { r => ChatSession {
        session, origin, chat, thread, project, agent, node, command, resumed, created_at,
        ended_at;
        state: state.parse()?,
    } })
}

fn project_from_row(r: &Row<'_>) -> Result<ProjectEntry> {
    let agents: String = r.get("agents")?;
    Ok(ProjectEntry {
        name: r.get("name")?,
        node: r.get("node")?,
        agents: agents.split(',').map(str::to_string).collect(),
    })
}

/// Writes a command; its id, or `None` when its message was read before (one command).
pub fn insert_command_in(tx: &Tx<'_>, c: &NewCommand<'_>) -> Result<Option<i64>> {
    let now = tx.now();
    tx.insert(
        &INSERT_COMMAND_SQL,
        params![
            ":origin" => c.origin, ":chat" => c.chat, ":thread" => c.thread,
            ":message" => c.message_id, ":user_id" => c.user_id, ":user_name" => c.user_name,
            ":command" => c.command, ":state" => c.state.as_str(), ":node" => c.node,
            ":session" => c.session, ":detail" => c.detail, ":outcome" => c.outcome,
            ":now" => now,
        ],
    )
}

/// One command, if written.
pub fn command(db: &dyn Executor, id: i64) -> Result<Option<CommandRow>> {
    db.query_opt(&COMMAND_SQL, params![":id" => id], command_from_row)
}

/// The oldest `limit` commands that wait for their node or run on it now.
pub fn waiting_commands(db: &dyn Executor, limit: i64) -> Result<Vec<CommandRow>> {
    db.query_all(
        &WAITING_COMMANDS_SQL,
        params![":limit" => limit],
        command_from_row,
    )
}

/// The command a chat message was read as, if it was one.
pub fn command_of_message(
    db: &dyn Executor,
    origin: &str,
    chat: &str,
    message_id: &str,
) -> Result<Option<i64>> {
    db.query_opt(
        &COMMAND_OF_MESSAGE_SQL,
        params![":origin" => origin, ":chat" => chat, ":message" => message_id],
        |r| r.get(0),
    )
}

/// What a command's move to another state records (each `None` keeps what is there).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CommandMove<'a> {
    pub node: Option<&'a str>,
    pub session: Option<&'a str>,
    pub detail: Option<&'a str>,
    pub outcome: Option<&'a str>,
}

/// Moves command `id` from state `from` to `to`; false when it was not in `from` (another
/// tap, another node, moved it first). Its lease ends.
pub fn move_command_in(
    tx: &Tx<'_>,
    id: i64,
    from: CommandState,
    to: CommandState,
    m: &CommandMove<'_>,
) -> Result<bool> {
    let now = tx.now();
    let changed = tx.exec(
        &SET_COMMAND_SQL,
        params![
            ":id" => id, ":from" => from.as_str(), ":state" => to.as_str(), ":node" => m.node,
            ":session" => m.session, ":detail" => m.detail, ":outcome" => m.outcome,
            ":now" => now,
        ],
    )?;
    Ok(changed == 1)
}

/// Leases node `node`'s due commands to `owner` until `until`: the commands leased.
pub fn lease_commands_in(
    tx: &Tx<'_>,
    node: &str,
    owner: &str,
    until: i64,
) -> Result<Vec<CommandRow>> {
    let now = tx.now();
    let due: Vec<i64> = tx.query_all(
        &DUE_COMMANDS_SQL,
        params![":node" => node, ":now" => now],
        |r| r.get(0),
    )?;
    let mut leased = Vec::new();
    for id in due {
        let taken = tx.exec(
            &LEASE_COMMAND_SQL,
            params![":id" => id, ":owner" => owner, ":until" => until, ":now" => now],
        )?;
        if taken == 1 {
            leased.extend(command(tx, id)?);
        }
    }
    Ok(leased)
}

/// Makes node `node`'s commands that another daemon (an earlier one of this node) was
/// carrying out ready again: how many.
pub fn reclaim_commands_in(tx: &Tx<'_>, node: &str, owner: &str) -> Result<usize> {
    tx.exec(
        &RECLAIM_COMMANDS_SQL,
        params![":node" => node, ":owner" => owner],
    )
}

/// Writes a session started from a chat (`starting`); false when its name is taken.
pub fn insert_session_in(tx: &Tx<'_>, s: &ChatSession) -> Result<bool> {
    let now = tx.now();
    let written = tx.exec(
        &INSERT_SESSION_SQL,
        params![
            ":session" => s.session, ":origin" => s.origin, ":chat" => s.chat,
            ":thread" => s.thread, ":project" => s.project, ":agent" => s.agent,
            ":node" => s.node, ":command" => s.command, ":resumed" => s.resumed, ":now" => now,
        ],
    )?;
    Ok(written == 1)
}

/// One session started from a chat, if it is one.
pub fn session(db: &dyn Executor, session: &str) -> Result<Option<ChatSession>> {
    db.query_opt(
        &SESSION_SQL,
        params![":session" => session],
        session_from_row,
    )
}

/// The session a topic belongs to.
pub fn by_topic(
    db: &dyn Executor,
    origin: &str,
    chat: &str,
    thread: &str,
) -> Result<Option<ChatSession>> {
    db.query_opt(
        &BY_TOPIC_SQL,
        params![":origin" => origin, ":chat" => chat, ":thread" => thread],
        session_from_row,
    )
}

/// A page of a chat's sessions, newest first.
pub fn of_chat(
    db: &dyn Executor,
    origin: &str,
    chat: &str,
    limit: i64,
    skip: i64,
) -> Result<Vec<ChatSession>> {
    db.query_all(
        &OF_CHAT_SQL,
        params![":origin" => origin, ":chat" => chat, ":limit" => limit, ":skip" => skip],
        session_from_row,
    )
}

/// How many of a chat's sessions have not ended, and how many it has in all.
pub fn counts_in_chat(db: &dyn Executor, origin: &str, chat: &str) -> Result<(i64, i64)> {
    let live = db.query_value(
        &LIVE_IN_CHAT_SQL,
        params![":origin" => origin, ":chat" => chat],
    )?;
    let all = db.query_value(
        &COUNT_IN_CHAT_SQL,
        params![":origin" => origin, ":chat" => chat],
    )?;
    Ok((live, all))
}

pub fn set_session_state_in(tx: &Tx<'_>, session: &str, state: ChatSessionState) -> Result<()> {
    let now = tx.now();
    tx.exec(
        &SET_SESSION_STATE_SQL,
        params![":session" => session, ":state" => state.as_str(), ":now" => now],
    )?;
    Ok(())
}

/// Records the topic made for a session.
pub fn set_thread_in(tx: &Tx<'_>, session: &str, thread: &str) -> Result<()> {
    tx.exec(
        &SET_THREAD_SQL,
        params![":session" => session, ":thread" => thread],
    )?;
    Ok(())
}

/// Makes `session` the one a chat without topics talks to.
pub fn set_current_in(tx: &Tx<'_>, origin: &str, chat: &str, session: &str) -> Result<()> {
    let now = tx.now();
    tx.exec(
        &SET_CURRENT_SQL,
        params![":origin" => origin, ":chat" => chat, ":session" => session, ":now" => now],
    )?;
    Ok(())
}

/// The session a chat without topics talks to, if one was chosen.
pub fn current(db: &dyn Executor, origin: &str, chat: &str) -> Result<Option<String>> {
    db.query_opt(
        &CURRENT_SQL,
        params![":origin" => origin, ":chat" => chat],
        |r| r.get(0),
    )
}

/// Replaces node `node`'s published projects with `projects`.
pub fn publish_in(tx: &Tx<'_>, node: &str, projects: &[ProjectEntry]) -> Result<()> {
    let now = tx.now();
    tx.exec(&UNPUBLISH_SQL, params![":node" => node])?;
    for p in projects {
        let agents = p.agents.join(",");
        tx.exec(
            &PUBLISH_SQL,
            params![":name" => p.name, ":node" => p.node, ":agents" => agents, ":now" => now],
        )?;
    }
    Ok(())
}

/// A project, if a node publishes it.
pub fn project(db: &dyn Executor, name: &str) -> Result<Option<ProjectEntry>> {
    db.query_opt(&PROJECT_SQL, params![":name" => name], project_from_row)
}

/// Every published project, by name.
pub fn projects(db: &dyn Executor) -> Result<Vec<ProjectEntry>> {
    db.query_all(&PROJECTS_SQL, params![], project_from_row)
}

/// The session a chat's message goes to: its topic's session; else, outside topics, the
/// chat's current one; else `fallback` (the source's static routing). `None`: no session.
pub fn route(
    db: &dyn Executor,
    origin: &str,
    chat: &str,
    thread: Option<&str>,
    fallback: Option<&str>,
) -> Result<Option<String>> {
    if let Some(thread) = thread {
        if let Some(s) = by_topic(db, origin, chat, thread)? {
            return Ok(Some(s.session));
        }
    }
    if let Some(current) = current(db, origin, chat)? {
        return Ok(Some(current));
    }
    Ok(fallback.map(str::to_string))
}
