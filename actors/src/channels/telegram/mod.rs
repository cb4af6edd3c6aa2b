//! `kind = "telegram"`: sends outbound rows with the Bot API's `sendMessage`.
//!
//! ```text
//!   row ──▶ sendMessage {chat_id, text, parse_mode?, message_thread_id?, reply_parameters?}
//!             ok: true                      → delivered, receipt = message_id
//!             429 parameters.retry_after    → throttled that long (not counted)
//!             400 migrate_to_chat_id        → sent again to the new chat id, which is kept
//!             400 can't parse entities      → a notice sent again as plain text
//!             400 / 403 (chat not found,    → permanent: no retry can fix it
//!               blocked, kicked, deactivated, can't initiate, too long)
//!             401 / 404 (a bad token)       → not sent, not the row's fault: uncounted, and
//!                                              the breaker opens; `getMe` keeps it unready
//!             5xx, no connection            → retry (no answer after sending: unknown)
//! ```
//!
//! Texts are split at 4096 characters when written (see `text_limit`), and sent as plain text:
//! an agent's answer cannot fail to parse. A notice is sent as HTML (the session in bold),
//! falling back to its plain text if Telegram cannot parse it. Telegram has no idempotency key:
//! after a send with no answer the row is sent again (`unknown_outcome = "resend"`, the
//! default) or held for an operator (`"hold"`).

mod config;
mod render;
#[cfg(test)]
pub(crate) mod tests;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};

use crate::kit::http::{self, HttpClient, Reply};
use crate::channels::notice;
use crate::kit::api::telegram::{describe, number_or_text, BotApiReply};
use super::contract::only_outbound;
use super::{Answer, Channel, Content, Delivery, Outcome, UnknownOutcome};
use crate::channels::bot::bot_channel_basics;

pub use config::Config;

/// Telegram's limit on a message's text (UTF-16 units after entities are parsed).
pub const MAX_CHARS: usize = render::TELEGRAM_MAX_CHARS;

/// The most a bot may send as a photo, and as any file (Bot API `sendPhoto`, `sendDocument`).
pub const MAX_PHOTO_BYTES: u64 = 10 * 1024 * 1024;
pub const MAX_DOCUMENT_BYTES: u64 = 50 * 1024 * 1024;
/// How the file limit is named to a person.
pub const FILE_LIMIT_WORDS: &str = "Telegram's 50 MB limit for a bot's files";
/// What `sendPhoto` shows as a photo.
const PHOTO_TYPES: [&str; 3] = ["image/jpeg", "image/png", "image/webp"];
/// A caption's most characters.
const MAX_CAPTION_CHARS: usize = 1024;
/// How long one upload may take.
pub const FILE_SEND_TIMEOUT: Duration = Duration::from_secs(600);

#[derive(Clone)]
pub struct TelegramChannel {
    /// `https://api.telegram.org/bot<token>/`: a method's URL is this joined with its name.
    /// Secret (the token is in it): scrubbed from every error by `http`.
    api: url::Url,
    http: HttpClient,
    timeout: Duration,
    unknown_outcome: UnknownOutcome,
    /// Groups upgraded to supergroups: old chat id → new, as Telegram said
    /// (`migrate_to_chat_id`). Later rows to the old id go to the new one.
    migrated: Arc<Mutex<HashMap<String, String>>>,
}

