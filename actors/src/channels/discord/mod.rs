//! `kind = "discord"`: sends outbound rows as Discord messages (`POST /channels/{id}/messages`).
//!
//! ```text
//!   row ──▶ bucket empty? ── yes ──▶ throttled until it refills (nothing sent)
//!             │ no
//!             ▼
//!           create message {content, nonce, enforce_nonce, allowed_mentions: none}
//!             200 {id}                     → delivered, receipt = id
//!             429 global                   → the whole channel throttled retry_after
//!             429                          → this channel id throttled retry_after
//!             401                          → not the row's fault: uncounted, the breaker opens
//!             400 / 403 / 404 (10003, 50001, 50007, 50013, ...) → permanent
//!             5xx, no connection           → retry (no answer after sending: unknown)
//!           X-RateLimit-* of every answer  → the buckets (see `buckets`)
//! ```
//!
//! `to` is a channel id (a DM channel's too); a row's `thread` is a thread's channel id and is
//! posted to instead, `reply_to` becomes a message reference. Texts are split at 2000
//! characters when written. Each row's `nonce` is made from its id, with `enforce_nonce`: sent
//! again after a crash within Discord's window (a few minutes), Discord answers with the message
//! it already made rather than a second one. Nobody is pinged: `allowed_mentions` is empty, so an
//! agent's `@everyone` stays text.

mod buckets;
mod components;
mod config;
mod render;
#[cfg(test)]
pub(crate) mod tests;

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::{json, Value};

use crate::kit::http::{HttpClient, Reply, MAX_RETRY_AFTER};
use super::contract::only_outbound;
use super::{Answer, Channel, Content, Delivery, Outcome, UnknownOutcome};
use crate::channels::bot::bot_channel_basics;

pub use buckets::Buckets;
pub use config::{client, Config};

/// The route messages are created on, as Discord's buckets are keyed.
const CREATE_MESSAGE: &str = "POST /channels/{id}/messages";

/// The longest nonce Discord takes.
const MAX_NONCE: usize = 25;

#[derive(Clone)]
pub struct DiscordChannel {
    /// The REST API's base URL, ending in `/`.
    api: url::Url,
    /// Sends `Authorization: Bot <token>` with each request; scrubs the token from errors.
    http: HttpClient,
    timeout: Duration,
    unknown_outcome: UnknownOutcome,
    buckets: Arc<Buckets>,
}

impl Channel for DiscordChannel {
    fn deliver(&mut self, delivery: Delivery) -> Answer {
        let Content::Outbound(message) = &delivery.content else {
            return only_outbound("discord");
        };
        let channel_id = message.thread.as_deref().unwrap_or(&message.to).trim();
        if !is_snowflake(channel_id) {
            return Outcome::Permanent {
                reason: "not a Discord channel id: `to` (and `thread`) must be the channel's \
                         number, e.g. 1312345678901234567 (Developer Mode → Copy Channel ID)"
                    .into(),
            }
            .into();
        }
        if let Err(wait) = self.buckets.take(CREATE_MESSAGE, channel_id, Instant::now()) {
            return Outcome::Throttled {
                reason: "Discord's rate limit for this channel is used up until it resets".into(),
                wait,
                channel_wide: false,
            }
            .into();
        }
        let mut body = json!({
            "content": message.text,
            "nonce": nonce(delivery.id, delivery.created_at),
            "enforce_nonce": true,
            "allowed_mentions": {"parse": []},
        });
        if let Some((_, reply_to)) = message
            .reply_to_on_this_part()
            .and_then(|r| located(channel_id, r))
        {
            body["message_reference"] =
                json!({"message_id": reply_to, "fail_if_not_exists": false});
        }
        // An approval's question carries its answers as buttons (an `INTERACTION_CREATE` to
        // the Discord source); its outcome replaces it, buttons gone.
        if let Some(approval) = message.notice.as_ref().and_then(|n| n.approval.as_ref()) {
            body["components"] = components::approval(approval);
        }
        // A message's own buttons (a session's list, a confirmation).
        if !message.buttons.is_empty() {
            body["components"] = components::rows(&message.buttons);
        }
        let this = self.clone();
        let channel_id = channel_id.to_string();
        // A message in a thread is addressed as `thread/message` (see [`located`]).
        let in_thread = message.thread.is_some();
        let edit = message.edit.clone();
        let to = message.to.trim().to_string();
        Answer::later(async move {
            if let Some(edit) = edit {
                if let Some(outcome) = this.edit_message(&to, &edit, &body).await {
                    return outcome;
                }
            }
            let mut outcome = this.create_message(&channel_id, body).await;
            if let Outcome::Delivered(receipt) = &mut outcome {
                if let Some(id) = receipt.message_id.as_mut().filter(|_| in_thread) {
                    *id = format!("{channel_id}/{id}");
                }
            }
            outcome
        })
    }

