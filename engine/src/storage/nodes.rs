//! The `nodes` table: the daemons serving one database, each under a name (`[node] name`,
//! the host name by default). A daemon joins at start, says it is alive every few seconds
//! (its heartbeat, timed by the database's clock on PostgreSQL) and leaves at a clean stop.
//! A node not seen for [`NODE_TIMEOUT`] is lost: the leases it held are taken back by the
//! others, and its name may be taken by a new daemon.
//!
//! The `sessions.node` column says which node a session's agent runs on (its hooks ran
//! there): only that node delivers the session's inbound rows.

use std::time::Duration;

use crate::error::{EngineError, Result};
use crate::params;
use crate::storage::clock::ms;
use crate::storage::sql::{Executor, Query, Sql};
use crate::storage::tx::Tx;

/// How often a daemon says it is alive.
pub const HEARTBEAT: Duration = Duration::from_secs(2);

/// A node not seen for this long is lost (five missed heartbeats).
pub const NODE_TIMEOUT: Duration = Duration::from_secs(10);

/// A node whose writer has at least this many operations waiting, on average, is busy: see
/// `Engine::busier_than_others`.
pub const BUSY_BACKLOG: u64 = 16;

/// A node whose writer has fewer than this many operations waiting, on average, is idle.
pub const IDLE_BACKLOG: u64 = 4;

/// A node as the table has it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Node {
    pub name: String,
    /// The daemon now serving as this node: the owner written on its leases.
    pub instance: String,
    pub started_at: i64,
    pub seen_at: i64,
    /// When it stopped cleanly; `None` while it runs (or since it was lost).
    pub stopped_at: Option<i64>,
}

/// Takes the name for `instance`: a new name, one whose daemon stopped or was lost, or one
/// whose daemon the caller found dead (`:holder_dead`: a process of this host that is gone). A
/// live daemon's name is left alone (0 rows).
const JOIN_SQL: Sql = Sql::same(
    "INSERT INTO nodes (name, instance, started_at, seen_at) VALUES (:name, :instance, :now, :now)
     ON CONFLICT (name) DO UPDATE SET instance = excluded.instance,
            started_at = excluded.started_at, seen_at = excluded.seen_at, stopped_at = NULL
     WHERE nodes.instance = excluded.instance OR nodes.stopped_at IS NOT NULL
        OR nodes.seen_at < :lost_before OR :holder_dead",
);
const BEAT_SQL: Sql = Sql::same(
    "UPDATE nodes SET seen_at = :now, backlog = :backlog, unready = :unready
     WHERE name = :name AND instance = :instance",
);
const LEAVE_SQL: Sql =
    Sql::same("UPDATE nodes SET stopped_at = :now WHERE name = :name AND instance = :instance");
const LIST_SQL: Sql =
    Sql::same("SELECT name, instance, started_at, seen_at, stopped_at FROM nodes ORDER BY name");
const GET_SQL: Sql = Sql::same(
    "SELECT name, instance, started_at, seen_at, stopped_at FROM nodes WHERE name = :name",
);
/// Returns to pending every lease whose owner is not a live node's daemon: a node lost, or
/// restarted (its new daemon is another instance); the runs they held are settled (see
/// `queue::reclaim_in`).
const RECLAIM_LOST_SQL: Sql = Sql::same(
    "UPDATE queue_rows SET state = 'pending', lease_owner = NULL, lease_expires_at = NULL,
            next_attempt_at = :now
     WHERE state = 'leased' AND lease_owner NOT IN (
         SELECT instance FROM nodes WHERE stopped_at IS NULL AND seen_at >= :lost_before)
     RETURNING queue, key, id, run_through, send_started",
);
const SESSIONS_PER_NODE_SQL: Sql = Sql::same(
    "SELECT node, COUNT(*) FROM sessions WHERE node IS NOT NULL AND state = 'active' GROUP BY node",
);
const LEASES_PER_OWNER_SQL: Sql = Sql::same(
    "SELECT lease_owner, COUNT(*) FROM queue_rows WHERE state = 'leased' GROUP BY lease_owner",
);
/// Alive as the freshest heartbeat's time says (the database's clock on PostgreSQL), so that
/// reading it needs no clock of the reader's.
const OTHERS_SQL: Sql = Sql::same(
    "SELECT MIN(backlog), COALESCE(SUM(CASE WHEN backlog >= :idle THEN 1 ELSE 0 END), 0)
     FROM nodes
     WHERE name <> :name AND stopped_at IS NULL
       AND seen_at >= (SELECT MAX(seen_at) FROM nodes) - :timeout",
);
/// When the longest-running live node started.
const EARLIEST_LIVE_START_SQL: Sql = Sql::same(
    "SELECT MIN(started_at) FROM nodes WHERE stopped_at IS NULL AND seen_at >= :lost_before",
);
const SESSION_NODE_SQL: Sql = Sql::same("SELECT node FROM sessions WHERE key = :key");
const SESSIONS_ELSEWHERE_SQL: Sql =
    Sql::same("SELECT key FROM sessions WHERE node IS NOT NULL AND node <> :node");

