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
//!     payload=<JSON> (form-encoded): block_actions, a click on an approval's button →
//!       ChatAnswer (allowed user? the conversation it was asked in?) recorded, then the
//!       click answered where it was made (response_url, ephemeral)
//!   committed ──▶ 200 (Slack wants it within 3 s; a commit takes milliseconds)
//! ```
//!
//! Or `mode = "socket"` (`socket.rs`): the same events and clicks over a Socket Mode
//! connection relayq holds open, for a machine Slack cannot post to.
//!
//! Set the app's Interactivity Request URL to the same `POST /v1/ingress/NAME` as its events.
//!
//! Slack retries an event it saw no 200 for (`X-Slack-Retry-Num`); the retry carries the same
//! conversation and `ts`, which the row's dedup key (origin, chat, message id) makes a
//! duplicate: one row, however many retries.

mod config;
mod files;
#[cfg(feature = "test-helpers")]
pub mod conformance;
#[cfg(any(test, feature = "test-helpers"))]
pub mod fake_socket;
#[cfg(any(test, feature = "test-helpers"))]
pub mod fake_web;
mod socket;
#[cfg(test)]
mod tests;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use relayq_engine::chat_sessions::{Asked, SessionRequest, Tap};
use relayq_engine::approvals::{self, Answered, Answerer, ChatAnswer};
use relayq_engine::inbound::attachments::{Attachment, FileKind};
use relayq_engine::{InboundMessage, MessageType};
use ring::hmac;
use serde_json::{json, Value};

use crate::kit::http::HttpClient;
use crate::kit::routing::Role;
use crate::kit::secret::Secret;
use crate::sources::{chat_words, Push, PushRefused, PushSource, Pushed, Receive};

pub use config::{Config, SlackMode, CHANNEL_PLACEHOLDER};
pub use socket::SlackSocket;

/// How old a signed request may be: Slack's advice, against replays.
const MAX_AGE_SECS: i64 = 5 * 60;

/// The origin of source `name`'s messages.
pub fn origin(name: &str) -> String {
    format!("slack:{name}")
}

/// How Slack's events and interactions read, whichever way they come (posted to the HTTP API,
/// or over Socket Mode): who may write, which session a conversation feeds, what a click
/// answers; and how a click is answered where it was made.
pub struct SlackReader {
    config: Config,
    /// Answers a click where it was made (its `response_url`).
    http: HttpClient,
}

/// The Events API: Slack posts each event, signed, to `POST /v1/ingress/NAME`.
pub struct SlackEvents {
    reader: SlackReader,
    key: hmac::Key,
}

/// How long answering a click (`response_url`) may take.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(10);

impl SlackEvents {
    pub fn new(config: Config, signing_secret: Secret) -> Self {
        let key = hmac::Key::new(hmac::HMAC_SHA256, signing_secret.expose().as_bytes());
        SlackEvents {
            reader: SlackReader::new(config),
            key,
        }
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
}

impl SlackReader {
    pub fn new(config: Config) -> Self {
        let http = HttpClient::new(RESPONSE_TIMEOUT, Default::default(), Vec::new());
        SlackReader { config, http }
    }

    /// The answers a click on an approval's buttons gives (a `block_actions` interaction);
    /// none for anyone else's buttons. Whoever clicked, the click is answered once recorded
    /// (a stranger's changes nothing).
    fn clicked(&self, interaction: &Value, origin: &str) -> Vec<ChatAnswer> {
        let text = |path: &[&str]| {
            let mut v = interaction;
            for key in path {
                v = v.get(*key)?;
            }
            v.as_str()
        };
        if text(&["type"]) != Some("block_actions") {
            tracing::debug!(kind = ?text(&["type"]), "ignoring a Slack interaction that is not a button click");
            return Vec::new();
        }
        let (Some(user), Some(channel)) = (
            text(&["user", "id"]),
            text(&["channel", "id"]).or(text(&["container", "channel_id"])),
        ) else {
            tracing::warn!("skipping a Slack button click without user or channel");
            return Vec::new();
        };
        let role = self.config.routing.role_of(&user.to_string());
        if role < Role::Approver {
            tracing::warn!(user, channel, "a Slack user who may not answer questions clicked an approval's button: refused");
        }
        let actions = interaction.get("actions").and_then(Value::as_array);
        actions
            .into_iter()
            .flatten()
            .filter_map(|action| approvals::read_button_data(action.get("value")?.as_str()?))
            .map(|(id, decision)| ChatAnswer {
                target: approvals::Target::Id(id),
                decision,
                who: Answerer {
                    name: text(&["user", "name"])
                        .or(text(&["user", "username"]))
                        .unwrap_or(user)
                        .to_string(),
                    id: Some(user.to_string()),
                    via: origin.to_string(),
                    chat: Some((origin.to_string(), channel.to_string())),
                },
                role,
                callback: text(&["response_url"]).map(str::to_string),
                message_id: None,
                otherwise: None,
            })
            .collect()
    }

