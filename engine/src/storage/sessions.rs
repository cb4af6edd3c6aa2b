//! The `sessions` and `session_origins` tables: the registry of agent sessions (kept current
//! by the hook-event handlers, see [`sessions`](crate::storage::sessions)) and the chat each session
//! talks to. Every statement on them lives here; writes take the caller's transaction, so they
//! commit with the row that caused them.

use serde::Serialize;

use crate::error::Result;
use crate::params;
use crate::storage::sql::{Executor, Query, Row, Sql};
use crate::storage::tx::Tx;

crate::words! {
    /// The agent CLIs relayq understands.
    #[derive(PartialOrd, Ord)]
    pub enum Agent("agent") { Claude = "claude", Codex = "codex", Gemini = "gemini" }
}

crate::words! {
    /// What the agent is doing.
    pub enum AgentState("agent state") {
        /// Running in its pane, not reported yet.
        Starting = "starting",
        /// At its prompt: the next message may be pasted.
        Ready = "ready",
        /// A turn runs.
        Working = "working",
        /// A dialog asks the person (a tool's permission): nothing may be typed.
        AwaitingApproval = "awaiting_approval",
        /// The session ended, or its pane is gone or runs something else.
        Gone = "gone",
    }
}

/// One session as the registry knows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SessionRecord {
    pub key: String,
    pub agent: String,
    pub native_session_id: Option<String>,
    pub cwd: Option<String>,
    pub transcript_path: Option<String>,
    /// `active` or `ended`.
    pub state: String,
    pub started_at: i64,
    pub ended_at: Option<i64>,
    pub last_activity_at: i64,
    pub last_user_input: Option<String>,
    /// Turns started so far; the current turn's number.
    pub current_turn: i64,
    /// A turn is running: started by a prompt, not yet stopped.
    pub turn_running: bool,
    pub last_assistant_message: Option<String>,
    /// What the agent is doing, from its own events (see [`agent_state`](crate::sessions::agent_state));
    /// none before its first event.
    pub agent_state: Option<AgentState>,
    /// Since when (unix ms).
    pub agent_state_since: Option<i64>,
    /// The agent's own hooks reported (not only Codex `notify`, which is then ignored).
    pub agent_hooks: bool,
    /// The tmux pane its agent's hooks ran in (`$TMUX_PANE`).
    pub pane: Option<String>,
    /// The node its agent's hooks ran on (the node that delivers its messages).
    pub node: Option<String>,
    /// The agent's permission mode as its last event that said one (Claude Code: `default`,
    /// `auto`, `acceptEdits`, `plan`, `bypassPermissions`).
    pub permission_mode: Option<String>,
    /// Where its last inbound message came from, when that named a chat: where its notices
    /// go by default.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub origin: Option<Origin>,
    /// The project it was started in, when a chat (or `relayq session new`) started it.
    pub project: Option<String>,
    /// Its own topic in its chat (a forum topic's id), when it has one.
    pub topic: Option<String>,
}

/// The chat a session's conversation is in: where its last inbound message that named its chat
/// came from. `to = "origin"` notice routes send there.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Origin {
    /// The message's origin (`telegram:mybot`): which source, hence which channel answers.
    pub origin: String,
    /// The chat (the message's `source_channel_id`).
    pub chat: String,
    /// The thread or forum topic in the chat (`source_thread_id`).
    pub thread: Option<String>,
}

/// `SELECT` of a session's columns and its origin's, from sessions and their origins, for the
/// rows `where_` chooses (a statement's tail).
macro_rules! select_sessions {
    ($where_:literal) => {
        concat!(
            "SELECT key, sessions.agent, native_session_id, cwd, transcript_path, sessions.state,
                    started_at,
                    sessions.ended_at, last_activity_at, last_user_input, current_turn, turn_running,
                    last_assistant_message, o.origin, o.chat, o.thread, agent_state,
                    agent_state_since, agent_hooks, pane, sessions.node, permission_mode,
                    c.project, c.thread AS topic
             FROM sessions LEFT JOIN session_origins o ON o.session = sessions.key
                  LEFT JOIN chat_sessions c ON c.session = sessions.key ",
            $where_
        )
    };
}

const GET_SQL: Sql = Sql::same(select_sessions!("WHERE key = :key"));
const UNMATCHED_SQL: Sql = Sql::same(select_sessions!(
    "WHERE key = native_session_id AND o.session IS NULL AND sessions.state = 'active'
     ORDER BY last_activity_at DESC, key"
));
const LIST_SQL: Sql = Sql::same(select_sessions!("ORDER BY last_activity_at DESC, key"));

