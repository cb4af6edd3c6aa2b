//! The engine: one database, one clock, one instance id, and a `Queue` handle per queue.

use crate::tx::Tx;
use std::sync::Arc;

use crate::clock::{Clock, SystemClock};
use crate::db::{Database, DbConfig};
use crate::error::Result;
use crate::policy::{QueuePolicies, QueuePolicy};
use crate::queue::{
    counts, dead_page, dead_rows, delivered_after, oldest_pending, purge_dead_in,
    reclaim_expired_in, reclaim_foreign_in, revive_dead_in, row_detail, stuck_heads, DeadQuery,
    OldestPending, Queue, QueueName, RowDetail, StateCount,
};

/// The storage engine. Cheap to clone; every clone shares the pools.
#[derive(Debug, Clone)]
pub struct Engine {
    db: Database,
    clock: Arc<dyn Clock>,
    owner: Arc<str>,
    /// The node this process is part of (see [`crate::storage::nodes`]).
    node: Arc<str>,
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

    /// Returns rows whose lease has expired, in every queue, to pending.
    pub fn reclaim_expired(&self) -> Result<usize> {
        self.write(reclaim_expired_in)
    }

    /// Returns every lease held by another owner to pending. Only for a daemon that knows it is
    /// the only one on this database: the leases it did not take are a previous process's.
    pub fn reclaim_foreign_leases(&self) -> Result<usize> {
        self.write(|tx| reclaim_foreign_in(tx, &self.owner))
    }

    /// Joins the database's nodes as this engine's node, served by its owner (refused while
    /// another live daemon serves the name).
    pub fn join_nodes(&self) -> Result<()> {
        self.write(|tx| crate::storage::nodes::join_in(tx, &self.node, &self.owner))
    }

    /// Says this node is alive; false when another daemon took its name meanwhile.
    pub fn heartbeat(&self) -> Result<bool> {
        self.write(|tx| crate::storage::nodes::beat_in(tx, &self.node, &self.owner))
    }

    /// This node stops cleanly.
    pub fn leave_nodes(&self) -> Result<()> {
        self.write(|tx| crate::storage::nodes::leave_in(tx, &self.node, &self.owner))
    }

    /// Every node the database has known, with what it holds (alive by the database's clock
    /// when several daemons share it).
    pub fn nodes(&self) -> Result<Vec<crate::storage::nodes::NodeView>> {
        let now = match self.db.is_shared() {
            true => self.write(|tx| Ok(tx.now()))?,
            false => self.now(),
        };
        crate::storage::nodes::overview(&self.db.read()?, now)
    }

    /// Returns to pending the leases of daemons that are no live node's (a node lost or
    /// restarted): see [`crate::storage::nodes::reclaim_lost_in`].
    pub fn reclaim_lost_leases(&self) -> Result<usize> {
        self.write(crate::storage::nodes::reclaim_lost_in)
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

    /// Takes or renews source `name`'s lease for this node; false while another node reads it
    /// (see [`crate::storage::source_leases`]).
    pub fn take_source_lease(&self, name: &str) -> Result<bool> {
        use crate::storage::source_leases::take_in;
        self.write(|tx| take_in(tx, name, &self.node, &self.owner))
    }

    /// Lets source `name`'s lease go, so another node reads it at once.
    pub fn release_source_lease(&self, name: &str) -> Result<()> {
        self.write(|tx| crate::storage::source_leases::release_in(tx, name, &self.owner))
    }

    /// Which node reads each source that has one reader.
    pub fn source_leases(&self) -> Result<Vec<crate::storage::source_leases::SourceLease>> {
        crate::storage::source_leases::list(&self.db.read()?)
    }

    /// Takes one send from each shared budget (a key, and microseconds between sends; see
    /// [`crate::storage::budgets`]), or from none: then the microseconds to wait.
    pub fn take_budgets(&self, budgets: &[(&str, i64)]) -> Result<Option<i64>> {
        let taken = self.write(|tx| match crate::storage::budgets::take_in(tx, budgets)? {
            None => Ok(()),
            // Rolled back: the budgets taken before the spent one are not spent.
            Some(wait_us) => Err(crate::EngineError::OverBudget { wait_us }),
        });
        match taken {
            Ok(()) => Ok(None),
            Err(crate::EngineError::OverBudget { wait_us }) => Ok(Some(wait_us)),
            Err(e) => Err(e),
        }
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

    /// Revives dead rows (`None`: all of them): pending again, attempts reset, due now.
    /// Returns (id, queue, key) of each row revived, so the caller can wake its worker.
    pub fn retry_dead(&self, ids: Option<&[i64]>) -> Result<Vec<(i64, QueueName, String)>> {
        self.write(|tx| revive_dead_in(tx, ids))
    }

    /// Deletes dead rows (`None`: all of them). Returns the ids deleted.
    pub fn purge_dead(&self, ids: Option<&[i64]>) -> Result<Vec<i64>> {
        self.write(|tx| purge_dead_in(tx, ids))
    }

    /// Where inbound source `name` stopped reading, if it ever read.
    pub fn source_offset(&self, name: &str) -> Result<Option<String>> {
        crate::sources::offset(&self.db.read()?, name)
    }

    /// The operator's pauses (see [`crate::pauses`]).
    pub fn pauses(&self) -> Result<Vec<crate::pauses::Pause>> {
        crate::pauses::all(&self.db.read()?)
    }

    /// How long each channel's pause still runs (ms), by the database's clock on PostgreSQL,
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

    /// The channels' pauses still running (see [`crate::penalties`]).
    pub fn channel_penalties(&self) -> Result<Vec<crate::penalties::Penalty>> {
        crate::penalties::running(&self.db.read()?, self.now())
    }

    /// Whether an approval is open, or ended with its chat not told (see
    /// [`crate::approvals::anything_to_do`]).
    pub fn approvals_to_look_at(&self) -> Result<bool> {
        crate::approvals::anything_to_do(&self.db.read()?)
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

    /// Agent sessions no chat hears (see [`sessions::unmatched`](crate::sessions::unmatched)).
    pub fn unmatched_sessions(&self) -> Result<Vec<crate::sessions::SessionRecord>> {
        crate::sessions::unmatched(&self.db.read()?)
    }
}

/// An engine and its three queues (see [`Engine::queues`]): the one bundle of queue handles,
/// for one-shot commands, the hook processor and the actors' `Store` alike.
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
