//! The graphile_worker reference (the Rust crate), built and run as a child process: its sqlx
//! tree would double relayq's build, so it lives in its own Cargo project at
//! `bench/graphile-rs-ref`.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::Result;
use relayq_engine::postgres::{Client, NoTls};

/// Its best settings on the 2-core machine (tried: concurrency 10 to 100, local queue 0 to
/// 1 000, completion batches 0 to 10 ms): concurrency 100, a local queue of 100, completions
/// batched over 2 ms. Without a local queue a worker fetches one job per notification and a
/// run of 20 000 stalls.
pub const BEST: Settings = Settings {
    concurrency: 100,
    local_queue: 100,
    batch_ms: 2,
};

/// The worker's settings for a run.
pub struct Settings {
    pub concurrency: usize,
    pub local_queue: usize,
    pub batch_ms: u64,
}

/// Builds the reference (release) and returns its binary.
pub fn build(root: &Path) -> Result<PathBuf> {
    crate::reference::build(root, "graphile-rs-ref")
}

/// Jobs per second for `n` no-op jobs over `keys` named queues on the server at `url`, each
/// queue's order checked (a broken order fails the run). The job tables are emptied first.
pub fn run(bin: &Path, url: &str, n: usize, keys: usize, settings: &Settings) -> Result<f64> {
    let mut client = Client::connect(url, NoTls)?;
    // No schema yet: the first run makes it.
    let _ = client.batch_execute(
        "DELETE FROM graphile_worker._private_jobs; DELETE FROM graphile_worker._private_job_queues",
    );
    let mut command = Command::new(bin);
    command
        .arg(url)
        .args([n, keys, settings.concurrency, settings.local_queue].map(|v| v.to_string()))
        .arg(settings.batch_ms.to_string());
    crate::reference::per_sec(command)
}