fn from_row(r: &Row<'_>) -> Result<SessionRecord> {
    let agent_state: Option<String> = r.get("agent_state")?;
    let origin = match r.get::<Option<String>, _>("origin")? {
        Some(_) => Some(from_columns! { r => Origin { origin, chat, thread } }),
        None => None,
    };
    Ok(from_columns! { r => SessionRecord {
        key, agent, native_session_id, cwd, transcript_path, state, started_at, ended_at,
        last_activity_at, last_user_input, current_turn, turn_running, last_assistant_message,
        agent_state_since, agent_hooks, pane, node, permission_mode, project, topic;
        agent_state: agent_state.as_deref().and_then(AgentState::parse),
        origin,
    } })
}

/// What an agent's event says of its session: who it is, where it runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Activity<'a> {
    pub key: &'a str,
    pub agent: Agent,
    pub native_session_id: Option<&'a str>,
    pub cwd: Option<&'a str>,
    pub transcript_path: Option<&'a str>,
    pub pane: Option<&'a str>,
    /// The node its hook ran on.
    pub node: Option<&'a str>,
    /// The agent's permission mode, when the event says it.
    pub permission_mode: Option<&'a str>,
}

/// The upsert of a session's activity, with the dialect's name of the larger of two values.
macro_rules! touch_sql {
    ($max:literal) => {
        concat!(
            "INSERT INTO sessions AS s (key, agent, native_session_id, cwd, transcript_path,
                                   started_at, last_activity_at, pane, node, permission_mode)
             VALUES (:key, :agent, :native, :cwd, :transcript, :now, :now, :pane, :node, :mode)
             ON CONFLICT (key) DO UPDATE SET
               agent = excluded.agent,
               permission_mode = COALESCE(excluded.permission_mode, s.permission_mode),
               native_session_id = COALESCE(excluded.native_session_id, s.native_session_id),
               cwd = COALESCE(excluded.cwd, s.cwd),
               transcript_path = COALESCE(excluded.transcript_path, s.transcript_path),
               pane = COALESCE(excluded.pane, s.pane),
               node = COALESCE(excluded.node, s.node),
               last_activity_at = ",
            $max,
            "(s.last_activity_at, excluded.last_activity_at),
               state = CASE WHEN :reopen THEN 'active' ELSE s.state END,
               ended_at = CASE WHEN :reopen THEN NULL ELSE s.ended_at END,
               started_at = CASE WHEN :reopen THEN excluded.started_at ELSE s.started_at END"
        )
    };
}

/// (SQLite's two-argument `MAX` is PostgreSQL's `GREATEST`; the rest reads alike.)
const TOUCH_SQL: Sql = Sql::two(touch_sql!("MAX"), touch_sql!("GREATEST"));

const BEGIN_TURN_SQL: Sql = Sql::same(
    "UPDATE sessions SET current_turn = current_turn + 1, turn_running = TRUE,
            last_user_input = COALESCE(:prompt, last_user_input)
     WHERE key = :key",
);

const SET_AGENT_STATE_SQL: Sql = Sql::same(
    "UPDATE sessions SET agent_state = :state, agent_state_since = :now
     WHERE key = :key AND agent_state IS DISTINCT FROM :state",
);

/// As `SET_AGENT_STATE_SQL`, unless the state was set after `:not_after` (by the agent's own
/// events, which know better than an older look at the screen).
const SET_AGENT_STATE_IF_OLDER_SQL: Sql = Sql::same(
    "UPDATE sessions SET agent_state = :state, agent_state_since = :now
     WHERE key = :key AND agent_state IS DISTINCT FROM :state
       AND (agent_state_since IS NULL OR agent_state_since <= :not_after)",
);

const MARK_AGENT_HOOKS_SQL: Sql =
    Sql::same("UPDATE sessions SET agent_hooks = TRUE WHERE key = :key AND NOT agent_hooks");

const SET_LAST_USER_INPUT_SQL: Sql =
    Sql::same("UPDATE sessions SET last_user_input = :input WHERE key = :key");

const AGENT_STATE_SQL: Sql = Sql::same(
    "SELECT agent_state, agent_state_since FROM sessions
     WHERE key = :key AND agent_state IS NOT NULL",
);

const COMPLETE_TURN_SQL: Sql = Sql::same(
    "UPDATE sessions SET turn_running = FALSE,
            last_assistant_message = COALESCE(:message, last_assistant_message)
     WHERE key = :key",
);

const END_SQL: Sql = Sql::same(
    "UPDATE sessions SET state = 'ended', ended_at = :now, turn_running = FALSE
     WHERE key = :key",
);

const IS_ENDED_SQL: Sql = Sql::same("SELECT 1 FROM sessions WHERE key = :key AND state = 'ended'");

const SET_ORIGIN_SQL: Sql = Sql::same(
    "INSERT INTO session_origins (session, origin, chat, thread, updated_at)
     VALUES (:key, :origin, :chat, :thread, :now)
     ON CONFLICT (session) DO UPDATE SET origin = excluded.origin, chat = excluded.chat,
                                         thread = excluded.thread,
                                         updated_at = excluded.updated_at",
);

