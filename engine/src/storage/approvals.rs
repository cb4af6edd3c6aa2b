//! The `approvals` table: an agent's permission question, from the time it asks until the
//! answer reached it, and its row types. Every statement on it lives here; what the rows mean
//! to the agents and the chats (which events ask, how answers are read and told) is in
//! [`approvals`](crate::approvals).
//!
//! Only the first answer is recorded: every write that ends an approval is
//! `UPDATE … WHERE state = 'asked'`, and says whether it changed the row.

use serde::Serialize;
use serde_json::Value;

use super::sessions::{Agent, Origin};
use crate::error::{EngineError, Result};
use crate::params;
use crate::storage::sql::{Executor, Query, Row, Sql};
use crate::storage::tx::Tx;

/// Letters of an approval id: no `0`/`o`, `1`/`l`/`i`, so an id read off a phone types right.
const ID_ALPHABET: &[u8] = b"abcdefghjkmnpqrstuvwxyz23456789";

/// Random bytes for a new id: 16 of them, from each database's own source.
const NEW_ID_SQL: Sql = Sql::two(
    "SELECT randomblob(16)",
    "SELECT uuid_send(gen_random_uuid())",
);

/// Characters in an approval id. Random, so a button left over from an older database (or
/// another host) can never answer a newer question.
const ID_LEN: usize = 6;

crate::words! {
    /// Where an approval is in its life.
    pub enum State("approval state") {
        /// The agent waits for the answer.
        Asked = "asked",
        Allowed = "allowed",
        Denied = "denied",
        /// No answer in time: the agent is told no.
        Expired = "expired",
        /// The agent stopped asking (answered in its terminal, its turn or session ended).
        Withdrawn = "withdrawn",
    }
}

crate::words! {
    /// How the answer reaches the agent (see `docs/agent-approvals.md` for why, per agent).
    pub enum Means("means") {
        /// A `relayq hook` process waits and prints the agent's decision output (Claude Code,
        /// Codex: their `PermissionRequest` hook).
        Hook = "hook",
        /// The dialog's keys, pressed by the daemon into the agent's pane (Gemini CLI).
        Keys = "keys",
    }
}

crate::words! {
    /// For how long an allow holds.
    pub enum Scope("scope") {
        /// This one call.
        Once = "once",
        /// This call and the like for the rest of the agent's session (the agent's own option).
        Session = "session",
    }
}

/// What an answer says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Allow(Scope),
    Deny,
}

impl Decision {
    /// `allow`, `allow-session`, `deny` (a button's data).
    pub fn parse(word: &str) -> Option<Decision> {
        Some(match word {
            "allow" => Decision::Allow(Scope::Once),
            "allow-session" => Decision::Allow(Scope::Session),
            "deny" => Decision::Deny,
            _ => return None,
        })
    }

    /// The word [`parse`](Self::parse) reads back (a button's data).
    pub fn word(self) -> &'static str {
        match self {
            Decision::Allow(Scope::Once) => "allow",
            Decision::Allow(Scope::Session) => "allow-session",
            Decision::Deny => "deny",
        }
    }
}

/// Who answered, and through what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answerer {
    /// A name for people: the user's, or `relayq approvals`.
    pub name: String,
    /// Their id on the platform, when they have one.
    pub id: Option<String>,
    /// `telegram:bot`, `slack:team`, `cli`, `api`.
    pub via: String,
    /// The chat the answer came from (a platform's); `None` for the CLI and the API, which
    /// the operator runs.
    pub chat: Option<(String, String)>,
}

/// A question the agent asks, as recorded by [`ask_in`].
#[derive(Debug, Clone, PartialEq)]
pub struct Ask {
    pub session: String,
    pub agent: Agent,
    pub tool: Option<String>,
    /// What it will do: the command, the file and a short diff summary.
    pub action: String,
    pub means: Means,
    /// The hook process that waits for the answer ([`Means::Hook`]).
    pub waiter_pid: Option<u32>,
    /// What the agent applies for "allow for this session" (Claude Code's
    /// `permission_suggestions`); `Some(Null)` when the agent does it itself (Gemini CLI's
    /// option 2); `None` when it has no such answer.
    pub session_rules: Option<Value>,
    /// The session's chat, where the question goes.
    pub origin: Option<Origin>,
    pub expires_at: i64,
}

