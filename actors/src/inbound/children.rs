//! The running children of a parent actor, one per session: the SupervisorActor's
//! SessionActors and the HookClaimer's HookWorkers. Each child counts the messages sent to it;
//! a child that reports "idle, having seen N" is stopped only when N is all that was sent, since
//! otherwise a message is still on its way to it.

use std::collections::HashMap;

use actix::prelude::*;

/// One running child, and what the parent keeps about it.
pub struct Child<A: Actor, S = ()> {
    pub addr: Addr<A>,
    /// Messages sent to it that it must see before it may stop.
    pub sent: u64,
    pub state: S,
}

pub struct Children<A: Actor, S = ()> {
    running: HashMap<String, Child<A, S>>,
}

impl<A: Actor, S: Default> Default for Children<A, S> {
    fn default() -> Self {
        Children {
            running: HashMap::new(),
        }
    }
}

impl<A: Actor, S: Default> Children<A, S> {
    /// The child of `key`, started by `start` when there is none or it died (a panic closes
    /// its mailbox); `start` is told whether it replaces a dead one.
    pub fn get_or_start(
        &mut self,
        key: &str,
        start: impl FnOnce(bool) -> Addr<A>,
    ) -> &mut Child<A, S> {
        let died = self.is_dead(key);
        if died {
            tracing::warn!(key, "child actor died; starting a new one");
            self.running.remove(key);
        }
        self.running
            .entry(key.to_string())
            .or_insert_with(|| Child {
                addr: start(died),
                sent: 0,
                state: S::default(),
            })
    }

    /// A child of `key` exists and its actor died.
    pub fn is_dead(&self, key: &str) -> bool {
        self.running.get(key).is_some_and(|c| !c.addr.connected())
    }

    pub fn is_running(&self, key: &str) -> bool {
        self.running.get(key).is_some_and(|c| c.addr.connected())
    }

    pub fn get_mut(&mut self, key: &str) -> Option<&mut Child<A, S>> {
        self.running.get_mut(key)
    }

    pub fn remove(&mut self, key: &str) -> Option<Child<A, S>> {
        self.running.remove(key)
    }

    /// Removes the child of `key` if it has seen all `seen` messages sent to it.
    pub fn remove_if_settled(&mut self, key: &str, seen: u64) -> Option<Child<A, S>> {
        match self.running.get(key) {
            Some(c) if c.sent == seen => self.running.remove(key),
            _ => None,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.running.is_empty()
    }

    /// How many children are alive.
    pub fn alive(&self) -> usize {
        self.running.values().filter(|c| c.addr.connected()).count()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&String, &Child<A, S>)> {
        self.running.iter()
    }

    /// Removes every child, for a shutdown.
    pub fn drain(&mut self) -> impl Iterator<Item = Child<A, S>> + '_ {
        self.running.drain().map(|(_, c)| c)
    }
}