const ORIGIN_SQL: Sql =
    Sql::same("SELECT origin, chat, thread FROM session_origins WHERE session = :key");

/// Creates the session on its first event, or records the activity; fills in identity fields
/// (native id, cwd, transcript) the event carries. A session that was ended stays ended unless
/// `reopen` (a new `session_start` under the same key).
pub fn record_activity(tx: &Tx<'_>, a: &Activity<'_>, reopen: bool) -> Result<()> {
    let now = tx.now();
    tx.exec(
        &TOUCH_SQL,
        params![
            ":key" => a.key, ":agent" => a.agent, ":native" => a.native_session_id,
            ":cwd" => a.cwd, ":transcript" => a.transcript_path, ":now" => now, ":pane" => a.pane,
            ":node" => a.node, ":reopen" => reopen, ":mode" => a.permission_mode,
        ],
    )?;
    Ok(())
}

/// A prompt was submitted: a new turn starts.
pub fn begin_turn(tx: &Tx<'_>, key: &str, prompt: Option<&str>) -> Result<()> {
    tx.exec(&BEGIN_TURN_SQL, params![":key" => key, ":prompt" => prompt])?;
    Ok(())
}

/// The agent's state is `state` from `now`, unless it already was (its since-when stays).
pub fn set_agent_state(tx: &Tx<'_>, key: &str, state: AgentState) -> Result<bool> {
    let now = tx.now();
    let changed = tx.exec(
        &SET_AGENT_STATE_SQL,
        params![":key" => key, ":state" => state, ":now" => now],
    )?;
    Ok(changed > 0)
}

/// [`set_agent_state`], unless the state was set after `not_after`: what was seen on the screen
/// at `not_after` must not undo what the agent's events said since.
pub fn set_agent_state_if_older(
    tx: &Tx<'_>,
    key: &str,
    state: AgentState,
    not_after: i64,
) -> Result<bool> {
    let now = tx.now();
    let changed = tx.exec(
        &SET_AGENT_STATE_IF_OLDER_SQL,
        params![":key" => key, ":state" => state, ":not_after" => not_after, ":now" => now],
    )?;
    Ok(changed > 0)
}

/// The agent's own hooks reported for this session (Codex: `notify` is then a duplicate).
pub fn mark_agent_hooks(tx: &Tx<'_>, key: &str) -> Result<()> {
    tx.exec(&MARK_AGENT_HOOKS_SQL, params![":key" => key])?;
    Ok(())
}

/// The person's message of this turn, when the turn's start did not say it (Codex `notify`).
pub fn set_last_user_input(tx: &Tx<'_>, key: &str, input: &str) -> Result<()> {
    tx.exec(
        &SET_LAST_USER_INPUT_SQL,
        params![":key" => key, ":input" => input],
    )?;
    Ok(())
}

/// The agent's state and since when, if the registry knows the session.
pub fn agent_state(db: &dyn Executor, key: &str) -> Result<Option<(AgentState, i64)>> {
    let found = db.query_opt(&AGENT_STATE_SQL, params![":key" => key], |r| {
        Ok((r.get::<String, _>(0)?, r.get::<Option<i64>, _>(1)?))
    })?;
    Ok(found.and_then(|(state, since)| Some((AgentState::parse(&state)?, since.unwrap_or(0)))))
}

/// The agent stopped: the turn is complete.
pub fn complete_turn(tx: &Tx<'_>, key: &str, last_message: Option<&str>) -> Result<()> {
    tx.exec(
        &COMPLETE_TURN_SQL,
        params![":key" => key, ":message" => last_message],
    )?;
    Ok(())
}

/// The session ended.
pub fn end(tx: &Tx<'_>, key: &str) -> Result<()> {
    let now = tx.now();
    tx.exec(&END_SQL, params![":key" => key, ":now" => now])?;
    Ok(())
}

/// True when the registry shows the session ended (and no `session_start` came since).
pub fn is_ended(db: &dyn Executor, key: &str) -> Result<bool> {
    Ok(db
        .query_opt(&IS_ENDED_SQL, params![":key" => key], |_| Ok(()))?
        .is_some())
}

/// Records `origin` as the session's, in the caller's transaction (with the inbound row).
pub fn set_origin_in(tx: &Tx<'_>, key: &str, origin: &Origin) -> Result<()> {
    let now = tx.now();
    tx.exec(
        &SET_ORIGIN_SQL,
        params![
            ":key" => key, ":origin" => origin.origin, ":chat" => origin.chat,
            ":thread" => origin.thread, ":now" => now,
        ],
    )?;
    Ok(())
}

