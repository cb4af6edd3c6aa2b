//! What the daemon counts as it runs, for `/metrics` (Prometheus, through the maintained
//! `prometheus-client` crate): rows written, answers recorded by outcome, delivery durations,
//! leases reclaimed, hook receiver errors. Counted where it happens, in this process: rows
//! written by another process (`relayq enqueue`, the command hook) are in the database's row
//! counts, which `/metrics` reads at each scrape, but not in `enqueued`.

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::{Family, MetricConstructor};
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::{Registry, Unit};
use relayq_engine::QueueName;

use relayq_engine::writes::runs::RowRecorded;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QueueChannel {
    pub queue: &'static str,
    pub channel: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ChannelLabel {
    pub channel: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CosmeticLabel {
    pub channel: String,
    pub outcome: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AgentLabel {
    pub agent: &'static str,
}

/// Delivery durations from 1 ms to about 33 s, doubling.
#[derive(Debug, Clone)]
pub struct DurationBuckets;

impl MetricConstructor<Histogram> for DurationBuckets {
    fn new_metric(&self) -> Histogram {
        Histogram::new(exponential_buckets(0.001, 2.0, 16))
    }
}

/// The counters; cheap to clone (each family is shared).
#[derive(Debug, Clone)]
pub struct Metrics {
    enqueued: Family<QueueChannel, Counter>,
    delivered: Family<QueueChannel, Counter>,
    retried: Family<QueueChannel, Counter>,
    dead: Family<QueueChannel, Counter>,
    expired: Family<QueueChannel, Counter>,
    throttled: Family<QueueChannel, Counter>,
    delivery_duration: Family<ChannelLabel, Histogram, DurationBuckets>,
    leases_reclaimed: Counter,
    hook_errors: Family<AgentLabel, Counter>,
    progress: Family<CosmeticLabel, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            enqueued: Family::default(),
            delivered: Family::default(),
            retried: Family::default(),
            dead: Family::default(),
            expired: Family::default(),
            throttled: Family::default(),
            delivery_duration: Family::new_with_constructor(DurationBuckets),
            leases_reclaimed: Counter::default(),
            hook_errors: Family::default(),
            progress: Family::default(),
        }
    }
}

impl Metrics {
    /// A row was written (not a duplicate) to `queue` for `channel` (a session's channel, an
    /// outbound row's channel; empty for hook events).
    pub fn enqueued(&self, queue: QueueName, channel: &str) {
        self.enqueued.get_or_create(&label(queue, channel)).inc();
    }

    /// An answer was recorded for a row of `queue` sent through `channel`.
    pub fn recorded(&self, queue: QueueName, channel: &str, recorded: &RowRecorded) {
        let family = match recorded {
            RowRecorded::Delivered => &self.delivered,
            RowRecorded::Retried(_) => &self.retried,
            RowRecorded::Dead => &self.dead,
            RowRecorded::Expired => &self.expired,
            RowRecorded::Throttled { .. } => &self.throttled,
            RowRecorded::Stale | RowRecorded::Submitted => return,
        };
        family.get_or_create(&label(queue, channel)).inc();
    }

    /// A channel answered (whatever it answered) after `took`.
    pub fn delivery_took(&self, channel: &str, took: Duration) {
        let channel = ChannelLabel {
            channel: channel.to_string(),
        };
        self.delivery_duration
            .get_or_create(&channel)
            .observe(took.as_secs_f64());
    }

    /// Leases found expired (or held by a previous process) and made pending again.
    pub fn leases_reclaimed(&self, n: usize) {
        self.leases_reclaimed.inc_by(n as u64);
    }

    /// An agent's hook input could not be kept as it came (an `error` event stands for it).
    pub fn hook_error(&self, agent: &'static str) {
        self.hook_errors.get_or_create(&AgentLabel { agent }).inc();
    }

    /// A cosmetic call (a reaction, a progress message) through `channel`: `sent`, `coalesced`
    /// (its text replaced by a later one before it went), `dropped` (given up), `shed`
    /// (held back: the platform asked to wait, or the chat's budget went to answers).
    pub fn progress(&self, channel: &str, outcome: &'static str) {
        let label = CosmeticLabel {
            channel: channel.to_string(),
            outcome,
        };
        self.progress.get_or_create(&label).inc();
    }

    /// Registers the counters in `registry` (prefixed `relayq_` by it).
    pub fn register(&self, registry: &mut Registry) {
        let families = [
            ("enqueued", "Rows written by this process", &self.enqueued),
            (
                "delivered",
                "Rows delivered (the far end confirmed)",
                &self.delivered,
            ),
            (
                "retried",
                "Failed attempts that will be retried",
                &self.retried,
            ),
            (
                "dead",
                "Rows that gave up (attempt limit, permanent failure)",
                &self.dead,
            ),
            (
                "expired",
                "Rows expired before delivery (max age, gone session)",
                &self.expired,
            ),
            (
                "throttled",
                "Attempts the far end rate-limited (not counted)",
                &self.throttled,
            ),
        ];
        for (name, help, family) in families {
            registry.register(name, help, family.clone());
        }
        registry.register_with_unit(
            "delivery_duration",
            "Time a channel took to answer one delivery",
            Unit::Seconds,
            self.delivery_duration.clone(),
        );
        registry.register(
            "leases_reclaimed",
            "Leases found expired or left by a previous process, made pending again",
            self.leases_reclaimed.clone(),
        );
        registry.register(
            "progress_calls",
            "Cosmetic calls (reactions, progress messages) by outcome: sent, coalesced, dropped, shed",
            self.progress.clone(),
        );
        registry.register(
            "hook_receiver_errors",
            "Hook inputs that could not be kept as they came (stored as error events)",
            self.hook_errors.clone(),
        );
    }
}

fn label(queue: QueueName, channel: &str) -> QueueChannel {
    QueueChannel {
        queue: queue.as_str(),
        channel: channel.to_string(),
    }
}
