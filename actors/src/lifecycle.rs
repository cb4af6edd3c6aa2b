//! The two ways an actor is asked to end, one message each, shared by every actor:
//!
//! - [`Stop`]: a child (SessionActor, HookWorker, SourceActor, RecoveryActor) finishes the step
//!   in progress, gives back what it holds, stops, then answers.
//! - [`Shutdown`]: a parent (SupervisorActor, HookClaimer, OutboundSender) stops taking work,
//!   stops its children and waits for them (and its own work in flight) up to `grace`.

use std::future::Future;
use std::time::Duration;

use tokio::sync::oneshot;

/// Finish the step in progress, give back what is held, stop. Answers once stopped.
#[derive(Debug, Clone, Copy, actix::Message)]
#[rtype(result = "()")]
pub struct Stop;

/// Stop taking work; let the work in flight finish within `grace`, then answer.
#[derive(Debug, Clone, Copy, actix::Message)]
#[rtype(result = "()")]
pub struct Shutdown {
    pub grace: Duration,
}

/// Waits for every child's `Stop` answer, at most `grace`; true when all came in time.
pub async fn all_stopped<F: Future>(stops: Vec<F>, grace: Duration) -> bool {
    let all = async {
        for stop in stops {
            let _ = stop.await;
        }
    };
    tokio::time::timeout(grace, all).await.is_ok()
}

/// The callers waiting for a child to stop: each `Stop` adds one, answered when the actor's
/// `stopped` runs.
#[derive(Debug, Default)]
pub struct Stopping(Vec<oneshot::Sender<()>>);

impl Stopping {
    /// A `Stop` came: its answer, once the actor has stopped.
    pub fn wait(&mut self) -> std::pin::Pin<Box<dyn Future<Output = ()>>> {
        let (tx, rx) = oneshot::channel();
        self.0.push(tx);
        Box::pin(async move {
            let _ = rx.await;
        })
    }

    pub fn requested(&self) -> bool {
        !self.0.is_empty()
    }

    /// The actor stopped: answer every `Stop`.
    pub fn done(&mut self) {
        for tx in self.0.drain(..) {
            let _ = tx.send(());
        }
    }
}
