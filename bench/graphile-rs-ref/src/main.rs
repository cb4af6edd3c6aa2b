//! graphile_worker (the Rust crate), measured the way relayq's PostgreSQL benchmark measures
//! relayq: N no-op jobs, job `i` in the named queue `k{i % KEYS}` (graphile_worker runs a
//! queue's jobs one at a time, in order: per-key FIFO), added 100 per `add_jobs` call while the
//! worker runs; the figure is N / (time from the first add to the last job done), after
//! checking that each queue's jobs ran in order.
//!
//! `graphile-rs-ref URL N KEYS CONCURRENCY LOCAL_QUEUE BATCH_MS`: LOCAL_QUEUE is the size of
//! the worker's local queue (0: none; then a worker fetches one job per notification or poll,
//! and a run of 20 000 stalls), BATCH_MS the delay over which completions are batched (0: each
//! on its own). Notifications on (the worker hears new jobs by LISTEN/NOTIFY). Prints one JSON
//! line. Its best on a 2-core machine: concurrency 100, local queue 100, batches of 2 ms.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use graphile_worker::{
    IntoTaskHandlerResult, JobSpec, LocalQueueConfig, TaskHandler, WorkerContext, WorkerOptions,
};
use serde::{Deserialize, Serialize};

/// Each queue's last sequence number run, and the first order break seen.
#[derive(Default)]
struct Order {
    last: HashMap<u32, u32>,
    broken: Option<String>,
}

static LAST: OnceLock<Mutex<Order>> = OnceLock::new();
static DONE: AtomicUsize = AtomicUsize::new(0);

#[derive(Clone, Deserialize, Serialize)]
struct NoOp {
    k: u32,
    s: u32,
}

impl TaskHandler for NoOp {
    const IDENTIFIER: &'static str = "noop";

    async fn run(self, _ctx: WorkerContext) -> impl IntoTaskHandlerResult {
        let mut last = LAST.get_or_init(Default::default).lock().unwrap();
        if let Some(prev) = last.last.insert(self.k, self.s) {
            if self.s <= prev && last.broken.is_none() {
                last.broken = Some(format!(
                    "queue k{}: job {} ran after {prev}",
                    self.k, self.s
                ));
            }
        }
        DONE.fetch_add(1, Ordering::Relaxed);
        Ok::<(), String>(())
    }
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, url, n, keys, concurrency, local, batch_ms] = args.as_slice() else {
        eprintln!("usage: graphile-rs-ref URL N KEYS CONCURRENCY LOCAL_QUEUE BATCH_MS");
        std::process::exit(2);
    };
    let number = |s: &str| s.parse::<usize>().expect("a number");
    let (n, keys, concurrency) = (number(n), number(keys), number(concurrency));
    let (local, batch_ms) = (number(local), number(batch_ms));

    let mut options = WorkerOptions::default()
        .database_url(url)
        .max_pg_conn(concurrency as u32 + 4)
        .concurrency(concurrency)
        .listen_os_shutdown_signals(false)
        .define_job::<NoOp>();
    if batch_ms > 0 {
        options = options.complete_job_batch_delay(Duration::from_millis(batch_ms as u64));
    }
    if local > 0 {
        options = options.local_queue(LocalQueueConfig::default().with_size(local));
    }
    // The caller empties the job tables before each run (jobs an earlier run left would run).
    let worker = std::sync::Arc::new(options.init().await.expect("graphile_worker init"));
    let utils = worker.create_utils();
    let runner = {
        let worker = worker.clone();
        tokio::spawn(async move { worker.run().await })
    };
    let started = Instant::now();
    // A queue runs its jobs by run_at (then priority), not by id: jobs added in one call share
    // the transaction's now(), and ran out of order. Each job gets its own run_at, a
    // microsecond after the one before, all in the past (runnable at once).
    let first = chrono::Utc::now() - chrono::Duration::seconds(1);
    for from in (0..n).step_by(100) {
        let specs: Vec<JobSpec> = (from..(from + 100).min(n))
            .map(|i| JobSpec {
                queue_name: Some(format!("k{}", i % keys)),
                run_at: Some(first + chrono::Duration::microseconds(i as i64)),
                ..Default::default()
            })
            .collect();
        let jobs: Vec<(NoOp, &JobSpec)> = (from..(from + 100).min(n))
            .zip(&specs)
            .map(|(i, spec)| {
                let job = NoOp {
                    k: (i % keys) as u32,
                    s: (i / keys) as u32,
                };
                (job, spec)
            })
            .collect();
        utils.add_jobs(&jobs).await.expect("add_jobs");
    }
    while DONE.load(Ordering::Relaxed) < n {
        if LAST
            .get_or_init(Default::default)
            .lock()
            .unwrap()
            .broken
            .is_some()
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let secs = started.elapsed().as_secs_f64();
    worker.request_shutdown();
    let _ = tokio::time::timeout(Duration::from_secs(10), runner).await;
    if let Some(broken) = LAST
        .get_or_init(Default::default)
        .lock()
        .unwrap()
        .broken
        .clone()
    {
        eprintln!("FIFO broken: {broken}");
        std::process::exit(3);
    }
    println!(
        "{}",
        serde_json::json!({"per_sec": n as f64 / secs, "n": n, "keys": keys,
                           "concurrency": concurrency, "local_queue": local,
                           "batch_ms": batch_ms})
    );
}
