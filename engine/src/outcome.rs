//! What a far end said of one delivery: a channel's answer (`relayq_actors::channels`), and
//! what the queue records of it (see [`writes::runs`](crate::writes::runs)).

use std::time::Duration;

use crate::queue::Receipt;

/// How a delivery went. Expected outcomes are values, not errors.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// The far end confirmed it. Only then: a send whose result is unknown is a `Retry`.
    Delivered(Receipt),
    /// The far end said "not now": try again after `wait`, without counting the attempt. When
    /// `channel_wide` (a global rate limit), no destination of the channel is sent to before
    /// then, even after a restart.
    Throttled {
        reason: String,
        wait: Duration,
        channel_wide: bool,
    },
    /// Transient: the far end answered with an error. Try again later (after `after` if the
    /// far end said, else per policy); the attempt counts.
    Retry {
        error: String,
        after: Option<Duration>,
    },
    /// The far end could not be reached (DNS, refused, TLS): nothing went out, and the row is
    /// not at fault. Tried again after the policy's backoff without counting the attempt (the
    /// channel's breaker stops the tries while it stays down; `max_age` ends the wait).
    Unreachable { error: String },
    /// The request went out and no answer came (a timeout, a connection cut mid-request): the
    /// far end may have the message. Tried again per policy, and the next attempt is a
    /// `possible_repeat`, handled as the channel's
    /// `unknown_outcome` says.
    Unknown { error: String },
    /// Permanent: retrying cannot help; the row is dead.
    Permanent { reason: String },
    /// The row can no longer be delivered where it is addressed (its session is gone): it is
    /// expired with this reason, neither retried nor kept as a dead letter.
    Expired { reason: String },
    /// Handed to a far end that confirms by itself (an agent, by its prompt-submit event): the
    /// row stays in flight, `note` saying so, until the confirmation marks it delivered. No
    /// word within `wait`: the channel is asked to look again.
    Submitted { note: String, wait: Duration },
}

impl Outcome {
    /// Delivered, with no message id to keep.
    pub fn delivered() -> Self {
        Outcome::Delivered(Receipt::default())
    }

    /// Delivered; the far end's id for the message it made.
    pub fn delivered_as(message_id: impl Into<String>) -> Self {
        Outcome::Delivered(Receipt {
            message_id: Some(message_id.into()),
            took: None,
        })
    }

    pub fn retry(error: impl Into<String>) -> Self {
        Outcome::Retry {
            error: error.into(),
            after: None,
        }
    }

    /// A send with no answer (see [`Outcome::Unknown`]).
    pub fn unknown(error: impl Into<String>) -> Self {
        Outcome::Unknown {
            error: error.into(),
        }
    }

    pub fn is_delivered(&self) -> bool {
        matches!(self, Outcome::Delivered(_))
    }

    /// The words kept with the row when it was not delivered.
    pub fn text(&self) -> Option<&str> {
        match self {
            Outcome::Delivered(_) => None,
            Outcome::Throttled { reason: t, .. }
            | Outcome::Retry { error: t, .. }
            | Outcome::Unknown { error: t }
            | Outcome::Unreachable { error: t }
            | Outcome::Permanent { reason: t }
            | Outcome::Expired { reason: t }
            | Outcome::Submitted { note: t, .. } => Some(t),
        }
    }
}