impl Channel for TelegramChannel {
    fn deliver(&mut self, delivery: Delivery) -> Answer {
        let Content::Outbound(message) = &delivery.content else {
            return only_outbound("telegram");
        };
        let chat = self.chat_for(&message.to);
        if let Some(file) = &message.file {
            let (this, file) = (self.clone(), file.clone());
            let caption = crate::files::marked_if_repeat(&message.text, delivery.possible_repeat);
            let thread = message.thread.clone();
            return Answer::later(async move { this.send_file(chat, thread, caption, file).await });
        }
        let mut body = json!({
            "chat_id": chat,
            "text": message.text,
            "link_preview_options": {"is_disabled": true},
        });
        if let Some(thread) = &message.thread {
            body["message_thread_id"] = number_or_text(thread);
        }
        if let Some(reply_to) = message.reply_to_on_this_part() {
            body["reply_parameters"] =
                json!({"message_id": number_or_text(reply_to), "allow_sending_without_reply": true});
        }
        // A notice rendered here is HTML (see `render`), with its plain text as the fallback;
        // any other text, a writer's own, is sent as it is.
        let rendered = message.notice.as_ref().filter(|n| message.text == self.render(n));
        let plain = rendered.map(|n| {
            body["parse_mode"] = json!("HTML");
            notice::fit(&notice::plain(n), text_limit())
        });
        // An approval's question carries its answers as buttons (`callback_query` to the
        // source); its outcome replaces it, buttons gone.
        if let Some(approval) = message.notice.as_ref().and_then(|n| n.approval.as_ref()) {
            body["reply_markup"] = approval_keyboard(approval);
        }
        // A message's own buttons (a session's list, a confirmation): taps come back to the
        // source as their data.
        if !message.buttons.is_empty() {
            let rows: Vec<Vec<Value>> = message
                .buttons
                .iter()
                .map(|row| {
                    row.iter()
                        .map(|b| json!({"text": b.label, "callback_data": b.data}))
                        .collect()
                })
                .collect();
            body["reply_markup"] = json!({ "inline_keyboard": rows });
        }
        let edit = message.edit.as_deref().map(number_or_text);
        // What a message sent to the chat when its topic is gone is marked with.
        let mark = message
            .session
            .clone()
            .or_else(|| message.notice.as_ref().map(|n| n.session.clone()));
        let this = self.clone();
        let original = message.to.clone();
        Answer::later(async move {
            if let Some(edit) = edit {
                if let Some(outcome) = this.edit_message(&body, edit).await {
                    return outcome;
                }
            }
            this.send_message(&original, body, plain, mark).await
        })
    }

    /// A forum topic per session: `createForumTopic` named after it, `closeForumTopic` when
    /// it stops.
    fn thread(&self, call: super::ThreadCall) -> Option<super::ThreadAnswer> {
        let this = self.clone();
        Some(Box::pin(async move { this.topic(call).await }))
    }

    /// Reactions (`setMessageReaction`, one emoji of the Bot API's list) and progress
    /// messages (`sendMessage` without a notification, then `editMessageText`).
    fn cosmetic(&self, call: super::CosmeticCall) -> Option<super::CosmeticAnswer> {
        let this = self.clone();
        Some(Box::pin(async move { this.show(call).await }))
    }

    /// Private chats (a user's id, positive): Bot API 9.5 lets every bot stream drafts there.
    fn drafts_in(&self, to: &str) -> bool {
        to.trim().parse::<i64>().is_ok_and(|id| id > 0)
    }

    bot_channel_basics!(render: render::telegram_html, pace: config::pace, ready: get_me);
}

/// The limit texts are split at: plain text, as rows are sent.
pub fn text_limit() -> relayq_engine::TextLimit {
    relayq_engine::TextLimit {
        max: MAX_CHARS,
        markup: relayq_engine::Markup::Plain,
    }
}

impl TelegramChannel {
    /// The chat a row addressed to `to` goes to: the supergroup it became, if it did.
    fn chat_for(&self, to: &str) -> Value {
        let migrated = self.migrated.lock().expect("migrations lock");
        number_or_text(migrated.get(to).map_or(to, String::as_str))
    }

    /// A method's URL.
    fn method(&self, name: &str) -> url::Url {
        self.api.join(name).expect("a method name joins the API URL")
    }

    /// Posts `body` to Bot API method `name`; the outcome when no answer came.
    async fn post(&self, name: &str, body: &Value) -> Result<Reply, Outcome> {
        let request = self.http.post(self.method(name)).json(body.to_string());
        self.http.send(request).await
    }

    /// `editMessageText` of message `id` to `body`'s text (no `reply_markup`: its buttons go).
    /// `None` when that message cannot be edited (gone, too old): the caller sends it new.
    async fn edit_message(&self, body: &Value, id: Value) -> Option<Outcome> {
        let mut edit = body.clone();
        edit["message_id"] = id.clone();
        if let Some(fields) = edit.as_object_mut() {
            fields.remove("reply_parameters");
            fields.remove("message_thread_id");
        }
        let reply = match self.post("editMessageText", &edit).await {
            Ok(reply) => reply,
            Err(no_answer) => return Some(no_answer),
        };
        let error = describe(&reply);
        if reply.status == 400 && error.contains("message is not modified") {
            return Some(Outcome::delivered_as(id.to_string()));
        }
        let cannot_edit = ["message to edit not found", "message can't be edited"];
        if reply.status == 400 && cannot_edit.iter().any(|e| error.contains(e)) {
            tracing::info!(error, "Telegram cannot edit the message; sending it as a new one");
            return None;
        }
        match classify(&reply) {
            // An edit answers the message, whose id stays the question's.
            Verdict::Done(Outcome::Delivered { .. }) => Some(Outcome::delivered_as(id.to_string())),
            Verdict::Done(outcome) => Some(outcome),
            Verdict::Migrated(_) | Verdict::BadMarkup(_) | Verdict::ThreadGone(_) => None,
        }
    }

