//! Per-queue policy: how a queue retries, leases, gives up and forgets, and how it is written
//! in `config.toml` (`[queues.inbound]`, `[queues.hooks]`, `[queues.outbound]`): each setting
//! left out keeps that queue's default.

use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::settings::{check_duration, SettingError};

/// How one queue behaves. The engine is the same for every queue; only this differs.
#[derive(Debug, Clone, PartialEq)]
pub struct QueuePolicy {
    /// Delay before attempt n+1 after n failed attempts: `backoff[min(n-1, len-1)]`.
    pub backoff: Vec<Duration>,
    /// How long a lease lasts unless extended; an expired lease may be taken over.
    pub lease_timeout: Duration,
    /// Give up (dead letter) after this many attempts; `None` retries forever.
    pub max_attempts: Option<u32>,
    /// How old a row may be when it is tried; what happens past it is `expire_action`.
    /// `None`: no limit.
    pub max_age: Option<Duration>,
    /// What becomes of a row past `max_age`.
    pub expire_action: ExpireAction,
    /// Delivered and expired rows are deleted this long after they finished.
    pub retention: Duration,
    /// Dead rows are deleted this long after they died; `None` keeps them for an operator.
    pub dead_retention: Option<Duration>,
    /// Most unfinished (pending or leased) rows in the queue; an enqueue past it is refused
    /// (`QueueFull`), nothing written. `None`: no limit.
    pub max_depth: Option<u64>,
    /// Most unfinished rows of one key (a session, a destination); `None`: no limit.
    pub max_key_depth: Option<u64>,
    /// Which kinds of row (the payload's `kind`, `final` when it has none) a new daemon sends
    /// when it finds them left from before it started; the others (progress, streaming parts)
    /// end as expired, reason `superseded`. `None`: every row is sent.
    pub replay_kinds: Option<Vec<String>>,
}

/// What becomes of a row older than its queue's `max_age`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ExpireAction {
    /// It is not sent: it ends as expired, reason `max age`, counted by `relayq status`.
    #[default]
    Expire,
    /// It is sent however late (`max_age` then only names what counts as late).
    Deliver,
}

/// The policies of the three queues.
#[derive(Debug, Clone, PartialEq)]
pub struct QueuePolicies {
    pub inbound: QueuePolicy,
    pub hooks: QueuePolicy,
    pub outbound: QueuePolicy,
}

/// The durations a queue setting may take: below the minimum the daemon misbehaves (see the
/// reason), above the maximum a setting is surely a typo.
pub const LEASE_TIMEOUT_RANGE: (Duration, Duration) =
    (Duration::from_secs(1), Duration::from_secs(24 * 3600));
/// The longest delay a backoff may list.
pub const MAX_BACKOFF: Duration = Duration::from_secs(30 * 24 * 3600);
/// The longest a row may be kept.
pub const MAX_KEEP: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

impl QueuePolicies {
    /// What the file alone can tell; keys within `[queues]`.
    pub fn check(&self) -> Result<(), SettingError> {
        for (name, policy) in self.each() {
            policy.check(name).map_err(|e| e.within(name))?;
        }
        Ok(())
    }

    /// The three policies with their queues' names.
    pub fn each(&self) -> [(&'static str, &QueuePolicy); 3] {
        [
            ("inbound", &self.inbound),
            ("hooks", &self.hooks),
            ("outbound", &self.outbound),
        ]
    }
}

impl QueuePolicy {
    /// What the file alone can tell of queue `queue`'s policy; keys within its table.
    fn check(&self, queue: &str) -> Result<(), SettingError> {
        match (queue, &self.replay_kinds) {
            ("outbound", Some(kinds)) => {
                if let Some(bad) = kinds
                    .iter()
                    .find(|k| !["final", "block", "tool"].contains(&k.as_str()))
                {
                    return Err(SettingError::new(
                        "replay_kinds",
                        format!("{bad:?} is not a kind of message: use \"final\", \"block\" and \"tool\""),
                    ));
                }
            }
            (_, None) => {}
            (_, Some(_)) => {
                return Err(SettingError::new(
                    "replay_kinds",
                    "only outbound messages have kinds: set replay_kinds in [queues.outbound]",
                ))
            }
        }
        if queue == "hooks" && (self.max_depth.is_some() || self.max_key_depth.is_some()) {
            return Err(SettingError::new(
                "max_depth",
                "hook events are never refused (the agent cannot send them again): leave max_depth and max_key_depth out of [queues.hooks]",
            ));
        }
        if self.backoff.is_empty() {
            return Err(SettingError::new(
                "backoff",
                "must list at least one delay, e.g. [\"5s\", \"10s\"]",
            ));
        }
        check_duration(
            "lease_timeout",
            self.lease_timeout,
            LEASE_TIMEOUT_RANGE,
            "a lease is renewed every third of it while a delivery runs; shorter ones \
             expire under a busy disk and the row is delivered twice",
        )?;
        for delay in &self.backoff {
            check_duration("backoff", *delay, (Duration::ZERO, MAX_BACKOFF), "")?;
        }
        for (key, value) in [
            ("max_age", self.max_age),
            ("retention", Some(self.retention)),
            ("dead_retention", self.dead_retention),
        ] {
            if let Some(value) = value {
                check_duration(key, value, (Duration::ZERO, MAX_KEEP), "")?;
            }
        }
        Ok(())
    }
}

impl<'de> Deserialize<'de> for QueuePolicies {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let file = PoliciesFile::deserialize(d)?;
        let base = QueuePolicies::default();
        Ok(QueuePolicies {
            inbound: file.inbound.apply(base.inbound),
            hooks: file.hooks.apply(base.hooks),
            outbound: file.outbound.apply(base.outbound),
        })
    }
}

