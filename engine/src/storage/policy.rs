//! Per-queue policy: how a queue retries, leases, gives up and forgets.

use std::time::Duration;

/// How one queue behaves. The engine is the same for every queue; only this differs.
#[derive(Debug, Clone, PartialEq)]
pub struct QueuePolicy {
    /// Delay before attempt n+1 after n failed attempts: `backoff[min(n-1, len-1)]`.
    pub backoff: Vec<Duration>,
    /// How long a lease lasts unless extended; an expired lease may be taken over.
    pub lease_timeout: Duration,
    /// Give up (dead letter) after this many attempts; `None` retries forever.
    pub max_attempts: Option<u32>,
    /// Pending rows older than this are expired; `None` keeps them until delivered.
    pub max_age: Option<Duration>,
    /// Delivered and expired rows are deleted this long after they finished.
    pub retention: Duration,
    /// Dead rows are deleted this long after they died; `None` keeps them for an operator.
    pub dead_retention: Option<Duration>,
}

/// The policies of the three queues.
#[derive(Debug, Clone, PartialEq)]
pub struct QueuePolicies {
    pub inbound: QueuePolicy,
    pub hooks: QueuePolicy,
    pub outbound: QueuePolicy,
}

impl Default for QueuePolicies {
    fn default() -> Self {
        QueuePolicies {
            inbound: QueuePolicy::inbound(),
            hooks: QueuePolicy::hooks(),
            outbound: QueuePolicy::outbound(),
        }
    }
}

const DAY: Duration = Duration::from_secs(24 * 3600);

impl QueuePolicy {
    /// The inbound queue's defaults (inbound-queue spec): 5..300 s backoff, no attempt limit,
    /// 5 minute lease, 7 day retention.
    pub fn inbound() -> Self {
        QueuePolicy {
            backoff: secs(&[5, 10, 20, 40, 80, 160, 300]),
            lease_timeout: Duration::from_secs(300),
            max_attempts: None,
            max_age: None,
            retention: 7 * DAY,
            dead_retention: Some(30 * DAY),
        }
    }

    /// The delay before the next attempt, after `attempts` attempts have failed (at least 1).
    pub fn delay_after(&self, attempts: u32) -> Duration {
        let last = self.backoff.len().saturating_sub(1);
        let index = (attempts.max(1) as usize - 1).min(last);
        self.backoff.get(index).copied().unwrap_or_default()
    }

    /// True when a row that has been tried `attempts` times must not be tried again.
    pub fn exhausted(&self, attempts: u32) -> bool {
        self.max_attempts.is_some_and(|max| attempts >= max)
    }
}

pub(crate) fn secs(list: &[u64]) -> Vec<Duration> {
    list.iter().map(|s| Duration::from_secs(*s)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inbound_backoff_follows_the_spec_and_caps_at_300s() {
        let p = QueuePolicy::inbound();
        let got: Vec<u64> = (1..=9).map(|n| p.delay_after(n).as_secs()).collect();
        assert_eq!(got, vec![5, 10, 20, 40, 80, 160, 300, 300, 300]);
        assert!(!p.exhausted(1_000_000), "inbound never gives up");
    }

    #[test]
    fn max_attempts_exhausts_at_the_limit() {
        let p = QueuePolicy {
            max_attempts: Some(3),
            ..QueuePolicy::inbound()
        };
        assert!(!p.exhausted(2));
        assert!(p.exhausted(3));
    }
}
