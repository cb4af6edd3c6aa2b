//! The operator's pauses as the claimers read them: on every claim, so they are kept in
//! memory here, and in the `pauses` table (see [`relayq_engine::pauses`]) so they hold across
//! a restart. A paused queue or key gets no new leases; deliveries under way finish. Daemons
//! sharing a database read the table as they go ([`SharedPauses`]): a pause set on one node
//! holds on every node.

use std::collections::BTreeSet;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use relayq_engine::pauses::Pause;
use relayq_engine::QueueName;

/// What the claimers and sessions ask of the operator's pauses, on every claim: [`Pauses`]
/// keeps them in this process's memory, read from the table at start and changed by this
/// daemon's API, and on a shared database by [`SharedPauses`] from what every node wrote.
pub trait OperatorPauses: Send + Sync + std::fmt::Debug + 'static {
    /// Takes the pauses read from the table at start.
    fn load(&self, stored: Vec<Pause>);
    /// Takes the table as it is now, whoever wrote it; answers what is no longer paused (its
    /// workers are to be woken).
    fn replace(&self, stored: Vec<Pause>) -> Vec<Paused>;
    /// `queue`'s `key` (the whole queue when `None`) is paused, or no longer.
    fn set(&self, queue: QueueName, key: Option<String>, paused: bool);
    /// Whether the whole queue is paused.
    fn queue(&self, queue: QueueName) -> bool;
    /// Whether `key`'s rows wait: it, or its queue, is paused.
    fn holds(&self, queue: QueueName, key: &str) -> bool;
    /// The paused keys of `queue` (a claim's skip list).
    fn keys(&self, queue: QueueName) -> Vec<String>;
}

/// One thing paused: a queue's key, or the whole queue (no key).
pub type Paused = (QueueName, Option<String>);

/// Today's [`OperatorPauses`]: what is paused, in this process's memory.
#[derive(Debug, Clone, Default)]
pub struct Pauses(Arc<RwLock<BTreeSet<Paused>>>);

impl OperatorPauses for Pauses {
    fn load(&self, stored: Vec<Pause>) {
        let mut set = self.0.write().expect("pauses lock");
        set.extend(stored.into_iter().map(|p| (p.queue, p.key)));
    }

    fn replace(&self, stored: Vec<Pause>) -> Vec<Paused> {
        let now: BTreeSet<Paused> = stored.into_iter().map(|p| (p.queue, p.key)).collect();
        let mut set = self.0.write().expect("pauses lock");
        let was = std::mem::replace(&mut *set, now);
        was.difference(&set).cloned().collect()
    }

    fn set(&self, queue: QueueName, key: Option<String>, paused: bool) {
        let mut set = self.0.write().expect("pauses lock");
        match paused {
            true => set.insert((queue, key)),
            false => set.remove(&(queue, key)),
        };
    }

    fn queue(&self, queue: QueueName) -> bool {
        self.0.read().expect("pauses lock").contains(&(queue, None))
    }

    fn holds(&self, queue: QueueName, key: &str) -> bool {
        let set = self.0.read().expect("pauses lock");
        // Most of the time nothing is paused: no key is copied to find that out.
        !set.is_empty()
            && (set.contains(&(queue, None)) || set.contains(&(queue, Some(key.to_string()))))
    }

    fn keys(&self, queue: QueueName) -> Vec<String> {
        let set = self.0.read().expect("pauses lock");
        set.iter()
            .filter(|(q, _)| *q == queue)
            .filter_map(|(_, k)| k.clone())
            .collect()
    }
}

/// How often [`SharedPauses`] reads the table.
pub const SHARED_PAUSES_READ_EVERY: Duration = Duration::from_millis(250);

/// Reads the `pauses` table every [`SHARED_PAUSES_READ_EVERY`] on a thread of its own, for
/// daemons sharing one database: claimers ask on every claim, on the actors' threads, and must
/// not wait for the database there. What another node resumed is handed to `resumed`, to wake
/// its workers. Stops when dropped.
#[derive(Debug)]
pub struct SharedPauses {
    _reader: crate::shared_reader::SharedReader,
}

impl SharedPauses {
    /// Follows the pauses other nodes set into `pauses`, on a database several daemons share;
    /// `None` on one a daemon serves alone (its own API is the only one that sets them).
    pub fn follow(
        engine: relayq_engine::Engine,
        pauses: Arc<dyn OperatorPauses>,
        resumed: impl Fn(Paused) + Send + 'static,
    ) -> Option<Self> {
        engine
            .database()
            .is_shared()
            .then(|| Self::start(engine, pauses, resumed))
    }

    fn start(
        engine: relayq_engine::Engine,
        pauses: Arc<dyn OperatorPauses>,
        resumed: impl Fn(Paused) + Send + 'static,
    ) -> Self {
        let read = move || match engine.pauses() {
            Ok(stored) => pauses.replace(stored).into_iter().for_each(&resumed),
            Err(e) => tracing::warn!(error = %e, "cannot read the pauses other nodes set"),
        };
        SharedPauses {
            _reader: crate::shared_reader::SharedReader::start(
                "relayq-pauses",
                SHARED_PAUSES_READ_EVERY,
                "the operator's pauses",
                read,
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_queue_pause_holds_every_key_and_a_key_pause_only_its_own() {
        let pauses = Pauses::default();
        pauses.set(QueueName::Outbound, Some("a".into()), true);
        assert!(pauses.holds(QueueName::Outbound, "a"));
        assert!(!pauses.holds(QueueName::Outbound, "b"));
        assert!(
            !pauses.holds(QueueName::Inbound, "a"),
            "another queue's key"
        );
        pauses.set(QueueName::Outbound, None, true);
        assert!(pauses.holds(QueueName::Outbound, "b") && pauses.queue(QueueName::Outbound));
        pauses.set(QueueName::Outbound, None, false);
        assert_eq!(pauses.keys(QueueName::Outbound), ["a"]);
    }
}