/// This host's name: a node's name when `[node] name` says none. From the kernel (Linux), else
/// `$HOSTNAME`, else `localhost`.
pub fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|name| name.trim().to_string())
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

/// The time before which a node's last heartbeat means it is lost.
fn lost_before(now: i64) -> i64 {
    now - ms(NODE_TIMEOUT)
}

/// Joins as node `name`, served by `instance` (`HOST/PID-...`, see [`instance_name`]);
/// refused while another live daemon serves the name.
pub fn join_in(tx: &Tx<'_>, name: &str, instance: &str) -> Result<()> {
    let now = tx.now();
    let lost_before = lost_before(now);
    let holder = tx.query_opt(&GET_SQL, params![":name" => name], read_node)?;
    let holder_dead = holder.as_ref().is_some_and(|h| process_gone(&h.instance));
    let params = params![
        ":name" => name, ":instance" => instance, ":now" => now, ":lost_before" => lost_before,
        ":holder_dead" => holder_dead,
    ];
    if tx.exec(&JOIN_SQL, params)? == 1 {
        return Ok(());
    }
    let seen = holder.map_or(0, |n| (now - n.seen_at).max(0) / 1000);
    Err(EngineError::Invalid(format!(
        "node name '{name}' is in use by another daemon (seen {seen} s ago): give each daemon \
         its own [node] name, or stop the other one"
    )))
}

/// A daemon's instance name: this host, its process id, when it started (a process id alone
/// is reused), and which of this process's engines it is (a benchmark runs several nodes in
/// one process).
pub fn instance_name(started_ms: i64) -> String {
    static ENGINES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = ENGINES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("{}/{}-{started_ms}-{n}", host_name(), std::process::id())
}

/// Whether `instance` (see [`instance_name`]) was a process of this host that has ended: a
/// daemon that died a moment ago (`kill -9`, then a restart at once) has not missed its
/// heartbeats yet, but its name is free.
fn process_gone(instance: &str) -> bool {
    let Some((host, rest)) = instance.split_once('/') else {
        return false;
    };
    let pid = rest.split_once('-').map_or(rest, |(pid, _)| pid);
    match pid.parse::<u32>() {
        Ok(pid) if host == host_name() && pid != std::process::id() => {
            !std::path::Path::new(&format!("/proc/{pid}")).exists()
        }
        _ => false,
    }
}

/// Says node `name` (as `instance`) is alive, its writer's `backlog` (operations waiting, on
/// average); false when the name was taken by another daemon meanwhile (this one was thought
/// lost: it should join again).
pub fn beat_in(
    tx: &Tx<'_>,
    name: &str,
    instance: &str,
    backlog: u64,
    unready: &[String],
) -> Result<bool> {
    let now = tx.now();
    let backlog = backlog.min(i64::MAX as u64) as i64;
    let unready = (!unready.is_empty())
        .then(|| serde_json::to_string(unready).expect("a list of strings serialises"));
    let params = params![
        ":name" => name, ":instance" => instance, ":now" => now, ":backlog" => backlog,
        ":unready" => unready,
    ];
    Ok(tx.exec(&BEAT_SQL, params)? == 1)
}

