//! One delivery attempt of a leased row: hand it to its channel, keep the lease alive while the
//! channel works, and record the answer fenced by the lease token.

use std::time::Duration;

use tracing::Instrument;

use relayq_engine::writes::runs::{Answered, ChannelPenalty, ExtendLease, RecordAnswer};
use relayq_engine::{EngineError, Lease, Queue};

pub use relayq_engine::writes::runs::{RowRecorded, Taken, Then};

use crate::channels::{
    AgentHints, ChannelDirectory, ChannelHandle, Content, Deliver, Delivery, Outcome,
    UnknownOutcome,
};
use crate::error::Result;
use crate::metrics::Metrics;
use crate::store::Store;

/// How long after a channel's own timeout the caller stops waiting for it.
const BACKSTOP_MARGIN: Duration = Duration::from_secs(1);

/// Delivers a leased row through the named channel and records the answer: the whole of one
/// attempt. `message` is the row's payload, read back with the channel it goes to (see
/// [`try_delivery`]). `then` says whether a delivered row's key has its next row taken in the
/// same transaction (an index seek, where finding due rows anew walks the queue).
pub async fn deliver(
    store: &Store,
    queue: &Queue,
    lease: &Lease,
    channels: &ChannelDirectory,
    message: Result<(String, Content), EngineError>,
    then: Then,
) -> Result<(RowRecorded, Option<Taken>)> {
    let part = match &message {
        Ok((_, Content::Outbound(m))) => m.part,
        _ => None,
    };
    let tried = try_delivery(
        store,
        queue,
        lease,
        channels,
        message,
        AgentHints::default(),
    )
    .await;
    let answered = AnswerToRecord::new(channels, lease.clone(), tried, part);
    // The next row goes to the same channel and destination: when nothing holds the channel
    // and it has no budget to take, it is cleared here and marked started as it is leased.
    let then = match then {
        Then::LeaseToSend { .. } | Then::LeaseRun { .. } | Then::LeaseHeldRun { .. }
            if !channels.clear_to_send(&answered.tried.channel) =>
        {
            Then::Lease
        }
        then => then,
    };
    let recorded = store
        .apply(RecordAnswer {
            queue: queue.name(),
            answer: answered.to_record(),
            then,
        })
        .await?;
    answered
        .tried
        .log(&store.metrics, queue, lease, &recorded.0);
    Ok(recorded)
}

/// One attempt's answer, ready to record: the row, what the channel said, which part of a text
/// it is, the pause of the channel the answer called for, and (inbound) the chat the message
/// came from.
#[derive(Debug, Clone)]
pub struct AnswerToRecord {
    pub lease: Lease,
    pub tried: Tried,
    part: Option<relayq_engine::outbound::Part>,
    penalty: Option<ChannelPenalty>,
    origin: Option<relayq_engine::sessions::Origin>,
}

impl AnswerToRecord {
    /// An inbound row's answer: the chat it came from is told when the message starts to
    /// wait or is dropped.
    pub fn inbound(
        lease: Lease,
        tried: Tried,
        origin: Option<relayq_engine::sessions::Origin>,
    ) -> Self {
        AnswerToRecord {
            lease,
            tried,
            part: None,
            penalty: None,
            origin,
        }
    }

    /// Takes in what the answer says of the whole channel (its breaker, a global limit): a
    /// penalty starts at once in memory, so no send starts in the channel while it is written.
    pub fn new(
        channels: &ChannelDirectory,
        lease: Lease,
        tried: Tried,
        part: Option<relayq_engine::outbound::Part>,
    ) -> Self {
        let outcome = &tried.outcome;
        let penalty = match outcome {
            Outcome::Throttled {
                wait,
                channel_wide: true,
                reason,
            } => Some(ChannelPenalty {
                channel: tried.channel.clone(),
                wait: *wait,
                reason: format!("rate limit: {reason}"),
            }),
            _ => channels.observe(&tried.channel, outcome).map(|open| {
                let why = outcome.text().unwrap_or_default();
                ChannelPenalty {
                    channel: tried.channel.clone(),
                    wait: open,
                    reason: format!("breaker open after failed sends in a row: {why}"),
                }
            }),
        };
        if let Some(p) = &penalty {
            tracing::warn!(channel = p.channel, wait = ?p.wait, reason = p.reason, "channel paused");
            channels.penalize(&p.channel, p.wait);
        }
        AnswerToRecord {
            lease,
            tried,
            part,
            penalty,
            origin: None,
        }
    }

