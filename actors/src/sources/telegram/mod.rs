//! `kind = "telegram"`: a bot's messages, read with the Bot API's `getUpdates` long poll, become
//! inbound rows for the session their chat feeds.
//!
//! ```text
//!   getUpdates {offset, timeout} ──▶ updates
//!     each message: allowed sender or chat?  no → skipped, logged (never typed into a pane)
//!                   chat → session (`chats`, or `session_template`)
//!                   → InboundMessage { origin "telegram:NAME", source_channel_id chat.id,
//!                                      source_message_id message_id, actor from.id, ... }
//!   Batch { messages, offset = last update_id + 1 } ──▶ rows + offset in ONE transaction
//!   committed ──▶ sendChatAction "typing" (only within the reply channel's budget)
//! ```
//!
//! Telegram forgets an update only when a later `getUpdates` asks from past it, and relayq
//! asks from the stored offset, which moves with the rows: a crash between the poll and the
//! commit reads the same updates again, and the rows' dedup key (origin, chat, message id)
//! keeps a second read from writing twice. 409 (another poller on the token), 401 (a bad token)
//! and network errors are failures of the fetch, retried from the same offset with backoff.

mod config;
#[cfg(feature = "test-helpers")]
pub mod conformance;
#[cfg(any(test, feature = "test-helpers"))]
pub mod fake;
mod files;
mod webhook;
#[cfg(test)]
mod tests;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use relayq_engine::approvals::{self, Answered, Answerer, ChatAnswer};
use relayq_engine::chat_sessions::{self, Asked, SessionRequest, Tap};
use relayq_engine::inbound::attachments::{human_size, Attachment, FileKind};
use relayq_engine::{InboundMessage, MessageType};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::kit::http::{HttpClient, Reply};
use crate::kit::routing::Role;
use crate::kit::api::telegram::{describe, number_or_text, BotApiReply};
use crate::pacing::Budgets;
use crate::settings::SettingError;
use crate::sources::{Batch, Fetch, Source};

pub use config::{Config, Mode, CHAT_PLACEHOLDER};
pub use files::TelegramFiles;
pub use webhook::{TelegramWebhook, SECRET_HEADER};

/// The origin of source `name`'s messages.
pub fn origin(name: &str) -> String {
    format!("telegram:{name}")
}

#[derive(Clone)]
pub struct TelegramSource {
    inner: Arc<Inner>,
    /// `telegram:NAME`, once started as `[sources.NAME]`.
    origin: Arc<str>,
}

struct Inner {
    config: Config,
    /// `<api_url>/bot<token>/`: secret, scrubbed from errors by `http`.
    api: url::Url,
    /// `<api_url>/file/bot<token>/`, where downloads are.
    files: url::Url,
    /// For the long poll: its timeout covers the poll.
    http: HttpClient,
    /// For short calls (typing, getFile, downloads).
    short: HttpClient,
    /// How many updates the next `getUpdates` asks for: [`MAX_UPDATES`], halved while an
    /// answer does not fit in `limit` × [`UPDATE_BYTES`], grown back after answers that do.
    limit: AtomicUsize,
    /// The bot's commands were registered (`setMyCommands`), once per start.
    commands_registered: std::sync::atomic::AtomicBool,
    /// The bot has topics in private chats (`getMe`'s `has_topics_enabled`, Bot API 9.3): a
    /// session started in a private chat then gets a topic, as in a forum.
    private_topics: std::sync::atomic::AtomicBool,
    /// `getMe` answered (asked before each fetch until it does).
    me_known: std::sync::atomic::AtomicBool,
}

/// The most updates one `getUpdates` returns (Telegram's own maximum for `limit`).
const MAX_UPDATES: usize = 100;

/// The most bytes one update is read at: a 4 096-character text with every character escaped,
/// its entities and the message it replies to fit several times over.
const UPDATE_BYTES: usize = 64 * 1024;

impl TelegramSource {
    pub fn new(config: Config) -> Result<Self, SettingError> {
        let bot = config.bot();
        let (api, token) = bot.bot_url()?;
        let files = api
            .join(&format!("../file/bot{}/", token.expose()))
            .map_err(|e| SettingError::new("api_url", format!("cannot hold a file path: {e}")))?;
        let http = HttpClient::new(
            config::request_timeout(&config),
            Default::default(),
            vec![token.clone()],
        );
        Ok(TelegramSource {
            inner: Arc::new(Inner {
                short: bot.client(&token),
                config,
                api,
                files,
                http,
                limit: AtomicUsize::new(MAX_UPDATES),
                commands_registered: Default::default(),
                private_topics: Default::default(),
                me_known: Default::default(),
            }),
            origin: origin("telegram").into(),
        })
    }
}