    /// Sends `body`, following one chat migration, sending to the chat itself (marked with
    /// `mark`, its session) once when its topic is gone, and falling back once to `plain` text.
    async fn send_message(&self, to: &str, mut body: Value, mut plain: Option<String>, mark: Option<String>) -> Outcome {
        // At most: the send, one to the migrated chat, one without its gone topic, one as
        // plain text.
        for _ in 0..4 {
            let reply = match self.post("sendMessage", &body).await {
                Ok(reply) => reply,
                Err(no_answer) => return no_answer,
            };
            match classify(&reply) {
                Verdict::Done(outcome) => return outcome,
                Verdict::Migrated(chat) => {
                    tracing::warn!(from = to, to = %chat, "the Telegram group became a supergroup; its rows now go to the new chat id (update your config)");
                    self.migrated
                        .lock()
                        .expect("migrations lock")
                        .insert(to.to_string(), chat.to_string());
                    body["chat_id"] = chat;
                }
                Verdict::ThreadGone(error) if body.get("message_thread_id").is_some() => {
                    // Once, to the chat itself, marked with whom it is from.
                    let thread = body.as_object_mut().and_then(|b| b.remove("message_thread_id"));
                    tracing::warn!(chat = to, ?thread, error, "the message's topic is gone; sent to the chat itself, marked with its session");
                    if let Some(mark) = &mark {
                        let text = body["text"].as_str().unwrap_or_default();
                        body["text"] = json!(format!("[{mark}, its topic is gone] {text}"));
                        if let Some(p) = plain.as_mut() {
                            *p = format!("[{mark}, its topic is gone] {p}");
                        }
                    }
                }
                Verdict::ThreadGone(error) => return Outcome::Permanent { reason: error },
                Verdict::BadMarkup(error) => match plain.take() {
                    Some(text) => {
                        tracing::info!(error, "Telegram could not parse the notice's HTML; sending it as plain text");
                        body["text"] = json!(text);
                        if let Some(fields) = body.as_object_mut() {
                            fields.remove("parse_mode");
                        }
                    }
                    None => return Outcome::Permanent { reason: error },
                },
            }
        }
        Outcome::retry("Telegram kept asking to send elsewhere or differently; trying again later")
    }

    /// A file, streamed from disk: `sendPhoto` for what Telegram shows as a photo (JPEG, PNG or
    /// WebP up to 10 MB), else `sendDocument` (up to 50 MB, the most a bot may send); a photo
    /// Telegram refuses (its sides, its ratio) is sent once more as a document.
    async fn send_file(
        &self,
        chat: Value,
        thread: Option<String>,
        caption: String,
        file: relayq_engine::outbound::OutboundFile,
    ) -> Outcome {
        if file.size > MAX_DOCUMENT_BYTES {
            return Outcome::Permanent {
                reason: format!("{} is over {FILE_LIMIT_WORDS}", file.name),
            };
        }
        let photo = PHOTO_TYPES.contains(&file.mime.as_str()) && file.size <= MAX_PHOTO_BYTES;
        let methods: &[(&str, &str)] = match photo {
            true => &[("sendPhoto", "photo"), ("sendDocument", "document")],
            false => &[("sendDocument", "document")],
        };
        let mut outcome = Outcome::retry("not sent");
        for (method, field) in methods {
            let chat_id = match &chat {
                Value::String(name) => name.clone(),
                id => id.to_string(),
            };
            let mut form = http::Multipart::new().text("chat_id", &chat_id);
            if let Some(thread) = &thread {
                form = form.text("message_thread_id", thread);
            }
            if !caption.is_empty() {
                form = form.text("caption", &crate::kit::cut_chars(&caption, MAX_CAPTION_CHARS));
            }
            let request = self.http.post(self.method(method));
            let path = std::path::Path::new(&file.path);
            let request = form.upload(request, field, &file.name, &file.mime, path, file.size);
            let reply = match self.http.send_within(request, FILE_SEND_TIMEOUT).await {
                Ok(reply) => reply,
                Err(no_answer) => return no_answer,
            };
            outcome = match classify(&reply) {
                Verdict::Done(outcome) => outcome,
                Verdict::Migrated(_) | Verdict::ThreadGone(_) | Verdict::BadMarkup(_) => {
                    Outcome::Permanent { reason: describe(&reply) }
                }
            };
            match (&outcome, *method) {
                (Outcome::Permanent { reason }, "sendPhoto") => {
                    tracing::info!(file = file.name, reason, "Telegram refused the photo; sending it as a document");
                }
                _ => return outcome,
            }
        }
        outcome
    }