    /// A thread per session: `POST /channels/{id}/threads` named after it (a public thread,
    /// archived after a week of quiet); archived when the session stops.
    fn thread(&self, call: super::ThreadCall) -> Option<super::ThreadAnswer> {
        let this = self.clone();
        Some(Box::pin(async move { this.session_thread(call).await }))
    }

    /// Reactions (`PUT` the new one, `DELETE` the one shown) and progress messages (create,
    /// then edit).
    fn cosmetic(&self, call: super::CosmeticCall) -> Option<super::CosmeticAnswer> {
        let this = self.clone();
        Some(Box::pin(async move { this.show(call).await }))
    }

    bot_channel_basics!(render: render::discord_markdown, pace: config::pace, ready: bot_user);
}

/// Where a message id relayq holds lives: `thread/message` for a message in a thread (a
/// channel of its own on Discord, which its chat's id does not reach), else a message of `to`.
/// `None` unless both are snowflakes: a row's ids (the HTTP API takes any) never walk the
/// API's paths with the bot's token.
pub fn located<'a>(to: &'a str, id: &'a str) -> Option<(&'a str, &'a str)> {
    let (channel, message) = match id.trim().split_once('/') {
        Some((channel, message)) => (channel, message),
        None => (to.trim(), id.trim()),
    };
    (is_snowflake(channel) && is_snowflake(message)).then_some((channel, message))
}

/// Discord's limit: 2000 characters of markdown.
pub fn text_limit() -> relayq_engine::TextLimit {
    relayq_engine::TextLimit {
        max: render::DISCORD_MAX_CHARS,
        markup: relayq_engine::Markup::Markdown,
    }
}

impl DiscordChannel {
    async fn create_message(&self, channel_id: &str, body: Value) -> Outcome {
        let url = self
            .api
            .join(&format!("channels/{channel_id}/messages"))
            .expect("a snowflake joins the API URL");
        let request = self
            .http
            .post(url)
            .json(body.to_string());
        match self.http.send(request).await {
            Ok(reply) => {
                self.buckets
                    .learn(CREATE_MESSAGE, channel_id, &reply.headers, Instant::now());
                classify(&reply)
            }
            Err(no_answer) => no_answer,
        }
    }

    fn route(&self, path: &str) -> url::Url {
        self.api.join(path).expect("a route joins the API URL")
    }

    /// `PATCH` of message `id` (a `thread/message` address, or a message of `to`) to `body`'s
    /// text and buttons (none: they go). `None` when it cannot be edited (deleted): the caller
    /// sends it new.
    async fn edit_message(&self, to: &str, id: &str, body: &Value) -> Option<Outcome> {
        let (channel, message) = located(to, id)?;
        let edit = json!({
            "content": body["content"],
            "components": body.get("components").cloned().unwrap_or(json!([])),
            "allowed_mentions": {"parse": []},
        });
        let url = self.route(&format!("channels/{channel}/messages/{message}"));
        let reply = match self.http.send(self.http.patch(url).json(edit.to_string())).await {
            Ok(reply) => reply,
            Err(no_answer) => return Some(no_answer),
        };
        let error = reply.json::<DiscordError>().unwrap_or_default();
        match (reply.status, error.code) {
            (200, _) => Some(Outcome::delivered_as(id.trim())),
            (404, Some(10008)) => None,
            _ => Some(classify(&reply)),
        }
    }