impl Source for TelegramSource {
    fn named(&mut self, name: &str) {
        self.origin = origin(name).into();
    }

    fn fetch(&mut self, offset: Option<String>) -> Fetch {
        if !self.inner.commands_registered.swap(true, Ordering::Relaxed) {
            let inner = self.inner.clone();
            actix_rt::spawn(async move { inner.register_commands().await });
        }
        let (inner, origin) = (self.inner.clone(), self.origin.clone());
        Box::pin(async move {
            if !inner.me_known.load(Ordering::Relaxed) {
                inner.learn_me().await;
            }
            inner.fetch(offset, &origin).await
        })
    }

    fn ready_check(&self) -> Option<crate::kit::ReadyCheck> {
        let inner = self.inner.clone();
        Some(Box::pin(async move {
            let reply = inner.call(&inner.short, "getMe", &json!({})).await?;
            answered(&reply).map(|_| ()).map_err(|refusal| refusal.to_string())
        }))
    }

    fn acknowledge(&mut self, answered: Vec<Answered>) {
        let taps = answered
            .into_iter()
            .filter_map(|a| Some((a.answer.callback?, a.reply)))
            .collect();
        self.inner.answer_taps(taps);
    }

    fn tapped(&mut self, taps: Vec<(String, String)>) {
        self.inner.answer_taps(taps);
    }

    fn committed(&mut self, new: Vec<InboundMessage>, budget: Option<Arc<dyn Budgets>>) {
        let progress = self.inner.config.routing.progress;
        if !self.inner.config.typing || progress != relayq_engine::progress::ProgressMode::Off {
            return;
        }
        let chats: BTreeSet<(String, Option<String>)> = new
            .into_iter()
            .filter_map(|m| Some((m.source_channel_id?, m.source_thread_id)))
            .collect();
        for (chat, thread) in chats {
            // Cosmetic: only within the chat's budget, never at the cost of an answer.
            if budget.as_ref().is_some_and(|b| b.take(&chat).is_err()) {
                tracing::debug!(chat, "no typing indicator: the chat's budget is short");
                continue;
            }
            let inner = self.inner.clone();
            actix_rt::spawn(async move { inner.typing(&chat, thread.as_deref()).await });
        }
    }
}

impl Inner {
    /// Whether a session started in `chat` gets a topic of its own: a forum, or a private
    /// chat when the bot has topics there.
    fn has_topics(&self, chat: &Chat) -> bool {
        chat.is_forum || (chat.kind == "private" && self.private_topics.load(Ordering::Relaxed))
    }

    fn method(&self, name: &str) -> url::Url {
        self.api.join(name).expect("a method name joins the API URL")
    }

    /// Calls `method` with a JSON body on `client`; the answer's status and body.
    async fn call(&self, client: &HttpClient, method: &str, body: &Value) -> Result<Reply, String> {
        self.call_reading(client, method, body, crate::kit::http::MAX_BODY).await
    }

    /// [`call`](Self::call), reading up to `bytes` of the answer.
    async fn call_reading(&self, client: &HttpClient, method: &str, body: &Value, bytes: usize) -> Result<Reply, String> {
        let request = client
            .post(self.method(method))
            .json(body.to_string())
            .read_up_to(bytes);
        client
            .send(request)
            .await
            .map_err(|no_answer| format!("cannot reach Telegram: {}", no_answer.text().unwrap_or("no answer")))
    }

    /// `setMyCommands`: the session commands and the approvals' answers, so Telegram offers
    /// them as the user types `/`. Cosmetic: a refusal is logged.
    async fn register_commands(&self) {
        let mut commands: Vec<Value> = chat_sessions::COMMANDS
            .iter()
            .map(|(command, description)| json!({"command": command, "description": description}))
            .collect();
        commands.push(json!({"command": "allow", "description": "Allow what an agent asks: /allow ID"}));
        commands.push(json!({"command": "deny", "description": "Deny what an agent asks: /deny ID"}));
        match self.call(&self.short, "setMyCommands", &json!({ "commands": commands })).await {
            Ok(reply) => match answered(&reply) {
                Ok(_) => tracing::debug!("the bot's commands are registered with Telegram"),
                Err(e) => tracing::warn!(error = %e, "setMyCommands refused: Telegram will not offer /new, /sessions... as the user types (they work all the same)"),
            },
            Err(e) => tracing::warn!(error = %e, "cannot register the bot's commands with Telegram"),
        }
    }

