//! The engine: one database, one clock, one instance id, and a `Queue` handle per queue.

use crate::tx::Tx;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use crate::clock::{Clock, SystemClock};
use crate::db::{Database, DbConfig};
use crate::error::Result;
use crate::policy::{QueuePolicies, QueuePolicy};
use crate::queue::{
    counts, dead_page, dead_rows, delivered_after, oldest_pending, row_detail, stuck_heads,
    DeadQuery, OldestPending, Queue, QueueName, RowDetail, StateCount,
};

/// The storage engine. Cheap to clone; every clone shares the pools.
#[derive(Debug, Clone)]
pub struct Engine {
    db: Database,
    clock: Arc<dyn Clock>,
    owner: Arc<str>,
    /// The node this process is part of (see [`crate::storage::nodes`]).
    node: Arc<str>,
    /// How busy this node is, and the others (see [`Engine::busier_than_others`]).
    load: Arc<NodeLoad>,
}

/// How busy this node's writer is, and the least busy other node's.
#[derive(Debug)]
struct NodeLoad {
    /// Group-commit operations waiting, averaged over the last second or so.
    own: AtomicU64,
    /// The least busy other live node's, as last read (ten times a second); `u64::MAX`: none.
    least_other: AtomicU64,
    /// Sessions handed on and not taken, in a row.
    not_taken: AtomicU32,
    /// Reads of the others' load still to ignore.
    quiet_reads: AtomicU32,
}

impl NodeLoad {
    /// The least busy other node's load, as read (`None`: no other node is alive); ignored
    /// while this node keeps quiet (see [`NodeLoad::handed_on`]).
    fn note_others(&self, least: Option<u64>) {
        let quiet = self
            .quiet_reads
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
            .is_ok();
        let least = if quiet { None } else { least };
        self.least_other
            .store(least.unwrap_or(u64::MAX), Ordering::Relaxed);
    }

    /// This node is busy and another is idle.
    fn busier_than_others(&self) -> bool {
        use crate::storage::nodes::{BUSY_BACKLOG, IDLE_BACKLOG};
        self.own.load(Ordering::Relaxed) >= BUSY_BACKLOG
            && self.least_other.load(Ordering::Relaxed) < IDLE_BACKLOG
    }

    /// When [`NOT_TAKEN_IN_A_ROW`] sessions handed on in a row were not taken, the others are
    /// busier than they said (or one of them died and is not known lost yet): this node hands
    /// none on for the next [`QUIET_READS`] reads of their load, about a heartbeat. (One not
    /// taken proves little: the taker may have been between two runs.)
    fn handed_on(&self, taken: bool) {
        if taken {
            self.not_taken.store(0, Ordering::Relaxed);
        } else if self.not_taken.fetch_add(1, Ordering::Relaxed) + 1 >= NOT_TAKEN_IN_A_ROW {
            self.not_taken.store(0, Ordering::Relaxed);
            self.quiet_reads.store(QUIET_READS, Ordering::Relaxed);
            self.least_other.store(u64::MAX, Ordering::Relaxed);
        }
    }
}

/// See [`NodeLoad::handed_on`].
const NOT_TAKEN_IN_A_ROW: u32 = 3;

/// See [`NodeLoad::handed_on`]: the others' load is read ten times a second.
const QUIET_READS: u32 = 20;

impl Default for NodeLoad {
    fn default() -> Self {
        NodeLoad {
            own: AtomicU64::new(0),
            least_other: AtomicU64::new(u64::MAX),
            not_taken: AtomicU32::new(0),
            quiet_reads: AtomicU32::new(0),
        }
    }
}

impl Engine {
    /// Opens (creating and migrating if needed) the database, on the system clock.
    pub fn open(config: &DbConfig) -> Result<Self> {
        Ok(Engine::with_clock(
            Database::open(config)?,
            Arc::new(SystemClock),
        ))
    }

    /// An engine over an open database with a given clock (tests use `ManualClock`).
    pub fn with_clock(db: Database, clock: Arc<dyn Clock>) -> Self {
        let owner = crate::storage::nodes::instance_name(clock.now_ms());
        Engine {
            db: db.with_clock(clock.clone()),
            clock,
            owner: owner.into(),
            node: crate::storage::nodes::host_name().into(),
            load: Arc::default(),
        }
    }

