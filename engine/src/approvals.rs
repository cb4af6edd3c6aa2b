//! The `approvals` table: an agent's permission question, answered from the chat. One row per
//! question, from the moment the agent asks until its answer reached the agent, surviving
//! restarts (every statement on the table is here).
//!
//! ```text
//!   agent asks ──▶ ask_in: a row `asked`, with its expiry ──▶ the question, with buttons, to the
//!                  session's chat (the row keeps the question's outbound row: its message id)
//!   a tap, /allow ID, yes/no, `relayq approvals allow`, the API
//!            ──▶ answer_in: `asked` → `allowed` | `denied`, once (a second answer changes
//!                nothing and is told what the first was)
//!   expiry   ──▶ expire_in: `asked` → `expired`: the agent gets an explicit deny
//!   the agent stopped asking (answered in its terminal, ended) ──▶ withdraw_in: `withdrawn`
//!   the answer reaches the agent once: reached_in marks it (a hook prints it, or keys pressed)
//!   the chat is told the outcome once: untold → the question edited → told_in
//! ```

use rusqlite::{params, Connection, OptionalExtension, Row, Transaction};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::error::{EngineError, Result};
use crate::hooks::{Agent, HookEvent};
use crate::sessions::Origin;

/// `[approvals]`: whether the session's chat answers its agent's permission questions, and
/// how long a question waits for an answer before the agent is told no.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Settings {
    /// Off: questions are told to the chat as before, and answered in the agent's terminal.
    pub enabled: bool,
    #[serde(with = "humantime_serde")]
    pub expire_after: std::time::Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            enabled: true,
            expire_after: std::time::Duration::from_secs(5 * 60),
        }
    }
}

/// The timeout `relayq init` sets on the agents' `PermissionRequest` hook (Claude Code's and
/// Codex's default for command hooks too): the waiting hook answers well before it.
pub const HOOK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(600);

/// What `expire_after` may be: long enough to read a question on a phone, and short of the
/// agents' own hook timeout (600 s for Claude Code and Codex; `relayq init` sets it on the
/// hook), so the hook always answers before the agent gives up on it.
pub const EXPIRE_AFTER_RANGE: (std::time::Duration, std::time::Duration) = (
    std::time::Duration::from_secs(10),
    std::time::Duration::from_secs(9 * 60),
);

/// The approval a permission request opens, when the session's chat can answer it: Claude
/// Code's and Codex's `PermissionRequest` (answered by the waiting hook), Gemini CLI's
/// `ToolPermission` notification (answered by the dialog's keys). `None` for any other event,
/// when approvals are off, or when the session has no chat to ask.
pub fn ask_of(
    event: &HookEvent,
    origin: Option<Origin>,
    settings: &Settings,
    waiter_pid: Option<u32>,
    now: i64,
) -> Option<Ask> {
    if !settings.enabled {
        return None;
    }
    let native = event.native_event.as_deref()?;
    let (means, session_rules) = match event.agent {
        Agent::Claude | Agent::Codex if native == "PermissionRequest" => {
            (Means::Hook, session_rules_of(event))
        }
        Agent::Gemini
            if native == "Notification"
                && event.field(&["notification_type"]) == Some("ToolPermission") =>
        {
            (Means::Keys, Some(Value::Null))
        }
        _ => return None,
    };
    let origin = origin?;
    Some(Ask {
        session: event.session.clone(),
        agent: event.agent,
        tool: event
            .field(&["tool_name"])
            .or_else(|| event.data.get("details")?.get("title")?.as_str())
            .map(str::to_string),
        action: action_of(event),
        means,
        waiter_pid: waiter_pid.filter(|_| means == Means::Hook),
        session_rules,
        origin: Some(origin),
        expires_at: now + settings.expire_after.as_millis() as i64,
    })
}

/// What "allow for this session" hands back to Claude Code (`updatedPermissions`), `None` when
/// it is not offered: Claude Code's own suggestions for the call (its dialog's "don't ask
/// again" choice), each kept to this session (never written to a settings file from a chat),
/// and, for a shell command, a rule allowing that exact command: Claude Code's suggestions for
/// a command in the project's directory are that directory, which does not spare the next
/// identical call its question (seen with Claude Code 2.1.197).
fn session_rules_of(event: &HookEvent) -> Option<Value> {
    let mut rules: Vec<Value> = event
        .data
        .get("permission_suggestions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for rule in &mut rules {
        if rule.get("destination").is_some() {
            rule["destination"] = json!("session");
        }
    }
    let command = event
        .data
        .get("tool_input")
        .and_then(|i| i.get("command"))
        .and_then(Value::as_str);
    if let (Agent::Claude, Some("Bash"), Some(command)) =
        (event.agent, event.field(&["tool_name"]), command)
    {
        rules.push(json!({
            "type": "addRules",
            "rules": [{"toolName": "Bash", "ruleContent": command}],
            "behavior": "allow",
            "destination": "session",
        }));
    }
    (!rules.is_empty()).then_some(Value::Array(rules))
}

/// Letters of an approval id: no `0`/`o`, `1`/`l`/`i`, so an id read off a phone types right.
const ID_ALPHABET: &[u8] = b"abcdefghjkmnpqrstuvwxyz23456789";

/// Characters in an approval id. Random, so a button left over from an older database (or
/// another host) can never answer a newer question.
const ID_LEN: usize = 6;

