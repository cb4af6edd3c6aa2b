//! The `sessions` and `session_origins` tables: the registry of agent sessions (kept current
//! by the hook-event handlers, see [`sessions`](crate::sessions)) and the chat each session
//! talks to. Every statement on them lives here; writes take the caller's transaction, so they
//! commit with the row that caused them.

use crate::tx::Tx;
use rusqlite::{named_params, Connection, OptionalExtension, Row};
use serde::Serialize;

use crate::db::query_all;
use crate::error::Result;

crate::words! {
    /// The agent CLIs relayq understands.
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
    /// What the agent is doing, from its own events (see [`agent_state`](crate::agent_state));
    /// none before its first event.
    pub agent_state: Option<AgentState>,
    /// Since when (unix ms).
    pub agent_state_since: Option<i64>,
    /// The agent's own hooks reported (not only Codex `notify`, which is then ignored).
    pub agent_hooks: bool,
    /// The tmux pane its agent's hooks ran in (`$TMUX_PANE`).
    pub pane: Option<String>,
    /// Where its last inbound message came from, when that named a chat: where its notices
    /// go by default.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub origin: Option<Origin>,
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
            "SELECT key, agent, native_session_id, cwd, transcript_path, state, started_at,
                    ended_at, last_activity_at, last_user_input, current_turn, turn_running,
                    last_assistant_message, o.origin, o.chat, o.thread, agent_state,
                    agent_state_since, agent_hooks, pane
             FROM sessions LEFT JOIN session_origins o ON o.session = sessions.key ",
            $where_
        )
    };
}

const GET_SQL: &str = select_sessions!("WHERE key = :key");
const UNMATCHED_SQL: &str = select_sessions!(
    "WHERE key = native_session_id AND o.session IS NULL AND state = 'active'
     ORDER BY last_activity_at DESC, key"
);
const LIST_SQL: &str = select_sessions!("ORDER BY last_activity_at DESC, key");

fn from_row(r: &Row<'_>) -> rusqlite::Result<SessionRecord> {
    let agent_state: Option<String> = r.get("agent_state")?;
    let origin = match r.get::<_, Option<String>>("origin")? {
        Some(_) => Some(from_columns! { r => Origin { origin, chat, thread } }),
        None => None,
    };
    Ok(from_columns! { r => SessionRecord {
        key, agent, native_session_id, cwd, transcript_path, state, started_at, ended_at,
        last_activity_at, last_user_input, current_turn, turn_running, last_assistant_message,
        agent_state_since, agent_hooks, pane;
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
}

const TOUCH_SQL: &str = "INSERT INTO sessions (key, agent, native_session_id, cwd, transcript_path,
                           started_at, last_activity_at, pane)
     VALUES (:key, :agent, :native, :cwd, :transcript, :now, :now, :pane)
     ON CONFLICT (key) DO UPDATE SET
       agent = excluded.agent,
       native_session_id = COALESCE(excluded.native_session_id, native_session_id),
       cwd = COALESCE(excluded.cwd, cwd),
       transcript_path = COALESCE(excluded.transcript_path, transcript_path),
       pane = COALESCE(excluded.pane, pane),
       last_activity_at = MAX(last_activity_at, excluded.last_activity_at),
       state = CASE WHEN :reopen THEN 'active' ELSE state END,
       ended_at = CASE WHEN :reopen THEN NULL ELSE ended_at END,
       started_at = CASE WHEN :reopen THEN excluded.started_at ELSE started_at END";

const BEGIN_TURN_SQL: &str =
    "UPDATE sessions SET current_turn = current_turn + 1, turn_running = 1,
            last_user_input = COALESCE(:prompt, last_user_input)
     WHERE key = :key";

const SET_AGENT_STATE_SQL: &str =
    "UPDATE sessions SET agent_state = :state, agent_state_since = :now
     WHERE key = :key AND agent_state IS NOT :state";

/// As `SET_AGENT_STATE_SQL`, unless the state was set after `:not_after` (by the agent's own
/// events, which know better than an older look at the screen).
const SET_AGENT_STATE_IF_OLDER_SQL: &str =
    "UPDATE sessions SET agent_state = :state, agent_state_since = :now
     WHERE key = :key AND agent_state IS NOT :state
       AND (agent_state_since IS NULL OR agent_state_since <= :not_after)";

const MARK_AGENT_HOOKS_SQL: &str =
    "UPDATE sessions SET agent_hooks = 1 WHERE key = :key AND agent_hooks = 0";

const SET_LAST_USER_INPUT_SQL: &str =
    "UPDATE sessions SET last_user_input = :input WHERE key = :key";

const AGENT_STATE_SQL: &str = "SELECT agent_state, agent_state_since FROM sessions
     WHERE key = :key AND agent_state IS NOT NULL";

const COMPLETE_TURN_SQL: &str = "UPDATE sessions SET turn_running = 0,
            last_assistant_message = COALESCE(:message, last_assistant_message)
     WHERE key = :key";

const END_SQL: &str =
    "UPDATE sessions SET state = 'ended', ended_at = :now, turn_running = 0 WHERE key = :key";

const IS_ENDED_SQL: &str = "SELECT 1 FROM sessions WHERE key = :key AND state = 'ended'";

const SET_ORIGIN_SQL: &str =
    "INSERT INTO session_origins (session, origin, chat, thread, updated_at)
     VALUES (:key, :origin, :chat, :thread, :now)
     ON CONFLICT (session) DO UPDATE SET origin = excluded.origin, chat = excluded.chat,
                                         thread = excluded.thread,
                                         updated_at = excluded.updated_at";

const ORIGIN_SQL: &str = "SELECT origin, chat, thread FROM session_origins WHERE session = :key";

/// Creates the session on its first event, or records the activity; fills in identity fields
/// (native id, cwd, transcript) the event carries. A session that was ended stays ended unless
/// `reopen` (a new `session_start` under the same key).
pub fn record_activity(tx: &Tx<'_>, a: &Activity<'_>, reopen: bool) -> Result<()> {
    let now = tx.now();
    tx.sqlite()?
        .prepare_cached(TOUCH_SQL)?
        .execute(named_params! {
            ":key": a.key, ":agent": a.agent.as_str(), ":native": a.native_session_id,
            ":cwd": a.cwd, ":transcript": a.transcript_path, ":now": now, ":pane": a.pane,
            ":reopen": reopen,
        })?;
    Ok(())
}

/// A prompt was submitted: a new turn starts.
pub fn begin_turn(tx: &Tx<'_>, key: &str, prompt: Option<&str>) -> Result<()> {
    tx.sqlite()?
        .prepare_cached(BEGIN_TURN_SQL)?
        .execute(named_params! {":key": key, ":prompt": prompt})?;
    Ok(())
}

/// The agent's state is `state` from `now`, unless it already was (its since-when stays).
pub fn set_agent_state(tx: &Tx<'_>, key: &str, state: AgentState) -> Result<bool> {
    let now = tx.now();
    let changed = tx
        .sqlite()?
        .prepare_cached(SET_AGENT_STATE_SQL)?
        .execute(named_params! {":key": key, ":state": state.as_str(), ":now": now})?;
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
    let changed = tx
        .sqlite()?
        .prepare_cached(SET_AGENT_STATE_IF_OLDER_SQL)?
        .execute(named_params! {
            ":key": key, ":state": state.as_str(), ":not_after": not_after, ":now": now,
        })?;
    Ok(changed > 0)
}

/// The agent's own hooks reported for this session (Codex: `notify` is then a duplicate).
pub fn mark_agent_hooks(tx: &Tx<'_>, key: &str) -> Result<()> {
    tx.sqlite()?
        .prepare_cached(MARK_AGENT_HOOKS_SQL)?
        .execute(named_params! {":key": key})?;
    Ok(())
}

/// The person's message of this turn, when the turn's start did not say it (Codex `notify`).
pub fn set_last_user_input(tx: &Tx<'_>, key: &str, input: &str) -> Result<()> {
    tx.sqlite()?
        .prepare_cached(SET_LAST_USER_INPUT_SQL)?
        .execute(named_params! {":key": key, ":input": input})?;
    Ok(())
}

/// The agent's state and since when, if the registry knows the session.
pub fn agent_state(conn: &Connection, key: &str) -> Result<Option<(AgentState, i64)>> {
    Ok(conn
        .prepare_cached(AGENT_STATE_SQL)?
        .query_row(named_params! {":key": key}, |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, Option<i64>>(1)?))
        })
        .optional()?
        .and_then(|(state, since)| Some((AgentState::parse(&state)?, since.unwrap_or(0)))))
}