    /// What `getMe` says of the bot that reading needs: whether it has topics in private
    /// chats. Without an answer, none (said in the log), and asked again at the next fetch.
    async fn learn_me(&self) {
        let me = match self.call(&self.short, "getMe", &json!({})).await {
            Ok(reply) => answered(&reply).map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        match me {
            Ok(me) => {
                let topics = me["has_topics_enabled"] == true;
                self.private_topics.store(topics, Ordering::Relaxed);
                self.me_known.store(true, Ordering::Relaxed);
            }
            Err(error) => tracing::warn!(error, "getMe got no answer: private chats get no topics until it does"),
        }
    }

    async fn fetch(&self, offset: Option<String>, origin: &str) -> Result<Batch, String> {
        let from = match offset.as_deref() {
            None => 0, // from the earliest update Telegram still holds
            Some(o) => o
                .parse::<i64>()
                .map_err(|_| format!("the stored offset {o:?} is not a Telegram update id"))?,
        };
        let limit = self.limit.load(Ordering::Relaxed);
        let body = json!({
            "offset": from,
            "limit": limit,
            "timeout": self.config.poll_timeout.as_secs(),
            "allowed_updates": ALLOWED_UPDATES,
        });
        let reply = self
            .call_reading(&self.http, "getUpdates", &body, limit * UPDATE_BYTES)
            .await?;
        if reply.cut {
            return self.too_large(&reply, from, limit);
        }
        if limit < MAX_UPDATES {
            self.limit.store((limit * 2).min(MAX_UPDATES), Ordering::Relaxed);
        }
        let updates = match answered(&reply) {
            Ok(result) => result,
            Err(Refusal::Wait(wait)) => {
                tracing::warn!(?wait, "Telegram asks relayq to slow down (429); polling again after the wait");
                tokio::time::sleep(wait).await;
                return Ok(empty(from));
            }
            Err(Refusal::Failed(error)) => return Err(error),
        };
        let updates = match updates {
            Value::Array(updates) => updates,
            other => return Err(format!("getUpdates answered a result that is not a list: {other}")),
        };
        let mut next = from;
        let (mut messages, mut answers, mut requests) = (Vec::new(), Vec::new(), Vec::new());
        for update in updates {
            let Some(id) = update["update_id"].as_i64() else {
                tracing::error!("skipping an update without an update_id");
                continue;
            };
            next = next.max(id + 1);
            match self.accept(id, update, origin).await {
                Some(TakenUpdate::Message(message)) => messages.push(message),
                Some(TakenUpdate::Answer(answer)) => answers.push(answer),
                Some(TakenUpdate::Request(request)) => requests.push(request),
                None => {}
            }
        }
        Ok(Batch {
            messages,
            answers,
            requests,
            offset: next.to_string(),
        })
    }

    /// An answer over `limit` × [`UPDATE_BYTES`]: ask for half as many updates next time; an
    /// answer that cannot hold even one update is skipped past, so the source never polls
    /// the same offset for ever. The cut body is never logged: it holds what users wrote.
    fn too_large(&self, reply: &Reply, from: i64, limit: usize) -> Result<Batch, String> {
        let bytes = limit * UPDATE_BYTES;
        if limit > 1 {
            let fewer = limit / 2;
            self.limit.store(fewer, Ordering::Relaxed);
            tracing::warn!(updates = limit, bytes, next = fewer, "a getUpdates answer is over its read limit; asking for fewer updates at a time");
            return Ok(empty(from));
        }
        // Telegram writes `update_id` first; failing that, ids go up one by one.
        let id = match first_update_id(&reply.body) {
            Some(id) => id,
            None if from > 0 => from,
            None => return Err(format!("a getUpdates answer of one update is over {bytes} bytes and names no update_id")),
        };
        tracing::error!(update = id, bytes, "an update is over the read limit for one update: skipped, the source reads on past it");
        Ok(empty(from.max(id + 1)))
    }

    /// What an update is to relayq: a message for the session its chat feeds, an answer to
    /// an agent's question (a button tapped, `/allow ID`, a yes or no replying to the
    /// question), or nothing it takes.
    async fn accept(&self, id: i64, update: Value, origin: &str) -> Option<TakenUpdate> {
        if let Some(tap) = update.get("callback_query") {
            return self.tap(id, tap, origin);
        }
        let Some(raw) = update.get("message") else {
            tracing::debug!(update = id, "skipping an update that is not a new message");
            return None;
        };
        let message = match Message::deserialize(raw) {
            Ok(m) => m,
            Err(e) => {
                tracing::error!(update = id, error = %e, "skipping a message relayq cannot read");
                return None;
            }
        };
        let chat = message.chat.id.to_string();
        let sender = message.from.as_ref().map(|u| u.id);
        let role = self.role(sender, message.chat.id);
        let stranger = role == Role::Stranger;
        let command = message.text.as_deref().and_then(chat_sessions::command_of);
        if stranger {
            // Pairing may have added them: the write decides, and a stranger's message
            // writes nothing (see `relayq_engine::access`).
            tracing::debug!(update = id, chat, user = ?sender, "a message from someone the settings do not name (add the user id to allowed_users or the chat id to allowed_chats to accept them)");
        }
        // The chat's sessions (a topic's, the current one) decide in the write; this is the
        // static route under them, empty when config.toml names none.
        let session = self.config.routing.session_for(&chat).unwrap_or_default();
        if message.text.as_deref().map(str::trim) == Some("/start") {
            tracing::info!(chat, "the chat started the bot (/start); not passed to the agent");
            return None;
        }
        let thread = message
            .is_topic_message
            .then_some(message.message_thread_id)
            .flatten()
            .map(|t| t.to_string());
        if let Some(typed) = command {
            let request = SessionRequest {
                origin: origin.to_string(),
                chat,
                thread,
                message_id: Some(message.message_id.to_string()),
                user_id: sender.map(|s| s.to_string()),
                user_name: message.from.as_ref().map_or_else(|| "someone".into(), User::name),
                may: role >= Role::Approver,
                known: !stranger,
                topics: self.has_topics(&message.chat),
                max_sessions: self.config.routing.max_sessions,
                asked: Asked::Typed(typed),
            };
            return Some(TakenUpdate::Request(request));
        }
        let (message_type, content, attachments) = self.content_of(&message)?;
        let inbound = InboundMessage {
            session,
            origin: origin.to_string(),
            message_type,
            content,
            source_message_id: Some(message.message_id.to_string()),
            source_channel_id: Some(chat),
            source_thread_id: thread,
            actor_id: sender.map(|s| s.to_string()),
            actor_name: message.from.as_ref().map(User::name),
            actor_avatar_url: None,
            payload: None,
            attachments,
            album: message.media_group_id.clone(),
            album_quiet: self.config.album_quiet,
            prompt: None,
            route_by_chat: true,
            unlisted: stranger,
        };
        let reply_to = message.reply_to_message.as_ref().map(|r| r.message_id.to_string());
        let command = message
            .text
            .as_deref()
            .and_then(|text| approvals::command_of(text, reply_to.as_deref()));
        let Some((target, decision)) = command else {
            return Some(TakenUpdate::Message(inbound));
        };
        let otherwise = matches!(
            target,
            approvals::Target::Question { .. } | approvals::Target::OpenInChat
        )
        .then(|| Box::new(inbound.clone()));
        Some(TakenUpdate::Answer(ChatAnswer {
            target,
            decision,
            who: Answerer {
                name: message
                    .from
                    .as_ref()
                    .map_or_else(|| "someone".into(), User::first_name_or_username),
                id: inbound.actor_id.clone(),
                via: origin.to_string(),
                chat: Some((origin.to_string(), inbound.source_channel_id.clone()?)),
            },
            role,
            callback: None,
            message_id: inbound.source_message_id.clone(),
            otherwise,
        }))
    }

    /// A button of an approval's question tapped (`callback_query`): the answer it gives, if
    /// it is relayq's. Whoever tapped, the tap is answered (after it is recorded); a tap
    /// relayq cannot read is answered at once.
    fn tap(&self, id: i64, tap: &Value, origin: &str) -> Option<TakenUpdate> {
        let tap = match CallbackQuery::deserialize(tap) {
            Ok(tap) => tap,
            Err(e) => {
                tracing::error!(update = id, error = %e, "skipping a button tap relayq cannot read");
                return None;
            }
        };
        if let (Some(session_tap), Some(message)) = (tap.data.as_deref().and_then(Tap::read), &tap.message) {
            let role = self.role(Some(tap.from.id), message.chat.id);
            return Some(TakenUpdate::Request(SessionRequest {
                origin: origin.to_string(),
                chat: message.chat.id.to_string(),
                thread: message.message_thread_id.map(|t| t.to_string()),
                message_id: None,
                user_id: Some(tap.from.id.to_string()),
                user_name: tap.from.name(),
                may: role >= Role::Approver,
                known: role >= Role::Writer,
                topics: self.has_topics(&message.chat),
                max_sessions: self.config.routing.max_sessions,
                asked: Asked::Tapped { tap: session_tap, callback: Some(tap.id) },
            }));
        }
        let read = tap.data.as_deref().and_then(approvals::read_button_data);
        let (Some((approval, decision)), Some(message)) = (read, &tap.message) else {
            tracing::info!(update = id, user = tap.from.id, "a button tap that is not an approval's answer");
            self.answer_taps(vec![(tap.id, "This button is not relayq's, or too old to answer".into())]);
            return None;
        };
        let role = self.role(Some(tap.from.id), message.chat.id);
        if role < Role::Approver {
            tracing::warn!(update = id, user = tap.from.id, chat = message.chat.id, "someone who may not answer questions tapped an approval's button: refused");
        }
        Some(TakenUpdate::Answer(ChatAnswer {
            target: approvals::Target::Id(approval),
            decision,
            who: Answerer {
                name: tap.from.first_name_or_username(),
                id: Some(tap.from.id.to_string()),
                via: origin.to_string(),
                chat: Some((origin.to_string(), message.chat.id.to_string())),
            },
            role,
            callback: Some(tap.id),
            message_id: None,
            otherwise: None,
        }))
    }

    /// `answerCallbackQuery` for each tap: Telegram stops the button's spinner and shows the
    /// text. Cosmetic (the outcome is also in the edited question): failures are logged.
    fn answer_taps(&self, taps: Vec<(String, String)>) {
        if taps.is_empty() {
            return;
        }
        let client = self.short.clone();
        let url = self.method("answerCallbackQuery");
        // One after another, in the order they were tapped.
        actix_rt::spawn(async move {
            for (callback, text) in taps {
                let body = json!({"callback_query_id": callback, "text": crate::kit::cut_chars(&text, TAP_ANSWER_CHARS)});
                let request = client.post(url.clone()).json(body.to_string());
                match client.send(request).await {
                    Ok(reply) if reply.is_success() => {}
                    Ok(reply) => tracing::warn!(error = describe(&reply), "answerCallbackQuery refused"),
                    Err(no_answer) => tracing::warn!(error = no_answer.text().unwrap_or_default(), "answerCallbackQuery not sent"),
                }
            }
        });
    }

    /// Whether the sender or the chat is on the allowlist.
    /// What the settings let `sender` do in `chat`: their own role, and a writer's in a chat
    /// allowed as a whole (`allowed_chats`).
    fn role(&self, sender: Option<i64>, chat: i64) -> Role {
        let own = sender.map_or(Role::Stranger, |s| self.config.routing.role_of(&s));
        match self.config.allowed_chats.contains(&chat) {
            true => own.max(Role::Writer),
            false => own,
        }
    }

    /// The row's type, its text (or caption) and its files, as they arrived: what each file is
    /// (its `file_id`, name, size, type), fetched later by the node that delivers it. A file
    /// over the bot download limit, or a kind relayq does not take (a sticker, a location...),
    /// is a file not fetched, saying why. `None` for a message with nothing in it for an agent
    /// (a member joined, a pin).
    fn content_of(&self, m: &Message) -> Option<(MessageType, String, Vec<Attachment>)> {
        if let Some(text) = &m.text {
            return Some((MessageType::Text, text.clone(), Vec::new()));
        }
        let file = |kind: FileKind, f: &FileRef, name: Option<&String>| {
            let mut a = Attachment::new(kind, f.file_id.clone());
            a.name = name.cloned();
            a.size = f.file_size;
            a.mime = f.mime_type.clone();
            a.duration = f.duration;
            a.message = Some(m.message_id.to_string());
            let limit = self.config.max_download_bytes;
            if let Some(size) = f.file_size.filter(|size| *size > limit) {
                a.skipped = Some(format!(
                    "it is {}, over the {} a bot may download from Telegram",
                    human_size(size),
                    human_size(limit)
                ));
            }
            a
        };
        let attachment = if let Some(voice) = &m.voice {
            file(FileKind::Voice, voice, None)
        } else if let Some(audio) = &m.audio {
            file(FileKind::Audio, &audio.file, audio.file_name.as_ref())
        } else if let Some(doc) = &m.document {
            file(FileKind::Document, &doc.file, doc.file_name.as_ref())
        } else if let Some(photo) = m.photo.as_ref().and_then(|sizes| sizes.last()) {
            file(FileKind::Photo, photo, None)
        } else if let Some(video) = &m.video {
            file(FileKind::Video, &video.file, video.file_name.as_ref())
        } else if let Some(note) = &m.video_note {
            file(FileKind::VideoNote, note, None)
        } else if let Some(animation) = &m.animation {
            file(FileKind::Animation, &animation.file, animation.file_name.as_ref())
        } else if let Some(kind) = NOT_TAKEN.iter().find(|k| m.other.contains_key(**k)) {
            let mut a = Attachment::not_fetched(FileKind::Other, format!("relayq does not take {kind}s"));
            a.name = Some(kind.replace('_', " "));
            a.message = Some(m.message_id.to_string());
            a
        } else {
            tracing::info!(chat = m.chat.id, message = m.message_id, "skipping a message with nothing in it for an agent (a member joined, a pin...)");
            return None;
        };
        let kind = match attachment.kind {
            FileKind::Voice => MessageType::Voice,
            _ => MessageType::File,
        };
        Some((kind, m.caption.clone().unwrap_or_default(), vec![attachment]))
    }

    /// `sendChatAction typing`: the chat sees the agent has its message. Failures are only
    /// logged; nothing depends on it.
    async fn typing(&self, chat: &str, thread: Option<&str>) {
        let mut body = json!({"chat_id": number_or_text(chat), "action": "typing"});
        if let Some(thread) = thread {
            body["message_thread_id"] = number_or_text(thread);
        }
        match self.call(&self.short, "sendChatAction", &body).await {
            Ok(reply) if reply.is_success() => {}
            Ok(reply) => tracing::debug!(chat, error = describe(&reply), "typing indicator refused"),
            Err(error) => tracing::debug!(chat, error, "typing indicator not sent"),
        }
    }
}

/// The updates relayq asks Telegram for: messages, and the taps on its questions' buttons.
pub const ALLOWED_UPDATES: [&str; 2] = ["message", "callback_query"];

/// What an update is to relayq.
enum TakenUpdate {
    Message(InboundMessage),
    Answer(ChatAnswer),
    Request(SessionRequest),
}

/// The most characters `answerCallbackQuery` shows.
const TAP_ANSWER_CHARS: usize = 200;

/// The first `update_id` in the start of a `getUpdates` answer that was cut.
fn first_update_id(cut: &str) -> Option<i64> {
    let after = cut.split_once("\"update_id\"")?.1.trim_start().strip_prefix(':')?;
    let digits: String = after.trim_start().chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// No news: the same offset.
fn empty(offset: i64) -> Batch {
    Batch {
        offset: offset.to_string(),
        ..Batch::default()
    }
}

/// Why a Bot API call did not give a result.
#[derive(Debug)]
enum Refusal {
    /// 429: come back after this.
    Wait(Duration),
    Failed(String),
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::Wait(wait) => write!(f, "Telegram asks to wait {wait:?} (429)"),
            Refusal::Failed(error) => f.write_str(error),
        }
    }
}