/// How busy the live nodes other than one are, from their heartbeats (see [`beat_in`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Others {
    /// The least busy one's writer backlog; `None` when no other node is alive.
    pub least_backlog: Option<u64>,
    /// How many are writing: their backlog is not idle ([`IDLE_BACKLOG`]).
    pub writing: u64,
}

/// How busy the live nodes other than `name` are.
pub fn others(conn: &dyn Executor, name: &str) -> Result<Others> {
    let params =
        params![":name" => name, ":idle" => IDLE_BACKLOG as i64, ":timeout" => ms(NODE_TIMEOUT)];
    let (least, writing): (Option<i64>, i64) = conn
        .query_opt(&OTHERS_SQL, params, |r| Ok((r.get(0)?, r.get(1)?)))?
        .unwrap_or((None, 0));
    Ok(Others {
        least_backlog: least.map(|n| n.max(0) as u64),
        writing: writing.max(0) as u64,
    })
}

/// Node `name` stops cleanly.
pub fn leave_in(tx: &Tx<'_>, name: &str, instance: &str) -> Result<()> {
    let now = tx.now();
    tx.exec(
        &LEAVE_SQL,
        params![":name" => name, ":instance" => instance, ":now" => now],
    )?;
    Ok(())
}

/// Every node the database has known, by name.
pub fn list(conn: &dyn Executor) -> Result<Vec<Node>> {
    conn.query_all(&LIST_SQL, params![], read_node)
}

/// A node as the operator sees it: alive or not at the time read, and what it holds.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct NodeView {
    #[serde(flatten)]
    pub node: Node,
    pub alive: bool,
    /// The sources it reads (their leases).
    pub sources: Vec<String>,
    /// Active sessions whose agents run on it.
    pub sessions: i64,
    /// Rows its daemon holds leased now.
    pub leases: i64,
    /// What cannot work on it now, and why (its last heartbeat's word; empty when it is not
    /// alive).
    pub unready: Vec<String>,
}

const UNREADY_SQL: Sql = Sql::same("SELECT name, unready FROM nodes WHERE unready IS NOT NULL");

/// Every node with what it holds, as at `now`: its sessions and leases, and the sources its
/// instance reads (`sources_read_by`, from the source leases, which nodes hold).
pub fn overview(
    conn: &dyn Executor,
    now: i64,
    sources_read_by: impl Fn(&str) -> Vec<String>,
) -> Result<Vec<NodeView>> {
    let count = |sql: &Sql| -> Result<std::collections::HashMap<String, i64>> {
        Ok(conn
            .query_all(sql, params![], |r| Ok((r.get(0)?, r.get(1)?)))?
            .into_iter()
            .collect())
    };
    let (sessions, leases) = (
        count(&SESSIONS_PER_NODE_SQL)?,
        count(&LEASES_PER_OWNER_SQL)?,
    );
    let unready: std::collections::HashMap<String, Vec<String>> = conn
        .query_all(&UNREADY_SQL, params![], |r| {
            Ok((r.get::<String, _>(0)?, r.get::<String, _>(1)?))
        })?
        .into_iter()
        .map(|(name, list)| (name, serde_json::from_str(&list).unwrap_or_default()))
        .collect();
    Ok(list(conn)?
        .into_iter()
        .map(|node| NodeView {
            alive: is_alive(&node, now),
            unready: match is_alive(&node, now) {
                true => unready.get(&node.name).cloned().unwrap_or_default(),
                false => Vec::new(),
            },
            sources: sources_read_by(&node.instance),
            sessions: sessions.get(&node.name).copied().unwrap_or(0),
            leases: leases.get(&node.instance).copied().unwrap_or(0),
            node,
        })
        .collect())
}

/// Whether `node` is alive at `now`: running and seen within [`NODE_TIMEOUT`].
pub fn is_alive(node: &Node, now: i64) -> bool {
    node.stopped_at.is_none() && node.seen_at >= lost_before(now)
}