/// The agent stopped: the turn is complete.
pub fn complete_turn(tx: &Tx<'_>, key: &str, last_message: Option<&str>) -> Result<()> {
    tx.sqlite()?
        .prepare_cached(COMPLETE_TURN_SQL)?
        .execute(named_params! {":key": key, ":message": last_message})?;
    Ok(())
}

/// The session ended.
pub fn end(tx: &Tx<'_>, key: &str) -> Result<()> {
    let now = tx.now();
    tx.sqlite()?
        .prepare_cached(END_SQL)?
        .execute(named_params! {":key": key, ":now": now})?;
    Ok(())
}

/// True when the registry shows the session ended (and no `session_start` came since).
pub fn is_ended(conn: &Connection, key: &str) -> Result<bool> {
    Ok(conn
        .prepare_cached(IS_ENDED_SQL)?
        .exists(named_params! {":key": key})?)
}

/// Records `origin` as the session's, in the caller's transaction (with the inbound row).
pub fn set_origin_in(tx: &Tx<'_>, key: &str, origin: &Origin) -> Result<()> {
    let now = tx.now();
    tx.sqlite()?
        .prepare_cached(SET_ORIGIN_SQL)?
        .execute(named_params! {
            ":key": key, ":origin": origin.origin, ":chat": origin.chat, ":thread": origin.thread,
            ":now": now,
        })?;
    Ok(())
}

/// The session's origin, if a message that named its chat ever reached it.
pub fn origin(conn: &Connection, key: &str) -> Result<Option<Origin>> {
    Ok(conn
        .prepare_cached(ORIGIN_SQL)?
        .query_row(named_params! {":key": key}, |r| {
            Ok(from_columns! { r => Origin { origin, chat, thread } })
        })
        .optional()?)
}

/// One session, if known.
pub fn get(conn: &Connection, key: &str) -> Result<Option<SessionRecord>> {
    Ok(conn
        .prepare_cached(GET_SQL)?
        .query_row(named_params! {":key": key}, from_row)
        .optional()?)
}
/// Active sessions known only by the agent's own id, with no chat: their hooks ran without
/// `RELAYQ_SESSION` and outside a pane relayq types into, so no chat hears their notices.
pub fn unmatched(conn: &Connection) -> Result<Vec<SessionRecord>> {
    query_all(conn, UNMATCHED_SQL, [], from_row)
}

/// Every session, most recently active first.
pub fn list(conn: &Connection) -> Result<Vec<SessionRecord>> {
    query_all(conn, LIST_SQL, [], from_row)
}
