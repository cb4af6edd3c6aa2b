//! The threads outbound runs are sent on: the actix thread the OutboundSender lives on, and
//! `claimer.send_threads − 1` more, each an actix [`Arbiter`].
//!
//! ```text
//!   OutboundSender (actix thread) ── claim, lease ──▶ a run of one destination's rows
//!        │ spawn on the thread with the fewest runs under way
//!        ├──▶ thread 0 (its own): destination sender ─▶ channel actor ─▶ connections of thread 0
//!        └──▶ thread 1 (arbiter): destination sender ─▶ channel actor ─▶ connections of thread 1
//!   each sender's answers ──▶ commit thread; its end (DestinationDone) ──▶ OutboundSender
//! ```
//!
//! A run's sends never cross threads: each thread has its own channel actors
//! ([`ChannelDirectory::get`](crate::channels::ChannelDirectory::get)) and its own HTTP
//! connections (the kit's `Transport`), since a request handed to a connection living on another
//! thread costs a wake-up of that thread per request. One thread sending every run was the
//! outbound benchmark's limit: 18 µs of CPU per row on it, most of it loopback TCP and hyper.

use actix::{Arbiter, ArbiterHandle};

/// The extra send threads and how many runs each has under way.
pub struct SendThreads {
    /// Threads 1.. (thread 0 is the caller's own).
    others: Vec<ArbiterHandle>,
    /// Runs under way per thread, thread 0 first.
    runs: Vec<usize>,
    /// The extra threads were stopped: only the caller's own is picked.
    stopped: bool,
}

/// A send thread, as [`SendThreads::pick`] chose it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendThread(usize);

impl SendThreads {
    /// Starts `threads − 1` arbiters beside the caller's thread (`threads` at least 1). Must run
    /// inside an actix system.
    pub fn start(threads: usize) -> Self {
        let threads = threads.clamp(1, crate::claiming::MAX_SEND_THREADS);
        SendThreads {
            others: (1..threads).map(|_| Arbiter::new().handle()).collect(),
            runs: vec![0; threads],
            stopped: false,
        }
    }

    /// The thread with the fewest runs under way (the caller's own on a tie), counted as
    /// running one more until [`done`](Self::done).
    pub fn pick(&mut self) -> SendThread {
        let threads = if self.stopped { 1 } else { self.runs.len() };
        let (i, _) = self.runs[..threads]
            .iter()
            .enumerate()
            .min_by_key(|(_, runs)| **runs)
            .expect("at least one thread");
        self.runs[i] += 1;
        SendThread(i)
    }

    /// Runs `start` on `thread`: at once on the caller's own, else on that arbiter, where it
    /// spawns what it sends (a future that need not be `Send`). False when that arbiter has
    /// stopped: `start` did not run, and the caller counts the run as ended.
    #[must_use]
    pub fn run_on(&self, thread: SendThread, start: impl FnOnce() + Send + 'static) -> bool {
        match thread.0 {
            0 => {
                start();
                true
            }
            i => self.others[i - 1].spawn_fn(start),
        }
    }

    /// A run on `thread` ended.
    pub fn done(&mut self, thread: SendThread) {
        self.runs[thread.0] = self.runs[thread.0].saturating_sub(1);
    }

    /// Stops the extra threads; what still runs on them is dropped (its rows are tried again
    /// when their leases expire).
    pub fn stop(&mut self) {
        self.stopped = true;
        for arbiter in &self.others {
            arbiter.stop();
        }
    }
}

impl Drop for SendThreads {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[actix::test]
    async fn a_run_goes_to_the_thread_with_the_fewest_runs_the_own_thread_first() {
        let mut threads = SendThreads::start(3);
        let (a, b, c) = (threads.pick(), threads.pick(), threads.pick());
        assert_eq!((a, b, c), (SendThread(0), SendThread(1), SendThread(2)));
        threads.done(b);
        assert_eq!(threads.pick(), SendThread(1), "the one with room");
        assert_eq!(threads.pick(), SendThread(0), "all even: the own thread");
        threads.stop();
    }

    #[actix::test]
    async fn a_run_started_on_another_thread_runs_there() {
        let mut threads = SendThreads::start(2);
        let here = std::thread::current().id();
        let (_, other) = (threads.pick(), threads.pick());
        let (tx, rx) = tokio::sync::oneshot::channel();
        let started = threads.run_on(other, move || {
            let _ = tx.send(std::thread::current().id());
        });
        assert!(started);
        assert_ne!(rx.await.unwrap(), here);
        threads.stop();
        assert_eq!(
            threads.pick(),
            SendThread(0),
            "stopped: only the own thread"
        );
    }
}