/// Where an approval is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    /// The agent waits for the answer.
    Asked,
    Allowed,
    Denied,
    /// No answer in time: the agent is told no.
    Expired,
    /// The agent stopped asking (answered in its terminal, its turn or session ended).
    Withdrawn,
}

impl State {
    pub fn as_str(self) -> &'static str {
        match self {
            State::Asked => "asked",
            State::Allowed => "allowed",
            State::Denied => "denied",
            State::Expired => "expired",
            State::Withdrawn => "withdrawn",
        }
    }

    fn parse(text: &str) -> Option<State> {
        Some(match text {
            "asked" => State::Asked,
            "allowed" => State::Allowed,
            "denied" => State::Denied,
            "expired" => State::Expired,
            "withdrawn" => State::Withdrawn,
            _ => return None,
        })
    }
}

/// How the answer reaches the agent (see `docs/agent-approvals.md` for why, per agent).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Means {
    /// A `relayq hook` process waits and prints the agent's decision output (Claude Code,
    /// Codex: their `PermissionRequest` hook).
    Hook,
    /// The dialog's keys, pressed by the daemon into the agent's pane (Gemini CLI).
    Keys,
}

/// For how long an allow holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// This one call.
    Once,
    /// This call and the like for the rest of the agent's session (the agent's own option).
    Session,
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

impl Approval {
    /// The decision the agent gets: its answer, or a deny once expired or withdrawn.
    pub fn decision(&self) -> Option<Decision> {
        match self.state {
            State::Asked => None,
            State::Allowed => Some(Decision::Allow(self.scope.unwrap_or(Scope::Once))),
            State::Denied | State::Expired | State::Withdrawn => Some(Decision::Deny),
        }
    }

    /// What happened, for the chat and the operator: "allowed by Alice at 12:03 UTC",
    /// "expired at 12:08 UTC: denied".
    pub fn outcome(&self) -> String {
        let at = self.answered_at.map(clock_time).unwrap_or_default();
        let by = self.answered_by.as_deref().unwrap_or("someone");
        let said = match self.state {
            State::Asked => format!(
                "waiting for an answer until {}",
                clock_time(self.expires_at)
            ),
            State::Allowed if self.scope == Some(Scope::Session) => {
                format!("allowed for this session by {by} at {at}")
            }
            State::Allowed => format!("allowed by {by} at {at}"),
            State::Denied => format!("denied by {by} at {at}"),
            State::Expired => format!("expired at {at} with no answer: denied"),
            State::Withdrawn => match &self.note {
                Some(why) => format!("no longer asked ({why})"),
                None => "no longer asked".into(),
            },
        };
        match &self.unreached {
            Some(why) => format!("{said}; it did not reach the agent: {why}"),
            None => said,
        }
    }
}

/// `12:03 UTC` for unix ms.
pub fn clock_time(ms: i64) -> String {
    let minutes = ms.div_euclid(60_000).rem_euclid(24 * 60);
    format!("{:02}:{:02} UTC", minutes / 60, minutes % 60)
}

const COLUMNS: &str = "id, session, agent, tool, action, means, waiter_pid, session_rules, \
     origin, chat, thread, question_row, asked_at, expires_at, state, scope, answered_by, \
     answered_by_id, answered_via, answered_at, note, reached_at, told_at, pressed_at, unreached";

fn from_row(r: &Row<'_>) -> rusqlite::Result<Approval> {
    let text = |i: usize| r.get::<_, Option<String>>(i);
    let invalid = |i: usize, what: &str| {
        rusqlite::Error::FromSqlConversionFailure(
            i,
            rusqlite::types::Type::Text,
            format!("not an approval {what}").into(),
        )
    };
    let agent: String = r.get(2)?;
    let means: String = r.get(5)?;
    let state: String = r.get(14)?;
    let rules: Option<String> = text(7)?;
    let origin = match (text(8)?, text(9)?) {
        (Some(origin), Some(chat)) => Some(Origin {
            origin,
            chat,
            thread: text(10)?,
        }),
        _ => None,
    };
    Ok(Approval {
        id: r.get(0)?,
        session: r.get(1)?,
        agent: agent.parse().map_err(|_| invalid(2, "agent"))?,
        tool: text(3)?,
        action: r.get(4)?,
        means: match means.as_str() {
            "hook" => Means::Hook,
            "keys" => Means::Keys,
            _ => return Err(invalid(5, "means")),
        },
        waiter_pid: r.get(6)?,
        for_session: rules.is_some(),
        session_rules: rules.and_then(|r| serde_json::from_str(&r).ok()),
        origin,
        question_row: r.get(11)?,
        asked_at: r.get(12)?,
        expires_at: r.get(13)?,
        state: State::parse(&state).ok_or_else(|| invalid(14, "state"))?,
        scope: match text(15)?.as_deref() {
            Some("once") => Some(Scope::Once),
            Some("session") => Some(Scope::Session),
            _ => None,
        },
        answered_by: text(16)?,
        answered_by_id: text(17)?,
        answered_via: text(18)?,
        answered_at: r.get(19)?,
        note: text(20)?,
        reached_at: r.get(21)?,
        told_at: r.get(22)?,
        pressed_at: r.get(23)?,
        unreached: text(24)?,
    })
}

