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

/// Takes or renews a chat's progress lane: free, run out, held by this daemon, or held by a
/// daemon that is no live node's (as `source_leases`).
const HOLD_LANE_SQL: Sql = Sql::same(
    "INSERT INTO progress_lanes (channel, chat, instance, expires_at)
     VALUES (:channel, :chat, :instance, :expires)
     ON CONFLICT (channel, chat) DO UPDATE SET instance = excluded.instance,
            expires_at = excluded.expires_at
     WHERE progress_lanes.instance = excluded.instance OR progress_lanes.expires_at <= :now
        OR progress_lanes.instance NOT IN (
            SELECT instance FROM nodes WHERE stopped_at IS NULL AND seen_at >= :lost_before)",
);
const LANE_SQL: Sql = Sql::same(
    "SELECT instance, expires_at FROM progress_lanes WHERE channel = :channel AND chat = :chat",
);
const PRUNE_LANES_SQL: Sql = Sql::same("DELETE FROM progress_lanes WHERE expires_at < :before");

/// Announces a step to every daemon when the transaction commits (notifications arrive in
/// commit order, so in the order the events were applied). SQLite has one daemon, which
/// shows its own steps: this is never run there (it would do nothing).
const ANNOUNCE_SQL: Sql = Sql::two(
    "SELECT :payload WHERE 0",
    "SELECT pg_notify('relayq_progress', :payload)",
);

/// Every statement, for the test that prepares them all on both backends.
#[cfg(test)]
pub(crate) const STATEMENTS: &[Sql] = &[
    WANT_SQL,
    TURN_ENDED_SQL,
    UNTRIED_SQL,
    REACTION_SQL,
    TRIED_SQL,
    SHOWN_SQL,
    PRUNE_SQL,
    SET_CHAT_SQL,
    CHAT_SQL,
    HOLD_LANE_SQL,
    LANE_SQL,
    PRUNE_LANES_SQL,
    ANNOUNCE_SQL,
];

/// Who sends a chat's progress, and until when (unix ms) unless renewed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaneHolder {
    pub instance: String,
    pub expires_at: i64,
}

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

/// Takes or renews the progress lane of `channel`'s chat `chat` for daemon `instance`, to run
/// `for_ms` from now; who holds it after.
pub fn hold_lane_in(
    tx: &Tx<'_>,
    channel: &str,
    chat: &str,
    instance: &str,
    for_ms: i64,
) -> Result<LaneHolder> {
    let now = tx.now();
    let lost_before = now - crate::storage::clock::ms(crate::storage::nodes::NODE_TIMEOUT);
    let lane = params![":channel" => channel, ":chat" => chat];
    tx.exec(
        &HOLD_LANE_SQL,
        params![
            ":channel" => channel, ":chat" => chat, ":instance" => instance,
            ":expires" => now + for_ms, ":now" => now, ":lost_before" => lost_before,
        ],
    )?;
    let holder = tx.query_opt(&LANE_SQL, lane, |r| {
        Ok(from_columns! { r => LaneHolder { instance, expires_at } })
    })?;
    holder.ok_or_else(|| crate::EngineError::Invalid("a progress lane just written is gone".into()))
}

/// Announces `payload` (a step) to every daemon on commit, on the channel they listen on
/// (`relayq_progress`, `storage::postgresql::notify::PROGRESS_CHANNEL`); nothing
/// where no other daemon can share the database.
pub fn announce_in(tx: &Tx<'_>, payload: &str) -> Result<()> {
    if tx.is_shared() {
        tx.exec(&ANNOUNCE_SQL, params![":payload" => payload])?;
    }
    Ok(())
}

/// Forgets the lanes run out before `before`. How many.
pub fn prune_lanes_in(tx: &Tx<'_>, before: i64) -> Result<usize> {
    tx.exec(&PRUNE_LANES_SQL, params![":before" => before])
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::nodes::{join_in, NODE_TIMEOUT};
    use crate::storage::test_db::TestDb;

    const T: i64 = 1_700_000_000_000;
    const HOLD: i64 = 20_000;

    /// One daemon at a time sends a chat's progress: the holder renews its lane, another
    /// daemon takes it once it ran out, or at once when its holder is no live node's.
    #[test]
    fn one_daemon_holds_a_chats_lane_until_it_runs_out_or_its_holder_is_lost() {
        for backend in TestDb::both() {
            let db = &backend.db;
            let hold = |t: i64, instance: &str| {
                db.write_at(t, |tx| hold_lane_in(tx, "bot", "42", instance, HOLD))
                    .unwrap()
                    .instance
            };
            db.write_at(T, |tx| join_in(tx, "a", "ha/1")).unwrap();
            db.write_at(T, |tx| join_in(tx, "b", "hb/1")).unwrap();
            assert_eq!(hold(T, "ha/1"), "ha/1");
            assert_eq!(
                hold(T + 1, "hb/1"),
                "ha/1",
                "{}: a holds it",
                backend.name()
            );
            assert_eq!(hold(T + 5_000, "ha/1"), "ha/1", "renewed");
            // Another chat is another lane.
            let other = db
                .write_at(T + 5_000, |tx| hold_lane_in(tx, "bot", "43", "hb/1", HOLD))
                .unwrap();
            assert_eq!(other.instance, "hb/1");
            // Run out (a is still thought alive: it beats).
            let out = T + 5_000 + HOLD;
            db.write_at(out, |tx| {
                crate::storage::nodes::beat_in(tx, "a", "ha/1", 0, &[])
            })
            .unwrap();
            db.write_at(out, |tx| {
                crate::storage::nodes::beat_in(tx, "b", "hb/1", 0, &[])
            })
            .unwrap();
            assert_eq!(hold(out, "hb/1"), "hb/1", "{}: run out", backend.name());
            // b is lost (no heartbeat for longer than the nodes' timeout): taken at once.
            let lost = out + crate::storage::clock::ms(NODE_TIMEOUT) + 1;
            db.write_at(lost, |tx| {
                crate::storage::nodes::beat_in(tx, "a", "ha/1", 0, &[])
            })
            .unwrap();
            db.write_at(lost, |tx| hold_lane_in(tx, "bot", "42", "hb/1", HOLD * 100))
                .unwrap();
            assert_eq!(
                hold(lost + 1, "ha/1"),
                "ha/1",
                "{}: holder lost",
                backend.name()
            );
            // Forgotten an hour after it ran out.
            let pruned = db
                .write_at(lost + HOLD + 1, |tx| prune_lanes_in(tx, lost))
                .unwrap();
            assert_eq!(pruned, 1, "{}: chat 43's lane", backend.name());
        }
    }
}
