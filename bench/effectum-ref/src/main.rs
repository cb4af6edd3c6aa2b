//! effectum, measured the way relayq's benchmark measures relayq: N no-op jobs enqueued while a
//! worker runs them; the figure is N / (time from the first enqueue to the last completion).
//!
//! `effectum-ref MODE N` with MODE `best` (enqueue in batches of 100, worker concurrency 100)
//! or `default` (one enqueue per job, default worker settings). Prints one JSON line.

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
        [_, mode, n] if mode == "best" || mode == "default" => {
            (mode.clone(), n.parse::<u64>().expect("N is a number"))
        }
        _ => {
            eprintln!("usage: effectum-ref best|default N");
            std::process::exit(2);
        }
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let queue = Queue::new(&dir.path().join("effectum.db"))
        .await
        .expect("open queue");
    let done = Done::default();
    let runner = JobRunner::builder("noop", no_op).build();
    let mut worker = Worker::builder(&queue, done.clone()).jobs([runner]);
    if mode == "best" {
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
    if mode == "best" {
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
        serde_json::json!({ "mode": mode, "n": n, "secs": secs, "per_sec": n as f64 / secs })
    );
    drop(worker);
    queue.close(Duration::from_secs(5)).await.ok();
}
