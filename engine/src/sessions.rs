//! The `sessions` table: the registry of agent sessions, kept current by the hook-event
//! handlers. Every statement on it lives here; writes take the handler's transaction so they
//! commit together with the hook row's completion.

use rusqlite::{params, Connection, OptionalExtension, Row, Transaction};
use serde::Serialize;

use crate::agent_state::AgentState;
use crate::db::query_all;
use crate::error::Result;
use crate::hooks::HookEvent;

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

/// A session's columns and its origin's, `FROM` sessions and their origins.
const COLUMNS: &str = "key, agent, native_session_id, cwd, transcript_path, state, started_at,
     ended_at, last_activity_at, last_user_input, current_turn, turn_running, last_assistant_message,
     o.origin, o.chat, o.thread, agent_state, agent_state_since, agent_hooks,
     pane";
const FROM: &str = "sessions LEFT JOIN session_origins o ON o.session = sessions.key";

fn from_row(r: &Row<'_>) -> rusqlite::Result<SessionRecord> {
    Ok(SessionRecord {
        key: r.get(0)?,
        agent: r.get(1)?,
        native_session_id: r.get(2)?,
        cwd: r.get(3)?,
        transcript_path: r.get(4)?,
        state: r.get(5)?,
        started_at: r.get(6)?,
        ended_at: r.get(7)?,
        last_activity_at: r.get(8)?,
        last_user_input: r.get(9)?,
        current_turn: r.get(10)?,
        turn_running: r.get(11)?,
        last_assistant_message: r.get(12)?,
        agent_state: r
            .get::<_, Option<String>>(16)?
            .as_deref()
            .and_then(AgentState::parse),
        agent_state_since: r.get(17)?,
        agent_hooks: r.get(18)?,
        pane: r.get(19)?,
        origin: match r.get::<_, Option<String>>(13)? {
            Some(origin) => Some(Origin {
                origin,
                chat: r.get(14)?,
                thread: r.get(15)?,
            }),
            None => None,
        },
    })
}

/// Creates the session on its first event, or records the activity; fills in identity fields
/// (native id, cwd, transcript) the event carries. A session that was ended stays ended unless
/// `reopen` (a new `session_start` under the same key).
pub fn touch(tx: &Transaction<'_>, event: &HookEvent, now: i64, reopen: bool) -> Result<()> {
    let text = |field: &str| {
        event
            .data
            .get(field)
            .and_then(|v| v.as_str())
            .map(str::to_string)
    };
    tx.prepare_cached(
        "INSERT INTO sessions (key, agent, native_session_id, cwd, transcript_path, started_at,
                               last_activity_at, pane)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6, ?8)
         ON CONFLICT (key) DO UPDATE SET
           agent = excluded.agent,
           native_session_id = COALESCE(excluded.native_session_id, native_session_id),
           cwd = COALESCE(excluded.cwd, cwd),
           transcript_path = COALESCE(excluded.transcript_path, transcript_path),
           pane = COALESCE(excluded.pane, pane),
           last_activity_at = MAX(last_activity_at, excluded.last_activity_at),
           state = CASE WHEN ?7 THEN 'active' ELSE state END,
           ended_at = CASE WHEN ?7 THEN NULL ELSE ended_at END,
           started_at = CASE WHEN ?7 THEN excluded.started_at ELSE started_at END",
    )?
    .execute(params![
        event.session,
        event.agent.as_str(),
        event.native_session_id,
        text("cwd"),
        text("transcript_path"),
        now,
        reopen,
        event.pane,
    ])?;
    Ok(())
}

/// A prompt was submitted: a new turn starts.
pub fn begin_turn(tx: &Transaction<'_>, key: &str, prompt: Option<&str>) -> Result<()> {
    tx.prepare_cached(
        "UPDATE sessions SET current_turn = current_turn + 1, turn_running = 1,
                last_user_input = COALESCE(?2, last_user_input)
         WHERE key = ?1",
    )?
    .execute(params![key, prompt])?;
    Ok(())
}

/// The agent's state is `state` from `now`, unless it already was (its since-when stays).
pub fn set_agent_state(
    tx: &Transaction<'_>,
    key: &str,
    state: AgentState,
    now: i64,
) -> Result<bool> {
    let changed = tx
        .prepare_cached(
            "UPDATE sessions SET agent_state = ?2, agent_state_since = ?3
             WHERE key = ?1 AND agent_state IS NOT ?2",
        )?
        .execute(params![key, state.as_str(), now])?;
    Ok(changed > 0)
}