impl Serialize for QueuePolicies {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        PoliciesFile {
            inbound: PolicyFile::from(&self.inbound),
            hooks: PolicyFile::from(&self.hooks),
            outbound: PolicyFile::from(&self.outbound),
        }
        .serialize(s)
    }
}

/// The three queues' tables as written in the file.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
struct PoliciesFile {
    inbound: PolicyFile,
    hooks: PolicyFile,
    outbound: PolicyFile,
}

/// A queue's settings as written in the file; each one left out keeps that queue's default.
/// `max_attempts = 0` never gives up; `max_age = "0s"` never expires.
#[derive(Debug, Clone, PartialEq, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
struct PolicyFile {
    backoff: Option<Vec<humantime_serde::Serde<Duration>>>,
    #[serde(with = "humantime_serde")]
    lease_timeout: Option<Duration>,
    max_attempts: Option<u32>,
    #[serde(with = "humantime_serde")]
    max_age: Option<Duration>,
    expire_action: Option<ExpireAction>,
    #[serde(with = "humantime_serde")]
    retention: Option<Duration>,
    #[serde(with = "humantime_serde")]
    dead_retention: Option<Duration>,
    max_depth: Option<u64>,
    max_key_depth: Option<u64>,
    replay_kinds: Option<Vec<String>>,
}

impl PolicyFile {
    /// `base` with this file's settings applied.
    fn apply(self, base: QueuePolicy) -> QueuePolicy {
        QueuePolicy {
            backoff: match self.backoff {
                Some(list) => list.into_iter().map(|d| *d).collect(),
                None => base.backoff,
            },
            lease_timeout: self.lease_timeout.unwrap_or(base.lease_timeout),
            max_attempts: match self.max_attempts {
                Some(0) => None,
                Some(n) => Some(n),
                None => base.max_attempts,
            },
            max_age: match self.max_age {
                Some(d) if d.is_zero() => None,
                Some(d) => Some(d),
                None => base.max_age,
            },
            expire_action: self.expire_action.unwrap_or(base.expire_action),
            retention: self.retention.unwrap_or(base.retention),
            dead_retention: self.dead_retention.or(base.dead_retention),
            max_depth: limit(self.max_depth, base.max_depth),
            max_key_depth: limit(self.max_key_depth, base.max_key_depth),
            replay_kinds: self.replay_kinds.or(base.replay_kinds),
        }
    }
}

/// A limit as written in the file: 0 is none; left out keeps `base`.
fn limit(file: Option<u64>, base: Option<u64>) -> Option<u64> {
    match file {
        Some(0) => None,
        Some(n) => Some(n),
        None => base,
    }
}

impl From<&QueuePolicy> for PolicyFile {
    /// Every setting written out, in the file's conventions.
    fn from(p: &QueuePolicy) -> Self {
        PolicyFile {
            backoff: Some(p.backoff.iter().map(|d| (*d).into()).collect()),
            lease_timeout: Some(p.lease_timeout),
            max_attempts: Some(p.max_attempts.unwrap_or(0)),
            max_age: Some(p.max_age.unwrap_or_default()),
            expire_action: Some(p.expire_action),
            retention: Some(p.retention),
            dead_retention: p.dead_retention,
            max_depth: Some(p.max_depth.unwrap_or(0)),
            max_key_depth: Some(p.max_key_depth.unwrap_or(0)),
            replay_kinds: p.replay_kinds.clone(),
        }
    }
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
            expire_action: ExpireAction::Expire,
            retention: 7 * DAY,
            dead_retention: Some(30 * DAY),
            max_depth: None,
            max_key_depth: None,
            replay_kinds: None,
        }
    }

    /// The delay before the next attempt, after `attempts` attempts have failed (at least 1).
    pub fn delay_after(&self, attempts: u32) -> Duration {
        let last = self.backoff.len().saturating_sub(1);
        let index = (attempts.max(1) as usize - 1).min(last);
        self.backoff.get(index).copied().unwrap_or_default()
    }

    /// The age past which a row is expired instead of tried: `max_age` when the action is
    /// `expire`.
    pub fn expires_after(&self) -> Option<Duration> {
        match self.expire_action {
            ExpireAction::Expire => self.max_age,
            ExpireAction::Deliver => None,
        }
    }

    /// True when a row written at `created_at` is past its max age at `now` (unix ms) and is
    /// to be expired rather than delivered.
    pub fn too_old(&self, created_at: i64, now: i64) -> bool {
        self.expires_after()
            .is_some_and(|age| created_at < now.saturating_sub(crate::storage::clock::ms(age)))
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
    fn a_file_sets_only_what_it_names_and_shows_everything() {
        let p: QueuePolicies =
            serde_json::from_str(r#"{"hooks": {"max_attempts": 0, "backoff": ["1s"]}}"#).unwrap();
        assert_eq!(p.inbound, QueuePolicy::inbound());
        assert_eq!(p.hooks.max_attempts, None);
        assert_eq!(p.hooks.backoff, vec![Duration::from_secs(1)]);
        assert_eq!(p.hooks.lease_timeout, QueuePolicy::hooks().lease_timeout);
        let shown = serde_json::to_value(&p).unwrap();
        assert_eq!(shown["hooks"]["max_attempts"], 0);
        assert_eq!(shown["inbound"]["lease_timeout"], "5m");
        let again: QueuePolicies = serde_json::from_value(shown).unwrap();
        assert_eq!(again, p, "what is shown reads back the same");
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
