//! The tables of progress on the phone (`engine/migrations/0021_progress.sql`): the reaction
//! each chat message should show, and what each chat asked to see (`/progress`). Every
//! statement on them lives here; writes take the caller's transaction.

use serde::Serialize;

use crate::error::Result;
use crate::params;
use crate::storage::sql::{Executor, Query, Row, Sql};
use crate::storage::tx::Tx;

crate::words! {
    /// What a chat sees while its agent works: nothing more than today, receipts on its
    /// messages, a progress message with the agent's steps, or that and the answer as it grows.
    #[derive(Default, PartialOrd, Ord)]
    pub enum ProgressMode("progress setting") {
        Off = "off",
        Receipts = "receipts",
        #[default]
        Steps = "steps",
        Stream = "stream",
    }
}

crate::words! {
    /// What became of a chat message, as the bot's reaction on it says.
    pub enum ReactionState("reaction") {
        /// The agent took it (its own prompt-submit event).
        Taken = "taken",
        /// The agent's turn on it ended.
        Done = "done",
        /// It was dropped, or the agent's turn failed.
        Failed = "failed",
    }
}

/// A chat message's reaction.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Reaction {
    /// The message's inbound row.
    pub row_id: i64,
    pub session: String,
    pub origin: String,
    pub chat: String,
    /// The platform's id of the message.
    pub message: String,
    pub wanted: ReactionState,
    /// The state last sent (or given up on).
    pub tried: Option<ReactionState>,
    /// The state the platform confirmed.
    pub shown: Option<ReactionState>,
    pub updated_at: i64,
}

/// Where a reaction goes: the message's row, session and place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReactionPlace<'a> {
    pub row_id: i64,
    pub session: &'a str,
    pub origin: &'a str,
    pub chat: &'a str,
    pub message: &'a str,
}

/// A reaction wanted: written, or moved on; a message that ended (done, failed) is never
/// taken again.
const WANT_SQL: Sql = Sql::two(
    "INSERT INTO reactions (row_id, session, origin, chat, message, wanted, updated_at)
     VALUES (:row, :session, :origin, :chat, :message, :wanted, :now)
     ON CONFLICT (row_id) DO UPDATE SET wanted = excluded.wanted, updated_at = excluded.updated_at
     WHERE reactions.wanted <> excluded.wanted
       AND (reactions.wanted = 'taken' OR excluded.wanted <> 'taken')",
    "INSERT INTO reactions (row_id, session, origin, chat, message, wanted, updated_at)
     VALUES (:row, :session, :origin, :chat, :message, :wanted, :now)
     ON CONFLICT (row_id) DO UPDATE SET wanted = EXCLUDED.wanted, updated_at = EXCLUDED.updated_at
     WHERE reactions.wanted <> EXCLUDED.wanted
       AND (reactions.wanted = 'taken' OR EXCLUDED.wanted <> 'taken')",
);
/// The session's taken messages, their turn ended.
const TURN_ENDED_SQL: Sql = Sql::same(
    "UPDATE reactions SET wanted = :wanted, updated_at = :now
     WHERE session = :session AND wanted = 'taken'",
);
macro_rules! select_reactions {
    ($where_:literal) => {
        concat!(
            "SELECT row_id, session, origin, chat, message, wanted, tried, shown, updated_at
             FROM reactions ",
            $where_
        )
    };
}
const UNTRIED_SQL: Sql = Sql::same(select_reactions!(
    "WHERE (tried IS NULL OR tried <> wanted) AND updated_at <= :before
     ORDER BY updated_at LIMIT :limit"
));
const REACTION_SQL: Sql = Sql::same(select_reactions!("WHERE row_id = :row"));
const TRIED_SQL: Sql =
    Sql::same("UPDATE reactions SET tried = :state WHERE row_id = :row AND wanted = :state");
const SHOWN_SQL: Sql = Sql::same(
    "UPDATE reactions SET tried = :state, shown = :state WHERE row_id = :row AND wanted = :state",
);
const PRUNE_SQL: Sql = Sql::same("DELETE FROM reactions WHERE updated_at < :before");

