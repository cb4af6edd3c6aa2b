//! Scenarios that run relayq's own binary as a child process: the hook receiver's wall time,
//! and the idle daemon's memory.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use relayq_engine::{DbConfig, Engine, InboundMessage, NewRow, QueuePolicy};

/// Wall time in milliseconds of each of `runs` runs of `relayq hook --agent claude` with
/// `payload` on stdin, daemon not running (the receiver only persists), from spawn to exit.
/// Checks afterwards that every run wrote its row.
pub fn hook_wall_times(relayq: &Path, runs: usize, payload: &[u8]) -> Result<Vec<f64>> {
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("relayq.db");
    let run = || -> Result<f64> {
        let started = Instant::now();
        let mut child = Command::new(relayq)
            .current_dir(dir.path())
            .arg("--db")
            .arg(&db)
            .args(["hook", "--agent", "claude"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()?;
        child.stdin.take().expect("piped").write_all(payload)?;
        let out = child.wait_with_output()?;
        let ms = started.elapsed().as_secs_f64() * 1e3;
        ensure!(
            out.status.success(),
            "relayq hook failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(ms)
    };
    run()?; // creates the database; not counted
    let times = (0..runs).map(|_| run()).collect::<Result<Vec<_>>>()?;
    let rows: i64 = rusqlite::Connection::open(&db)?.query_row(
        "SELECT COUNT(*) FROM queue_rows WHERE queue = 'hooks'",
        [],
        |r| r.get(0),
    )?;
    ensure!(
        rows as usize == runs + 1,
        "expected {} hook rows, found {rows}",
        runs + 1
    );
    Ok(times)
}

/// The daemon's memory once idle after delivering one message to each of `sessions` sessions.
pub struct Memory {
    pub rss_mb: f64,
    pub peak_mb: f64,
}

/// Writes one inbound row for each of `sessions` sessions, starts `relayq serve` on them,
/// waits until all are delivered and the daemon has settled, and reads its memory.
pub fn idle_daemon(relayq: &Path, sessions: usize) -> Result<Memory> {
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("relayq.db");
    {
        let engine = Engine::open(&DbConfig::new(&db))?;
        let inbound = engine.queue(relayq_engine::inbound::QUEUE, QueuePolicy::inbound());
        let rows: Vec<NewRow> = (0..sessions)
            .map(|s| InboundMessage::text(&format!("s{s}"), "bench", "hello").to_row())
            .collect();
        inbound.enqueue_many(&rows)?;
    }
    let mut daemon = Command::new(relayq)
        .current_dir(dir.path())
        .arg("--db")
        .arg(&db)
        .arg("serve")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    let result = (|| {
        let conn = rusqlite::Connection::open(&db)?;
        let deadline = Instant::now() + Duration::from_secs(300);
        loop {
            let done: i64 = conn.query_row(
                "SELECT COUNT(*) FROM queue_rows WHERE queue = 'inbound' AND state = 'delivered'",
                [],
                |r| r.get(0),
            )?;
            if done as usize == sessions {
                break;
            }
            ensure!(
                Instant::now() < deadline,
                "only {done} of {sessions} delivered after 300 s"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        std::thread::sleep(Duration::from_secs(3)); // idle: session actors stop, buffers drain
        let status = std::fs::read_to_string(format!("/proc/{}/status", daemon.id()))
            .context("reading the daemon's /proc status")?;
        let kb = |field: &str| -> Result<f64> {
            let line = status
                .lines()
                .find(|l| l.starts_with(field))
                .with_context(|| format!("{field} missing from /proc status"))?;
            Ok(line
                .split_whitespace()
                .nth(1)
                .context("malformed /proc status")?
                .parse::<f64>()?)
        };
        Ok(Memory {
            rss_mb: kb("VmRSS:")? / 1024.0,
            peak_mb: kb("VmHWM:")? / 1024.0,
        })
    })();
    let _ = Command::new("kill").arg(daemon.id().to_string()).status();
    let _ = daemon.wait();
    result
}