/// The agent's own hooks reported for this session (Codex: `notify` is then a duplicate).
pub fn mark_agent_hooks(tx: &Transaction<'_>, key: &str) -> Result<()> {
    tx.prepare_cached("UPDATE sessions SET agent_hooks = 1 WHERE key = ?1 AND agent_hooks = 0")?
        .execute(params![key])?;
    Ok(())
}

/// The person's message of this turn, when the turn's start did not say it (Codex `notify`).
pub fn set_last_user_input(tx: &Transaction<'_>, key: &str, input: &str) -> Result<()> {
    tx.prepare_cached("UPDATE sessions SET last_user_input = ?2 WHERE key = ?1")?
        .execute(params![key, input])?;
    Ok(())
}

/// The agent's state and since when, if the registry knows the session.
pub fn agent_state(conn: &Connection, key: &str) -> Result<Option<(AgentState, i64)>> {
    Ok(conn
        .prepare_cached(
            "SELECT agent_state, agent_state_since FROM sessions
             WHERE key = ?1 AND agent_state IS NOT NULL",
        )?
        .query_row(params![key], |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, Option<i64>>(1)?))
        })
        .optional()?
        .and_then(|(state, since)| Some((AgentState::parse(&state)?, since.unwrap_or(0)))))
}

/// The agent stopped: the turn is complete.
pub fn complete_turn(tx: &Transaction<'_>, key: &str, last_message: Option<&str>) -> Result<()> {
    tx.prepare_cached(
        "UPDATE sessions SET turn_running = 0,
                last_assistant_message = COALESCE(?2, last_assistant_message)
         WHERE key = ?1",
    )?
    .execute(params![key, last_message])?;
    Ok(())
}

/// The session ended.
pub fn end(tx: &Transaction<'_>, key: &str, now: i64) -> Result<()> {
    tx.prepare_cached(
        "UPDATE sessions SET state = 'ended', ended_at = ?2, turn_running = 0 WHERE key = ?1",
    )?
    .execute(params![key, now])?;
    Ok(())
}

/// True when the registry shows the session ended (and no `session_start` came since).
pub fn is_ended(conn: &Connection, key: &str) -> Result<bool> {
    Ok(conn
        .prepare_cached("SELECT 1 FROM sessions WHERE key = ?1 AND state = 'ended'")?
        .exists(params![key])?)
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

/// Records `origin` as the session's, in the caller's transaction (with the inbound row).
pub fn set_origin_in(tx: &Transaction<'_>, key: &str, origin: &Origin, now: i64) -> Result<()> {
    tx.prepare_cached(
        "INSERT INTO session_origins (session, origin, chat, thread, updated_at)
         VALUES (?1, ?2, ?3, ?4, ?5)
         ON CONFLICT (session) DO UPDATE SET origin = excluded.origin, chat = excluded.chat,
                                             thread = excluded.thread,
                                             updated_at = excluded.updated_at",
    )?
    .execute(params![key, origin.origin, origin.chat, origin.thread, now])?;
    Ok(())
}

/// The session's origin, if a message that named its chat ever reached it.
pub fn origin(conn: &Connection, key: &str) -> Result<Option<Origin>> {
    Ok(conn
        .prepare_cached("SELECT origin, chat, thread FROM session_origins WHERE session = ?1")?
        .query_row(params![key], |r| {
            Ok(Origin {
                origin: r.get(0)?,
                chat: r.get(1)?,
                thread: r.get(2)?,
            })
        })
        .optional()?)
}

/// One session, if known.
pub fn get(conn: &Connection, key: &str) -> Result<Option<SessionRecord>> {
    let sql = format!("SELECT {COLUMNS} FROM {FROM} WHERE key = ?1");
    Ok(conn
        .prepare_cached(&sql)?
        .query_row(params![key], from_row)
        .optional()?)
}

/// Active sessions known only by the agent's own id, with no chat: their hooks ran without
/// `RELAYQ_SESSION` and outside a pane relayq types into, so no chat hears their notices.
pub fn unmatched(conn: &Connection) -> Result<Vec<SessionRecord>> {
    let sql = format!(
        "SELECT {COLUMNS} FROM {FROM}
          WHERE key = native_session_id AND o.session IS NULL AND state = 'active'
          ORDER BY last_activity_at DESC, key"
    );
    query_all(conn, &sql, [], from_row)
}

/// Every session, most recently active first.
pub fn list(conn: &Connection) -> Result<Vec<SessionRecord>> {
    let sql = format!("SELECT {COLUMNS} FROM {FROM} ORDER BY last_activity_at DESC, key");
    query_all(conn, &sql, [], from_row)
}