    /// A click on one of relayq's session buttons (`relayq-s:...`), as a session request.
    fn session_tap(&self, interaction: &Value, origin: &str) -> Option<SessionRequest> {
        let user = interaction["user"]["id"].as_str()?;
        let channel = interaction["channel"]["id"]
            .as_str()
            .or(interaction["container"]["channel_id"].as_str())?;
        let tap = interaction["actions"]
            .as_array()?
            .iter()
            .find_map(|a| Tap::read(a["value"].as_str()?))?;
        let role = self.config.routing.role_of(&user.to_string());
        Some(SessionRequest {
            origin: origin.to_string(),
            chat: channel.to_string(),
            thread: interaction["container"]["thread_ts"].as_str().map(str::to_string),
            message_id: None,
            user_id: Some(user.to_string()),
            user_name: interaction["user"]["name"].as_str().unwrap_or(user).to_string(),
            may: role >= Role::Approver,
            known: role >= Role::Writer,
            topics: true,
            max_sessions: self.config.routing.max_sessions,
            asked: Asked::Tapped {
                tap,
                callback: interaction["response_url"].as_str().map(str::to_string),
            },
        })
    }

    /// The inbound message an event makes, if it is a message relayq takes.
    fn accept(&self, event: &Value, origin: &str) -> Option<InboundMessage> {
        let field = |name: &str| event.get(name).and_then(Value::as_str);
        if field("type") != Some("message") {
            return None;
        }
        // Edits, deletions, joins and bots' own posts (relayq's answers among them) are not
        // someone writing to the agent; a message with files is.
        let shared = field("subtype") == Some("file_share");
        if (event.get("subtype").is_some() && !shared) || event.get("bot_id").is_some() {
            return None;
        }
        let (Some(user), Some(channel), Some(ts)) = (field("user"), field("channel"), field("ts"))
        else {
            tracing::warn!(event = %event, "skipping a Slack message without user, channel or ts");
            return None;
        };
        // The conversation's sessions (started with /new) decide in the write; this is the
        // static route under them, empty when config.toml names none.
        let session = self.config.routing.session_for(channel).unwrap_or_default();
        let attachments = files_of(event, ts);
        let message_type = match attachments.first().map(|a| a.kind) {
            None => MessageType::Text,
            Some(FileKind::Voice) => MessageType::Voice,
            Some(_) => MessageType::File,
        };
        Some(InboundMessage {
            session,
            origin: origin.to_string(),
            message_type,
            content: field("text").unwrap_or_default().to_string(),
            source_message_id: Some(ts.to_string()),
            source_channel_id: Some(channel.to_string()),
            source_thread_id: field("thread_ts").filter(|t| *t != ts).map(str::to_string),
            actor_id: Some(user.to_string()),
            actor_name: None,
            actor_avatar_url: None,
            payload: None,
            attachments,
            album: None,
            album_quiet: std::time::Duration::ZERO,
            prompt: None,
            route_by_chat: true,
            // Pairing may have added them: the write decides (see `relayq_engine::access`).
            unlisted: !self.config.routing.allows(&user.to_string()),
        })
    }

    /// What an `event_callback` carries: an allowed user's message, or an answer it gives.
    /// Slack keeps a leading `/` for its own commands: ` /new demo` (after a space) is
    /// relayq's, and `allow ID` answers as `/allow ID` does.
    pub fn event_callback(&self, body: &Value, origin: &str) -> Pushed {
        let event = body.get("event").unwrap_or(&Value::Null);
        let Some(message) = self.accept(event, origin) else {
            return Pushed::Messages(Vec::new());
        };
        let user = message.actor_id.clone().unwrap_or_default();
        let role = self.config.routing.role_of(&user);
        let max = self.config.routing.max_sessions;
        if let Some(request) = chat_words::request_in(&message, role, true, max) {
            return Pushed::Requests(vec![request]);
        }
        match chat_words::answer_in(&message, role, true) {
            Some(answer) => Pushed::Answers(vec![answer]),
            None => Pushed::Messages(vec![message]),
        }
    }

    /// What an interaction carries: the answers its clicks give, or a session button's tap.
    pub fn interaction(&self, interaction: &Value, origin: &str) -> Pushed {
        if let Some(request) = self.session_tap(interaction, origin) {
            return Pushed::Requests(vec![request]);
        }
        match self.clicked(interaction, origin) {
            answers if answers.is_empty() => Pushed::Messages(Vec::new()),
            answers => Pushed::Answers(answers),
        }
    }