    /// Makes a cosmetic call (see [`Channel::cosmetic`]).
    async fn show(&self, call: super::CosmeticCall) -> super::CosmeticOutcome {
        use super::{CosmeticCall, CosmeticOutcome};
        let quiet = json!({"is_disabled": true});
        let (method, body) = match &call {
            CosmeticCall::React { to, message, emoji, .. } => (
                "setMessageReaction",
                json!({"chat_id": self.chat_for(to), "message_id": number_or_text(message),
                       "reaction": [{"type": "emoji", "emoji": emoji}]}),
            ),
            CosmeticCall::Post { to, thread, text } => {
                let mut body = json!({"chat_id": self.chat_for(to), "text": crate::kit::cut_chars(text, MAX_CHARS),
                                      "disable_notification": true, "link_preview_options": quiet});
                if let Some(thread) = thread {
                    body["message_thread_id"] = number_or_text(thread);
                }
                ("sendMessage", body)
            }
            CosmeticCall::Draft {
                to,
                thread,
                draft,
                text,
            } => {
                let mut body = json!({"chat_id": self.chat_for(to), "draft_id": draft,
                                      "text": crate::kit::cut_chars(text, MAX_CHARS)});
                if let Some(thread) = thread {
                    body["message_thread_id"] = number_or_text(thread);
                }
                ("sendMessageDraft", body)
            }
            CosmeticCall::Edit { to, message, text } => (
                "editMessageText",
                json!({"chat_id": self.chat_for(to), "message_id": number_or_text(message),
                       "text": crate::kit::cut_chars(text, MAX_CHARS), "link_preview_options": quiet}),
            ),
        };
        let reply = match self.post(method, &body).await {
            Ok(reply) => reply,
            Err(no_answer) => {
                let why = no_answer.text().unwrap_or("no answer").to_string();
                return CosmeticOutcome::Failed(format!("{method}: {why}"));
            }
        };
        let answered = reply.json::<BotApiReply>();
        let error = describe(&reply);
        match answered {
            Some(BotApiReply { ok: true, result, .. }) => CosmeticOutcome::Done(
                result
                    .and_then(|m| m.get("message_id").cloned())
                    .map(|id| id.to_string()),
            ),
            _ if reply.status == 400 && error.contains("message is not modified") => {
                CosmeticOutcome::Done(None)
            }
            Some(BotApiReply { parameters: Some(p), .. }) if reply.status == 429 => {
                CosmeticOutcome::Wait(Duration::from_secs(p.retry_after.unwrap_or(1)))
            }
            _ => CosmeticOutcome::Failed(format!("{method}: {error}")),
        }
    }

    /// Opens or closes a forum topic; the new topic's `message_thread_id`.
    async fn topic(&self, call: super::ThreadCall) -> Result<Option<String>, String> {
        let (method, body) = match &call {
            super::ThreadCall::Open { to, name } => (
                "createForumTopic",
                json!({"chat_id": self.chat_for(to), "name": crate::kit::cut_chars(name, 128)}),
            ),
            super::ThreadCall::Close { to, thread } => (
                "closeForumTopic",
                json!({"chat_id": self.chat_for(to), "message_thread_id": number_or_text(thread)}),
            ),
        };
        // Not paced with the chat's messages (a session start waits on it): a 429 is waited
        // out, a few times, as Telegram asks.
        let mut tries = 0;
        let reply = loop {
            let reply = match self.post(method, &body).await {
                Ok(reply) => reply,
                Err(no_answer) => return Err(format!("{method} got no answer: {no_answer:?}")),
            };
            let wait = reply
                .json::<BotApiReply>()
                .and_then(|r| r.parameters?.retry_after)
                .filter(|secs| *secs <= TOPIC_WAIT_MAX_SECS);
            match wait {
                Some(secs) if reply.status == 429 && tries < TOPIC_TRIES => {
                    tries += 1;
                    tracing::info!(method, secs, "Telegram asked to wait before the topic call");
                    tokio::time::sleep(Duration::from_secs(secs)).await;
                }
                _ => break reply,
            }
        };
        match reply.json::<BotApiReply>() {
            Some(BotApiReply {
                ok: true, result, ..
            }) => Ok(result.and_then(|topic| match &topic["message_thread_id"] {
                Value::Number(id) => Some(id.to_string()),
                _ => None,
            })),
            _ => Err(format!("Telegram refused {method}: {}", describe(&reply))),
        }
    }