/// The session's origin, if a message that named its chat ever reached it.
pub fn origin(db: &dyn Executor, key: &str) -> Result<Option<Origin>> {
    db.query_opt(&ORIGIN_SQL, params![":key" => key], |r| {
        Ok(from_columns! { r => Origin { origin, chat, thread } })
    })
}

/// One session, if known.
pub fn get(db: &dyn Executor, key: &str) -> Result<Option<SessionRecord>> {
    db.query_opt(&GET_SQL, params![":key" => key], from_row)
}

/// Active sessions known only by the agent's own id, with no chat: their hooks ran without
/// `RELAYQ_SESSION` and outside a pane relayq types into, so no chat hears their notices.
pub fn unmatched(db: &dyn Executor) -> Result<Vec<SessionRecord>> {
    db.query_all(&UNMATCHED_SQL, params![], from_row)
}

/// Every session, most recently active first.
pub fn list(db: &dyn Executor) -> Result<Vec<SessionRecord>> {
    db.query_all(&LIST_SQL, params![], from_row)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::test_db::TestDb;

    /// A session's life through every statement of the registry, on both backends.
    #[test]
    fn the_registry_keeps_a_session_from_its_first_event_to_its_end() {
        for db in TestDb::both() {
            let at = |now, f: &dyn Fn(&Tx<'_>) -> Result<()>| db.write_at(now, f).unwrap();
            let activity = Activity {
                key: "s1",
                agent: Agent::Codex,
                native_session_id: Some("n1"),
                cwd: None,
                transcript_path: None,
                pane: Some("%3"),
                node: Some("h1"),
                permission_mode: None,
            };
            at(1_000, &|tx| record_activity(tx, &activity, false));
            at(500, &|tx| {
                let later = Activity {
                    cwd: Some("/w"),
                    pane: None,
                    node: None,
                    permission_mode: None,
                    ..activity.clone()
                };
                record_activity(tx, &later, false)
            });
            at(2_000, &|tx| begin_turn(tx, "s1", Some("hello")));
            at(2_000, &|tx| mark_agent_hooks(tx, "s1"));
            at(2_100, &|tx| {
                set_agent_state(tx, "s1", AgentState::Working).map(|_| ())
            });
            // The same state again keeps its since-when; an older look does not undo a newer one.
            at(2_200, &|tx| {
                set_agent_state(tx, "s1", AgentState::Working).map(|_| ())
            });
            let older = db
                .write_at(2_300, |tx| {
                    set_agent_state_if_older(tx, "s1", AgentState::Ready, 2_000)
                })
                .unwrap();
            assert!(!older, "{}", db.name());
            let origin = Origin {
                origin: "telegram:bot".into(),
                chat: "42".into(),
                thread: None,
            };
            at(2_400, &|tx| set_origin_in(tx, "s1", &origin));
            at(3_000, &|tx| complete_turn(tx, "s1", Some("done")));

            let s = db.read(|conn| get(conn, "s1")).unwrap().unwrap();
            assert_eq!(
                (
                    s.agent.as_str(),
                    s.started_at,
                    s.last_activity_at,
                    s.cwd.as_deref()
                ),
                ("codex", 1_000, 1_000, Some("/w")),
                "{}: an older event does not move the activity back",
                db.name()
            );
            assert_eq!(
                (s.current_turn, s.turn_running, s.agent_hooks),
                (1, false, true)
            );
            assert_eq!(
                s.pane.as_deref(),
                Some("%3"),
                "a missing pane keeps the known one"
            );
            let node = db.read(|conn| crate::storage::nodes::session_node(conn, "s1"));
            assert_eq!(
                node.unwrap().as_deref(),
                Some("h1"),
                "an event without a node keeps it"
            );
            assert_eq!(s.last_user_input.as_deref(), Some("hello"));
            assert_eq!(s.last_assistant_message.as_deref(), Some("done"));
            assert_eq!(
                (s.agent_state, s.agent_state_since),
                (Some(AgentState::Working), Some(2_100))
            );
            assert_eq!(s.origin.as_ref(), Some(&origin));
            assert_eq!(
                db.read(|c| agent_state(c, "s1")).unwrap(),
                Some((AgentState::Working, 2_100))
            );
            assert_eq!(
                db.read(|c| self::origin(c, "s1")).unwrap(),
                Some(origin.clone())
            );
            assert!(
                db.read(|c| unmatched(c)).unwrap().is_empty(),
                "it has a chat"
            );

            at(4_000, &|tx| end(tx, "s1"));
            assert!(db.read(|c| is_ended(c, "s1")).unwrap(), "{}", db.name());
            at(5_000, &|tx| record_activity(tx, &activity, true));
            assert!(!db.read(|c| is_ended(c, "s1")).unwrap(), "reopened");
            let listed = db.read(list).unwrap();
            assert_eq!((listed.len(), listed[0].started_at), (1, 5_000));
        }
    }
}
