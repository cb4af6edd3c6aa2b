//! `tune-lease-shapes`: what a run's lease costs the server as relayq writes it (every row of
//! the run updated to `leased`, then each updated again to `delivered`) against a lease held
//! once per key (one row of a lease table per key; the rows updated once, when recorded). One
//! client on a durable server, no relayq process: the statements alone, each lease and each
//! record its own transaction, as a destination sender's writes are. Printed, not written to the report: the
//! measure behind choosing (or not) a lease per key for outbound runs (BENCHMARKS.md, 11).

use anyhow::Result;
use relayq_engine::postgres::{Client, NoTls};
use std::time::Instant;

/// Rows, destinations and run length, as the outbound drain's 5-destination case.
const ROWS: usize = 30_000;
const KEYS: usize = 5;
const RUN: usize = 256;

/// The two shapes measured.
#[derive(Debug, Clone, Copy)]
enum Shape {
    /// Each row leased, then each recorded: relayq's statements.
    RowLeases,
    /// One lease row per key (an upsert), the rows recorded from pending.
    KeyLease,
}

/// Runs both shapes `runs` times, interleaved, on `url` (relayq's schema is migrated there
/// first) and prints each one's median rows/s.
pub fn run(url: &str, runs: usize) -> Result<()> {
    // The node file of the engine that migrates the schema: gone with the directory.
    let dir = tempfile::tempdir()?;
    let mut db = relayq_engine::DbConfig::new(dir.path().join("relayq.db"));
    db.url = Some(url.to_string());
    drop(relayq_engine::Engine::open(&db)?);
    let mut client = Client::connect(url, NoTls)?;
    client.batch_execute(
        "CREATE TABLE IF NOT EXISTS bench_key_leases (
             queue TEXT, key TEXT, owner TEXT, token BIGINT NOT NULL DEFAULT 0, through BIGINT,
             expires_at BIGINT, PRIMARY KEY (queue, key))",
    )?;
    let mut rates: Vec<(Shape, Vec<f64>)> = vec![
        (Shape::RowLeases, Vec::new()),
        (Shape::KeyLease, Vec::new()),
    ];
    for _ in 0..runs {
        for (shape, seen) in rates.iter_mut() {
            load(&mut client)?;
            let started = Instant::now();
            drain(&mut client, *shape)?;
            seen.push(ROWS as f64 / started.elapsed().as_secs_f64());
            let left: i64 = client
                .query_one(
                    "SELECT COUNT(*) FROM queue_rows WHERE state <> 'delivered'",
                    &[],
                )?
                .get(0);
            anyhow::ensure!(left == 0, "{shape:?}: {left} rows not recorded");
        }
    }
    client.batch_execute("DROP TABLE bench_key_leases")?;
    client.batch_execute("TRUNCATE queue_rows")?;
    for (shape, seen) in rates {
        eprintln!(
            "{shape:?}: median {:.0} rows/s ({seen:.0?})",
            crate::median(&seen)
        );
    }
    Ok(())
}

/// A backlog of `ROWS` outbound rows over `KEYS` destinations, analyzed and checkpointed.
fn load(client: &mut Client) -> Result<()> {
    client.batch_execute(&format!(
        "TRUNCATE queue_rows RESTART IDENTITY; TRUNCATE bench_key_leases;
         INSERT INTO queue_rows (queue, key, payload, created_at, next_attempt_at)
           SELECT 'outbound', 'd' || (i % {KEYS}),
                  '{{\"channel\":\"noop\",\"to\":\"d' || (i % {KEYS}) || '\",\"text\":\"' || i || '\"}}',
                  1000, 1000
             FROM generate_series(0, {ROWS} - 1) AS i;"
    ))?;
    // Each on its own: VACUUM does not run in the implicit transaction of several statements.
    client.batch_execute("VACUUM ANALYZE queue_rows")?;
    client.batch_execute("CHECKPOINT")?;
    Ok(())
}

/// Every key's runs, the keys taking turns, each run read, leased and recorded.
fn drain(client: &mut Client, shape: Shape) -> Result<()> {
    let per_key = ROWS / KEYS;
    for first in (0..per_key).step_by(RUN) {
        for key in 0..KEYS {
            let ids: Vec<i64> = (first..(first + RUN).min(per_key))
                .map(|j| (j * KEYS + key + 1) as i64)
                .collect();
            let (from, to) = (ids[0], ids[ids.len() - 1]);
            let read = format!(
                "SELECT pg_try_advisory_xact_lock(hashtextextended('outbound/d{key}', 0));
                 SELECT id, payload FROM queue_rows
                  WHERE queue = 'outbound' AND key >= 'd{key}' AND key <= 'd{key}'
                    AND state IN ('pending', 'leased') ORDER BY key, id LIMIT {RUN};"
            );
            let list = ids.iter().map(i64::to_string).collect::<Vec<_>>().join(",");
            let (lease, record) = match shape {
                Shape::RowLeases => (
                    format!(
                        "UPDATE queue_rows SET state = 'leased', attempts = attempts + 1,
                                lease_owner = 'me', lease_token = lease_token + 1,
                                lease_expires_at = 99999999, send_started = COALESCE(5000, send_started)
                          WHERE queue = 'outbound' AND key = 'd{key}' AND state IN ('pending', 'leased')
                            AND id BETWEEN {from} AND {to}
                            AND (state = 'pending' OR lease_expires_at <= 5000);"
                    ),
                    format!(
                        "UPDATE queue_rows SET state = 'delivered', finished_at = 6000, took_ms = 1,
                                lease_owner = NULL, lease_expires_at = NULL
                          WHERE id = ANY (ARRAY[{list}]::BIGINT[]) AND state = (SELECT 'leased')
                            AND lease_token = 1;"
                    ),
                ),
                Shape::KeyLease => (
                    format!(
                        "INSERT INTO bench_key_leases (queue, key, owner, token, through, expires_at)
                         VALUES ('outbound', 'd{key}', 'me', 1, {to}, 99999999)
                         ON CONFLICT (queue, key) DO UPDATE
                            SET token = bench_key_leases.token + 1, owner = 'me', through = {to},
                                expires_at = 99999999;"
                    ),
                    format!(
                        "UPDATE queue_rows SET state = 'delivered', attempts = attempts + 1,
                                finished_at = 6000, took_ms = 1
                          WHERE id = ANY (ARRAY[{list}]::BIGINT[]) AND state = (SELECT 'pending')
                            AND id <= (SELECT through FROM bench_key_leases
                                        WHERE queue = 'outbound' AND key = 'd{key}' AND owner = 'me');"
                    ),
                ),
            };
            client.batch_execute(&format!("BEGIN; {read} {lease} COMMIT;"))?;
            client.batch_execute(&format!("BEGIN; {record} COMMIT;"))?;
        }
    }
    Ok(())
}