/// One approval row.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Approval {
    pub id: String,
    pub session: String,
    pub agent: Agent,
    pub tool: Option<String>,
    pub action: String,
    pub means: Means,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waiter_pid: Option<u32>,
    /// Whether "allow for this session" is offered.
    pub for_session: bool,
    #[serde(skip)]
    pub session_rules: Option<Value>,
    pub origin: Option<Origin>,
    /// The outbound row that carried the question (its receipt is the message's id).
    pub question_row: Option<i64>,
    pub asked_at: i64,
    pub expires_at: i64,
    pub state: State,
    pub scope: Option<Scope>,
    pub answered_by: Option<String>,
    pub answered_by_id: Option<String>,
    pub answered_via: Option<String>,
    pub answered_at: Option<i64>,
    pub note: Option<String>,
    /// When the answer reached the agent (the hook printed it, the keys were pressed).
    pub reached_at: Option<i64>,
    /// When the chat was told the outcome.
    pub told_at: Option<i64>,
    /// Keys only: when the daemon started pressing the dialog's keys (kept across a crash).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pressed_at: Option<i64>,
    /// Keys only: why the answer could not reach the agent (its dialog had closed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unreached: Option<String>,
}

/// `SELECT` of every column of approvals whose rows `where_` chooses (a statement's tail).
macro_rules! select_approvals {
    ($where_:literal) => {
        concat!(
            "SELECT id, session, agent, tool, action, means, waiter_pid, session_rules, origin,
                    chat, thread, question_row, asked_at, expires_at, state, scope, answered_by,
                    answered_by_id, answered_via, answered_at, note, reached_at, told_at,
                    pressed_at, unreached
             FROM approvals ",
            $where_
        )
    };
}

const GET_SQL: Sql = Sql::same(select_approvals!("WHERE id = :id"));
const LIST_SQL: Sql = Sql::same(select_approvals!(
    "WHERE (NOT :open_only OR state = 'asked') ORDER BY asked_at DESC, id LIMIT :limit"
));
const OPEN_FOR_SESSION_SQL: Sql = Sql::same(select_approvals!(
    "WHERE session = :session AND state = 'asked' ORDER BY asked_at, id"
));
const DUE_SQL: Sql = Sql::same(select_approvals!(
    "WHERE state = 'asked' AND expires_at <= :now ORDER BY expires_at"
));
const UNTOLD_SQL: Sql = Sql::same(select_approvals!(
    "WHERE state <> 'asked' AND told_at IS NULL
       AND (means = 'hook' OR state = 'withdrawn' OR reached_at IS NOT NULL
            OR unreached IS NOT NULL)
     ORDER BY answered_at LIMIT 100"
));
const KEYS_DUE_SQL: Sql = Sql::same(select_approvals!(
    "WHERE means = 'keys' AND state <> 'asked' AND reached_at IS NULL AND unreached IS NULL
     ORDER BY answered_at LIMIT 100"
));
const ASK_SQL: Sql = Sql::same(
    "INSERT INTO approvals (id, session, agent, tool, action, means,
         waiter_pid, session_rules, origin, chat, thread, asked_at, expires_at)
     VALUES (:id, :session, :agent, :tool, :action, :means, :waiter_pid, :session_rules,
             :origin, :chat, :thread, :now, :expires_at)
     ON CONFLICT (id) DO NOTHING",
);
const ANYTHING_TO_DO_SQL: Sql = Sql::same(
    "SELECT EXISTS (SELECT 1 FROM approvals WHERE state = 'asked')
     OR EXISTS (SELECT 1 FROM approvals WHERE state <> 'asked' AND told_at IS NULL)",
);
const ANSWER_SQL: Sql = Sql::same(
    "UPDATE approvals SET state = :state, scope = :scope, answered_by = :by,
         answered_by_id = :by_id, answered_via = :via, answered_at = :now
     WHERE id = :id AND state = 'asked'",
);
const END_SQL: Sql = Sql::same(
    "UPDATE approvals SET state = :state, answered_via = :via,
         answered_at = :now, note = :note
     WHERE id = :id AND state = 'asked'",
);
const REACHED_SQL: Sql = Sql::same(
    "UPDATE approvals SET reached_at = :now
     WHERE id = :id AND state <> 'asked' AND reached_at IS NULL",
);
const ASKED_SINCE_SQL: Sql = Sql::same(
    "SELECT EXISTS (SELECT 1 FROM approvals
     WHERE session = :session AND id <> :id
       AND (asked_at > :at OR (asked_at = :at AND id > :id)))",
);
const UNREACHED_SQL: Sql =
    Sql::same("UPDATE approvals SET unreached = :why WHERE id = :id AND reached_at IS NULL");
const SET_QUESTION_SQL: Sql = Sql::same("UPDATE approvals SET question_row = :row WHERE id = :id");
const TOLD_SQL: Sql = Sql::same("UPDATE approvals SET told_at = :now WHERE id = :id");