/// Records the question, `asked`, under a new random id.
pub fn ask_in(tx: &Transaction<'_>, ask: &Ask, now: i64) -> Result<Approval> {
    let rules = ask
        .session_rules
        .as_ref()
        .map(|r| serde_json::to_string(r).expect("JSON serialises"));
    let (origin, chat, thread) = match &ask.origin {
        Some(o) => (Some(&o.origin), Some(&o.chat), o.thread.as_ref()),
        None => (None, None, None),
    };
    for _ in 0..8 {
        let id = new_id(tx)?;
        let inserted = tx
            .prepare_cached(
                "INSERT OR IGNORE INTO approvals (id, session, agent, tool, action, means,
                     waiter_pid, session_rules, origin, chat, thread, asked_at, expires_at)
                 VALUES (:id, :session, :agent, :tool, :action, :means, :waiter_pid,
                         :session_rules, :origin, :chat, :thread, :now, :expires_at)",
            )?
            .execute(rusqlite::named_params! {
                ":id": id,
                ":session": ask.session,
                ":agent": ask.agent.as_str(),
                ":tool": ask.tool,
                ":action": ask.action,
                ":means": match ask.means { Means::Hook => "hook", Means::Keys => "keys" },
                ":waiter_pid": ask.waiter_pid,
                ":session_rules": rules,
                ":origin": origin,
                ":chat": chat,
                ":thread": thread,
                ":now": now,
                ":expires_at": ask.expires_at,
            })?;
        if inserted == 1 {
            return get(tx, &id)?.ok_or_else(|| EngineError::Invalid("approval vanished".into()));
        }
    }
    Err(EngineError::Invalid(
        "no free approval id after 8 tries".into(),
    ))
}

fn new_id(conn: &Connection) -> Result<String> {
    let bytes: Vec<u8> = conn.query_row("SELECT randomblob(?1)", params![ID_LEN as i64], |r| {
        r.get(0)
    })?;
    Ok(bytes
        .iter()
        .map(|b| ID_ALPHABET[*b as usize % ID_ALPHABET.len()] as char)
        .collect())
}

/// Whether `text` has the shape of an approval id (so a chat's `/allow k3x9p` is read as one).
pub fn is_id(text: &str) -> bool {
    text.len() == ID_LEN && text.bytes().all(|b| ID_ALPHABET.contains(&b))
}

/// One approval.
pub fn get(conn: &Connection, id: &str) -> Result<Option<Approval>> {
    let sql = format!("SELECT {COLUMNS} FROM approvals WHERE id = :id");
    Ok(conn
        .prepare_cached(&sql)?
        .query_row(rusqlite::named_params! {":id": id}, from_row)
        .optional()?)
}

