//! `kind = "slack"`: a Slack app's Events API. Slack posts each event to
//! `POST /v1/ingress/NAME`; a message from an allowed user becomes an inbound row for the
//! session its conversation feeds.
//!
//! ```text
//!   POST /v1/ingress/NAME  (X-Slack-Request-Timestamp, X-Slack-Signature)
//!     signed with the signing secret, and no older than 5 minutes?  no → 401
//!     url_verification → {"challenge"} at once
//!     event_callback, a user's message (no subtype, no bot):
//!       allowed user? conversation → session → InboundMessage { origin "slack:NAME",
//!         source_channel_id channel, source_message_id ts, source_thread_id thread_ts }
//!   committed ──▶ 200 (Slack wants it within 3 s; a commit takes milliseconds)
//! ```
//!
//! Slack retries an event it saw no 200 for (`X-Slack-Retry-Num`); the retry carries the same
//! conversation and `ts`, which the row's dedup key (origin, chat, message id) makes a
//! duplicate: one row, however many retries.

mod config;
#[cfg(test)]
mod tests;

use std::time::{SystemTime, UNIX_EPOCH};

use relayq_engine::{InboundMessage, MessageType};
use ring::hmac;
use serde_json::{json, Value};

use crate::channels::kit::secret::Secret;
use crate::sources::{Push, PushRefused, PushSource, Pushed, Receive};

pub use config::{Config, CHANNEL_PLACEHOLDER};

/// How old a signed request may be: Slack's advice, against replays.
const MAX_AGE_SECS: i64 = 5 * 60;

/// The origin of source `name`'s messages.
pub fn origin(name: &str) -> String {
    format!("slack:{name}")
}

pub struct SlackEvents {
    config: Config,
    key: hmac::Key,
}

impl SlackEvents {
    pub fn new(config: Config, signing_secret: Secret) -> Self {
        let key = hmac::Key::new(hmac::HMAC_SHA256, signing_secret.expose().as_bytes());
        SlackEvents { config, key }
    }

    /// Slack's request signing: `v0=` and the hex HMAC-SHA256 of `v0:<timestamp>:<body>`,
    /// compared in constant time, for a timestamp within five minutes of now.
    fn verify(&self, push: &Push, now: i64) -> Result<(), PushRefused> {
        let refused = |why: &str| Err(PushRefused::NotThePlatform(why.to_string()));
        let Some(ts) = push.header("x-slack-request-timestamp") else {
            return refused("no X-Slack-Request-Timestamp header");
        };
        let Ok(at) = ts.parse::<i64>() else {
            return refused("X-Slack-Request-Timestamp is not a unix time");
        };
        if (now - at).abs() > MAX_AGE_SECS {
            return refused("the request was signed more than 5 minutes away from now (a replay, or a clock off)");
        }
        let Some(signature) = push
            .header("x-slack-signature")
            .and_then(|s| s.strip_prefix("v0="))
            .and_then(decode_hex)
        else {
            return refused("no v0= X-Slack-Signature header");
        };
        let mut signed = format!("v0:{ts}:").into_bytes();
        signed.extend_from_slice(&push.body);
        hmac::verify(&self.key, &signed, &signature).or_else(|_| {
            refused("X-Slack-Signature does not match the body signed with this app's signing_secret")
        })
    }

    /// The inbound message an event makes, if it is a message relayq takes.
    fn accept(&self, event: &Value, origin: &str) -> Option<InboundMessage> {
        let field = |name: &str| event.get(name).and_then(Value::as_str);
        if field("type") != Some("message") {
            return None;
        }
        // Edits, deletions, joins and bots' own posts (relayq's answers among them) are not
        // someone writing to the agent.
        if event.get("subtype").is_some() || event.get("bot_id").is_some() {
            return None;
        }
        let (Some(user), Some(channel), Some(ts)) = (field("user"), field("channel"), field("ts"))
        else {
            tracing::warn!(event = %event, "skipping a Slack message without user, channel or ts");
            return None;
        };
        if !self.config.allowed_users.iter().any(|u| u == user) {
            tracing::warn!(user, channel, "ignored a message from a Slack user who is not allowed (add the id to allowed_users to accept them)");
            return None;
        }
        let Some(session) = self.session_for(channel) else {
            tracing::warn!(channel, "ignored a message from a conversation that feeds no session: add it to `channels` (or set session_template)");
            return None;
        };
        Some(InboundMessage {
            session,
            origin: origin.to_string(),
            message_type: MessageType::Text,
            content: field("text").unwrap_or_default().to_string(),
            source_message_id: Some(ts.to_string()),
            source_channel_id: Some(channel.to_string()),
            source_thread_id: field("thread_ts").filter(|t| *t != ts).map(str::to_string),
            actor_id: Some(user.to_string()),
            actor_name: None,
            actor_avatar_url: None,
            payload: None,
        })
    }

    fn session_for(&self, channel: &str) -> Option<String> {
        if let Some(session) = self.config.channels.get(channel) {
            return Some(session.clone());
        }
        let template = self.config.session_template.as_ref()?;
        Some(template.replace(CHANNEL_PLACEHOLDER, channel))
    }
}

impl PushSource for SlackEvents {
    fn receive<'a>(&'a self, name: &'a str, push: &'a Push) -> Receive<'a> {
        Box::pin(async move {
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs() as i64);
            self.verify(push, now)?;
            let body: Value = serde_json::from_slice(&push.body)
                .map_err(|e| PushRefused::Unreadable(format!("the event is not JSON: {e}")))?;
            match body.get("type").and_then(Value::as_str) {
                Some("url_verification") => Ok(Pushed::Answer(
                    json!({"challenge": body.get("challenge").cloned().unwrap_or(Value::Null)}),
                )),
                Some("event_callback") => {
                    let event = body.get("event").unwrap_or(&Value::Null);
                    let message = self.accept(event, &origin(name));
                    Ok(Pushed::Messages(message.into_iter().collect()))
                }
                other => {
                    tracing::debug!(kind = ?other, "ignoring a Slack request that is not an event");
                    Ok(Pushed::Messages(Vec::new()))
                }
            }
        })
    }
}

fn decode_hex(hex: &str) -> Option<Vec<u8>> {
    if !hex.len().is_multiple_of(2) {
        return None;
    }
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
        .collect()
}

/// The signature Slack would send for `body` at `ts` (for tests and local tools).
pub fn sign(secret: &str, ts: i64, body: &[u8]) -> String {
    let key = hmac::Key::new(hmac::HMAC_SHA256, secret.as_bytes());
    let mut signed = format!("v0:{ts}:").into_bytes();
    signed.extend_from_slice(body);
    let tag = hmac::sign(&key, &signed);
    let hex: String = tag.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    format!("v0={hex}")
}