    /// `getMe`: the bot's username when the token is good.
    pub async fn get_me(&self) -> Result<String, String> {
        let reply = self
            .http
            .send(self.http.get(self.method("getMe")))
            .await
            .map_err(|no_answer| no_answer.text().unwrap_or_default().to_string())?;
        match reply.json::<BotApiReply>() {
            Some(BotApiReply {
                ok: true,
                result: Some(bot),
                ..
            }) => Ok(bot["username"].as_str().unwrap_or_default().to_string()),
            _ => Err(describe(&reply)),
        }
    }
}

/// The inline keyboard of an approval's question: Allow and Deny, and "Allow for this
/// session" where the agent has it. A tap comes back as `callback_query` with the data
/// `relayq:<id>:<allow|deny|allow-session>` (within Telegram's 64 bytes).
fn approval_keyboard(approval: &relayq_engine::outbound::notice::ApprovalAsked) -> Value {
    use relayq_engine::approvals::{Decision, Scope};
    let button = |text: &str, decision: Decision| {
        json!({"text": text, "callback_data": relayq_engine::approvals::button_data(&approval.id, decision)})
    };
    let mut rows = vec![json!([
        button("Allow", Decision::Allow(Scope::Once)),
        button("Deny", Decision::Deny)
    ])];
    if approval.for_session {
        rows.push(json!([button(
            "Allow for this session",
            Decision::Allow(Scope::Session)
        )]));
    }
    json!({"inline_keyboard": rows})
}

/// How often a topic call waits out a 429, and the longest wait it takes.
const TOPIC_TRIES: u32 = 3;
const TOPIC_WAIT_MAX_SECS: u64 = 30;

/// What one `sendMessage` answer means.
#[derive(Debug, PartialEq)]
enum Verdict {
    Done(Outcome),
    /// The group became a supergroup with this id: send there.
    Migrated(Value),
    /// Telegram could not parse the text's markup.
    BadMarkup(String),
    /// The topic is gone ("message thread not found"): send to the chat itself.
    ThreadGone(String),
}

fn classify(reply: &Reply) -> Verdict {
    let answered = reply.json::<BotApiReply>();
    let parameters = answered.as_ref().and_then(|a| a.parameters.as_ref());
    if reply.is_success() {
        return Verdict::Done(match answered {
            Some(BotApiReply {
                ok: true,
                result: Some(message),
                ..
            }) => match &message["message_id"] {
                Value::Number(id) => Outcome::delivered_as(id.to_string()),
                _ => Outcome::delivered(),
            },
            // A 2xx that does not say ok: the message may or may not exist.
            _ => Outcome::unknown(format!("unexpected answer: {}", reply.error())),
        });
    }
    if let Some(chat) = parameters.and_then(|p| p.migrate_to_chat_id) {
        return Verdict::Migrated(json!(chat));
    }
    let error = describe(reply);
    let wait = parameters
        .and_then(|p| p.retry_after)
        .map(Duration::from_secs);
    if let Some(throttled) = http::throttled(reply, wait) {
        return Verdict::Done(throttled);
    }
    Verdict::Done(match reply.status {
        400 if error.contains("can't parse entities") => return Verdict::BadMarkup(error),
        400 if error.contains("message thread not found") => return Verdict::ThreadGone(error),
        // A bad or revoked token: nothing was sent and the row is not at fault. Uncounted;
        // the breaker stops the tries and `getMe` keeps the channel unready until it is fixed.
        401 | 404 => Outcome::Unreachable {
            error: format!("{error}: check the bot token (token_env / token_file)"),
        },
        400 | 403 => Outcome::Permanent { reason: error },
        _ => Outcome::Retry {
            error,
            after: reply.retry_after,
        },
    })
}
