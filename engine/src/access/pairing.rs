//! Pairing: a stranger's `/pair` gets a code (6 characters, 5 minutes, once, one live code a
//! person, at most 3 answers an hour); an approver's `/approve CODE writer|approver`, or the
//! operator's `relayq users approve CODE`, adds them. Wrong codes are rate-limited: after 5
//! within 15 minutes, a person's `/approve` is refused until the window passes, so a code
//! cannot be guessed (31^6 codes, 5 tries).

use super::{reply_in, Role};
use crate::chat_sessions::SessionRequest;
use crate::error::Result;
use crate::outbound::notice::clock_time;
use crate::storage::access::{self as store, ChatUser, PairCode};
use crate::writes::Writer;

/// Letters and digits a person cannot mistake for one another (no 0/O, 1/I/L).
const ALPHABET: &[u8] = b"ABCDEFGHJKMNPQRSTUVWXYZ23456789";
pub const CODE_LEN: usize = 6;
/// How long a code is good for.
pub const CODE_VALID_MS: i64 = 5 * 60_000;
/// Answers to `/pair` a person gets an hour, at most.
const PAIR_ANSWERS_AN_HOUR: i64 = 3;
/// Wrong codes a person may give in [`WRONG_WINDOW_MS`] before `/approve` is refused.
pub const WRONG_CODES: i64 = 5;
pub const WRONG_WINDOW_MS: i64 = 15 * 60_000;

/// A new code, from the system's random source.
fn new_code() -> String {
    let mut bytes = [0u8; CODE_LEN];
    getrandom::getrandom(&mut bytes).expect("the system's random source");
    bytes
        .iter()
        .map(|b| ALPHABET[usize::from(*b) % ALPHABET.len()] as char)
        .collect()
}

/// `code` as it is stored (upper case), if it can be one.
pub fn read_code(code: &str) -> Option<String> {
    let code = code.trim().to_ascii_uppercase();
    (code.len() == CODE_LEN && code.bytes().all(|b| ALPHABET.contains(&b))).then_some(code)
}

/// What `/pair` from `r`'s person is answered (`None`: they were answered enough this hour).
pub fn pair_in(w: &Writer<'_>, r: &SessionRequest) -> Result<Option<String>> {
    let (tx, now) = (w.tx(), w.now());
    let user = r.user_id.as_deref().unwrap_or_default();
    if store::events_since(tx, &r.origin, user, "pair_answered", now - 3_600_000)?
        >= PAIR_ANSWERS_AN_HOUR
    {
        tracing::info!(
            origin = r.origin,
            user,
            "a /pair not answered: answered enough this hour"
        );
        return Ok(None);
    }
    store::add_event_in(tx, &r.origin, user, "pair_answered")?;
    if r.known {
        return Ok(Some("You may already write here.".into()));
    }
    if let Some(live) = store::live_code(tx, &r.origin, user, now)? {
        return Ok(Some(format!(
            "Your code {} is good until {} UTC: ask someone who approves here to send /approve {}.",
            live.code,
            clock_time(live.expires_at),
            live.code
        )));
    }
    let mut code = PairCode {
        code: new_code(),
        origin: r.origin.clone(),
        chat: r.chat.clone(),
        thread: r.thread.clone(),
        user_id: user.to_string(),
        user_name: r.user_name.clone(),
        created_at: now,
        expires_at: now + CODE_VALID_MS,
        used_at: None,
    };
    while !store::add_code_in(tx, &code)? {
        code.code = new_code();
    }
    tracing::info!(origin = r.origin, user, "a pairing code given");
    Ok(Some(format!(
        "Your pairing code: {} (good for 5 minutes, once). Ask someone who approves here to send \
         /approve {} writer, or the bot's operator to run relayq users approve {}.",
        code.code, code.code, code.code
    )))
}

/// Who approves a code: a chat's approver (their source, id and name) or the operator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Approver {
    Chat {
        origin: String,
        id: String,
        name: String,
    },
    Operator(String),
}

/// What approving a code did: the line for who approved, and whether it added someone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Approved {
    pub line: String,
    pub added: Option<ChatUser>,
    /// Replies written (their ordering keys).
    pub told: Vec<String>,
}

impl Approved {
    fn refused(line: impl Into<String>) -> Approved {
        Approved {
            line: line.into(),
            added: None,
            told: Vec::new(),
        }
    }
}

/// Approves `code` as `role`, by `by`; the paired person's chat is told.
pub fn approve_in(w: &Writer<'_>, code: &str, role: Role, by: &Approver) -> Result<Approved> {
    let (tx, now) = (w.tx(), w.now());
    if let Approver::Chat { origin, id, .. } = by {
        let wrong = store::events_since(tx, origin, id, "wrong_code", now - WRONG_WINDOW_MS)?;
        if wrong >= WRONG_CODES {
            tracing::warn!(
                origin,
                user = id,
                "an /approve refused: too many wrong codes"
            );
            return Ok(Approved::refused(
                "Not done: too many wrong codes; try again in 15 minutes.",
            ));
        }
    }
    let wrong = |why: &str| -> Result<Approved> {
        if let Approver::Chat { origin, id, .. } = by {
            store::add_event_in(tx, origin, id, "wrong_code")?;
        }
        Ok(Approved::refused(format!("Not done: {why}")))
    };
    let found = match read_code(code) {
        Some(code) => store::code(tx, &code)?,
        None => None,
    };
    let found = found.filter(|c| match by {
        Approver::Chat { origin, .. } => &c.origin == origin,
        Approver::Operator(_) => true,
    });
    let Some(found) = found else {
        return wrong("no such code. Check it, or ask for a new one with /pair.");
    };
    if found.used_at.is_some() {
        return wrong("that code was used already.");
    }
    if found.expires_at <= now {
        return wrong("that code expired: ask for a new one with /pair.");
    }
    if !store::use_code_in(tx, &found.code)? {
        return wrong("that code was used already.");
    }
    let added_by = match by {
        Approver::Chat { name, .. } => name.clone(),
        Approver::Operator(who) => format!("{who} (operator)"),
    };
    let user = ChatUser {
        origin: found.origin.clone(),
        user_id: found.user_id.clone(),
        user_name: found.user_name.clone(),
        role: role.word().to_string(),
        added_by,
        added_at: now,
    };
    store::add_user_in(tx, &user)?;
    tracing::info!(
        origin = user.origin,
        user = user.user_id,
        role = user.role,
        by = user.added_by,
        "a person added by pairing"
    );
    let may = match role {
        Role::Approver => "write here and approve",
        _ => "write here",
    };
    let told = reply_in(
        w,
        &found.origin,
        &found.chat,
        found.thread.as_deref(),
        &format!("You may now {may}."),
        "pairing",
    )?;
    Ok(Approved {
        line: format!("{} may now {may}.", user.user_name),
        added: Some(user),
        told: told.into_iter().collect(),
    })
}
