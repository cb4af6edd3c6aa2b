//! One delivery attempt of a leased row: hand it to its channel, keep the lease alive while the
//! channel works, and record the answer fenced by the lease token.

use std::time::Duration;

use tracing::Instrument;

use relayq_engine::clock::ms;
use relayq_engine::queue::{SUBMITTED, THROTTLED, UNREACHABLE};
use relayq_engine::rusqlite::Transaction;
use relayq_engine::{penalties, EngineError, Lease, Queue, Retried};

use crate::channels::{
    AgentHints, ChannelDirectory, ChannelHandle, Content, Deliver, Delivery, Outcome,
    UnknownOutcome,
};
use crate::error::Result;
use crate::metrics::Metrics;
use crate::store::Store;

/// How long after a channel's own timeout the caller stops waiting for it.
const BACKSTOP_MARGIN: Duration = Duration::from_secs(1);

/// How long a submitted row's lease lasts past the wait for its confirmation.
const SUBMITTED_LEASE_MARGIN: Duration = Duration::from_secs(30);

/// What became of the row.
#[derive(Debug, Clone, PartialEq)]
pub enum RowRecorded {
    Delivered,
    /// The far end said "not now": pending again, due at this time (unix ms), the attempt not
    /// counted.
    Throttled {
        at: i64,
    },
    Retried(Retried),
    Dead,
    Expired,
    /// Handed to a far end that confirms by itself: still in flight until it does.
    Submitted,
    /// The lease was lost (e.g. the session expired meanwhile): the answer changed nothing.
    Stale,
}

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
        Then::LeaseToSend { .. } | Then::LeaseRun { .. }
            if !channels.clear_to_send(&answered.tried.channel) =>
        {
            Then::Lease
        }
        then => then,
    };
    let (q, a) = (queue.clone(), answered.clone());
    let recorded = store
        .write(move |_, tx| {
            let now = q.now();
            let recorded = a.record_in(&q, tx, now)?;
            if then == Then::Stop || recorded != RowRecorded::Delivered {
                return Ok((recorded, None));
            }
            let key = &a.lease.key;
            let taken = match then {
                Then::LeaseRun { limit, mark } => {
                    Some(lease_run_in(&q, tx, key, now, limit, mark)?)
                        .filter(|run| !run.is_empty())
                        .map(Taken::Run)
                }
                // Leased and marked by one statement, as a run of one.
                Then::LeaseToSend { mark: true } => loop {
                    match q.lease_run_to_send_in(tx, key, now, 1)? {
                        // It ended at its lease (expired, superseded): the next row is the head.
                        Ok(run) if run.is_empty() => continue,
                        Ok(run) => {
                            break run.into_iter().next().map(|lease| Taken::Row {
                                lease,
                                cleared: true,
                            })
                        }
                        Err(_) => break None,
                    }
                },
                _ => q
                    .lease_next_in(tx, key, now)?
                    .map(|next| {
                        let cleared = then == Then::LeaseToSend { mark: false };
                        Ok::<_, EngineError>(Taken::Row {
                            lease: next,
                            cleared,
                        })
                    })
                    .transpose()?,
            };
            Ok((recorded, taken))
        })
        .await?;
    answered
        .tried
        .log(&store.metrics, queue, lease, &recorded.0);
    Ok(recorded)
}

/// What [`deliver`] does for the row behind a delivered one on its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Then {
    /// Nothing: the next row is found by the next claim.
    Stop,
    /// Lease it; the caller checks the channel's gates before sending it.
    Lease,
    /// The channel has no budget to take: lease it and, when nothing holds the channel,
    /// clear it to be sent, marked started if `mark` (one write with the answer, not two).
    LeaseToSend { mark: bool },
    /// As `LeaseToSend`, for up to `limit` rows of the key at once, all marked started if
    /// `mark` (see [`Queue::lease_run_to_send_in`]): they go one after the other, their answers
    /// recorded together.
    LeaseRun { limit: usize, mark: bool },
}