    /// Each click is answered where it was made, seen only by who clicked (an ephemeral
    /// message through its `response_url`). Cosmetic (the question itself is edited to its
    /// outcome): failures are logged.
    pub fn acknowledge(&self, answered: Vec<Answered>) {
        let replies = answered
            .into_iter()
            .filter_map(|a| Some((a.answer.callback?, a.reply)))
            .collect();
        self.answer_clicks(replies);
    }

    /// Each session button's click answered as an approval's is (see [`Self::acknowledge`]).
    pub fn tapped(&self, taps: Vec<(String, String)>) {
        self.answer_clicks(taps);
    }

    /// Ephemeral replies through each click's `response_url`.
    fn answer_clicks(&self, clicks: Vec<(String, String)>) {
        let replies: Vec<(url::Url, String)> = clicks
            .into_iter()
            .filter(|(_, reply)| !reply.is_empty())
            .filter_map(|(url, reply)| Some((url::Url::parse(&url).ok()?, reply)))
            .collect();
        if replies.is_empty() {
            return;
        }
        let http = self.http.clone();
        actix_rt::spawn(async move {
            for (url, reply) in replies {
                let body = json!({"response_type": "ephemeral", "replace_original": false, "text": reply});
                let request = http.post(url).json(body.to_string());
                match http.send(request).await {
                    Ok(answer) if answer.is_success() => {}
                    Ok(answer) => tracing::warn!(status = answer.status, "Slack refused the answer to a click"),
                    Err(no_answer) => tracing::warn!(error = no_answer.text().unwrap_or_default(), "the answer to a Slack click was not sent"),
                }
            }
        });
    }
}

impl PushSource for SlackEvents {
    fn acknowledge(&self, answered: Vec<Answered>) {
        self.reader.acknowledge(answered);
    }

    fn tapped(&self, taps: Vec<(String, String)>) {
        self.reader.tapped(taps);
    }

    fn receive<'a>(&'a self, name: &'a str, push: &'a Push) -> Receive<'a> {
        Box::pin(async move {
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs() as i64);
            self.verify(push, now)?;
            // Button clicks come form-encoded (`payload=<JSON>`) to the same URL when the
            // app's Interactivity Request URL is set to it.
            if let Some(interaction) = interaction_of(&push.body) {
                let interaction: Value = serde_json::from_str(&interaction).map_err(|e| {
                    PushRefused::Unreadable(format!("the interaction payload is not JSON: {e}"))
                })?;
                return Ok(self.reader.interaction(&interaction, &origin(name)));
            }
            let body: Value = serde_json::from_slice(&push.body)
                .map_err(|e| PushRefused::Unreadable(format!("the event is not JSON: {e}")))?;
            match body.get("type").and_then(Value::as_str) {
                Some("url_verification") => Ok(Pushed::Answer(
                    json!({"challenge": body.get("challenge").cloned().unwrap_or(Value::Null)}),
                )),
                Some("event_callback") => Ok(self.reader.event_callback(&body, &origin(name))),
                other => {
                    tracing::debug!(kind = ?other, "ignoring a Slack request that is not an event");
                    Ok(Pushed::Messages(Vec::new()))
                }
            }
        })
    }
}

/// The `payload` field of a form-encoded interaction, if the body is one.
fn interaction_of(body: &[u8]) -> Option<String> {
    if !body.starts_with(b"payload=") {
        return None;
    }
    url::form_urlencoded::parse(body)
        .find(|(key, _)| key == "payload")
        .map(|(_, value)| value.into_owned())
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

/// A message's `files`, as Slack describes them: fetched from `url_private_download` by the
/// delivering node. A file Slack does not serve (over the workspace's limit, deleted, a link
/// to elsewhere) is a line saying so.
fn files_of(event: &Value, ts: &str) -> Vec<Attachment> {
    let Some(files) = event.get("files").and_then(Value::as_array) else {
        return Vec::new();
    };
    files
        .iter()
        .map(|f| {
            let text = |key: &str| f.get(key).and_then(Value::as_str).map(str::to_string);
            let mime = text("mimetype").unwrap_or_default();
            let kind = match text("subtype").as_deref() {
                Some("slack_audio") => FileKind::Voice,
                _ => FileKind::of_mime(&mime),
            };
            let url = text("url_private_download").or_else(|| text("url_private"));
            let mut a = match (text("mode").as_deref(), url) {
                (Some(mode @ ("hidden_by_limit" | "tombstone" | "external")), _) => {
                    Attachment::not_fetched(kind, format!("Slack does not serve it ({mode})"))
                }
                (_, Some(url)) => Attachment::new(kind, url),
                (_, None) => Attachment::not_fetched(kind, "Slack gave no address to fetch it from"),
            };
            a.name = text("name");
            a.size = f.get("size").and_then(Value::as_u64);
            a.mime = Some(mime).filter(|m| !m.is_empty());
            a.message = Some(ts.to_string());
            a
        })
        .collect()
}