/// When the longest-running live node started, `None` when none is (a database no daemon
/// joined). A row written before it was written by a daemon that is gone; a later one may be a
/// live node's.
pub fn earliest_live_start(conn: &dyn Executor, now: i64) -> Result<Option<i64>> {
    let params = params![":lost_before" => lost_before(now)];
    Ok(conn
        .query_opt(&EARLIEST_LIVE_START_SQL, params, |r| {
            r.get::<Option<i64>, _>(0)
        })?
        .flatten())
}

/// Takes back the leases of daemons that are no live node's: how a node's crash is recovered
/// by the others (and by its own restart) without waiting for each lease to expire.
pub fn reclaim_lost_in(tx: &Tx<'_>) -> Result<usize> {
    let now = tx.now();
    let lost_before = lost_before(now);
    crate::storage::queue::reclaim_in(
        tx,
        &RECLAIM_LOST_SQL,
        params![":now" => now, ":lost_before" => lost_before],
    )
}

/// The node session `key`'s agent runs on, if one is known.
pub fn session_node(conn: &dyn Executor, key: &str) -> Result<Option<String>> {
    Ok(conn
        .query_opt(&SESSION_NODE_SQL, params![":key" => key], |r| {
            r.get::<Option<String>, _>(0)
        })?
        .flatten())
}

/// The sessions whose agents run on another node than `node`.
pub fn sessions_elsewhere(conn: &dyn Executor, node: &str) -> Result<Vec<String>> {
    conn.query_all(&SESSIONS_ELSEWHERE_SQL, params![":node" => node], |r| {
        r.get(0)
    })
}

/// The head rows of inbound sessions whose agent's node is lost or stopped, not yet said to
/// wait for it: (row id, its payload, the node, since when it is gone, whether it stopped).
const WAITING_ON_GONE_NODES_SQL: Sql = Sql::same(
    "SELECT r.id, r.payload, n.name, COALESCE(n.stopped_at, n.seen_at), n.stopped_at IS NOT NULL
     FROM queue_rows r
     JOIN sessions s ON s.key = r.key
     JOIN nodes n ON n.name = s.node
     WHERE r.queue = 'inbound' AND r.state = 'pending' AND r.last_error IS NULL
       AND s.state = 'active'
       AND (n.stopped_at IS NOT NULL OR n.seen_at < :lost_before)
       AND NOT EXISTS (
         SELECT 1 FROM queue_rows o
         WHERE o.queue = r.queue AND o.key = r.key
           AND o.state IN ('pending', 'leased') AND o.id < r.id)
     ORDER BY r.id LIMIT 100",
);

/// Says on a row why it waits (its last error), if nothing said it yet.
const SAY_WAITS_SQL: Sql = Sql::same(
    "UPDATE queue_rows SET last_error = :why
     WHERE id = :id AND state = 'pending' AND last_error IS NULL",
);

/// A message whose session's agent runs on a node that is gone (see
/// [`waiting_on_gone_nodes_in`]).
#[derive(Debug, Clone, PartialEq)]
pub struct WaitsForNode {
    pub row: i64,
    pub payload: String,
    pub node: String,
    /// When it stopped, or was last seen.
    pub gone_since: i64,
    /// It stopped cleanly (rather than being lost).
    pub stopped: bool,
}

/// The messages at the head of their session that wait for a node lost (or stopped), not yet
/// said so; each is marked with `why(it)` as its last error here, so `relayq show`,
/// `relayq status` and the API say it, and it is answered once.
pub fn waiting_on_gone_nodes_in(
    tx: &Tx<'_>,
    why: impl Fn(&WaitsForNode) -> String,
) -> Result<Vec<(WaitsForNode, String)>> {
    let lost_before = lost_before(tx.now());
    let waiting = tx.query_all(
        &WAITING_ON_GONE_NODES_SQL,
        params![":lost_before" => lost_before],
        |r| {
            Ok(WaitsForNode {
                row: r.get(0)?,
                payload: r.get(1)?,
                node: r.get(2)?,
                gone_since: r.get(3)?,
                stopped: r.get(4)?,
            })
        },
    )?;
    let mut said = Vec::new();
    for w in waiting {
        let text = why(&w);
        if tx.exec(
            &SAY_WAITS_SQL,
            params![":id" => w.row, ":why" => text.as_str()],
        )? == 1
        {
            said.push((w, text));
        }
    }
    Ok(said)
}