fn from_row(r: &Row<'_>) -> Result<Approval> {
    let rules: Option<String> = r.get("session_rules")?;
    let origin = match (r.get("origin")?, r.get("chat")?) {
        (Some(origin), Some(chat)) => Some(Origin {
            origin,
            chat,
            thread: r.get("thread")?,
        }),
        _ => None,
    };
    Ok(from_columns! { r => Approval {
        id, session, agent, tool, action, means, waiter_pid, question_row, asked_at, expires_at,
        state, scope, answered_by, answered_by_id, answered_via, answered_at, note, reached_at,
        told_at, pressed_at, unreached;
        for_session: rules.is_some(),
        session_rules: rules.and_then(|r| serde_json::from_str(&r).ok()),
        origin,
    } })
}

/// Records the question, `asked`, under a new random id.
pub fn ask_in(tx: &Tx<'_>, ask: &Ask) -> Result<Approval> {
    let now = tx.now();
    let rules = ask
        .session_rules
        .as_ref()
        .map(|r| serde_json::to_string(r).expect("JSON serialises"));
    let (origin, chat, thread) = match &ask.origin {
        Some(o) => (Some(&o.origin), Some(&o.chat), o.thread.as_ref()),
        None => (None, None, None),
    };
    let waiter_pid = ask.waiter_pid.map(i64::from);
    for _ in 0..8 {
        let id = new_id(tx)?;
        let inserted = tx.exec(
            &ASK_SQL,
            params![
                ":id" => id, ":session" => ask.session, ":agent" => ask.agent,
                ":tool" => ask.tool, ":action" => ask.action, ":means" => ask.means,
                ":waiter_pid" => waiter_pid, ":session_rules" => rules, ":origin" => origin,
                ":chat" => chat, ":thread" => thread, ":now" => now,
                ":expires_at" => ask.expires_at,
            ],
        )?;
        if inserted == 1 {
            return get(tx, &id)?.ok_or_else(|| EngineError::Invalid("approval vanished".into()));
        }
    }
    Err(EngineError::Invalid(
        "no free approval id after 8 tries".into(),
    ))
}

fn new_id(db: &dyn Executor) -> Result<String> {
    let bytes: Vec<u8> = db.query_value(&NEW_ID_SQL, params![])?;
    Ok(bytes
        .iter()
        .take(ID_LEN)
        .map(|b| ID_ALPHABET[*b as usize % ID_ALPHABET.len()] as char)
        .collect())
}

/// Whether `text` has the shape of an approval id (so a chat's `/allow k3x9p` is read as one).
pub fn is_id(text: &str) -> bool {
    text.len() == ID_LEN && text.bytes().all(|b| ID_ALPHABET.contains(&b))
}

/// One approval.
pub fn get(db: &dyn Executor, id: &str) -> Result<Option<Approval>> {
    db.query_opt(&GET_SQL, params![":id" => id], from_row)
}

/// The newest approvals first: only the open ones (`asked`), or all, at most `limit`.
pub fn list(db: &dyn Executor, open_only: bool, limit: u32) -> Result<Vec<Approval>> {
    let limit = i64::from(limit);
    db.query_all(
        &LIST_SQL,
        params![":open_only" => open_only, ":limit" => limit],
        from_row,
    )
}

/// The session's open approvals, oldest first.
pub fn open_for_session(db: &dyn Executor, session: &str) -> Result<Vec<Approval>> {
    db.query_all(
        &OPEN_FOR_SESSION_SQL,
        params![":session" => session],
        from_row,
    )
}

/// The session's open approval for the same call as `ask` (same agent, tool and action), if
/// the agent asks about it again while it waits.
pub fn open_like(db: &dyn Executor, ask: &Ask) -> Result<Option<Approval>> {
    Ok(open_for_session(db, &ask.session)?
        .into_iter()
        .find(|a| a.agent == ask.agent && a.tool == ask.tool && a.action == ask.action))
}

/// The open approvals past their expiry at `now`.
pub fn due(db: &dyn Executor, now: i64) -> Result<Vec<Approval>> {
    db.query_all(&DUE_SQL, params![":now" => now], from_row)
}

/// Whether any approval is open, or ended with its chat not told (the daemon's look).
pub fn anything_to_do(db: &dyn Executor) -> Result<bool> {
    db.query_value(&ANYTHING_TO_DO_SQL, params![])
}