/// The `result` of an `ok: true` answer, or what went wrong, in words an operator can act on.
fn answered(reply: &Reply) -> Result<Value, Refusal> {
    let answer = reply.json::<BotApiReply>();
    if reply.is_success() {
        if let Some(BotApiReply {
            ok: true,
            result: Some(result),
            ..
        }) = answer
        {
            return Ok(result);
        }
    }
    let error = describe(reply);
    Err(match reply.status {
        409 => Refusal::Failed(format!(
            "{error}: another program is reading this bot's updates (a second relayq, another bot \
             framework, or a webhook set with setWebhook). Stop it, or give relayq a bot of its own"
        )),
        401 | 404 => Refusal::Failed(format!(
            "{error}: Telegram does not know this bot token; check token_env / token_file"
        )),
        429 => {
            let wait = answer
                .and_then(|a| a.parameters)
                .and_then(|p| p.retry_after)
                .map(Duration::from_secs)
                .or(reply.retry_after)
                .unwrap_or(Duration::from_secs(5));
            Refusal::Wait(wait.min(crate::kit::http::MAX_RETRY_AFTER))
        }
        _ => Refusal::Failed(error),
    })
}

/// The parts of a Telegram `Message` relayq reads.
#[derive(Debug, Deserialize)]
struct Message {
    message_id: i64,
    /// The message this one replies to (a yes or no to an approval's question).
    #[serde(default)]
    reply_to_message: Option<Box<Replied>>,
    #[serde(default)]
    message_thread_id: Option<i64>,
    #[serde(default)]
    is_topic_message: bool,
    #[serde(default)]
    from: Option<User>,
    chat: Chat,
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    caption: Option<String>,
    #[serde(default)]
    voice: Option<FileRef>,
    #[serde(default)]
    document: Option<Document>,
    #[serde(default)]
    photo: Option<Vec<FileRef>>,
    #[serde(default)]
    audio: Option<Document>,
    #[serde(default)]
    video: Option<Document>,
    #[serde(default)]
    video_note: Option<FileRef>,
    #[serde(default)]
    animation: Option<Document>,
    /// An album's messages share it.
    #[serde(default)]
    media_group_id: Option<String>,
    /// The rest: what kind of thing it is, when it is one relayq does not take.
    #[serde(flatten)]
    other: serde_json::Map<String, Value>,
}

