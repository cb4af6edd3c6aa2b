//! The access tables (`engine/migrations/0024_chat_access.sql`): people added by pairing,
//! pairing codes, and what is rate-limited. Every statement on them lives here; writes take
//! the caller's transaction.

use serde::Serialize;

use crate::error::Result;
use crate::params;
use crate::storage::sql::{Executor, Query, Row, Sql};
use crate::storage::tx::Tx;

/// A person added to a source's chats by pairing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ChatUser {
    pub origin: String,
    pub user_id: String,
    pub user_name: String,
    /// `writer` or `approver`.
    pub role: String,
    pub added_by: String,
    pub added_at: i64,
}

/// A pairing code as given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PairCode {
    pub code: String,
    pub origin: String,
    pub chat: String,
    pub thread: Option<String>,
    pub user_id: String,
    pub user_name: String,
    pub created_at: i64,
    pub expires_at: i64,
    pub used_at: Option<i64>,
}

const ROLE_SQL: Sql =
    Sql::same("SELECT role FROM chat_users WHERE origin = :origin AND user_id = :user");
const ADD_USER_SQL: Sql = Sql::same(
    "INSERT INTO chat_users (origin, user_id, user_name, role, added_by, added_at)
     VALUES (:origin, :user, :name, :role, :by, :now)
     ON CONFLICT (origin, user_id) DO UPDATE SET user_name = excluded.user_name,
         role = excluded.role, added_by = excluded.added_by, added_at = excluded.added_at",
);
const REMOVE_USER_SQL: Sql =
    Sql::same("DELETE FROM chat_users WHERE origin = :origin AND user_id = :user");
const USERS_SQL: Sql = Sql::same(
    "SELECT origin, user_id, user_name, role, added_by, added_at FROM chat_users
     ORDER BY origin, added_at, user_id",
);
const LIVE_CODE_SQL: Sql = Sql::same(
    "SELECT code, origin, chat, thread, user_id, user_name, created_at, expires_at, used_at
     FROM pair_codes WHERE origin = :origin AND user_id = :user AND used_at IS NULL
     AND expires_at > :now ORDER BY expires_at DESC LIMIT 1",
);
const CODE_SQL: Sql = Sql::same(
    "SELECT code, origin, chat, thread, user_id, user_name, created_at, expires_at, used_at
     FROM pair_codes WHERE code = :code",
);
const ADD_CODE_SQL: Sql = Sql::same(
    "INSERT INTO pair_codes (code, origin, chat, thread, user_id, user_name, created_at,
         expires_at)
     VALUES (:code, :origin, :chat, :thread, :user, :name, :now, :expires)
     ON CONFLICT (code) DO NOTHING",
);
const USE_CODE_SQL: Sql =
    Sql::same("UPDATE pair_codes SET used_at = :now WHERE code = :code AND used_at IS NULL");
/// Codes are kept a day after they expire (so a late `/approve` is told it expired).
const PRUNE_CODES_SQL: Sql = Sql::same("DELETE FROM pair_codes WHERE expires_at < :before");
const EVENTS_SQL: Sql = Sql::same(
    "SELECT COUNT(*) FROM access_events
     WHERE origin = :origin AND subject = :subject AND kind = :kind AND at > :since",
);
const ADD_EVENT_SQL: Sql = Sql::same(
    "INSERT INTO access_events (origin, subject, kind, at) VALUES (:origin, :subject, :kind, :now)",
);
const PRUNE_EVENTS_SQL: Sql = Sql::same(
    "DELETE FROM access_events
     WHERE origin = :origin AND subject = :subject AND kind = :kind AND at < :before",
);

/// What is kept of the rate-limited events and the codes: a day.
const KEPT_MS: i64 = 24 * 3_600_000;

fn user_from_row(r: &Row<'_>) -> Result<ChatUser> {
    Ok(ChatUser {
        origin: r.get(0)?,
        user_id: r.get(1)?,
        user_name: r.get(2)?,
        role: r.get(3)?,
        added_by: r.get(4)?,
        added_at: r.get(5)?,
    })
}

fn code_from_row(r: &Row<'_>) -> Result<PairCode> {
    Ok(PairCode {
        code: r.get(0)?,
        origin: r.get(1)?,
        chat: r.get(2)?,
        thread: r.get(3)?,
        user_id: r.get(4)?,
        user_name: r.get(5)?,
        created_at: r.get(6)?,
        expires_at: r.get(7)?,
        used_at: r.get(8)?,
    })
}