/// Leases the key's next run (see [`Then::LeaseRun`]), marked started if `mark`; empty when its
/// head is not due.
pub fn lease_run_in(
    q: &Queue,
    tx: &Transaction<'_>,
    key: &str,
    now: i64,
    limit: usize,
    mark: bool,
) -> relayq_engine::Result<Vec<Lease>> {
    let run = match mark {
        true => q.lease_run_to_send_in(tx, key, now, limit)?,
        false => q.lease_run_in(tx, key, now, limit)?,
    };
    Ok(run.unwrap_or_default())
}

/// The rows behind a delivered one, leased with its answer.
#[derive(Debug, Clone)]
pub enum Taken {
    /// The next row; `cleared`: its gates were passed and it is marked started (as asked), so
    /// it is sent as it is.
    Row { lease: Lease, cleared: bool },
    /// The next rows, cleared and marked started together (see [`Then::LeaseRun`]).
    Run(Vec<Lease>),
}

/// A pause of a whole channel an answer called for: the far end asked for it (a global rate
/// limit), or the channel's breaker opened. Applied in memory when the answer comes, written
/// with the answer.
#[derive(Debug, Clone)]
pub struct ChannelPause {
    channel: String,
    wait: Duration,
    reason: String,
}

/// One attempt's answer, ready to record: the row, what the channel said, which part of a text
/// it is, and the pause of the channel the answer called for.
#[derive(Debug, Clone)]
pub struct AnswerToRecord {
    pub lease: Lease,
    pub tried: Tried,
    part: Option<relayq_engine::outbound::Part>,
    pause: Option<ChannelPause>,
}

impl AnswerToRecord {
    /// Takes in what the answer says of the whole channel (its breaker, a global limit): a
    /// pause starts at once in memory, so no send starts in the channel while it is written.
    pub fn new(
        channels: &ChannelDirectory,
        lease: Lease,
        tried: Tried,
        part: Option<relayq_engine::outbound::Part>,
    ) -> Self {
        let outcome = &tried.outcome;
        let pause = match outcome {
            Outcome::Throttled {
                wait,
                channel_wide: true,
                reason,
            } => Some(ChannelPause {
                channel: tried.channel.clone(),
                wait: *wait,
                reason: format!("rate limit: {reason}"),
            }),
            _ => channels.observe(&tried.channel, outcome).map(|open| {
                let why = outcome.text().unwrap_or_default();
                ChannelPause {
                    channel: tried.channel.clone(),
                    wait: open,
                    reason: format!("breaker open after failed sends in a row: {why}"),
                }
            }),
        };
        if let Some(p) = &pause {
            tracing::warn!(channel = p.channel, wait = ?p.wait, reason = p.reason, "channel paused");
            channels.penalize(&p.channel, p.wait);
        }
        AnswerToRecord {
            lease,
            tried,
            part,
            pause,
        }
    }