    /// The answer as the run recorder takes it.
    pub fn into_record(self) -> Answered {
        Answered {
            lease: self.lease,
            outcome: self.tried.outcome,
            part: self.part,
            penalty: self.penalty,
            origin: self.origin,
        }
    }

    /// [`into_record`](Self::into_record) of a copy.
    pub fn to_record(&self) -> Answered {
        Answered {
            lease: self.lease.clone(),
            outcome: self.tried.outcome.clone(),
            part: self.part,
            penalty: self.penalty.clone(),
            origin: self.origin.clone(),
        }
    }
}

/// One attempt's answer, before it is recorded.
#[derive(Debug, Clone)]
pub struct Tried {
    /// The channel the row went to (empty when its payload could not be read).
    pub channel: String,
    pub outcome: Outcome,
}

impl Tried {
    /// Logs and counts what became of the row: failures at warn, since someone may have to
    /// act.
    pub fn log(&self, metrics: &Metrics, queue: &Queue, lease: &Lease, recorded: &RowRecorded) {
        metrics.recorded(queue.name(), &self.channel, recorded);
        let (queue, row, attempt, channel) = (
            queue.name().as_str(),
            lease.id,
            lease.attempts,
            &self.channel,
        );
        match (recorded, &self.outcome) {
            (RowRecorded::Delivered, _) => tracing::debug!(queue, row, channel, "delivered"),
            (RowRecorded::Stale, _) => {
                tracing::info!(queue, row, "answer ignored: the lease was lost")
            }
            (_, Outcome::Unreachable { error }) => {
                tracing::warn!(queue, row, channel, error = %error, "far end unreachable; the attempt is not counted")
            }
            (_, Outcome::Retry { error, .. })
            | (_, Outcome::Unknown { error })
            | (_, Outcome::Permanent { reason: error }) => {
                tracing::warn!(queue, row, channel, attempt, error = %error, outcome = ?recorded, "delivery failed")
            }
            (_, Outcome::Expired { reason }) => {
                tracing::warn!(queue, row, channel, attempt, reason = %reason, "expired: not deliverable where it is addressed")
            }
            (_, Outcome::Submitted { note, .. }) => {
                tracing::debug!(queue, row, channel, note = %note, "submitted; waiting for the far end to confirm")
            }
            (_, Outcome::Throttled { reason, wait, .. }) => {
                tracing::info!(queue, row, channel, reason = %reason, wait = ?wait, "throttled by the far end; the attempt is not counted")
            }
            _ => {}
        }
    }
}

/// Hands a leased row to its channel and returns the answer, unrecorded. A payload that cannot
/// be read, or a channel that is not configured (removed from the config since the row was
/// written), is a permanent failure: retrying cannot help. `agent`: see `Delivery::agent`.
pub async fn try_delivery(
    store: &Store,
    queue: &Queue,
    lease: &Lease,
    channels: &ChannelDirectory,
    message: Result<(String, Content), EngineError>,
    agent: AgentHints,
) -> Tried {
    match message {
        Err(e) => Tried {
            channel: String::new(),
            outcome: Outcome::Permanent {
                reason: e.to_string(),
            },
        },
        Ok((name, content)) => {
            let outcome = match channels.get(&name) {
                None => Outcome::Permanent {
                    reason: format!(
                        "channel '{name}' is not configured (was it removed from the config?)"
                    ),
                },
                Some(channel) => match (lease.send_started, channel.unknown_outcome) {
                    (Some(started), UnknownOutcome::Hold) => Outcome::Permanent {
                        reason: held(started),
                    },
                    (started, _) => {
                        // Every line logged while the row is with its channel names it.
                        let span = tracing::info_span!(
                            "delivery",
                            queue = queue.name().as_str(),
                            row = lease.id,
                            attempt = lease.attempts,
                            channel = name.as_str(),
                            to = tracing::field::Empty,
                            session = tracing::field::Empty,
                        );
                        let delivery = Delivery {
                            id: lease.id,
                            queue: queue.name().to_string(),
                            attempt: lease.attempts,
                            created_at: lease.created_at,
                            possible_repeat: started.is_some(),
                            agent,
                            content,
                        };
                        span.record("to", delivery.address());
                        if let Some(session) = delivery.session() {
                            span.record("session", session);
                        }
                        let began = std::time::Instant::now();
                        // A file is sent only by the node that has it, as it was checked.
                        let file = match &delivery.content {
                            Content::Outbound(m) => m.file.clone(),
                            Content::Inbound(_) => None,
                        };
                        let refused = match &file {
                            Some(file) => crate::files::outgoing::ready_to_send(store, file).await,
                            None => None,
                        };
                        let outcome = match refused {
                            Some(outcome) => outcome,
                            None => {
                                let deadline = match file {
                                    Some(_) => channel.timeout.max(crate::files::SEND_TIMEOUT),
                                    None => channel.timeout,
                                };
                                attempt(store, queue, lease, &channel, delivery, deadline)
                                    .instrument(span)
                                    .await
                            }
                        };
                        store.metrics.delivery_took(&name, began.elapsed());
                        outcome
                    }
                },
            };
            Tried {
                channel: name,
                outcome,
            }
        }
    }
}