/// What a message may be that relayq does not pass on as a file, named in the line the agent
/// and the chat get instead.
const NOT_TAKEN: [&str; 9] = [
    "sticker", "location", "contact", "poll", "venue", "dice", "game", "story", "paid_media",
];

#[derive(Debug, Deserialize)]
struct Replied {
    message_id: i64,
}

/// `CallbackQuery`: a tap on an inline keyboard's button.
#[derive(Debug, Deserialize)]
struct CallbackQuery {
    id: String,
    from: User,
    #[serde(default)]
    message: Option<TappedMessage>,
    #[serde(default)]
    data: Option<String>,
}

/// The message whose button was tapped (`MaybeInaccessibleMessage`: its id and chat).
#[derive(Debug, Deserialize)]
struct TappedMessage {
    chat: Chat,
    #[serde(default)]
    message_thread_id: Option<i64>,
}

#[derive(Debug, Deserialize)]
struct User {
    id: i64,
    #[serde(default)]
    first_name: String,
    #[serde(default)]
    username: Option<String>,
}

impl User {
    /// `@username`, or the first name.
    fn name(&self) -> String {
        match &self.username {
            Some(u) => format!("@{u}"),
            None => self.first_name.clone(),
        }
    }

    /// The first name (as a person is addressed: "Allowed by Alice"), or `@username`.
    fn first_name_or_username(&self) -> String {
        match self.first_name.trim() {
            "" => self.name(),
            first => first.to_string(),
        }
    }
}

#[derive(Debug, Deserialize)]
struct Chat {
    id: i64,
    /// `private`, `group`, `supergroup` or `channel`.
    #[serde(rename = "type", default)]
    kind: String,
    /// A supergroup with topics (a forum): a session started there gets a topic of its own.
    #[serde(default)]
    is_forum: bool,
}

/// A file: a voice note, a photo size, a video note, or the file of a document, audio, video
/// or animation.
#[derive(Debug, Deserialize)]
struct FileRef {
    file_id: String,
    #[serde(default)]
    file_size: Option<u64>,
    #[serde(default)]
    mime_type: Option<String>,
    #[serde(default)]
    duration: Option<u64>,
}

#[derive(Debug, Deserialize)]
struct Document {
    #[serde(flatten)]
    file: FileRef,
    #[serde(default)]
    file_name: Option<String>,
}
