//! One delivery attempt of a leased row: hand it to its channel, keep the lease alive while the
//! channel works, and record the answer fenced by the lease token.

use std::time::Duration;

use relayq_engine::{EngineError, Lease, Queue, Retried};

use crate::channels::{ChannelDirectory, ChannelHandle, Deliver, Delivery, Message, Outcome};
use crate::error::Result;
use crate::store::Store;

/// How long after a channel's own timeout the caller stops waiting for it.
const BACKSTOP_MARGIN: Duration = Duration::from_secs(1);

/// What became of the row.
#[derive(Debug, Clone, PartialEq)]
pub enum Recorded {
    Delivered,
    Retried(Retried),
    Dead,
    /// The lease was lost (e.g. the session expired meanwhile): the answer changed nothing.
    Stale,
}

/// Delivers a leased row through the named channel and records the answer: the whole of one
/// attempt, for every queue. `message` is the row's payload, read back with the channel it goes
/// to; a payload that cannot be read, or a channel that is not configured (removed from the
/// config since the row was written), buries the row: retrying cannot help.
pub async fn deliver(
    store: &Store,
    queue: &Queue,
    lease: &Lease,
    channels: &ChannelDirectory,
    message: Result<(String, Message), EngineError>,
) -> Result<Recorded> {
    let (channel_name, outcome) = match message {
        Err(e) => (
            String::new(),
            Outcome::Permanent {
                reason: e.to_string(),
            },
        ),
        Ok((name, message)) => {
            let outcome = match channels.get(&name) {
                None => Outcome::Permanent {
                    reason: format!(
                        "channel '{name}' is not configured (was it removed from the config?)"
                    ),
                },
                Some(channel) => {
                    let delivery = Delivery {
                        id: lease.id,
                        queue: queue.name().to_string(),
                        attempt: lease.attempts,
                        message,
                    };
                    attempt(store, queue, lease, &channel, delivery).await
                }
            };
            (name, outcome)
        }
    };
    let recorded = record(store, queue, lease, outcome.clone()).await?;
    let (queue, row, attempt) = (queue.name(), lease.id, lease.attempts);
    match (&recorded, &outcome) {
        (Recorded::Delivered, _) => {
            tracing::debug!(queue, row, channel = channel_name, "delivered")
        }
        (Recorded::Stale, _) => tracing::info!(queue, row, "answer ignored: the lease was lost"),
        (_, Outcome::Retry { error, .. }) | (_, Outcome::Permanent { reason: error }) => {
            tracing::warn!(queue, row, channel = channel_name, attempt, error = %error, outcome = ?recorded, "delivery failed")
        }
        _ => {}
    }
    Ok(recorded)
}

/// Sends `delivery` to `channel`, extending the lease every third of the lease timeout while it
/// runs (so a live send is never taken over and replayed), and gives up a little after the
/// channel's timeout: channels enforce their own timeout (and clean up, e.g. kill a command);
/// this deadline is the backstop for one that does not. A dead channel actor is a transient failure.
pub async fn attempt(
    store: &Store,
    queue: &Queue,
    lease: &Lease,
    channel: &ChannelHandle,
    delivery: Delivery,
) -> Outcome {
    let send = channel.recipient.send(Deliver(delivery));
    let deadline = tokio::time::sleep(channel.timeout + BACKSTOP_MARGIN);
    tokio::pin!(send, deadline);
    let every = (queue.policy().lease_timeout / 3).max(Duration::from_millis(10));
    let mut extend = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    loop {
        tokio::select! {
            answer = &mut send => {
                return answer.unwrap_or_else(|e| Outcome::retry(format!("channel {} failed: {e}", channel.name)));
            }
            _ = &mut deadline => {
                return Outcome::retry(format!("channel {} did not answer within {:?}", channel.name, channel.timeout + BACKSTOP_MARGIN));
            }
            _ = extend.tick() => {
                let (q, id, token) = (queue.clone(), lease.id, lease.token);
                match store.run(move |_| q.extend(id, token)).await {
                    Ok(true) => {}
                    Ok(false) => tracing::warn!(row = lease.id, "lease lost while delivering"),
                    Err(e) => tracing::warn!(row = lease.id, error = %e, "could not extend lease"),
                }
            }
        }
    }
}

/// Records the channel's answer, fenced by the lease token.
pub async fn record(
    store: &Store,
    queue: &Queue,
    lease: &Lease,
    outcome: Outcome,
) -> Result<Recorded> {
    let (q, l) = (queue.clone(), lease.clone());
    store
        .run(move |_| {
            Ok(match outcome {
                Outcome::Delivered => {
                    if q.complete(l.id, l.token, None)? {
                        Recorded::Delivered
                    } else {
                        Recorded::Stale
                    }
                }
                Outcome::Retry { error, after } => match q.retry_later(&l, &error, after)? {
                    Retried::Stale => Recorded::Stale,
                    Retried::Dead => Recorded::Dead,
                    r => Recorded::Retried(r),
                },
                Outcome::Permanent { reason } => {
                    if q.bury(l.id, l.token, &reason)? {
                        Recorded::Dead
                    } else {
                        Recorded::Stale
                    }
                }
            })
        })
        .await
}
