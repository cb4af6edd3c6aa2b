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

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use crate::chat_sessions::{command_of, Asked, RecordRequests, SessionRequest};
    use crate::storage::sql::Query;
    use crate::storage::test_db::TestDb;
    use crate::{Engine, ManualClock, NoticeRoutes, WriteDoor};

    const ORIGIN: &str = "discord:bot";

    fn door(db: &TestDb, clock: &ManualClock) -> WriteDoor {
        let engine = Engine::with_clock(db.db.clone(), Arc::new(clock.clone())).with_node("n1");
        let mut routes = NoticeRoutes::none();
        routes.replies.insert(ORIGIN.into(), "bot".into());
        WriteDoor::new(engine.queues(&Default::default()), routes)
    }

    /// `text` typed by `user` (ann approves; bob and eve are strangers), as message `n`.
    fn say(door: &WriteDoor, n: u32, user: &str, text: &str) {
        let request = SessionRequest {
            origin: ORIGIN.into(),
            chat: format!("chat-{user}"),
            thread: None,
            message_id: Some(n.to_string()),
            user_id: Some(user.into()),
            user_name: user.into(),
            may: user == "ann",
            known: user == "ann",
            topics: false,
            max_sessions: 2,
            asked: Asked::Typed(command_of(text).expect("a command")),
        };
        door.apply_now(RecordRequests(vec![request])).unwrap();
    }

    /// The texts said in `user`'s chat, oldest first.
    fn said(db: &TestDb, user: &str) -> Vec<String> {
        let payloads: Vec<String> = db
            .db
            .read()
            .unwrap()
            .query_all(
                &crate::storage::sql::Sql::same(
                    "SELECT payload FROM queue_rows WHERE queue = 'outbound' ORDER BY id",
                ),
                crate::params![],
                |r| r.get(0),
            )
            .unwrap();
        payloads
            .iter()
            .map(|p| serde_json::from_str::<serde_json::Value>(p).unwrap())
            .filter(|m| m["to"] == format!("chat-{user}"))
            .map(|m| m["text"].as_str().unwrap().to_string())
            .collect()
    }

    /// The code in the last line said to `user`.
    fn code_told(db: &TestDb, user: &str) -> String {
        let last = said(db, user).pop().unwrap();
        let at = last.find("code").unwrap();
        last[at..]
            .split(|c: char| !c.is_ascii_alphanumeric())
            .find(|w| w.len() == super::CODE_LEN && *w != "approve")
            .unwrap_or_else(|| panic!("no code in {last:?}"))
            .to_string()
    }

    fn role(db: &TestDb, user: &str) -> Option<String> {
        crate::storage::access::role(&db.db.read().unwrap(), ORIGIN, user).unwrap()
    }

    #[test]
    fn a_code_is_good_once_for_five_minutes_and_one_is_live_per_person() {
        for db in TestDb::both() {
            let clock = ManualClock::new(1_767_225_600_000);
            let door = door(&db, &clock);
            say(&door, 1, "bob", "/pair");
            let first = code_told(&db, "bob");
            say(&door, 2, "bob", "/pair");
            assert_eq!(code_told(&db, "bob"), first, "one live code a person");

            clock.advance(Duration::from_secs(5 * 60 + 1));
            say(&door, 3, "ann", &format!("/approve {first}"));
            assert!(
                said(&db, "ann").last().unwrap().contains("expired"),
                "{:?}",
                said(&db, "ann")
            );
            assert_eq!(role(&db, "bob"), None);

            say(&door, 4, "bob", "/pair");
            let second = code_told(&db, "bob");
            assert_ne!(second, first, "a new code once the first expired");
            say(
                &door,
                5,
                "ann",
                &format!("/approve {} approver", second.to_lowercase()),
            );
            assert!(said(&db, "ann")
                .last()
                .unwrap()
                .contains("bob may now write here and approve"));
            assert!(said(&db, "bob")
                .last()
                .unwrap()
                .contains("You may now write here and approve"));
            assert_eq!(role(&db, "bob").as_deref(), Some("approver"));
            say(&door, 6, "ann", &format!("/approve {second}"));
            assert!(said(&db, "ann").last().unwrap().contains("used already"));

            // A fourth /pair within the hour is not answered.
            let before = said(&db, "bob").len();
            say(&door, 7, "bob", "/pair");
            assert_eq!(said(&db, "bob").len(), before, "at most 3 answers an hour");
        }
    }

    #[test]
    fn wrong_codes_are_rate_limited_so_a_code_cannot_be_guessed() {
        for db in TestDb::both() {
            let clock = ManualClock::new(1_767_225_600_000);
            let door = door(&db, &clock);
            say(&door, 1, "eve", "/pair");
            let code = code_told(&db, "eve");
            for n in 0..10u32 {
                say(&door, 10 + n, "ann", &format!("/approve Z{n:05}"));
            }
            let answers = said(&db, "ann");
            assert_eq!(answers.len(), 10);
            assert!(
                answers[..5].iter().all(|a| a.contains("no such code")),
                "{answers:?}"
            );
            assert!(
                answers[5..]
                    .iter()
                    .all(|a| a.contains("too many wrong codes")),
                "{answers:?}"
            );
            say(&door, 30, "ann", &format!("/approve {code}"));
            assert!(said(&db, "ann")
                .last()
                .unwrap()
                .contains("too many wrong codes"));
            assert_eq!(
                role(&db, "eve"),
                None,
                "even the right code waits out the limit"
            );

            clock.advance(Duration::from_secs(16 * 60));
            say(&door, 31, "eve", "/pair");
            let code = code_told(&db, "eve");
            say(&door, 32, "ann", &format!("/approve {code}"));
            assert_eq!(role(&db, "eve").as_deref(), Some("writer"));
        }
    }
}
