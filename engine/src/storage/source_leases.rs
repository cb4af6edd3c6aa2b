//! The `source_leases` table: a source that must have one reader at a time (Telegram's
//! `getUpdates` answers a second poller with a conflict) is read by the node holding its
//! lease. The holder renews it every [`SOURCE_RENEW`]; another node takes it once it has run
//! out, or at once when its holder is no live node's daemon (stopped, lost, restarted).

use std::time::Duration;

use crate::error::Result;
use crate::params;
use crate::storage::clock::ms;
use crate::storage::nodes::NODE_TIMEOUT;
use crate::storage::sql::{Executor, Query, Sql};
use crate::storage::tx::Tx;

/// How long a lease runs without renewal.
pub const SOURCE_LEASE: Duration = Duration::from_secs(10);

/// How often the holder renews it.
pub const SOURCE_RENEW: Duration = Duration::from_secs(2);

/// Who reads a source.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SourceLease {
    pub source: String,
    pub node: String,
    pub instance: String,
    pub expires_at: i64,
}

/// Takes or renews the lease: free, run out, held by this instance, or held by a daemon that
/// is no live node's.
const TAKE_SQL: Sql = Sql::same(
    "INSERT INTO source_leases (source, node, instance, expires_at)
     VALUES (:source, :node, :instance, :expires)
     ON CONFLICT (source) DO UPDATE SET node = excluded.node, instance = excluded.instance,
            expires_at = excluded.expires_at
     WHERE source_leases.instance = excluded.instance OR source_leases.expires_at <= :now
        OR source_leases.instance NOT IN (
            SELECT instance FROM nodes WHERE stopped_at IS NULL AND seen_at >= :lost_before)",
);
const RELEASE_SQL: Sql =
    Sql::same("DELETE FROM source_leases WHERE source = :source AND instance = :instance");
const LIST_SQL: Sql =
    Sql::same("SELECT source, node, instance, expires_at FROM source_leases ORDER BY source");

/// Takes or renews source `source`'s lease for node `node` (daemon `instance`); false when
/// another node holds it.
pub fn take_in(tx: &Tx<'_>, source: &str, node: &str, instance: &str) -> Result<bool> {
    let now = tx.now();
    let (expires, lost_before) = (now + ms(SOURCE_LEASE), now - ms(NODE_TIMEOUT));
    let params = params![
        ":source" => source, ":node" => node, ":instance" => instance, ":expires" => expires,
        ":now" => now, ":lost_before" => lost_before,
    ];
    Ok(tx.exec(&TAKE_SQL, params)? == 1)
}

/// Lets the lease go (a clean stop): another node takes it at once.
pub fn release_in(tx: &Tx<'_>, source: &str, instance: &str) -> Result<()> {
    tx.exec(
        &RELEASE_SQL,
        params![":source" => source, ":instance" => instance],
    )?;
    Ok(())
}

/// Every source lease, by source.
pub fn list(conn: &dyn Executor) -> Result<Vec<SourceLease>> {
    conn.query_all(&LIST_SQL, params![], |r| {
        Ok(from_columns! { r => SourceLease { source, node, instance, expires_at } })
    })
}

/// Every statement, for the test that prepares them all on both backends.
#[cfg(test)]
pub(crate) const STATEMENTS: &[Sql] = &[TAKE_SQL, RELEASE_SQL, LIST_SQL];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::nodes::join_in;
    use crate::storage::test_db::TestDb;

    const T: i64 = 1_700_000_000_000;

    #[test]
    fn one_node_reads_a_source_and_another_takes_over_when_it_stops_dies_or_lets_it_run_out() {
        for backend in TestDb::both() {
            let db = &backend.db;
            let take = |t: i64, node: &str, instance: &str| {
                db.write_at(t, |tx| take_in(tx, "bot", node, instance))
                    .unwrap()
            };
            db.write_at(T, |tx| join_in(tx, "a", "ha/1")).unwrap();
            db.write_at(T, |tx| join_in(tx, "b", "hb/1")).unwrap();
            assert!(take(T, "a", "ha/1"));
            assert!(!take(T + 1, "b", "hb/1"), "{}: a holds it", backend.name());
            assert!(take(T + 2_000, "a", "ha/1"), "renewed");
            // Run out: a stopped renewing (its node is still thought alive).
            let out = T + 2_000 + ms(SOURCE_LEASE);
            db.write_at(out, |tx| {
                crate::storage::nodes::beat_in(tx, "a", "ha/1", 0, &[])
            })
            .unwrap();
            assert!(take(out, "b", "hb/1"), "{}: run out", backend.name());
            // Let go at a clean stop: taken at once.
            db.write_at(out, |tx| release_in(tx, "bot", "hb/1"))
                .unwrap();
            assert!(take(out + 1, "a", "ha/1"));
            // Its holder restarted (a new daemon of node a): taken at once.
            db.write_at(out + 2, |tx| join_in(tx, "a", "ha/2"))
                .unwrap_err();
            let restarted = out + 2 + ms(NODE_TIMEOUT);
            db.write_at(restarted, |tx| join_in(tx, "a", "ha/2"))
                .unwrap();
            db.write_at(restarted, |tx| {
                crate::storage::nodes::beat_in(tx, "b", "hb/1", 0, &[])
            })
            .unwrap();
            assert!(
                take(restarted, "b", "hb/1"),
                "{}: ha/1 is no node's daemon",
                backend.name()
            );
            let leases = list(&db.read().unwrap()).unwrap();
            assert_eq!(leases.len(), 1);
            assert_eq!(
                (leases[0].node.as_str(), leases[0].instance.as_str()),
                ("b", "hb/1")
            );
        }
    }
}