    /// Opens or closes a session's thread.
    async fn session_thread(&self, call: super::ThreadCall) -> Result<Option<String>, String> {
        let (path, body, method) = match &call {
            super::ThreadCall::Open { to, name } => {
                let to = to.trim();
                if !is_snowflake(to) {
                    return Err(format!("{to:?} is not a Discord channel id"));
                }
                // Public thread (11), archived after a week without messages.
                let name = crate::kit::cut_chars(name, 100);
                let body = json!({"name": name, "type": 11, "auto_archive_duration": 10080});
                (format!("channels/{to}/threads"), body, "POST")
            }
            super::ThreadCall::Close { thread, .. } => {
                let thread = thread.trim();
                if !is_snowflake(thread) {
                    return Err(format!("{thread:?} is not a Discord thread id"));
                }
                (format!("channels/{thread}"), json!({"archived": true}), "PATCH")
            }
        };
        let url = self.route(&path);
        let request = match method {
            "POST" => self.http.post(url),
            _ => self.http.patch(url),
        };
        let reply = self
            .http
            .send(request.json(body.to_string()))
            .await
            .map_err(|no_answer| no_answer.text().unwrap_or_default().to_string())?;
        if !reply.is_success() {
            return Err(describe(&reply));
        }
        Ok(match call {
            super::ThreadCall::Open { .. } => reply
                .json::<Value>()
                .and_then(|thread| thread["id"].as_str().map(str::to_string)),
            super::ThreadCall::Close { .. } => None,
        })
    }

    /// Makes a cosmetic call (see [`Channel::cosmetic`]).
    async fn show(&self, call: super::CosmeticCall) -> super::CosmeticOutcome {
        use super::{CosmeticCall, CosmeticOutcome};
        use percent_encoding::{utf8_percent_encode, NON_ALPHANUMERIC};
        let not_ids = || CosmeticOutcome::Failed("not a Discord channel or message id".into());
        let mut calls = Vec::new();
        match &call {
            CosmeticCall::React { to, message, emoji, previous } => {
                let Some((channel, message)) = located(to, message) else {
                    return not_ids();
                };
                let reaction = |emoji: &str| {
                    let emoji = utf8_percent_encode(emoji, NON_ALPHANUMERIC);
                    self.route(&format!("channels/{channel}/messages/{message}/reactions/{emoji}/@me"))
                };
                calls.push(self.http.put(reaction(emoji)));
                if let Some(previous) = previous.as_deref().filter(|p| p != emoji) {
                    calls.push(self.http.delete(reaction(previous)));
                }
            }
            CosmeticCall::Post { to, thread, text } => {
                let channel = thread.as_deref().unwrap_or(to).trim();
                if !is_snowflake(channel) {
                    return not_ids();
                }
                let body = json!({"content": text, "allowed_mentions": {"parse": []},
                                  "flags": 1 << 12 /* SUPPRESS_NOTIFICATIONS */});
                let url = self.route(&format!("channels/{channel}/messages"));
                calls.push(self.http.post(url).json(body.to_string()));
            }
            CosmeticCall::Edit { to, message, text } => {
                let Some((channel, message)) = located(to, message) else {
                    return not_ids();
                };
                let body = json!({"content": text, "allowed_mentions": {"parse": []}});
                let url = self.route(&format!("channels/{channel}/messages/{message}"));
                calls.push(self.http.patch(url).json(body.to_string()));
            }
            CosmeticCall::Draft { .. } => {
                return CosmeticOutcome::Failed("Discord has no drafts".into())
            }
        }
        let mut posted = None;
        for request in calls {
            let reply = match self.http.send(request).await {
                Ok(reply) => reply,
                Err(no_answer) => {
                    return CosmeticOutcome::Failed(no_answer.text().unwrap_or_default().into())
                }
            };
            if reply.status == 429 {
                let wait = reply
                    .json::<DiscordError>()
                    .and_then(|e| e.retry_after)
                    .filter(|s| s.is_finite() && *s >= 0.0)
                    .map(Duration::from_secs_f64)
                    .or(reply.retry_after)
                    .unwrap_or(Duration::from_secs(1));
                return CosmeticOutcome::Wait(wait.min(MAX_RETRY_AFTER));
            }
            if !reply.is_success() {
                return CosmeticOutcome::Failed(describe(&reply));
            }
            posted = reply.json::<Value>().and_then(|m| m["id"].as_str().map(str::to_string));
        }
        match &call {
            CosmeticCall::Post { thread: Some(thread), .. } => {
                CosmeticOutcome::Done(posted.map(|id| format!("{}/{id}", thread.trim())))
            }
            CosmeticCall::Post { .. } => CosmeticOutcome::Done(posted),
            _ => CosmeticOutcome::Done(None),
        }
    }