fn read_node(r: &crate::storage::sql::Row<'_>) -> Result<Node> {
    Ok(from_columns! { r => Node { name, instance, started_at, seen_at, stopped_at } })
}

/// Every statement, for the test that prepares them all on both backends.
#[cfg(test)]
pub(crate) const STATEMENTS: &[Sql] = &[
    JOIN_SQL,
    BEAT_SQL,
    LEAVE_SQL,
    LIST_SQL,
    GET_SQL,
    RECLAIM_LOST_SQL,
    OTHERS_SQL,
    EARLIEST_LIVE_START_SQL,
    SESSION_NODE_SQL,
    SESSIONS_ELSEWHERE_SQL,
    WAITING_ON_GONE_NODES_SQL,
    SAY_WAITS_SQL,
    SESSIONS_PER_NODE_SQL,
    LEASES_PER_OWNER_SQL,
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::test_db::TestDb;

    const T: i64 = 1_700_000_000_000;

    #[test]
    fn a_name_is_held_by_one_live_daemon_and_taken_over_once_it_is_lost_or_stopped() {
        for backend in TestDb::both() {
            let db = &backend.db;
            let at = |t: i64, f: &dyn Fn(&Tx<'_>) -> Result<()>| db.write_at(t, |tx| f(tx));
            at(T, &|tx| join_in(tx, "a", "h1/1")).unwrap();
            let refused = at(T + 1_000, &|tx| join_in(tx, "a", "h2/1")).unwrap_err();
            assert!(
                refused.to_string().contains("in use by another daemon"),
                "{refused}"
            );
            at(T + 1_000, &|tx| join_in(tx, "a", "h1/1")).expect("it joins again as itself");
            // A process of this host that has ended (no such pid) held it: taken at once.
            let gone = format!("{}/{}-1", host_name(), u32::MAX);
            at(T, &|tx| join_in(tx, "b", &gone)).unwrap();
            at(T + 1_000, &|tx| join_in(tx, "b", "h1/2")).expect("a restart after a kill -9");
            // Lost: not seen for the timeout.
            let later = T + 1_000 + ms(NODE_TIMEOUT) + 1;
            at(later, &|tx| join_in(tx, "a", "h2/1")).unwrap();
            let stale = db
                .write_at(later, |tx| beat_in(tx, "a", "h1/1", 0, &[]))
                .unwrap();
            assert!(
                !stale,
                "{}: the lost daemon learns its name was taken",
                backend.name()
            );
            // Stopped cleanly: taken at once.
            at(later, &|tx| leave_in(tx, "a", "h2/1")).unwrap();
            at(later + 1, &|tx| join_in(tx, "a", "h3/1")).unwrap();
            let nodes = list(&db.read().unwrap()).unwrap();
            assert_eq!(nodes.len(), 2);
            assert_eq!(
                (nodes[0].instance.as_str(), nodes[0].stopped_at),
                ("h3/1", None)
            );
            assert!(is_alive(&nodes[0], later + 1));
        }
    }

    /// The nodes writing beside a node are the live others whose heartbeat's backlog is not
    /// idle: never itself, nor a lost or stopped node.
    #[test]
    fn the_nodes_writing_beside_a_node_are_the_live_others_whose_backlog_is_not_idle() {
        for backend in TestDb::both() {
            let db = &backend.db;
            let writing = |name: &str| others(&db.read().unwrap(), name).unwrap().writing;
            let beat = |name: &str, backlog: u64| {
                let instance = format!("h{name}/1");
                db.write_at(T, |tx| join_in(tx, name, &instance)).unwrap();
                db.write_at(T, |tx| beat_in(tx, name, &instance, backlog, &[]))
                    .unwrap();
            };
            beat("a", 40);
            assert_eq!(writing("a"), 0, "{}: alone", backend.name());
            beat("b", IDLE_BACKLOG);
            beat("c", IDLE_BACKLOG - 1);
            assert_eq!(writing("a"), 1, "{}: b writes, c is idle", backend.name());
            assert_eq!(writing("b"), 1, "{}: a writes", backend.name());
            db.write_at(T, |tx| leave_in(tx, "b", "hb/1")).unwrap();
            assert_eq!(writing("a"), 0, "{}: b stopped", backend.name());
        }
    }

    /// A node's heartbeat carries its writer's backlog; the others read the least busy live
    /// node's, never their own, nor a lost or stopped node's.
    #[test]
    fn the_least_busy_other_node_is_read_from_the_live_nodes_heartbeats() {
        for backend in TestDb::both() {
            let db = &backend.db;
            let least = |name: &str| others(&db.read().unwrap(), name).unwrap().least_backlog;
            db.write_at(T, |tx| join_in(tx, "a", "ha/1")).unwrap();
            assert_eq!(least("a"), None, "{}: alone", backend.name());
            for (name, instance, backlog) in [("b", "hb/1", 40), ("c", "hc/1", 3)] {
                db.write_at(T, |tx| join_in(tx, name, instance)).unwrap();
                db.write_at(T, |tx| beat_in(tx, name, instance, backlog, &[]))
                    .unwrap();
            }
            db.write_at(T, |tx| beat_in(tx, "a", "ha/1", 0, &[]))
                .unwrap();
            assert_eq!(least("a"), Some(3), "{}", backend.name());
            assert_eq!(least("c"), Some(0), "{}", backend.name());
            db.write_at(T, |tx| leave_in(tx, "c", "hc/1")).unwrap();
            assert_eq!(least("a"), Some(40), "{}: c stopped", backend.name());
            let later = T + ms(NODE_TIMEOUT) + 1;
            db.write_at(later, |tx| beat_in(tx, "a", "ha/1", 0, &[]))
                .unwrap();
            assert_eq!(least("a"), None, "{}: b lost", backend.name());
        }
    }

    #[test]
    fn the_leases_of_a_lost_or_restarted_daemon_are_taken_back_and_a_live_ones_are_kept() {
        use crate::storage::queue::testing::row;
        use crate::{Engine, ManualClock, QueueName, QueuePolicy};
        for backend in TestDb::both() {
            let db = &backend.db;
            db.write_at(T, |tx| join_in(tx, "a", "ha/1")).unwrap();
            db.write_at(T, |tx| join_in(tx, "b", "hb/1")).unwrap();
            let engine = Engine::with_clock(db.clone(), std::sync::Arc::new(ManualClock::new(T)));
            let daemon = |instance: &str| {
                let engine = engine.with_owner(instance);
                engine.queue(QueueName::Outbound, QueuePolicy::outbound())
            };
            let (a, b) = (daemon("ha/1"), daemon("hb/1"));
            let mut ids = vec![];
            for (q, key) in [(&a, "ka"), (&b, "kb")] {
                ids.push(
                    db.write_at(T, |tx| q.enqueue_in(tx, &row(key, "x")))
                        .unwrap()
                        .id,
                );
                db.write_at(T, |tx| q.lease_next_in(tx, key))
                    .unwrap()
                    .unwrap();
            }
            // b keeps beating; a does not, and is lost.
            let later = T + ms(NODE_TIMEOUT) + 1;
            db.write_at(later, |tx| beat_in(tx, "b", "hb/1", 0, &[]))
                .unwrap();
            let taken = db.write_at(later, reclaim_lost_in).unwrap();
            assert_eq!(taken, 1, "{}: only a's lease", backend.name());
            assert_eq!(a.state_of(ids[0]).unwrap().unwrap().state, "pending");
            assert_eq!(b.state_of(ids[1]).unwrap().unwrap().state, "leased");
        }
    }
}
