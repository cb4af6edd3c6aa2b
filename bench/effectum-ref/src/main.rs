//! effectum, measured the way relayq's benchmark measures relayq: N no-op jobs enqueued while a
//! worker runs them; the figure is N / (time from the first enqueue to the last completion).
//!
//! `effectum-ref MODE N` with MODE `best` (enqueue in batches of 100, worker concurrency 100,
//! the database in WAL mode), `best-as-shipped` (the same without forcing WAL) or `default`
//! (one enqueue per job, default worker settings, as shipped). Prints one JSON line, with the
//! journal mode the database had.
//!
//! Why WAL is forced: effectum 0.7 asks for WAL with a pragma SQLite does not know, which SQLite
//! ignores, so as shipped it runs in rollback-journal mode. Its best configuration is WAL, set
//! here on the new file before effectum opens it (the journal mode is kept in the file).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use effectum::{Job, JobRunner, Queue, RunningJob, Worker};

#[derive(Debug, Clone, Default)]
struct Done(Arc<AtomicU64>);

async fn no_op(_job: RunningJob, done: Done) -> Result<(), effectum::Error> {
    done.0.fetch_add(1, Ordering::Relaxed);
    Ok(())
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (mode, n) = match args.as_slice() {
        [_, mode, n] if ["best", "best-as-shipped", "default"].contains(&mode.as_str()) => {
            (mode.clone(), n.parse::<u64>().expect("N is a number"))
        }
        _ => {
            eprintln!("usage: effectum-ref best|best-as-shipped|default N");
            std::process::exit(2);
        }
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("effectum.db");
    if mode == "best" {
        let conn = rusqlite::Connection::open(&path).expect("create the database");
        let set: String = conn
            .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))
            .expect("set WAL");
        assert_eq!(set, "wal");
    }
    let queue = Queue::new(&path).await.expect("open queue");
    let journal: String = rusqlite::Connection::open(&path)
        .and_then(|c| c.query_row("PRAGMA journal_mode", [], |r| r.get(0)))
        .expect("read the journal mode");
    let done = Done::default();
    let runner = JobRunner::builder("noop", no_op).build();
    let mut worker = Worker::builder(&queue, done.clone()).jobs([runner]);
    if mode != "default" {
        worker = worker.max_concurrency(100);
    }
    let worker: Worker = worker.build().await.expect("worker");

    let job = |i: u64| {
        Job::builder("noop")
            .json_payload(&serde_json::json!({ "session": format!("s{}", i % 100), "seq": i }))
            .expect("payload")
            .build()
    };
    let started = Instant::now();
    if mode != "default" {
        let mut i = 0;
        while i < n {
            let batch: Vec<Job> = (i..(i + 100).min(n)).map(job).collect();
            i += batch.len() as u64;
            queue.add_jobs(batch).await.expect("add jobs");
        }
    } else {
        for i in 0..n {
            queue.add_job(job(i)).await.expect("add job");
        }
    }
    while done.0.load(Ordering::Relaxed) < n {
        tokio::time::sleep(Duration::from_micros(500)).await;
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "{}",
        serde_json::json!({ "mode": mode, "n": n, "secs": secs, "per_sec": n as f64 / secs, "journal": journal })
    );
    drop(worker);
    queue.close(Duration::from_secs(5)).await.ok();
}