    /// The same engine as part of node `name` (`[node] name`; the host name by default).
    pub fn with_node(self, name: &str) -> Self {
        Engine {
            node: name.into(),
            ..self
        }
    }

    /// The node this process is part of.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// Same database and clock, another lease owner: a second worker for tests.
    pub fn with_owner(&self, owner: &str) -> Self {
        Engine {
            owner: owner.into(),
            ..self.clone()
        }
    }

    pub fn database(&self) -> &Database {
        &self.db
    }

    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    pub fn now(&self) -> i64 {
        self.clock.now_ms()
    }

    /// Runs `f` in a write transaction made now (one-shot commands; the daemon's writes go
    /// through the commit thread, see [`writes`](crate::writes)).
    pub fn write<T>(&self, f: impl FnOnce(&Tx<'_>) -> Result<T>) -> Result<T> {
        self.db.write(f)
    }

    /// This process's instance id, written as the owner of its leases.
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// The three queues under `policies`, with this engine: the synchronous door one-shot
    /// commands use (the daemon wraps the same in the actors' async `Store`).
    pub fn queues(&self, policies: &QueuePolicies) -> Queues {
        Queues {
            inbound: self.queue(QueueName::Inbound, policies.inbound.clone()),
            hooks: self.queue(QueueName::Hooks, policies.hooks.clone()),
            outbound: self.queue(QueueName::Outbound, policies.outbound.clone()),
            engine: self.clone(),
        }
    }

    /// A handle on queue `name` under `policy`.
    pub fn queue(&self, name: QueueName, policy: QueuePolicy) -> Queue {
        Queue::new(
            self.db.clone(),
            self.clock.clone(),
            self.owner.clone(),
            name,
            policy,
        )
    }

    #[cfg(any(test, feature = "test-helpers"))]
    /// Returns rows whose lease has expired, in every queue, to pending.
    pub fn reclaim_expired(&self) -> Result<usize> {
        self.write(crate::queue::reclaim_expired_in)
    }

    #[cfg(any(test, feature = "test-helpers"))]
    /// Returns every lease held by another owner to pending. Only for a daemon that knows it is
    /// the only one on this database: the leases it did not take are a previous process's.
    pub fn reclaim_foreign_leases(&self) -> Result<usize> {
        self.write(|tx| crate::queue::reclaim_foreign_in(tx, &self.owner))
    }

    /// Notes how busy the other nodes are: the least busy one's load (see
    /// [`Engine::busier_than_others`]), and how many write, by which this node's held-row
    /// writers take turns (see [`WriterGate`](crate::commit::WriterGate)): all of them while no
    /// other node is writing, their share of [`HELD_LINES`](crate::commit::HELD_LINES) when
    /// others are, at least one.
    pub fn note_others(&self, others: crate::storage::nodes::Others) {
        self.load.note_others(others.least_backlog);
        let share = crate::commit::HELD_LINES / (1 + others.writing as usize);
        self.db.held_writers().allow(share.max(1));
    }

    /// This node's writer backlog, averaged (see [`Engine::sample_load`]): what its heartbeat
    /// tells the others (`writes::nodes::Heartbeat`).
    pub fn own_load(&self) -> u64 {
        self.load.own.load(Ordering::Relaxed)
    }

    /// Reads how busy the other nodes are (between heartbeats: a node's load changes faster).
    pub fn look_at_others(&self) -> Result<()> {
        if !self.db.is_shared() {
            return Ok(());
        }
        let others = crate::storage::nodes::others(&self.db.read()?, &self.node)?;
        self.note_others(others);
        Ok(())
    }

    /// Takes a sample of this node's writer backlog into its average (the heartbeat's thread
    /// does, ten times a second); true when that moved the node between idle, between and busy
    /// (then the others should hear of it before the next heartbeat).
    pub fn sample_load(&self) -> bool {
        use crate::storage::nodes::{BUSY_BACKLOG, IDLE_BACKLOG};
        let class = |n: u64| (n >= IDLE_BACKLOG) as u8 + (n >= BUSY_BACKLOG) as u8;
        let sample = self.db.write_backlog() as u64;
        let own = self.load.own.load(Ordering::Relaxed);
        let new = (own * 3 + sample + 2) / 4;
        self.load.own.store(new, Ordering::Relaxed);
        class(new) != class(own)
    }

    /// Whether this node's writer is idle (see `storage::nodes::IDLE_BACKLOG`), on a database
    /// several daemons share.
    pub fn is_idle(&self) -> bool {
        let own = self.load.own.load(Ordering::Relaxed);
        self.db.is_shared() && own < crate::storage::nodes::IDLE_BACKLOG
    }

    /// A session this node handed on was `taken` by another node, or was not (this node took
    /// it back): see [`NodeLoad::handed_on`].
    pub fn handed_on(&self, taken: bool) {
        self.load.handed_on(taken);
    }

    /// Whether this node should leave a session that has just become due to another node for
    /// a moment: its writer is busy (taking messages in, say, as the node that reads a source;
    /// `storage::nodes::BUSY_BACKLOG`) and another live node's is idle (`IDLE_BACKLOG`). Never
    /// on a database one daemon serves; never when all are alike busy (each keeps to its own
    /// sessions then).
    pub fn busier_than_others(&self) -> bool {
        self.db.is_shared() && self.load.busier_than_others()
    }

    /// Every node the database has known, with what it holds (alive by the database's clock
    /// when several daemons share it).
    pub fn nodes(&self) -> Result<Vec<crate::storage::nodes::NodeView>> {
        let now = match self.db.is_shared() {
            true => self.write(|tx| Ok(tx.now()))?,
            false => self.now(),
        };
        let conn = self.db.read()?;
        let leases = crate::storage::source_leases::list(&conn)?;
        let sources_read_by = |instance: &str| -> Vec<String> {
            let held = |l: &&crate::storage::source_leases::SourceLease| {
                l.instance == instance && l.expires_at > now
            };
            leases
                .iter()
                .filter(held)
                .map(|l| l.source.clone())
                .collect()
        };
        crate::storage::nodes::overview(&conn, now, sources_read_by)
    }

    /// Whether this node delivers session `key`'s inbound rows: its agent runs here, or
    /// nowhere known. Always on a database one daemon serves.
    pub fn serves_session(
        &self,
        conn: &dyn crate::storage::sql::Executor,
        key: &str,
    ) -> Result<bool> {
        if !self.db.is_shared() {
            return Ok(true);
        }
        let node = crate::storage::nodes::session_node(conn, key)?;
        Ok(node.is_none_or(|node| *node == *self.node))
    }

    /// Which node reads each source that has one reader.
    pub fn source_leases(&self) -> Result<Vec<crate::storage::source_leases::SourceLease>> {
        crate::storage::source_leases::list(&self.db.read()?)
    }

    /// The sessions whose agents run on other nodes than this one.
    pub fn sessions_elsewhere(&self) -> Result<std::collections::HashSet<String>> {
        let keys = crate::storage::nodes::sessions_elsewhere(&self.db.read()?, &self.node)?;
        Ok(keys.into_iter().collect())
    }

    /// Row counts per queue, state and terminal reason.
    pub fn counts(&self) -> Result<Vec<StateCount>> {
        counts(&self.db.read()?)
    }

    /// The oldest pending or leased row of each queue.
    pub fn oldest_pending(&self) -> Result<Vec<OldestPending>> {
        oldest_pending(&self.db.read()?)
    }

    /// Every key with unfinished rows, oldest head first, at most `limit` (see [`Lane`]).
    ///
    /// [`Lane`]: crate::queue::Lane
    pub fn lanes(&self, limit: usize) -> Result<Vec<crate::queue::Lane>> {
        crate::storage::queue::lanes(&self.db.read()?, limit)
    }

    /// One row, whatever its queue and state.
    pub fn row(&self, id: i64) -> Result<Option<RowDetail>> {
        row_detail(&self.db.read()?, id)
    }

    /// Pending rows that failed and hold up their key, oldest first.
    pub fn stuck_heads(&self, limit: usize) -> Result<Vec<RowDetail>> {
        stuck_heads(&self.db.read()?, limit)
    }

    /// Dead rows of every queue, or of `queue`, oldest first.
    pub fn dead_rows(&self, queue: Option<QueueName>) -> Result<Vec<RowDetail>> {
        dead_rows(&self.db.read()?, queue)
    }

    /// A page of the dead rows `query` chooses, oldest first, and how many it chooses in all:
    /// paged in SQL, so a page costs its own rows, not every dead row's payload.
    pub fn dead_page(&self, query: &DeadQuery) -> Result<(Vec<RowDetail>, i64)> {
        dead_page(&self.db.read()?, query)
    }

    /// How many later rows of `row`'s key were already delivered (see
    /// [`relayq dead retry`](crate::queue)): replaying `row` would put it out of order.
    pub fn delivered_after(&self, row: &RowDetail) -> Result<i64> {
        delivered_after(&self.db.read()?, row)
    }

    /// Where inbound source `name` stopped reading, if it ever read.
    pub fn source_offset(&self, name: &str) -> Result<Option<String>> {
        crate::inbound::sources::offset(&self.db.read()?, name)
    }

    /// The operator's pauses (see [`crate::pauses`]).
    pub fn pauses(&self) -> Result<Vec<crate::pauses::Pause>> {
        crate::pauses::all(&self.db.read()?)
    }

    /// How long each channel's penalty still runs (ms), by the database's clock on PostgreSQL,
    /// so hosts whose clocks differ agree.
    pub fn channel_penalties_left(&self) -> Result<Vec<(String, i64)>> {
        self.write(|tx| {
            let now = tx.now();
            let running = crate::penalties::running(tx, now)?;
            Ok(running
                .into_iter()
                .map(|p| (p.channel, p.until - now))
                .collect())
        })
    }

    /// The channels' penalties still running (see [`crate::penalties`]).
    pub fn channel_penalties(&self) -> Result<Vec<crate::penalties::Penalty>> {
        crate::penalties::running(&self.db.read()?, self.now())
    }

    /// Whether an approval is open, or ended with its chat not told (see
    /// [`crate::approvals::anything_to_do`]).
    pub fn approvals_to_look_at(&self) -> Result<bool> {
        crate::approvals::anything_to_do(&self.db.read()?)
    }

    /// The people pairing added, by source.
    pub fn chat_users(&self) -> Result<Vec<crate::storage::access::ChatUser>> {
        crate::storage::access::users(&self.db.read()?)
    }

    /// The session registry (most recently active first).
    pub fn sessions(&self) -> Result<Vec<crate::sessions::SessionRecord>> {
        crate::sessions::list(&self.db.read()?)
    }

    /// One session of the registry.
    pub fn session(&self, key: &str) -> Result<Option<crate::sessions::SessionRecord>> {
        crate::sessions::get(&self.db.read()?, key)
    }

    /// The newest `limit` approvals, or only the open ones (see
    /// [`approvals::list`](crate::approvals::list)).
    pub fn approvals(
        &self,
        open_only: bool,
        limit: u32,
    ) -> Result<Vec<crate::approvals::Approval>> {
        crate::approvals::list(&self.db.read()?, open_only, limit)
    }

    /// Session commands from the chats that wait for their node or run on it, oldest first.
    pub fn waiting_session_commands(
        &self,
        limit: i64,
    ) -> Result<Vec<crate::storage::chat_sessions::CommandRow>> {
        crate::storage::chat_sessions::waiting_commands(&self.db.read()?, limit)
    }

    /// Reactions not yet sent as they are now, unchanged since `before` (unix ms), oldest
    /// first (see [`progress`](crate::progress)).
    pub fn untried_reactions(
        &self,
        before: i64,
        limit: i64,
    ) -> Result<Vec<crate::progress::Reaction>> {
        crate::progress::untried(&self.db.read()?, before, limit)
    }

    /// Agent sessions no chat hears (see [`sessions::unmatched`](crate::sessions::unmatched)).
    pub fn unmatched_sessions(&self) -> Result<Vec<crate::sessions::SessionRecord>> {
        crate::sessions::unmatched(&self.db.read()?)
    }
}

/// An engine and its three queues (see [`Engine::queues`]): the one bundle of queue handles,
/// for one-shot commands, the write door and the actors' `Store` alike.
#[derive(Debug, Clone)]
pub struct Queues {
    pub engine: Engine,
    pub inbound: Queue,
    pub hooks: Queue,
    pub outbound: Queue,
}

impl Queues {
    /// The handle of queue `name`.
    pub fn named(&self, name: QueueName) -> &Queue {
        match name {
            QueueName::Inbound => &self.inbound,
            QueueName::Hooks => &self.hooks,
            QueueName::Outbound => &self.outbound,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(own: u64, least_other: Option<u64>) -> NodeLoad {
        let load = NodeLoad::default();
        load.own.store(own, Ordering::Relaxed);
        load.note_others(least_other);
        load
    }

    /// A node's held-row writers take turns while another node writes (the server's cores are
    /// shared), and all write at once again when the others go idle.
    #[test]
    fn held_row_writers_take_turns_while_another_node_writes() {
        use crate::commit::HELD_LINES;
        use crate::storage::nodes::{beat_in, join_in};
        let pg = crate::storage::test_db::TestDb::postgres();
        let engine = Engine::with_clock(pg.db.clone(), Arc::new(SystemClock)).with_node("a");
        let door = crate::WriteDoor::new(engine.queues(&Default::default()), Default::default());
        engine.note_others(door.apply_now(crate::writes::nodes::JoinNodes).unwrap());
        let allowed = || engine.database().held_writers().allowed();
        assert_eq!(allowed(), HELD_LINES, "alone");
        let other_beats = |backlog: u64| {
            engine
                .write(|tx| {
                    join_in(tx, "b", "hb/1")?;
                    beat_in(tx, "b", "hb/1", backlog, &[]).map(|_| ())
                })
                .unwrap()
        };
        other_beats(40);
        engine.look_at_others().unwrap();
        assert_eq!(allowed(), 1, "b writes");
        other_beats(0);
        engine.look_at_others().unwrap();
        assert_eq!(allowed(), HELD_LINES, "b is idle");
    }

    /// A node leaves sessions to the others only when it is busy and another is idle: never
    /// alone, never when the others are busy too (each keeps to its own then).
    #[test]
    fn a_node_hands_sessions_on_only_when_it_is_busy_and_another_is_idle() {
        assert!(load(40, Some(0)).busier_than_others());
        assert!(!load(40, None).busier_than_others(), "alone");
        assert!(!load(40, Some(30)).busier_than_others(), "all busy");
        assert!(!load(10, Some(0)).busier_than_others(), "not busy");
    }

    /// Sessions handed on and not taken three times in a row (not once: the taker may have
    /// been between two runs) stop the handing on for about a heartbeat's reads of the others'
    /// load (an idle node that died is still read as idle until it is known lost).
    #[test]
    fn sessions_not_taken_three_times_in_a_row_stop_the_handing_on_for_a_while() {
        let load = load(40, Some(0));
        load.handed_on(false);
        load.handed_on(false);
        load.handed_on(true);
        load.handed_on(false);
        load.handed_on(false);
        assert!(load.busier_than_others(), "never three in a row");
        load.handed_on(false);
        assert!(!load.busier_than_others());
        for _ in 0..QUIET_READS {
            load.note_others(Some(0));
            assert!(!load.busier_than_others(), "quiet");
        }
        load.note_others(Some(0));
        assert!(load.busier_than_others(), "after a heartbeat's reads");
    }

    /// The load is an average of the writer's backlog, and a move between idle, between and
    /// busy is reported (the others hear of it before the next heartbeat).
    #[test]
    fn a_node_moving_between_idle_and_busy_says_so() {
        let (_dir, db) = crate::db::temp_database();
        let engine = Engine::with_clock(db, Arc::new(SystemClock));
        assert!(!engine.sample_load(), "idle, as it was");
        engine.load.own.store(100, Ordering::Relaxed);
        let mut moved = 0;
        for _ in 0..40 {
            moved += usize::from(engine.sample_load());
        }
        assert!(engine.load.own.load(Ordering::Relaxed) < crate::storage::nodes::IDLE_BACKLOG);
        assert_eq!(moved, 2, "busy to between, between to idle");
    }
}
