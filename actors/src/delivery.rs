//! One delivery attempt of a leased row: hand it to its channel, keep the lease alive while the
//! channel works, and record the answer fenced by the lease token.

use std::time::Duration;

use relayq_engine::rusqlite::Transaction;
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
/// attempt, for every queue. `then` runs in the same transaction as the record, after it (a
/// session leases its next row there, saving a commit per message). `message` is the row's payload, read back with the channel it goes
/// to; a payload that cannot be read, or a channel that is not configured (removed from the
/// config since the row was written), buries the row: retrying cannot help.
pub async fn deliver<N, F>(
    store: &Store,
    queue: &Queue,
    lease: &Lease,
    channels: &ChannelDirectory,
    message: Result<(String, Message), EngineError>,
    then: F,
) -> Result<(Recorded, N)>
where
    N: Send + 'static,
    F: FnOnce(&Store, &Transaction<'_>) -> relayq_engine::Result<N> + Send + 'static,
{
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
    let (recorded, next) = record(store, queue, lease, outcome.clone(), then).await?;
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
    Ok((recorded, next))
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
                match store.write(move |_, tx| q.extend_in(tx, id, token, q.now())).await {
                    Ok(true) => {}
                    Ok(false) => tracing::warn!(row = lease.id, "lease lost while delivering"),
                    Err(e) => tracing::warn!(row = lease.id, error = %e, "could not extend lease"),
                }
            }
        }
    }
}

/// Records the channel's answer, fenced by the lease token, then runs `then` in the same
/// transaction.
async fn record<N, F>(
    store: &Store,
    queue: &Queue,
    lease: &Lease,
    outcome: Outcome,
    then: F,
) -> Result<(Recorded, N)>
where
    N: Send + 'static,
    F: FnOnce(&Store, &Transaction<'_>) -> relayq_engine::Result<N> + Send + 'static,
{
    let (q, l) = (queue.clone(), lease.clone());
    store
        .write(move |s, tx| {
            let now = q.now();
            let recorded = match outcome {
                Outcome::Delivered => {
                    if q.complete_in(tx, l.id, l.token, None, now)? {
                        Recorded::Delivered
                    } else {
                        Recorded::Stale
                    }
                }
                Outcome::Retry { error, after } => {
                    match q.retry_later_in(tx, &l, &error, after, now)? {
                        Retried::Stale => Recorded::Stale,
                        Retried::Dead => Recorded::Dead,
                        r => Recorded::Retried(r),
                    }
                }
                Outcome::Permanent { reason } => {
                    if q.bury_in(tx, l.id, l.token, &reason, now)? {
                        Recorded::Dead
                    } else {
                        Recorded::Stale
                    }
                }
            };
            Ok((recorded, then(s, tx)?))
        })
        .await
}
