//! Channels' penalties: the far end asked for quiet (a channel-wide 429), or the breaker
//! opened, and until when, as senders ask on every send. Also written to the `channel_penalties` table
//! (see `relayq_engine::penalties`) so a penalty holds across a restart.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What senders ask of the channels' penalties: [`LocalPenalties`] keeps them in this process's
/// memory, read from the table at start; when several daemons share the database,
/// [`SharedPenalties`] also reads the table as it goes, so a 429 one node got holds for all.
pub trait ChannelPenalties: Send + Sync + std::fmt::Debug + 'static {
    /// Channel `name` gets a penalty of `wait` (a longer one already set stays).
    fn penalize(&self, name: &str, wait: Duration);
    /// How long channel `name`'s penalty still runs, if it has one.
    fn penalty(&self, name: &str) -> Option<Duration>;
}

/// Today's [`ChannelPenalties`]: until when each channel's penalty runs, in this process's memory.
#[derive(Debug, Clone, Default)]
pub struct LocalPenalties(Arc<Mutex<HashMap<String, Instant>>>);

impl ChannelPenalties for LocalPenalties {
    fn penalize(&self, name: &str, wait: Duration) {
        let until = Instant::now() + wait;
        let mut paused = self.0.lock().unwrap();
        let entry = paused.entry(name.to_string()).or_insert(until);
        *entry = (*entry).max(until);
    }

    fn penalty(&self, name: &str) -> Option<Duration> {
        let paused = self.0.lock().unwrap();
        let left = paused.get(name)?.checked_duration_since(Instant::now())?;
        (!left.is_zero()).then_some(left)
    }
}

/// How often [`SharedPenalties`] reads the table.
const SHARED_PENALTIES_READ_EVERY: Duration = Duration::from_millis(500);

/// [`ChannelPenalties`] of daemons sharing one database: this node's own, and those every node
/// wrote to the `channel_penalties` table (with the answer that caused them), which a thread of
/// its own reads every [`SHARED_PENALTIES_READ_EVERY`]: senders ask on every send, on the
/// actors' threads, and must not wait for the database there.
#[derive(Debug)]
pub struct SharedPenalties {
    local: LocalPenalties,
    _reader: crate::shared_reader::SharedReader,
}

impl SharedPenalties {
    pub fn new(engine: relayq_engine::Engine) -> Self {
        let local = LocalPenalties::default();
        let seen = local.clone();
        let reader = crate::shared_reader::SharedReader::start(
            "relayq-penalties",
            SHARED_PENALTIES_READ_EVERY,
            "the channel pauses",
            move || read_into(&engine, &seen),
        );
        SharedPenalties {
            local,
            _reader: reader,
        }
    }
}

/// The penalties every node wrote, into `local`.
fn read_into(engine: &relayq_engine::Engine, local: &LocalPenalties) {
    match engine.channel_penalties_left() {
        Ok(left) => {
            for (channel, ms) in left {
                local.penalize(&channel, Duration::from_millis(ms.max(0) as u64));
            }
        }
        Err(e) => tracing::warn!(error = %e, "cannot read the channels' pauses other nodes wrote"),
    }
}

impl ChannelPenalties for SharedPenalties {
    fn penalize(&self, name: &str, wait: Duration) {
        self.local.penalize(name, wait);
    }

    fn penalty(&self, name: &str) -> Option<Duration> {
        self.local.penalty(name)
    }
}

#[cfg(test)]
mod shared_tests {
    use super::*;
    use relayq_engine::storage::test_db::TestDb;
    use relayq_engine::{Engine, SystemClock};

    /// A 429 another node recorded (a channel-wide limit on one of its sends, written with
    /// the send's answer, as its sender writes it) holds here within the read interval,
    /// without this node's senders asking the database.
    #[test]
    fn a_pause_another_node_wrote_holds_here() {
        use relayq_engine::writes::runs::{Answered, ChannelPenalty, RecordAnswer, Then};
        use relayq_engine::{NewRow, Outcome, QueueName, WriteDoor};
        let pg = TestDb::postgres();
        let engine = Engine::with_clock(pg.db.clone(), Arc::new(SystemClock));
        let here = SharedPenalties::new(engine.clone());
        assert_eq!(here.penalty("tg"), None);
        // The other node's send of an outbound row, answered 429 for the whole bot.
        let other = WriteDoor::new(engine.queues(&Default::default()), Default::default());
        let row = NewRow {
            key: "tg:42".into(),
            payload: "{}".into(),
            dedup_key: None,
        };
        other.outbound.enqueue(&row).unwrap();
        let lease = other.outbound.lease_next("tg:42").unwrap().unwrap();
        let (reason, wait) = (
            "429 from the other node".to_string(),
            Duration::from_secs(60),
        );
        let answer = Answered {
            lease,
            outcome: Outcome::Throttled {
                reason: reason.clone(),
                wait,
                channel_wide: true,
            },
            part: None,
            penalty: Some(ChannelPenalty {
                channel: "tg".into(),
                wait,
                reason,
            }),
            origin: None,
        };
        let then = Then::Stop;
        let queue = QueueName::Outbound;
        other
            .apply_now(RecordAnswer {
                queue,
                answer,
                then,
            })
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        while here.penalty("tg").is_none() {
            assert!(
                Instant::now() < deadline,
                "the other node's pause never held here"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(here.penalty("tg").unwrap() > Duration::from_secs(50));
    }
}
