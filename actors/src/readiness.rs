//! What cannot work on this node now, and why: a channel whose platform refused its token (its
//! ready check fails), a source that keeps failing. Kept here as it changes and written with
//! each heartbeat (see [`crate::node::Membership`]), so `relayq status`, `GET /v1/status` and
//! the dashboard say it, not only the log and `/readyz`.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// What is not ready, by name (`channel tg`, `source bot`), with why.
#[derive(Debug, Clone, Default)]
pub struct Readiness(Arc<Mutex<BTreeMap<String, String>>>);

impl Readiness {
    /// `what` cannot work now, because `why`.
    pub fn not_ready(&self, what: &str, why: &str) {
        self.says(what, &format!("{what} is not ready: {why}"));
    }

    /// `what` works less than it should: `line` says how, in a person's words.
    pub fn says(&self, what: &str, line: &str) {
        let mut map = self.0.lock().expect("readiness lock");
        map.insert(what.to_string(), line.to_string());
    }

    /// `what` works again.
    pub fn ready(&self, what: &str) {
        self.0.lock().expect("readiness lock").remove(what);
    }

    /// Each thing not ready ("WHAT is not ready: WHY"), or working less than it should.
    pub fn list(&self) -> Vec<String> {
        let map = self.0.lock().expect("readiness lock");
        map.values().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_not_ready_is_listed_with_why_until_it_works_again() {
        let readiness = Readiness::default();
        readiness.not_ready("channel tg", "401 Unauthorized");
        readiness.not_ready("source bot", "getUpdates: 401 Unauthorized");
        assert_eq!(
            readiness.list(),
            [
                "channel tg is not ready: 401 Unauthorized",
                "source bot is not ready: getUpdates: 401 Unauthorized"
            ]
        );
        readiness.ready("channel tg");
        assert_eq!(readiness.list().len(), 1);
    }
}