/// The dead letter's reason for a row held by `unknown_outcome = "hold"`.
fn held(started: i64) -> String {
    let at = humantime::format_rfc3339_seconds(
        std::time::UNIX_EPOCH + Duration::from_millis(started.max(0) as u64),
    );
    format!(
        "outcome unknown: a send started at {at} got no answer, so the far end may have it; \
         held (unknown_outcome = \"hold\"): check the far end, then `relayq dead retry` to send \
         it again or `relayq dead purge` to drop it"
    )
}

/// Sends `delivery` to `channel`, extending the lease every third of the lease timeout while it
/// runs (so a live send is never taken over and replayed), with the other leases this process
/// holds on the row's key (rows a session worker leased to deliver next), and gives up a little after the
/// channel's timeout: channels enforce their own timeout (and clean up, e.g. kill a command);
/// this deadline is the backstop for one that does not. A dead channel actor is a transient failure.
pub async fn attempt(
    store: &Store,
    queue: &Queue,
    lease: &Lease,
    channel: &ChannelHandle,
    delivery: Delivery,
    timeout: Duration,
) -> Outcome {
    let started = std::time::Instant::now();
    let send = channel
        .recipient
        .send(Deliver(delivery, tracing::Span::current()));
    let deadline = timeout + BACKSTOP_MARGIN;
    let answer = keep_lease_while(store, queue, lease, tokio::time::timeout(deadline, send)).await;
    tracing::debug!(took = ?started.elapsed(), delivered = matches!(answer, Ok(Ok(Outcome::Delivered(_)))), "answered");
    match answer {
        Ok(Ok(Outcome::Delivered(mut receipt))) => {
            receipt.took.get_or_insert(started.elapsed());
            Outcome::Delivered(receipt)
        }
        Ok(Ok(outcome)) => outcome,
        // It may have died mid-send.
        Ok(Err(e)) => Outcome::unknown(format!("channel {} failed: {e}", channel.name)),
        Err(_) => Outcome::unknown(format!(
            "channel {} did not answer within {deadline:?}",
            channel.name
        )),
    }
}

/// Runs `work` for leased row `lease`, extending the lease every third of the lease timeout
/// meanwhile (with the other leases this process holds on the row's key), so a row being
/// worked on is never taken over by another node and done twice.
pub async fn keep_lease_while<T>(
    store: &Store,
    queue: &Queue,
    lease: &Lease,
    work: impl std::future::Future<Output = T>,
) -> T {
    tokio::pin!(work);
    let every = (queue.policy().lease_timeout / 3).max(Duration::from_millis(10));
    let mut extend = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    loop {
        tokio::select! {
            done = &mut work => return done,
            _ = extend.tick() => {
                let extend = ExtendLease {
                    queue: queue.name(),
                    id: lease.id,
                    token: lease.token,
                    key: lease.key.clone(),
                };
                match store.apply(extend).await {
                    Ok(true) => {}
                    Ok(false) => tracing::warn!(row = lease.id, "lease lost while delivering"),
                    Err(e) => tracing::warn!(row = lease.id, error = %e, "could not extend lease"),
                }
            }
        }
    }
}