/// The newest approvals first: only the open ones (`asked`), or all, at most `limit`.
pub fn list(conn: &Connection, open_only: bool, limit: u32) -> Result<Vec<Approval>> {
    let sql = format!(
        "SELECT {COLUMNS} FROM approvals WHERE (:open_only = 0 OR state = 'asked')
         ORDER BY asked_at DESC, id LIMIT :limit"
    );
    let mut stmt = conn.prepare_cached(&sql)?;
    let rows = stmt.query_map(
        rusqlite::named_params! {":open_only": open_only, ":limit": limit},
        from_row,
    )?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

/// The session's open approvals, oldest first.
pub fn open_for_session(conn: &Connection, session: &str) -> Result<Vec<Approval>> {
    let sql = format!(
        "SELECT {COLUMNS} FROM approvals WHERE session = :session AND state = 'asked'
         ORDER BY asked_at, id"
    );
    let mut stmt = conn.prepare_cached(&sql)?;
    let rows = stmt.query_map(rusqlite::named_params! {":session": session}, from_row)?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

/// The session's open approval for the same call as `ask` (same agent, tool and action), if
/// the agent asks about it again while it waits.
pub fn open_like(conn: &Connection, ask: &Ask) -> Result<Option<Approval>> {
    Ok(open_for_session(conn, &ask.session)?
        .into_iter()
        .find(|a| a.agent == ask.agent && a.tool == ask.tool && a.action == ask.action))
}

/// The open approvals past their expiry at `now`.
pub fn due(conn: &Connection, now: i64) -> Result<Vec<Approval>> {
    let sql = format!(
        "SELECT {COLUMNS} FROM approvals WHERE state = 'asked' AND expires_at <= :now
         ORDER BY expires_at"
    );
    let mut stmt = conn.prepare_cached(&sql)?;
    let rows = stmt.query_map(rusqlite::named_params! {":now": now}, from_row)?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

/// Whether any approval is open, or ended with its chat not told (the daemon's look).
pub fn anything_to_do(conn: &Connection) -> Result<bool> {
    Ok(conn
        .prepare_cached(
            "SELECT EXISTS (SELECT 1 FROM approvals WHERE state = 'asked')
                 OR EXISTS (SELECT 1 FROM approvals WHERE state <> 'asked' AND told_at IS NULL)",
        )?
        .query_row([], |r| r.get(0))?)
}

/// The approvals that ended and whose chat was not told yet, oldest first. A keys answer is
/// told once it is settled (pressed, or found unable to reach the agent): the chat learns what
/// the agent got, not only what was tapped.
pub fn untold(conn: &Connection) -> Result<Vec<Approval>> {
    let sql = format!(
        "SELECT {COLUMNS} FROM approvals WHERE state <> 'asked' AND told_at IS NULL
           AND (means = 'hook' OR state = 'withdrawn' OR reached_at IS NOT NULL
                OR unreached IS NOT NULL)
         ORDER BY answered_at LIMIT 100"
    );
    let mut stmt = conn.prepare_cached(&sql)?;
    let rows = stmt.query_map([], from_row)?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
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

impl AnswerResult {
    /// A line for the person who answered.
    pub fn reply(&self) -> String {
        match self {
            AnswerResult::Recorded(a) => capitalise(&a.outcome()),
            AnswerResult::AlreadyEnded(a) => format!("Already {}", a.outcome()),
            AnswerResult::NotHere(a) => format!(
                "Approval {} was not asked in this chat; answer it where it was asked",
                a.id
            ),
            AnswerResult::NotFound => "No such approval".into(),
            AnswerResult::NotAllowed => {
                "You may not answer this agent's questions: ask the bot's owner to add your \
                 user id to allowed_users"
                    .into()
            }
        }
    }
}

fn capitalise(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// Records `decision` by `who`, only while the approval is `asked` (exactly one answer wins),
/// and only from the chat it was asked in when the answer comes from a chat. An allow for the
/// session where the agent has none is an allow once.
pub fn answer_in(
    tx: &Transaction<'_>,
    id: &str,
    decision: Decision,
    who: &Answerer,
    now: i64,
) -> Result<AnswerResult> {
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
    let changed = tx
        .prepare_cached(
            "UPDATE approvals SET state = :state, scope = :scope, answered_by = :by,
                 answered_by_id = :by_id, answered_via = :via, answered_at = :now
             WHERE id = :id AND state = 'asked'",
        )?
        .execute(rusqlite::named_params! {
            ":state": state, ":scope": scope, ":by": who.name, ":by_id": who.id,
            ":via": who.via, ":now": now, ":id": id,
        })?;
    let now_row = get(tx, id)?.expect("the approval was just read");
    Ok(if changed == 1 {
        AnswerResult::Recorded(now_row)
    } else {
        AnswerResult::AlreadyEnded(now_row)
    })
}

/// Ends an open approval past its expiry: `expired`, a deny for the agent. `None` when it was
/// no longer open (answered meanwhile).
pub fn expire_in(tx: &Transaction<'_>, id: &str, now: i64) -> Result<Option<Approval>> {
    end_in(tx, id, "expired", "expiry", None, now)
}

/// Ends an open approval the agent no longer asks (`why`: answered in the terminal, the
/// session ended). `None` when it was no longer open.
pub fn withdraw_in(
    tx: &Transaction<'_>,
    id: &str,
    why: &str,
    now: i64,
) -> Result<Option<Approval>> {
    end_in(tx, id, "withdrawn", "agent", Some(why), now)
}

fn end_in(
    tx: &Transaction<'_>,
    id: &str,
    state: &str,
    via: &str,
    note: Option<&str>,
    now: i64,
) -> Result<Option<Approval>> {
    let changed = tx
        .prepare_cached(
            "UPDATE approvals SET state = :state, answered_via = :via, answered_at = :now,
                 note = :note
             WHERE id = :id AND state = 'asked'",
        )?
        .execute(rusqlite::named_params! {
            ":state": state, ":via": via, ":now": now, ":note": note, ":id": id,
        })?;
    if changed == 0 {
        return Ok(None);
    }
    get(tx, id)
}

/// Marks that the answer reached the agent. False when it already had (so it is given once).
pub fn reached_in(tx: &Transaction<'_>, id: &str, now: i64) -> Result<bool> {
    let changed = tx
        .prepare_cached(
            "UPDATE approvals SET reached_at = :now
             WHERE id = :id AND state <> 'asked' AND reached_at IS NULL",
        )?
        .execute(rusqlite::named_params! {":now": now, ":id": id})?;
    Ok(changed == 1)
}

/// The keys answers still to press, oldest first: ended (allowed, denied, expired: a deny),
/// answered by the dialog's keys, neither reached nor found unreachable.
pub fn keys_due(conn: &Connection) -> Result<Vec<Approval>> {
    let sql = format!(
        "SELECT {COLUMNS} FROM approvals
          WHERE means = 'keys' AND state <> 'asked' AND reached_at IS NULL AND unreached IS NULL
          ORDER BY answered_at LIMIT 100"
    );
    let mut stmt = conn.prepare_cached(&sql)?;
    let rows = stmt.query_map([], from_row)?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

/// Whether the session has asked anything after `approval` (a newer dialog stands where its
/// dialog stood: keys for it must not be pressed into the newer one).
pub fn asked_since(conn: &Connection, approval: &Approval) -> Result<bool> {
    Ok(conn
        .prepare_cached(
            "SELECT EXISTS (SELECT 1 FROM approvals
                 WHERE session = :session AND id <> :id
                   AND (asked_at > :at OR (asked_at = :at AND id > :id)))",
        )?
        .query_row(
            rusqlite::named_params! {
                ":session": approval.session, ":id": approval.id, ":at": approval.asked_at,
            },
            |r| r.get(0),
        )?)
}

/// The send-started mark, set before the dialog's keys are pressed. The earlier mark, if keys
/// were pressed for it before (a crash between the press and its record).
pub fn pressing_in(tx: &Transaction<'_>, id: &str, now: i64) -> Result<Option<i64>> {
    let before: Option<i64> = tx
        .prepare_cached("SELECT pressed_at FROM approvals WHERE id = :id")?
        .query_row(rusqlite::named_params! {":id": id}, |r| r.get(0))
        .optional()?
        .flatten();
    if before.is_none() {
        tx.prepare_cached("UPDATE approvals SET pressed_at = :now WHERE id = :id")?
            .execute(rusqlite::named_params! {":now": now, ":id": id})?;
    }
    Ok(before)
}

/// Records that a keys answer could not reach the agent, and why (its dialog had closed, or
/// asks something else). Nothing was pressed; the chat is told.
pub fn unreached_in(tx: &Transaction<'_>, id: &str, why: &str) -> Result<()> {
    tx.prepare_cached(
        "UPDATE approvals SET unreached = :why WHERE id = :id AND reached_at IS NULL",
    )?
    .execute(rusqlite::named_params! {":why": why, ":id": id})?;
    Ok(())
}

/// Keeps the outbound row that carried the question.
pub fn set_question_in(tx: &Transaction<'_>, id: &str, row: i64) -> Result<()> {
    tx.prepare_cached("UPDATE approvals SET question_row = :row WHERE id = :id")?
        .execute(rusqlite::named_params! {":row": row, ":id": id})?;
    Ok(())
}

/// Marks that the chat was told the outcome.
pub fn told_in(tx: &Transaction<'_>, id: &str, now: i64) -> Result<()> {
    tx.prepare_cached("UPDATE approvals SET told_at = :now WHERE id = :id")?
        .execute(rusqlite::named_params! {":now": now, ":id": id})?;
    Ok(())
}

/// What a chat button answering approval `id` with `decision` carries (Telegram's
/// `callback_data`, a Slack button's `value`): `relayq:<id>:<allow|deny|allow-session>`, well
/// within Telegram's 64 bytes.
pub fn button_data(id: &str, decision: Decision) -> String {
    format!("relayq:{id}:{}", decision.word())
}

/// The approval and decision a button's data names, if it is relayq's.
pub fn read_button_data(data: &str) -> Option<(String, Decision)> {
    let (id, word) = data.strip_prefix("relayq:")?.split_once(':')?;
    Some((id.to_string(), Decision::parse(word)?))
}

/// Which approval an answer from a chat is for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// Named by its id (a button's data, `/allow ID`).
    Id(String),
    /// The question this platform message is (a reply of yes or no to it).
    Question { message_id: String },
}

/// An answer that came from a chat: a button tapped, a text command, a reply to the question.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatAnswer {
    pub target: Target,
    pub decision: Decision,
    /// Who, from which chat (`who.chat` is set).
    pub who: Answerer,
    /// Whether the source's allowlist names this user (`allowed_users`): a chat allowed as a
    /// whole lets its members write to the agent, not answer its questions.
    pub may_answer: bool,
    /// The platform's handle to acknowledge the tap with (Telegram `callback_query.id`).
    pub callback: Option<String>,
    /// The platform's id of the message that carried a text answer (the reply goes to it).
    pub message_id: Option<String>,
    /// An answer that turns out to answer no question goes to the agent as this message: a
    /// yes or no replying to a message that is no question; a bare `allow WORD` (Slack) whose
    /// word names no approval.
    pub otherwise: Option<Box<crate::InboundMessage>>,
}

/// `/allow ID`, `/allow ID session`, `/deny ID` (also `/allow@bot ID`, as Telegram writes a
/// command in a group); or, replying to a question, `yes`/`no`/`allow`/`deny`. `None` for any
/// other text, which goes to the agent as it is.
pub fn command_of(text: &str, reply_to: Option<&str>) -> Option<(Target, Decision)> {
    let words: Vec<&str> = text.split_whitespace().collect();
    let command = |word: &str| {
        let word = word.strip_prefix('/')?;
        let word = word.split_once('@').map_or(word, |(w, _)| w);
        match word.to_ascii_lowercase().as_str() {
            "allow" => Some(Decision::Allow(Scope::Once)),
            "deny" => Some(Decision::Deny),
            _ => None,
        }
    };
    match words.as_slice() {
        [first, id] if is_id(id) => Some((Target::Id(id.to_string()), command(first)?)),
        [first, id, scope] if is_id(id) && scope.eq_ignore_ascii_case("session") => {
            match command(first)? {
                Decision::Allow(_) => {
                    Some((Target::Id(id.to_string()), Decision::Allow(Scope::Session)))
                }
                Decision::Deny => None,
            }
        }
        [word] => {
            let message_id = reply_to?.to_string();
            let word = word.trim_end_matches(['.', '!']).to_ascii_lowercase();
            let decision = match word.as_str() {
                "yes" | "y" | "allow" | "/allow" => Decision::Allow(Scope::Once),
                "no" | "n" | "deny" | "/deny" => Decision::Deny,
                _ => return None,
            };
            Some((Target::Question { message_id }, decision))
        }
        _ => None,
    }
}

/// Records an answer from a chat: only from a user the source allows to answer, only in the
/// chat it was asked in, only while it is open. `Ok(None)` when the target names no approval
/// (a reply to a message that is no question: the text goes to the agent).
pub fn answer_from_chat_in(
    tx: &Transaction<'_>,
    answer: &ChatAnswer,
    now: i64,
) -> Result<Option<AnswerResult>> {
    let id = match &answer.target {
        // A bare `allow WORD` that names no approval is a message after all.
        Target::Id(id) if answer.otherwise.is_some() && get(tx, id)?.is_none() => return Ok(None),
        Target::Id(id) => id.clone(),
        Target::Question { message_id } => {
            let Some((origin, chat)) = &answer.who.chat else {
                return Ok(None);
            };
            let asked = tx
                .prepare_cached(
                    "SELECT a.id FROM approvals a JOIN queue_rows q ON q.id = a.question_row
                     WHERE q.receipt = :message AND a.origin = :origin AND a.chat = :chat",
                )?
                .query_row(
                    rusqlite::named_params! {":message": message_id, ":origin": origin, ":chat": chat},
                    |r| r.get::<_, String>(0),
                )
                .optional()?;
            match asked {
                Some(id) => id,
                None => return Ok(None),
            }
        }
    };
    if !answer.may_answer {
        return Ok(Some(AnswerResult::NotAllowed));
    }
    answer_in(tx, &id, answer.decision, &answer.who, now).map(Some)
}

/// Tells the chat how the approval ended, once: its question, edited to say the outcome
/// (buttons gone), or a new message where the question's id is not known (never delivered,
/// or a channel that cannot edit). The ordering key of the row written, to wake its sender.
pub fn tell_in(
    outbound: &crate::Queue,
    tx: &Transaction<'_>,
    approval: &Approval,
    now: i64,
) -> Result<Option<String>> {
    told_in(tx, &approval.id, now)?;
    let Some(row) = approval.question_row else {
        return Ok(None);
    };
    let Some(question) = crate::storage::queue::row_detail(tx, row)? else {
        return Ok(None);
    };
    let Ok(asked) = crate::OutboundMessage::from_payload(&question.payload) else {
        return Ok(None);
    };
    let what = asked
        .notice
        .as_ref()
        .and_then(|n| n.question.as_deref())
        .unwrap_or(&approval.action);
    let mark = match approval.decision() {
        Some(Decision::Allow(_)) => "✅",
        _ => "⛔",
    };
    let text = format!(
        "{} asked: {what}\n\n{mark} {}",
        approval.session,
        capitalise(&approval.outcome())
    );
    let message = crate::OutboundMessage {
        edit: question.receipt.filter(|_| question.state == "delivered"),
        idempotency_key: Some(format!("relayq-approval-{}-outcome", approval.id)),
        session: Some(approval.session.clone()),
        event: Some("approval".into()),
        thread: asked.thread.clone(),
        ..crate::OutboundMessage::text(&asked.channel, &asked.to, &text)
    };
    let written = crate::outbound::enqueue_in(outbound, tx, &message, None, now)?;
    Ok((!written.first.duplicate).then(|| message.destination_key()))
}

/// What the agent's hook prints for an ended approval: Claude Code's and Codex's
/// `PermissionRequest` decision output. An allow for the session hands Claude Code back its
/// own suggestions (what its dialog's "don't ask again" option applies).
pub fn hook_output(approval: &Approval) -> Option<String> {
    let decision = approval.decision()?;
    let mut answer = match decision {
        Decision::Allow(_) => json!({"behavior": "allow"}),
        Decision::Deny => json!({"behavior": "deny", "message": deny_message(approval)}),
    };
    if let (Decision::Allow(Scope::Session), Some(rules)) = (decision, &approval.session_rules) {
        if rules.is_array() {
            answer["updatedPermissions"] = rules.clone();
        }
    }
    Some(hook_decision(answer))
}

/// The deny a hook prints for approval `id` when it expired but could not be recorded so.
pub fn expired_hook_output(id: &str) -> String {
    hook_decision(json!({"behavior": "deny", "message": expired_message(id)}))
}

fn hook_decision(answer: Value) -> String {
    json!({"hookSpecificOutput": {"hookEventName": "PermissionRequest", "decision": answer}})
        .to_string()
}

fn expired_message(id: &str) -> String {
    format!("no answer came from the chat in time (relayq approval {id}): denied")
}

/// What a deny tells the agent (and so the model): who said no, or why no one did.
pub fn deny_message(approval: &Approval) -> String {
    match approval.state {
        State::Denied => format!(
            "{} denied this from the chat (relayq approval {})",
            approval.answered_by.as_deref().unwrap_or("the user"),
            approval.id
        ),
        State::Expired => expired_message(&approval.id),
        _ => format!("denied (relayq approval {})", approval.id),
    }
}

/// What a permission request asks to do, in one short text: the command; the file and a diff
/// summary (`+3 −1 lines`) for an edit; the tool's input otherwise, cut.
pub fn action_of(event: &HookEvent) -> String {
    const MAX: usize = 600;
    let input = event.data.get("tool_input").or(event.data.get("details"));
    let field = |name: &str| input.and_then(|i| i.get(name)).and_then(Value::as_str);
    let file = field("file_path").or(field("fileName")).or(field("path"));
    let text = if let Some(command) = field("command") {
        command.to_string()
    } else if let Some(file) = file {
        let old = field("old_string").map(line_count);
        let new = field("new_string").or(field("content")).map(line_count);
        match (old, new, field("fileDiff")) {
            (_, _, Some(diff)) => format!("{file} ({})", diff_summary(diff)),
            (Some(old), Some(new), _) => format!("{file} (+{new} −{old} lines)"),
            (None, Some(new), _) => format!("{file} (write {new} lines)"),
            _ => file.to_string(),
        }
    } else if let Some(input) = input {
        input.to_string()
    } else {
        event
            .field(&["message", "tool_name"])
            .unwrap_or("a tool call")
            .to_string()
    };
    crate::notice::cut_to(text, MAX)
}

fn line_count(text: &str) -> usize {
    text.lines().count().max(1)
}

/// `+3 −1 lines` for a unified diff.
fn diff_summary(diff: &str) -> String {
    let added = diff
        .lines()
        .filter(|l| l.starts_with('+') && !l.starts_with("+++"))
        .count();
    let removed = diff
        .lines()
        .filter(|l| l.starts_with('-') && !l.starts_with("---"))
        .count();
    format!("+{added} −{removed} lines")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ask(expires_at: i64) -> Ask {
        Ask {
            session: "s1".into(),
            agent: Agent::Claude,
            tool: Some("Bash".into()),
            action: "touch x".into(),
            means: Means::Hook,
            waiter_pid: Some(42),
            session_rules: Some(json!([{"type": "setMode", "mode": "acceptEdits"}])),
            origin: Some(Origin {
                origin: "telegram:bot".into(),
                chat: "7".into(),
                thread: None,
            }),
            expires_at,
        }
    }

    fn alice() -> Answerer {
        Answerer {
            name: "Alice".into(),
            id: Some("7".into()),
            via: "telegram:bot".into(),
            chat: Some(("telegram:bot".into(), "7".into())),
        }
    }

    #[test]
    fn the_first_answer_wins_and_a_second_changes_nothing() {
        let (_dir, db) = crate::db::temp_database();
        let asked = db.write(|tx| ask_in(tx, &ask(1_000), 0)).unwrap();
        assert!(is_id(&asked.id), "{}", asked.id);
        assert_eq!(asked.state, State::Asked);
        let first = db
            .write(|tx| {
                answer_in(
                    tx,
                    &asked.id,
                    Decision::Allow(Scope::Once),
                    &alice(),
                    60_000,
                )
            })
            .unwrap();
        let AnswerResult::Recorded(now) = first else {
            panic!("{first:?}")
        };
        assert_eq!(now.state, State::Allowed);
        assert_eq!(now.outcome(), "allowed by Alice at 00:01 UTC");
        let second = db
            .write(|tx| answer_in(tx, &asked.id, Decision::Deny, &alice(), 61_000))
            .unwrap();
        assert!(matches!(&second, AnswerResult::AlreadyEnded(a) if a.state == State::Allowed));
        assert_eq!(second.reply(), "Already allowed by Alice at 00:01 UTC");
        // Expiry after an answer does nothing either.
        assert_eq!(
            db.write(|tx| expire_in(tx, &asked.id, 2_000)).unwrap(),
            None
        );
    }

    #[test]
    fn an_answer_from_another_chat_changes_nothing() {
        let (_dir, db) = crate::db::temp_database();
        let asked = db.write(|tx| ask_in(tx, &ask(1_000), 0)).unwrap();
        let mut elsewhere = alice();
        elsewhere.chat = Some(("telegram:bot".into(), "8".into()));
        let result = db
            .write(|tx| answer_in(tx, &asked.id, Decision::Allow(Scope::Once), &elsewhere, 1))
            .unwrap();
        assert!(matches!(result, AnswerResult::NotHere(_)));
        assert_eq!(
            get(&db.read().unwrap(), &asked.id).unwrap().unwrap().state,
            State::Asked
        );
    }

    #[test]
    fn expiry_is_a_deny_the_agent_gets_once() {
        let (_dir, db) = crate::db::temp_database();
        assert!(!anything_to_do(&db.read().unwrap()).unwrap());
        let asked = db.write(|tx| ask_in(tx, &ask(1_000), 0)).unwrap();
        assert!(anything_to_do(&db.read().unwrap()).unwrap(), "open");
        assert!(due(&db.read().unwrap(), 999).unwrap().is_empty());
        assert_eq!(due(&db.read().unwrap(), 1_000).unwrap().len(), 1);
        let expired = db
            .write(|tx| expire_in(tx, &asked.id, 1_000))
            .unwrap()
            .unwrap();
        assert_eq!(expired.decision(), Some(Decision::Deny));
        let output: Value = serde_json::from_str(&hook_output(&expired).unwrap()).unwrap();
        assert_eq!(output["hookSpecificOutput"]["decision"]["behavior"], "deny");
        assert!(db.write(|tx| reached_in(tx, &asked.id, 1_001)).unwrap());
        assert!(!db.write(|tx| reached_in(tx, &asked.id, 1_002)).unwrap());
        // Told once.
        assert_eq!(untold(&db.read().unwrap()).unwrap().len(), 1);
        assert!(anything_to_do(&db.read().unwrap()).unwrap(), "untold");
        db.write(|tx| told_in(tx, &asked.id, 1_003)).unwrap();
        assert!(untold(&db.read().unwrap()).unwrap().is_empty());
        assert!(
            !anything_to_do(&db.read().unwrap()).unwrap(),
            "nothing left"
        );
    }

    /// A keys answer: due to press once ended, marked before pressing (the mark from before
    /// a crash comes back), told only once it reached the agent or could not; never pressed
    /// when the session asked something since.
    #[test]
    fn a_keys_answer_is_pressed_once_and_told_when_settled() {
        let (_dir, db) = crate::db::temp_database();
        let keys = |expires_at| Ask {
            agent: Agent::Gemini,
            means: Means::Keys,
            waiter_pid: None,
            session_rules: Some(Value::Null),
            ..ask(expires_at)
        };
        let asked = db.write(|tx| ask_in(tx, &keys(10_000), 0)).unwrap();
        assert!(asked.for_session);
        let read = || db.read().unwrap();
        assert!(keys_due(&read()).unwrap().is_empty(), "not answered yet");
        db.write(|tx| answer_in(tx, &asked.id, Decision::Allow(Scope::Once), &alice(), 1))
            .unwrap();
        assert_eq!(keys_due(&read()).unwrap().len(), 1);
        assert!(untold(&read()).unwrap().is_empty(), "told once pressed");
        assert_eq!(db.write(|tx| pressing_in(tx, &asked.id, 2)).unwrap(), None);
        assert_eq!(
            db.write(|tx| pressing_in(tx, &asked.id, 3)).unwrap(),
            Some(2),
            "pressed before: the first mark"
        );
        assert!(db.write(|tx| reached_in(tx, &asked.id, 4)).unwrap());
        assert!(keys_due(&read()).unwrap().is_empty());
        assert_eq!(untold(&read()).unwrap().len(), 1);

        let second = db.write(|tx| ask_in(tx, &keys(10_000), 5)).unwrap();
        let third = db.write(|tx| ask_in(tx, &keys(10_000), 6)).unwrap();
        assert!(asked_since(&read(), &second).unwrap());
        assert!(!asked_since(&read(), &third).unwrap());
        db.write(|tx| expire_in(tx, &second.id, 10_000)).unwrap();
        db.write(|tx| unreached_in(tx, &second.id, "the dialog had closed"))
            .unwrap();
        let second = get(&read(), &second.id).unwrap().unwrap();
        assert_eq!(
            second.outcome(),
            "expired at 00:00 UTC with no answer: denied; it did not reach the agent: \
             the dialog had closed"
        );
        assert!(keys_due(&read()).unwrap().is_empty());
        assert_eq!(untold(&read()).unwrap().len(), 2, "both settled");
    }

    #[test]
    fn allow_for_the_session_hands_claude_its_own_suggestions_back() {
        let (_dir, db) = crate::db::temp_database();
        let asked = db.write(|tx| ask_in(tx, &ask(1_000), 0)).unwrap();
        let AnswerResult::Recorded(allowed) = db
            .write(|tx| answer_in(tx, &asked.id, Decision::Allow(Scope::Session), &alice(), 1))
            .unwrap()
        else {
            panic!()
        };
        let output: Value = serde_json::from_str(&hook_output(&allowed).unwrap()).unwrap();
        let decision = &output["hookSpecificOutput"]["decision"];
        assert_eq!(decision["behavior"], "allow");
        assert_eq!(decision["updatedPermissions"][0]["mode"], "acceptEdits");

        // Without suggestions, "for the session" is an allow once.
        let mut once = ask(1_000);
        once.session_rules = None;
        let asked = db.write(|tx| ask_in(tx, &once, 0)).unwrap();
        let AnswerResult::Recorded(allowed) = db
            .write(|tx| answer_in(tx, &asked.id, Decision::Allow(Scope::Session), &alice(), 1))
            .unwrap()
        else {
            panic!()
        };
        assert_eq!(allowed.scope, Some(Scope::Once));

        // From Claude Code's own payload: its suggestions kept to the session (never a
        // settings file), and the exact command allowed for the session.
        let event = HookEvent {
            agent: Agent::Claude,
            event: crate::EventType::Notification,
            native_event: Some("PermissionRequest".into()),
            session: "s".into(),
            native_session_id: None,
            received_at: 0,
            pane: None,
            approval: None,
            data: json!({"tool_name": "Bash", "tool_input": {"command": "npm test"},
                "permission_suggestions": [{"type": "addRules", "behavior": "allow",
                    "rules": [{"toolName": "Bash", "ruleContent": "npm test:*"}],
                    "destination": "localSettings"}]}),
        };
        let rules = session_rules_of(&event).unwrap();
        assert_eq!(rules[0]["destination"], "session", "{rules:#}");
        assert_eq!(rules[1]["rules"][0]["ruleContent"], "npm test", "{rules:#}");
        assert_eq!(rules[1]["destination"], "session");
        let codex = HookEvent {
            agent: Agent::Codex,
            data: json!({"tool_name": "Bash", "tool_input": {"command": "npm test"}}),
            ..event
        };
        assert_eq!(session_rules_of(&codex), None, "Codex has no such answer");
    }

    #[test]
    fn the_action_names_the_command_or_the_file_and_its_diff() {
        let event = |data: Value| HookEvent {
            agent: Agent::Claude,
            event: crate::EventType::Notification,
            native_event: Some("PermissionRequest".into()),
            session: "s".into(),
            native_session_id: None,
            received_at: 0,
            pane: None,
            approval: None,
            data,
        };
        assert_eq!(
            action_of(&event(json!({"tool_input": {"command": "touch x"}}))),
            "touch x"
        );
        assert_eq!(
            action_of(&event(json!({"tool_input": {"file_path": "/p/a.rs",
                "old_string": "a\nb", "new_string": "c\nd\ne"}}))),
            "/p/a.rs (+3 −2 lines)"
        );
        assert_eq!(
            action_of(&event(
                json!({"details": {"type": "edit", "fileName": "a.txt",
                "fileDiff": "--- a\n+++ b\n@@\n-x\n+y\n+z\n"}})
            )),
            "a.txt (+2 −1 lines)"
        );
    }
}