    /// Records the answer in the caller's transaction: the channel's pause, the row's outcome
    /// (fenced by its lease), and for a part of a text that died, the parts after it.
    pub fn record_in(
        &self,
        q: &Queue,
        tx: &Transaction<'_>,
        now: i64,
    ) -> relayq_engine::Result<RowRecorded> {
        if let Some(p) = &self.pause {
            let until = now.saturating_add(p.wait.as_millis() as i64);
            penalties::set_in(tx, &p.channel, until, &p.reason)?;
        }
        let l = &self.lease;
        let recorded = record_in(q, tx, l, self.tried.outcome.clone(), now)?;
        // The parts of a text after one that died would arrive without it: they wait as dead
        // letters with it, and `dead retry` sends them again in order.
        if let (RowRecorded::Dead, Some(part)) = (&recorded, self.part) {
            let later = i64::from(part.of.saturating_sub(part.index));
            let reason = format!("part {} of {} (row {}) failed", part.index, part.of, l.id);
            q.bury_range_in(tx, &l.key, (l.id, l.id + later), &reason, now)?;
        }
        Ok(recorded)
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
                        let outcome = attempt(store, queue, lease, &channel, delivery)
                            .instrument(span)
                            .await;
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
) -> Outcome {
    let started = std::time::Instant::now();
    let send = channel
        .recipient
        .send(Deliver(delivery, tracing::Span::current()));
    let deadline = tokio::time::sleep(channel.timeout + BACKSTOP_MARGIN);
    tokio::pin!(send, deadline);
    let every = (queue.policy().lease_timeout / 3).max(Duration::from_millis(10));
    let mut extend = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    loop {
        tokio::select! {
            answer = &mut send => {
                tracing::debug!(took = ?started.elapsed(), delivered = matches!(answer, Ok(Outcome::Delivered(_))), "answered");
                return match answer {
                    Ok(Outcome::Delivered(mut receipt)) => {
                        receipt.took.get_or_insert(started.elapsed());
                        Outcome::Delivered(receipt)
                    }
                    Ok(outcome) => outcome,
                    // It may have died mid-send.
                    Err(e) => Outcome::unknown(format!("channel {} failed: {e}", channel.name)),
                };
            }
            _ = &mut deadline => {
                return Outcome::unknown(format!("channel {} did not answer within {:?}", channel.name, channel.timeout + BACKSTOP_MARGIN));
            }
            _ = extend.tick() => {
                let (q, id, token, key) = (queue.clone(), lease.id, lease.token, lease.key.clone());
                let extend = move |_: &Store, tx: &Transaction<'_>| {
                    let now = q.now();
                    let ours = q.extend_in(tx, id, token, now)?;
                    q.extend_key_in(tx, &key, now)?;
                    Ok(ours)
                };
                match store.write(extend).await {
                    Ok(true) => {}
                    Ok(false) => tracing::warn!(row = lease.id, "lease lost while delivering"),
                    Err(e) => tracing::warn!(row = lease.id, error = %e, "could not extend lease"),
                }
            }
        }
    }
}

/// Records an attempt's answer inside a caller's transaction, fenced by the lease token.
pub fn record_in(
    q: &Queue,
    tx: &Transaction<'_>,
    l: &Lease,
    outcome: Outcome,
    now: i64,
) -> relayq_engine::Result<RowRecorded> {
    Ok(match outcome {
        Outcome::Delivered(receipt) => {
            if q.delivered_in(tx, l, &receipt, now)? {
                RowRecorded::Delivered
            } else {
                RowRecorded::Stale
            }
        }
        Outcome::Throttled { reason, wait, .. } => {
            let reason = format!("{THROTTLED}{reason}");
            throttled(q.throttle_in(tx, l, &reason, wait, now)?)
        }
        Outcome::Retry { error, after } => retried(q.retry_later_in(tx, l, &error, after, now)?),
        Outcome::Unreachable { error } => {
            // Nothing went out: pending again after the backoff step it is at, uncounted.
            let wait = q.policy().delay_after(l.attempts.saturating_sub(1).max(1));
            let error = format!("{UNREACHABLE}{error}");
            throttled(q.throttle_in(tx, l, &error, wait, now)?)
        }
        Outcome::Unknown { error } => {
            let error = format!("outcome unknown: {error}");
            retried(q.retry_unknown_in(tx, l, &error, now)?)
        }
        Outcome::Permanent { reason } => {
            if q.bury_in(tx, l, &reason, now)? {
                RowRecorded::Dead
            } else {
                RowRecorded::Stale
            }
        }
        Outcome::Expired { reason } => {
            if q.expire_in(tx, l, &reason, now)? {
                RowRecorded::Expired
            } else {
                RowRecorded::Stale
            }
        }
        Outcome::Submitted { note, wait } => {
            // The lease outlives the wait, so only a crash hands the row to someone else.
            let until = now.saturating_add(ms(wait + SUBMITTED_LEASE_MARGIN));
            let note = format!("{SUBMITTED}{note}");
            if q.submitted_in(tx, l, &note, until, now)? {
                RowRecorded::Submitted
            } else {
                RowRecorded::Stale
            }
        }
    })
}

/// A throttle's answer as recorded: pending again, due `at`, or stale.
fn throttled(at: Option<i64>) -> RowRecorded {
    at.map_or(RowRecorded::Stale, |at| RowRecorded::Throttled { at })
}

/// A retry's answer as recorded.
fn retried(retried: Retried) -> RowRecorded {
    match retried {
        Retried::Stale => RowRecorded::Stale,
        Retried::Dead => RowRecorded::Dead,
        r => RowRecorded::Retried(r),
    }
}
