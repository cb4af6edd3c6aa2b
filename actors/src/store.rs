//! The engine, seen from async code: every call runs on a blocking thread, never on the
//! executor's threads, so a slow disk or a lock held by another process stalls no actor.

use relayq_engine::{Engine, Queue};

use crate::error::{ActorError, Result};

/// The engine plus the queue handles the actors use. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Store {
    pub engine: Engine,
    pub inbound: Queue,
}

impl Store {
    pub fn new(engine: Engine, inbound: Queue) -> Self {
        Store { engine, inbound }
    }

    /// Runs `f` on tokio's blocking pool and waits for it.
    pub async fn run<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Store) -> relayq_engine::Result<T> + Send + 'static,
    {
        let store = self.clone();
        actix_rt::task::spawn_blocking(move || f(&store))
            .await
            .map_err(|e| ActorError::Blocking(e.to_string()))?
            .map_err(ActorError::from)
    }
}
