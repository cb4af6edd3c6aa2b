//! `kind = "webhook"`: POSTs the delivery as JSON to a URL, with an `Idempotency-Key` header
//! that stays the same across retries of a row, so the far end can drop a repeat.
//!
//! - 2xx: delivered; a JSON answer's `id` is kept as the receipt's message id.
//! - 429 with `Retry-After`: throttled until then, the attempt not counted.
//! - no connection (DNS, refused, TLS): try again later; nothing went out.
//! - no answer after the request went out (a timeout, a cut connection): the outcome is
//!   unknown; the next attempt carries `"possible_repeat": true` and the same key, or, with
//!   `unknown_outcome = "hold"`, the row waits as a dead letter for an operator.
//! - 408, 429, 5xx: try again later, after the answer's
//!   `Retry-After` when it gives one.
//! - any other 4xx: permanent (the request itself is wrong; sending it again cannot help).
//! - redirects: 307 and 308 are followed within the URL's origin; any other 3xx is permanent
//!   (see [`kit::http::follows_redirect`](crate::kit::http::follows_redirect)).
//!
//! The URL may hold a secret (Slack and Discord webhook URLs do): it is a [`Secret`](crate::kit::secret::Secret), may be
//! given as `url_env` or `url_file`, and never appears in an error.

mod config;
#[cfg(test)]
pub(crate) mod tests;

use std::time::Duration;

use crate::kit::http::{self, HttpClient, Reply};
use super::{Answer, Channel, Content, Delivery, Outcome};

pub use config::Config;

#[derive(Clone)]
pub struct WebhookChannel {
    /// Parsed once: parsing it for every request showed in the outbound benchmark's profile.
    /// Its text is among the client's secrets, scrubbed from errors.
    url: url::Url,
    http: HttpClient,
    timeout: Duration,
    text_limit: Option<relayq_engine::TextLimit>,
    unknown_outcome: super::UnknownOutcome,
}

impl Channel for WebhookChannel {
    fn deliver(&mut self, mut delivery: Delivery) -> Answer {
        // The first part of a split text replies; the parts after it only follow.
        if let Content::Outbound(message) = &mut delivery.content {
            message.reply_to = message.reply_to_on_this_part().map(str::to_string);
        }
        let request = self
            .http
            .post(self.url.clone())
            .header("idempotency-key", &idempotency_key(&delivery))
            .json(serde_json::to_vec(&delivery).expect("a delivery always serialises"));
        let http = self.http.clone();
        Answer::later(async move {
            match http.send(request).await {
                Ok(reply) => classify(&reply),
                Err(no_answer) => no_answer,
            }
        })
    }

    fn timeout(&self) -> Duration {
        self.timeout
    }

    fn text_limit(&self) -> Option<relayq_engine::TextLimit> {
        self.text_limit
    }

    fn unknown_outcome(&self) -> super::UnknownOutcome {
        self.unknown_outcome
    }
}

/// The key the far end deduplicates on: the message's own, else one fixed per row.
pub fn idempotency_key(delivery: &Delivery) -> String {
    match &delivery.content {
        Content::Outbound(m) => m.idempotency_key_for(delivery.id),
        Content::Inbound(_) => format!("relayq-{}-{}", delivery.queue, delivery.id),
    }
}

/// What an HTTP answer means for the row.
pub fn classify(reply: &Reply) -> Outcome {
    if reply.is_success() {
        return match reply.json::<WebhookReply>().and_then(|a| a.id) {
            Some(serde_json::Value::String(id)) => Outcome::delivered_as(id),
            Some(id @ serde_json::Value::Number(_)) => Outcome::delivered_as(id.to_string()),
            _ => Outcome::delivered(),
        };
    }
    if let Some(throttled) = http::throttled(reply, None) {
        return throttled;
    }
    match reply.status {
        400..=499 if reply.status != 408 && reply.status != 429 => Outcome::Permanent {
            reason: reply.error(),
        },
        // 408, 429 without a wait, 5xx; 1xx/3xx left after redirects: unexpected, not final.
        _ => Outcome::Retry {
            error: reply.error(),
            after: reply.retry_after,
        },
    }
}

/// A JSON answer that names what the far end made.
#[derive(serde::Deserialize)]
struct WebhookReply {
    id: Option<serde_json::Value>,
}