/// The approvals that ended and whose chat was not told yet, oldest first. A keys answer is
/// told once it is settled (pressed, or found unable to reach the agent): the chat learns what
/// the agent got, not only what was tapped.
pub fn untold(db: &dyn Executor) -> Result<Vec<Approval>> {
    db.query_all(&UNTOLD_SQL, params![], from_row)
}

/// What an answer did.
#[derive(Debug, Clone, PartialEq)]
pub enum AnswerResult {
    /// Recorded: the approval as it is now.
    Recorded(Approval),
    /// It was answered (or expired, or withdrawn) before: nothing changed.
    AlreadyEnded(Approval),
    /// The answer came from a chat the question was not asked in: nothing changed.
    NotHere(Approval),
    /// No approval has this id.
    NotFound,
    /// The person may not answer approvals: nothing changed.
    NotAllowed,
}

/// Records `decision` by `who`, only while the approval is `asked` (exactly one answer wins),
/// and only from the chat it was asked in when the answer comes from a chat. An allow for the
/// session where the agent has none is an allow once.
pub fn answer_in(
    tx: &Tx<'_>,
    id: &str,
    decision: Decision,
    who: &Answerer,
) -> Result<AnswerResult> {
    let now = tx.now();
    let Some(approval) = get(tx, id)? else {
        return Ok(AnswerResult::NotFound);
    };
    if let Some((origin, chat)) = &who.chat {
        let asked_here = approval
            .origin
            .as_ref()
            .is_some_and(|o| &o.origin == origin && &o.chat == chat);
        if !asked_here {
            return Ok(AnswerResult::NotHere(approval));
        }
    }
    let (state, scope) = match decision {
        Decision::Allow(Scope::Session) if approval.for_session => ("allowed", Some("session")),
        Decision::Allow(_) => ("allowed", Some("once")),
        Decision::Deny => ("denied", None),
    };
    let changed = tx.exec(
        &ANSWER_SQL,
        params![
            ":state" => state, ":scope" => scope, ":by" => who.name, ":by_id" => who.id,
            ":via" => who.via, ":now" => now, ":id" => id,
        ],
    )?;
    let now_row = get(tx, id)?.expect("the approval was just read");
    Ok(if changed == 1 {
        AnswerResult::Recorded(now_row)
    } else {
        AnswerResult::AlreadyEnded(now_row)
    })
}

/// Ends an open approval past its expiry: `expired`, a deny for the agent. `None` when it was
/// no longer open (answered meanwhile).
pub fn expire_in(tx: &Tx<'_>, id: &str) -> Result<Option<Approval>> {
    end_in(tx, id, "expired", "expiry", None)
}

/// Ends an open approval the agent no longer asks (`why`: answered in the terminal, the
/// session ended). `None` when it was no longer open.
pub fn withdraw_in(tx: &Tx<'_>, id: &str, why: &str) -> Result<Option<Approval>> {
    end_in(tx, id, "withdrawn", "agent", Some(why))
}

fn end_in(
    tx: &Tx<'_>,
    id: &str,
    state: &str,
    via: &str,
    note: Option<&str>,
) -> Result<Option<Approval>> {
    let now = tx.now();
    let changed = tx.exec(
        &END_SQL,
        params![":state" => state, ":via" => via, ":now" => now, ":note" => note, ":id" => id],
    )?;
    if changed == 0 {
        return Ok(None);
    }
    get(tx, id)
}

/// Marks that the answer reached the agent. False when it already had (so it is given once).
pub fn reached_in(tx: &Tx<'_>, id: &str) -> Result<bool> {
    let now = tx.now();
    let changed = tx.exec(&REACHED_SQL, params![":now" => now, ":id" => id])?;
    Ok(changed == 1)
}

/// The keys answers still to press, oldest first: ended (allowed, denied, expired: a deny),
/// answered by the dialog's keys, neither reached nor found unreachable.
pub fn keys_due(db: &dyn Executor) -> Result<Vec<Approval>> {
    db.query_all(&KEYS_DUE_SQL, params![], from_row)
}

/// Whether the session has asked anything after `approval` (a newer dialog stands where its
/// dialog stood: keys for it must not be pressed into the newer one).
pub fn asked_since(db: &dyn Executor, approval: &Approval) -> Result<bool> {
    db.query_value(
        &ASKED_SINCE_SQL,
        params![
            ":session" => approval.session, ":id" => approval.id, ":at" => approval.asked_at,
        ],
    )
}

/// The send-started mark, set before the dialog's keys are pressed. The earlier mark, if keys
/// were pressed for it before (a crash between the press and its record).
pub fn pressing_in(tx: &Tx<'_>, id: &str) -> Result<Option<i64>> {
    let now = tx.now();
    let before = pressed_at_in(tx, id)?;
    if before.is_none() {
        tx.exec(&PRESSING_SQL, params![":now" => now, ":id" => id])?;
    }
    Ok(before)
}

