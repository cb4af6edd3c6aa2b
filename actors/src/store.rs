//! The engine, seen from async code: no call runs on the executor's threads, so a slow disk
//! or a lock held by another process stalls no actor. Every write is a typed request (see
//! `relayq_engine::writes`): applied in the group commit ([`Store::apply`]), or in a
//! transaction of its own on a blocking thread ([`Store::apply_alone`]: claims and upkeep,
//! which must neither hold a batch up nor wait behind one). Reads run on a blocking thread
//! ([`Store::run`]), as do the flows of several typed writes in turn the engine composes (a
//! hook row's processing) and the prune, which deletes finished rows in slices.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use relayq_engine::{Engine, NoticeRoutes, QueuePolicies, Queues, WriteDoor};
use tokio::sync::Notify;

use crate::error::{ActorError, Result};
use crate::metrics::Metrics;
use crate::pauses::{OperatorPauses, Pauses};
use crate::wake::{SocketWaking, Waking};

/// The engine plus the queue handles the actors use. Cheap to clone: one reference count, as
/// every write on the delivery path carries a clone to the commit thread.
#[derive(Debug, Clone)]
pub struct Store(Arc<Handles>);

/// What a [`Store`] holds.
#[derive(Debug)]
pub struct Handles {
    /// The engine and its queues (`store.inbound`, ... through `Deref`).
    pub queues: Queues,
    /// Runs hook rows through their handlers.
    pub door: Arc<WriteDoor>,
    /// The operator's pauses, read on every claim.
    pub pauses: Arc<dyn OperatorPauses>,
    /// What this process counts, for `/metrics`.
    pub metrics: Metrics,
    /// Tells the workers that rows were committed (see [`Waking`]).
    pub waking: Arc<dyn Waking>,
    /// What cannot work on this node now, and why.
    pub readiness: crate::readiness::Readiness,
    in_flight: Arc<InFlight>,
}

impl std::ops::Deref for Handles {
    type Target = Queues;
    fn deref(&self) -> &Queues {
        &self.queues
    }
}

impl std::ops::Deref for Store {
    type Target = Handles;
    fn deref(&self) -> &Handles {
        &self.0
    }
}

/// Calls running on blocking threads. A caller that stops waiting does not stop the call, so
/// shutdown waits on this count, not on the callers.
#[derive(Debug, Default)]
struct InFlight {
    count: AtomicUsize,
    idle: Notify,
}

/// Held by a running call; the last one out wakes `settle`.
struct Running(Arc<InFlight>);

impl Drop for Running {
    fn drop(&mut self) {
        if self.0.count.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

impl Store {
    pub fn new(engine: Engine, policies: QueuePolicies, routes: NoticeRoutes) -> Self {
        let queues = engine.queues(&policies);
        let door = WriteDoor {
            queues: queues.clone(),
            routes: routes.shared(),
        };
        let waking = Arc::new(SocketWaking::beside(engine.database().path()));
        Store(Arc::new(Handles {
            queues,
            door: Arc::new(door),
            pauses: Arc::new(Pauses::default()),
            metrics: Metrics::default(),
            waking,
            readiness: Default::default(),
            in_flight: Arc::default(),
        }))
    }

    /// Applies a reloaded configuration's queue policies and routes: rows leased and hook
    /// events applied from now on follow them.
    pub fn reconfigure(&self, policies: QueuePolicies, routes: NoticeRoutes) {
        self.inbound.set_policy(policies.inbound);
        self.hooks.set_policy(policies.hooks);
        self.outbound.set_policy(policies.outbound);
        *self.door.routes.write().expect("routes lock") = Arc::new(routes);
    }

    /// Waits until no call is running, or `limit` has passed. True when none is left.
    pub async fn settle(&self, limit: Duration) -> bool {
        let all_done = async {
            loop {
                let idle = self.in_flight.idle.notified();
                if self.in_flight.count.load(Ordering::SeqCst) == 0 {
                    return;
                }
                idle.await;
            }
        };
        tokio::time::timeout(limit, all_done).await.is_ok()
    }

    /// Applies `write` (see [`relayq_engine::writes`]) in the next group commit, with every
    /// write submitted around it; the future answers after the commit. Writes submitted in
    /// order commit in that order.
    pub fn apply<W: relayq_engine::writes::Write>(
        &self,
        write: W,
    ) -> impl std::future::Future<Output = Result<W::Output>> + 'static {
        self.in_flight.count.fetch_add(1, Ordering::SeqCst);
        // The guard is held until the answer is sent, so `settle` waits for the commit, not
        // the call.
        let answer = self.door.submit(write, Running(self.in_flight.clone()));
        async move {
            let value = answer
                .await
                .map_err(|_| ActorError::Blocking("the commit thread stopped".into()))??;
            Ok(value)
        }
    }

    /// Applies `write` now, in a transaction of its own, on tokio's blocking pool (see the
    /// module's doc); the future answers after the commit.
    pub fn apply_alone<W: relayq_engine::writes::Write>(
        &self,
        write: W,
    ) -> impl std::future::Future<Output = Result<W::Output>> + 'static {
        self.run(move |s| s.door.apply_now(write))
    }

    /// Runs `f` on tokio's blocking pool; the future answers when it is done. The future owns
    /// what it needs, so an actor can hold it across its own state changes.
    pub fn run<T, F>(&self, f: F) -> impl std::future::Future<Output = Result<T>> + 'static
    where
        T: Send + 'static,
        F: FnOnce(&Store) -> relayq_engine::Result<T> + Send + 'static,
    {
        let store = self.clone();
        self.in_flight.count.fetch_add(1, Ordering::SeqCst);
        let running = Running(self.in_flight.clone());
        async move {
            actix_rt::task::spawn_blocking(move || {
                let _running = running;
                f(&store)
            })
            .await
            .map_err(|e| ActorError::Blocking(e.to_string()))?
            .map_err(ActorError::from)
        }
    }
}