    /// `GET /users/@me`: the bot's name when the token is good.
    pub async fn bot_user(&self) -> Result<String, String> {
        let url = self.api.join("users/@me").expect("a route joins");
        let reply = self
            .http
            .send(self.http.get(url))
            .await
            .map_err(|no_answer| no_answer.text().unwrap_or_default().to_string())?;
        match reply.json::<Value>() {
            Some(user) if reply.is_success() && user["id"].is_string() => {
                Ok(user["username"].as_str().unwrap_or_default().to_string())
            }
            _ => Err(describe(&reply)),
        }
    }
}

/// A Discord id: a snowflake, digits only (so a row's `to` cannot walk the API's paths).
pub fn is_snowflake(id: &str) -> bool {
    !id.is_empty() && id.len() <= 20 && id.bytes().all(|b| b.is_ascii_digit())
}

/// The row's nonce: its id and when it was written, so that another database's row with the
/// same id is not taken for it; just the id if that would be longer than Discord allows.
fn nonce(id: i64, created_at: i64) -> String {
    let both = format!("{id}.{created_at}");
    match both.len() <= MAX_NONCE {
        true => both,
        false => id.to_string(),
    }
}

/// Discord's error answer: `{"message": "Missing Permissions", "code": 50013}`; a 429's is
/// `{"message": ..., "retry_after": 1.337, "global": false}`.
#[derive(Debug, Default, Deserialize)]
struct DiscordError {
    #[serde(default)]
    message: Option<String>,
    #[serde(default)]
    code: Option<i64>,
    #[serde(default)]
    retry_after: Option<f64>,
    #[serde(default)]
    global: bool,
}

fn classify(reply: &Reply) -> Outcome {
    if reply.is_success() {
        return match reply.json::<Value>() {
            Some(message) if message["id"].is_string() => {
                Outcome::delivered_as(message["id"].as_str().unwrap_or_default())
            }
            // A 2xx that is not a message: it may or may not have been made.
            _ => Outcome::unknown(format!("unexpected answer: {}", reply.error())),
        };
    }
    let error = reply.json::<DiscordError>().unwrap_or_default();
    let described = describe(reply);
    match reply.status {
        429 => {
            let wait = error
                .retry_after
                .filter(|s| s.is_finite() && *s >= 0.0)
                .map(|s| Duration::from_secs_f64(s.min(MAX_RETRY_AFTER.as_secs_f64())))
                .or(reply.retry_after)
                .unwrap_or(Duration::from_secs(1));
            let global_header = reply
                .headers
                .get("x-ratelimit-global")
                .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"true"));
            Outcome::Throttled {
                reason: described,
                wait,
                channel_wide: error.global || global_header,
            }
        }
        // A bad or reset token: nothing was sent and the row is not at fault. Uncounted; the
        // breaker stops the tries (Discord bans bots that keep sending invalid requests).
        401 => Outcome::Unreachable {
            error: format!("{described}: check the bot token (token_env / token_file)"),
        },
        400..=499 => Outcome::Permanent {
            reason: match error.code.and_then(hint) {
                Some(hint) => format!("{described}: {hint}"),
                None => described,
            },
        },
        _ => Outcome::Retry {
            error: described,
            after: reply.retry_after,
        },
    }
}

/// What to do about the errors a bridge meets.
fn hint(code: i64) -> Option<&'static str> {
    Some(match code {
        10003 => "no such channel: check the row's `to`",
        50001 => "the bot cannot see this channel: invite it to the server and give it access",
        50007 => "the user does not take DMs from the bot (no shared server, or DMs closed)",
        50013 => "give the bot Send Messages (and Send Messages in Threads) in this channel",
        _ => return None,
    })
}

/// `Discord 403 (50013): Missing Permissions`, or the HTTP status and body.
fn describe(reply: &Reply) -> String {
    match reply.json::<DiscordError>() {
        Some(DiscordError {
            message: Some(m),
            code: Some(code),
            ..
        }) => format!("Discord {} ({code}): {m}", reply.status),
        Some(DiscordError {
            message: Some(m), ..
        }) => format!("Discord {}: {m}", reply.status),
        _ => reply.error(),
    }
}
