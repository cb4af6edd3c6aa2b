//! A thread of its own that reads what the nodes sharing a database wrote (channels'
//! penalties, the operator's pauses) every so often: actors ask on every send or claim, on their own threads,
//! and must not wait for the database there. Stops when dropped.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The reading thread; it stops when this is dropped.
#[derive(Debug)]
pub struct SharedReader {
    stop: Arc<AtomicBool>,
}

impl SharedReader {
    /// Runs `read` every `every` on thread `name` until dropped; `what` says, if the thread
    /// cannot start, what this node then does without.
    pub fn start(
        name: &str,
        every: Duration,
        what: &'static str,
        read: impl Fn() + Send + 'static,
    ) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let started = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                while !stopped.load(Ordering::SeqCst) {
                    read();
                    std::thread::sleep(every);
                }
            });
        if let Err(e) = started {
            tracing::warn!(error = %e, "cannot start reading {what} other nodes write; this node holds its own only");
        }
        SharedReader { stop }
    }
}

impl Drop for SharedReader {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}