/// When the approval's keys were (or were about to be) pressed, if they were.
pub fn pressed_at_in(tx: &Tx<'_>, id: &str) -> Result<Option<i64>> {
    let pressed = tx.query_opt(&PRESSED_AT_SQL, params![":id" => id], |r| r.get(0))?;
    Ok(pressed.flatten())
}

const PRESSED_AT_SQL: Sql = Sql::same("SELECT pressed_at FROM approvals WHERE id = :id");
const PRESSING_SQL: Sql = Sql::same("UPDATE approvals SET pressed_at = :now WHERE id = :id");

/// Records that a keys answer could not reach the agent, and why (its dialog had closed, or
/// asks something else). Nothing was pressed; the chat is told.
pub fn unreached_in(tx: &Tx<'_>, id: &str, why: &str) -> Result<()> {
    tx.exec(&UNREACHED_SQL, params![":why" => why, ":id" => id])?;
    Ok(())
}

/// Keeps the outbound row that carried the question.
pub fn set_question_in(tx: &Tx<'_>, id: &str, row: i64) -> Result<()> {
    tx.exec(&SET_QUESTION_SQL, params![":row" => row, ":id" => id])?;
    Ok(())
}

/// Marks that the chat was told the outcome.
pub fn told_in(tx: &Tx<'_>, id: &str) -> Result<()> {
    let now = tx.now();
    tx.exec(&TOLD_SQL, params![":now" => now, ":id" => id])?;
    Ok(())
}

/// The open approvals asked in a chat's thread (no thread: the chat itself), two at most.
const OPEN_IN_CHAT_SQL: Sql = Sql::two(
    "SELECT id FROM approvals
     WHERE state = 'asked' AND origin = :origin AND chat = :chat AND thread IS :thread
     ORDER BY asked_at, id LIMIT 2",
    "SELECT id FROM approvals
     WHERE state = 'asked' AND origin = :origin AND chat = :chat
       AND thread IS NOT DISTINCT FROM CAST(:thread AS TEXT)
     ORDER BY asked_at, id LIMIT 2",
);

/// The approvals open in `chat` of `origin` (in `thread`, or outside any), up to two: a bare
/// yes or no answers one that is alone.
pub fn open_in_chat(
    db: &dyn Executor,
    origin: &str,
    chat: &str,
    thread: Option<&str>,
) -> Result<Vec<String>> {
    db.query_all(
        &OPEN_IN_CHAT_SQL,
        params![":origin" => origin, ":chat" => chat, ":thread" => thread],
        |r| r.get(0),
    )
}

const ASKED_BY_QUESTION_SQL: Sql = Sql::same(
    "SELECT a.id FROM approvals a
     JOIN queue_rows q ON q.id = a.question_row
     WHERE q.receipt = :message AND a.origin = :origin AND a.chat = :chat",
);

/// The approval whose question is platform message `message_id` in `chat` of `origin` (the
/// question's outbound row's receipt), if any.
pub fn asked_by_question(
    db: &dyn Executor,
    origin: &str,
    chat: &str,
    message_id: &str,
) -> Result<Option<String>> {
    db.query_opt(
        &ASKED_BY_QUESTION_SQL,
        params![":message" => message_id, ":origin" => origin, ":chat" => chat],
        |r| r.get(0),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::test_db::TestDb;

    /// Every statement on approvals prepares on both backends (on PostgreSQL with each
    /// parameter typed), the ones no test runs there included.
    #[test]
    fn every_approvals_statement_prepares_on_both_backends() {
        let all = [
            NEW_ID_SQL,
            GET_SQL,
            LIST_SQL,
            OPEN_FOR_SESSION_SQL,
            DUE_SQL,
            UNTOLD_SQL,
            OPEN_IN_CHAT_SQL,
            KEYS_DUE_SQL,
            ASK_SQL,
            ANYTHING_TO_DO_SQL,
            ANSWER_SQL,
            END_SQL,
            REACHED_SQL,
            ASKED_SINCE_SQL,
            UNREACHED_SQL,
            SET_QUESTION_SQL,
            TOLD_SQL,
            PRESSED_AT_SQL,
            PRESSING_SQL,
            ASKED_BY_QUESTION_SQL,
        ];
        for db in TestDb::both() {
            for sql in all {
                if let Err(e) = db.prepare(&sql) {
                    panic!("{}: {e}\nin: {sql:?}", db.name());
                }
            }
        }
    }
}