/// The role pairing gave `user` in `origin`'s chats, if any.
pub fn role(db: &dyn Executor, origin: &str, user: &str) -> Result<Option<String>> {
    db.query_opt(
        &ROLE_SQL,
        params![":origin" => origin, ":user" => user],
        |r| r.get(0),
    )
}

/// Adds (or changes) a person.
pub fn add_user_in(tx: &Tx<'_>, user: &ChatUser) -> Result<()> {
    tx.exec(
        &ADD_USER_SQL,
        params![":origin" => user.origin, ":user" => user.user_id, ":name" => user.user_name,
                ":role" => user.role, ":by" => user.added_by, ":now" => user.added_at],
    )?;
    Ok(())
}

/// Removes a person; whether there was one.
pub fn remove_user_in(tx: &Tx<'_>, origin: &str, user: &str) -> Result<bool> {
    Ok(tx.exec(
        &REMOVE_USER_SQL,
        params![":origin" => origin, ":user" => user],
    )? == 1)
}

/// Everyone added, by source.
pub fn users(db: &dyn Executor) -> Result<Vec<ChatUser>> {
    db.query_all(&USERS_SQL, params![], user_from_row)
}

/// `user`'s code that is still good at `now`, if any.
pub fn live_code(
    db: &dyn Executor,
    origin: &str,
    user: &str,
    now: i64,
) -> Result<Option<PairCode>> {
    db.query_opt(
        &LIVE_CODE_SQL,
        params![":origin" => origin, ":user" => user, ":now" => now],
        code_from_row,
    )
}

/// Code `code`, as given.
pub fn code(db: &dyn Executor, code: &str) -> Result<Option<PairCode>> {
    db.query_opt(&CODE_SQL, params![":code" => code], code_from_row)
}

/// Stores a new code (pruning those a day past their expiry); false when `code` is taken.
pub fn add_code_in(tx: &Tx<'_>, c: &PairCode) -> Result<bool> {
    tx.exec(
        &PRUNE_CODES_SQL,
        params![":before" => c.created_at - KEPT_MS],
    )?;
    let added = tx.exec(
        &ADD_CODE_SQL,
        params![":code" => c.code, ":origin" => c.origin, ":chat" => c.chat,
                ":thread" => c.thread, ":user" => c.user_id, ":name" => c.user_name,
                ":now" => c.created_at, ":expires" => c.expires_at],
    )?;
    Ok(added == 1)
}

/// Marks `code` used; false when it was used already.
pub fn use_code_in(tx: &Tx<'_>, code: &str) -> Result<bool> {
    Ok(tx.exec(&USE_CODE_SQL, params![":code" => code, ":now" => tx.now()])? == 1)
}

/// How many `kind` events about `subject` came after `since`.
pub fn events_since(
    db: &dyn Executor,
    origin: &str,
    subject: &str,
    kind: &str,
    since: i64,
) -> Result<i64> {
    db.query_value(
        &EVENTS_SQL,
        params![":origin" => origin, ":subject" => subject, ":kind" => kind, ":since" => since],
    )
}

/// Notes a `kind` event about `subject` now (forgetting those older than a day).
pub fn add_event_in(tx: &Tx<'_>, origin: &str, subject: &str, kind: &str) -> Result<()> {
    let now = tx.now();
    let key = params![":origin" => origin, ":subject" => subject, ":kind" => kind,
                      ":before" => now - KEPT_MS];
    tx.exec(&PRUNE_EVENTS_SQL, key)?;
    tx.exec(
        &ADD_EVENT_SQL,
        params![":origin" => origin, ":subject" => subject, ":kind" => kind, ":now" => now],
    )?;
    Ok(())
}

/// Every statement of this file, for the test that prepares them all.
#[cfg(test)]
pub(crate) const STATEMENTS: &[Sql] = &[
    ROLE_SQL,
    ADD_USER_SQL,
    REMOVE_USER_SQL,
    USERS_SQL,
    LIVE_CODE_SQL,
    CODE_SQL,
    ADD_CODE_SQL,
    USE_CODE_SQL,
    PRUNE_CODES_SQL,
    EVENTS_SQL,
    ADD_EVENT_SQL,
    PRUNE_EVENTS_SQL,
];