const SET_CHAT_SQL: Sql = Sql::two(
    "INSERT INTO chat_settings (origin, chat, progress, set_at) VALUES (:origin, :chat, :mode, :now)
     ON CONFLICT (origin, chat) DO UPDATE SET progress = excluded.progress, set_at = excluded.set_at",
    "INSERT INTO chat_settings (origin, chat, progress, set_at) VALUES (:origin, :chat, :mode, :now)
     ON CONFLICT (origin, chat) DO UPDATE SET progress = EXCLUDED.progress, set_at = EXCLUDED.set_at",
);
const CHAT_SQL: Sql =
    Sql::same("SELECT progress FROM chat_settings WHERE origin = :origin AND chat = :chat");

fn reaction_from_row(r: &Row<'_>) -> Result<Reaction> {
    Ok(from_columns! { r => Reaction {
        row_id, session, origin, chat, message, wanted, tried, shown, updated_at
    } })
}

/// Records that `place`'s message should show `state`; false when it shows that already or
/// ended before (a late "taken" does not undo "done").
pub fn want_in(tx: &Tx<'_>, place: &ReactionPlace<'_>, state: ReactionState) -> Result<bool> {
    let now = tx.now();
    let changed = tx.exec(
        &WANT_SQL,
        params![
            ":row" => place.row_id, ":session" => place.session, ":origin" => place.origin,
            ":chat" => place.chat, ":message" => place.message, ":wanted" => state.as_str(),
            ":now" => now,
        ],
    )?;
    Ok(changed > 0)
}

/// The messages of `session` the agent took: their turn ended (`state` done or failed). How
/// many.
pub fn turn_ended_in(tx: &Tx<'_>, session: &str, state: ReactionState) -> Result<usize> {
    let now = tx.now();
    tx.exec(
        &TURN_ENDED_SQL,
        params![":session" => session, ":wanted" => state.as_str(), ":now" => now],
    )
}

/// Receipts not yet sent as they are now, unchanged since `before`, oldest first.
pub fn untried(db: &dyn Executor, before: i64, limit: i64) -> Result<Vec<Reaction>> {
    db.query_all(
        &UNTRIED_SQL,
        params![":before" => before, ":limit" => limit],
        reaction_from_row,
    )
}

/// One message's reaction, if it has one.
pub fn reaction(db: &dyn Executor, row_id: i64) -> Result<Option<Reaction>> {
    db.query_opt(&REACTION_SQL, params![":row" => row_id], reaction_from_row)
}

/// Records that `state` was sent for message `row_id` (`shown`: the platform confirmed it;
/// else it was given up on), unless it wants another state since.
pub fn tried_in(tx: &Tx<'_>, row_id: i64, state: ReactionState, shown: bool) -> Result<()> {
    let sql = if shown { &SHOWN_SQL } else { &TRIED_SQL };
    tx.exec(sql, params![":row" => row_id, ":state" => state.as_str()])?;
    Ok(())
}

/// Forgets reactions unchanged since `before`. How many.
pub fn prune_in(tx: &Tx<'_>, before: i64) -> Result<usize> {
    tx.exec(&PRUNE_SQL, params![":before" => before])
}

/// Sets what chat `chat` of `origin` sees while its agent works.
pub fn set_chat_progress_in(
    tx: &Tx<'_>,
    origin: &str,
    chat: &str,
    mode: ProgressMode,
) -> Result<()> {
    let now = tx.now();
    tx.exec(
        &SET_CHAT_SQL,
        params![":origin" => origin, ":chat" => chat, ":mode" => mode.as_str(), ":now" => now],
    )?;
    Ok(())
}

/// What chat `chat` of `origin` asked to see, if it asked.
pub fn chat_progress(db: &dyn Executor, origin: &str, chat: &str) -> Result<Option<ProgressMode>> {
    db.query_opt(
        &CHAT_SQL,
        params![":origin" => origin, ":chat" => chat],
        |r| r.get(0),
    )
}
