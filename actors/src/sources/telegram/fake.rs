//! A Telegram Bot API on loopback, answering as <https://core.telegram.org/bots/api> documents
//! (and as `tests/fixtures/telegram` shows): `getMe`, `getUpdates` (a long poll that confirms
//! updates below the asked offset, as Telegram does), `sendMessage`, `sendChatAction`,
//! `getFile` and file downloads, and for inline keyboards `callback_query` updates,
//! `answerCallbackQuery` (once per query) and `editMessageText` (the bot's own messages; "not
//! modified" and "not found" as Telegram words them), and forum topics (`createForumTopic`,
//! `closeForumTopic`, `message_thread_id` on sends and messages, "message thread not found"
//! for a topic that is gone, "the chat is not a forum", "not enough rights to create a
//! topic"). A wrong token is answered 401. Tests push updates in, read what was sent, and
//! script failures.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::testing::loopback::{Answer, Asked, Loopback};

/// The fake bot's username (`getMe`).
pub const BOT_USERNAME: &str = "relayq_test_bot";

#[derive(Clone)]
pub struct FakeTelegram {
    /// The base URL to give as `api_url`.
    pub url: String,
    pub token: String,
    shared: Arc<(Mutex<FakeState>, Condvar)>,
}

#[derive(Default)]
struct FakeState {
    /// Updates not yet confirmed (a later poll's offset confirms them).
    pending: Vec<Value>,
    next_update_id: i64,
    next_message_id: i64,
    /// `sendMessage` bodies that were answered ok, in order.
    sent: Vec<Value>,
    /// When each of `sent` came, and to which chat.
    sent_at: Vec<(String, Instant)>,
    /// `sendChatAction` bodies.
    actions: Vec<Value>,
    /// `getUpdates` calls, and the offsets they asked for.
    polls: Vec<i64>,
    /// The `limit` each `getUpdates` call asked for (0 when it gave none).
    limits: Vec<u64>,
    /// The highest update id a poll has answered with.
    served: i64,
    /// Answers the next polls get instead of updates.
    poll_failures: VecDeque<(u16, Value)>,
    /// The polls answered with a failure: their place among `polls`, and when.
    refused_polls: Vec<(usize, Instant)>,
    /// Counts `getUpdates` calls: a poll still waiting when a newer one comes is ended by it.
    poll_generation: u64,
    /// Polls ended by a newer one (Telegram's 409 "terminated by other getUpdates request"):
    /// two programs were reading the bot's updates at once (or a killed one's poll was still
    /// waiting). When each happened.
    conflicts: Vec<Instant>,
    /// Answers the next sends get instead of ok.
    send_failures: VecDeque<(u16, Value)>,
    /// file_id → (file_path, bytes).
    files: HashMap<String, (String, Vec<u8>)>,
    /// The files the bot sent (`sendPhoto`, `sendDocument`), in order.
    files_sent: Vec<FileSent>,
    /// The next `sendPhoto` calls refused as Telegram refuses a photo it cannot show.
    refuse_photos: usize,
    /// The next this many file transfers (a download, a `sendPhoto` or `sendDocument`) are
    /// held this long before they are answered: a crash meanwhile cuts one mid-way.
    held_transfers: (usize, Duration),
    /// `setWebhook` bodies; while the last one set a URL, `getUpdates` is refused (409).
    webhooks: Vec<Value>,
    /// The bot's messages as they are now (edits applied): `message_id`, `chat_id`, `text`,
    /// `reply_markup`.
    messages: Vec<Value>,
    /// `editMessageText` bodies that were answered ok, in order.
    edits: Vec<Value>,
    /// Callback queries pushed: id → answered yet.
    callbacks: HashMap<String, bool>,
    /// `answerCallbackQuery` bodies, in order (refused ones too, marked `"refused": true`).
    callback_answers: Vec<Value>,
    /// Forum chats and their topics (`message_thread_id`, `name`, `closed`, `deleted`).
    forums: HashMap<i64, Vec<Value>>,
    /// Forums where the bot may not create topics.
    no_topic_rights: Vec<i64>,
    next_thread_id: i64,
    /// The last `setMyCommands` list.
    commands: Vec<Value>,
    /// The bot has topics in private chats.
    private_topics: bool,
    /// Every call to a chat that Telegram's limits count (`sendMessage`, `editMessageText`,
    /// `setMessageReaction`), refused ones too, in order.
    calls: Vec<ChatCall>,
    /// Refuse calls past Telegram's documented limits with 429 (see [`FakeTelegram::enforce_limits`]).
    limits_enforced: bool,
    /// The bot's reaction on each message now: (chat, message id) → emoji.
    reactions: HashMap<(i64, i64), String>,
    /// `sendMessageDraft` calls answered ok: (chat, draft id, text), in order.
    drafts: Vec<(i64, i64, String)>,
    /// The next this many reactions and edits are answered 429 (retry after 2 s).
    cosmetic_refusals: usize,
}

/// A file the bot sent, as the fake read its form.
#[derive(Debug, Clone, PartialEq)]
pub struct FileSent {
    /// `sendPhoto` or `sendDocument`.
    pub method: String,
    pub chat_id: String,
    pub thread: Option<String>,
    pub caption: Option<String>,
    pub filename: String,
    pub content_type: Option<String>,
    pub size: usize,
    /// Hex.
    pub sha256: String,
}

/// A call to a chat, as the fake's limits count it.
#[derive(Debug, Clone)]
pub struct ChatCall {
    pub method: String,
    pub chat: i64,
    pub at: Instant,
    /// When, as a wall clock (unix ms): to compare with another process's times.
    pub unix_ms: i64,
    /// What was asked.
    pub body: Value,
    /// Refused with 429: past a limit.
    pub refused: bool,
}

/// The limits [`FakeTelegram::enforce_limits`] enforces, as the Bot FAQ states them: about one
/// message a second to a chat (edits and reactions counted; 10 % slack for the network's
/// jitter), 20 a minute to a group, 30 a second in all.
pub const CHAT_GAP: Duration = Duration::from_millis(900);
pub const GROUP_PER_MINUTE: usize = 20;
pub const BOT_PER_SECOND: usize = 30;

impl FakeTelegram {
    /// Serves on a free loopback port, for bot `token`.
    pub fn start(token: &str) -> FakeTelegram {
        let shared = Arc::new((
            Mutex::new(FakeState {
                next_update_id: 700_000_000,
                next_message_id: 1,
                ..FakeState::default()
            }),
            Condvar::new(),
        ));
        let mut fake = FakeTelegram {
            url: String::new(),
            token: token.to_string(),
            shared,
        };
        let serving = fake.clone();
        let server = Loopback::start(0, move |asked| serving.answer(asked));
        fake.url = server.url();
        // It serves for the rest of the process, as the platform would.
        std::mem::forget(server);
        fake
    }

    /// Queues an update holding `message` (a Telegram `Message` object); its update id.
    pub fn push_message(&self, message: Value) -> i64 {
        let (lock, ready) = &*self.shared;
        let mut state = lock.lock().unwrap();
        let id = state.next_update_id;
        state.next_update_id += 1;
        state
            .pending
            .push(json!({"update_id": id, "message": message}));
        ready.notify_all();
        id
    }

    /// Queues a text from `user` in chat `chat` (a private chat when they are equal); the
    /// update id, as [`Self::push_message`].
    pub fn push_text(&self, chat: i64, user: i64, text: &str) -> i64 {
        let message_id = self.take_message_id();
        let forum = self.shared.0.lock().unwrap().forums.contains_key(&chat);
        self.push_message(json!({
            "message_id": message_id,
            "from": {"id": user, "is_bot": false, "first_name": "Alice", "username": format!("user{user}")},
            "chat": {"id": chat, "type": if chat == user { "private" } else { "supergroup" }, "is_forum": forum},
            "date": 1767225600,
            "text": text,
        }))
    }

    /// Queues a message from `user` in private chat `user` holding `media` (its fields: `photo`,
    /// `document`, `voice`, a `caption`, a `media_group_id`...); its message id.
    pub fn push_media(&self, user: i64, media: Value) -> i64 {
        let message_id = self.take_message_id();
        let mut message = json!({
            "message_id": message_id,
            "from": {"id": user, "is_bot": false, "first_name": "Alice", "username": format!("user{user}")},
            "chat": {"id": user, "type": "private"},
            "date": 1767225600,
        });
        let fields = media.as_object().expect("media is an object").clone();
        message.as_object_mut().unwrap().extend(fields);
        self.push_message(message);
        message_id
    }

    /// The bot's commands as last registered (`setMyCommands`).
    pub fn commands(&self) -> Vec<Value> {
        self.shared.0.lock().unwrap().commands.clone()
    }

    /// Makes `chat` a forum supergroup (topics on): its messages say `is_forum`.
    pub fn make_forum(&self, chat: i64) {
        self.shared.0.lock().unwrap().forums.entry(chat).or_default();
    }

    /// Turns on the bot's topics in private chats (Bot API 9.3: `getMe` says
    /// `has_topics_enabled`, and `createForumTopic` works in a private chat).
    pub fn enable_private_topics(&self) {
        self.shared.0.lock().unwrap().private_topics = true;
    }

    /// Takes from the bot the right to create topics in forum `chat`.
    pub fn refuse_topics(&self, chat: i64) {
        self.shared.0.lock().unwrap().no_topic_rights.push(chat);
    }

    /// The topics of forum `chat`, oldest first (`message_thread_id`, `name`, `closed`).
    pub fn topics(&self, chat: i64) -> Vec<Value> {
        let state = self.shared.0.lock().unwrap();
        state.forums.get(&chat).cloned().unwrap_or_default()
    }

    /// The id of forum `chat`'s topic named `name`, once there is one.
    pub fn topic_named(&self, chat: i64, name: &str) -> Option<i64> {
        let topics = self.topics(chat);
        let topic = topics.iter().find(|t| t["name"] == name)?;
        topic["message_thread_id"].as_i64()
    }

    /// The texts of the bot's messages in `chat` within topic `thread` (`None`: the chat
    /// itself, outside every topic), in order.
    pub fn texts_in_topic(&self, chat: i64, thread: Option<i64>) -> Vec<String> {
        self.bot_messages()
            .iter()
            .filter(|m| m["chat_id"] == chat && m["message_thread_id"].as_i64() == thread)
            .filter_map(|m| m["text"].as_str().map(str::to_string))
            .collect()
    }

    /// Deletes a topic: a send to it is then "message thread not found".
    pub fn delete_topic(&self, chat: i64, thread: i64) {
        let mut state = self.shared.0.lock().unwrap();
        for topic in state.forums.entry(chat).or_default() {
            if topic["message_thread_id"] == thread {
                topic["deleted"] = json!(true);
            }
        }
    }

    /// Queues a text from `user` in topic `thread` of forum `chat` (of their private chat, when
    /// `chat` is `user`); the update id.
    pub fn push_text_in_topic(&self, chat: i64, user: i64, thread: i64, text: &str) -> i64 {
        let message_id = self.take_message_id();
        self.push_message(json!({
            "message_id": message_id,
            "message_thread_id": thread,
            "is_topic_message": true,
            "from": {"id": user, "is_bot": false, "first_name": "Alice", "username": format!("user{user}")},
            "chat": if chat == user {
                json!({"id": chat, "type": "private"})
            } else {
                json!({"id": chat, "type": "supergroup", "is_forum": true})
            },
            "date": 1767225600,
            "text": text,
        }))
    }

    /// Queues a tap by `user` (first name `name`) on a button with `data` of the bot's
    /// message `message_id` in `chat` (a `callback_query` update); the callback query's id.
    /// Pushes an update as the fixtures hold it (its `update_id` replaced by the next one); a
    /// `callback_query` in it may then be answered once.
    pub fn push_update(&self, mut update: Value) -> i64 {
        let (lock, ready) = &*self.shared;
        let mut state = lock.lock().unwrap();
        let id = state.next_update_id;
        state.next_update_id += 1;
        update["update_id"] = json!(id);
        if let Some(query) = update["callback_query"]["id"].as_str() {
            state.callbacks.insert(query.to_string(), false);
        }
        state.pending.push(update);
        ready.notify_all();
        id
    }

    pub fn push_tap(
        &self,
        chat: i64,
        user: i64,
        name: &str,
        message_id: i64,
        data: &str,
    ) -> String {
        let (lock, ready) = &*self.shared;
        let mut state = lock.lock().unwrap();
        let id = state.next_update_id;
        state.next_update_id += 1;
        let query = format!("{}{id}", 4_000_000_000u64 + user.unsigned_abs());
        state.callbacks.insert(query.clone(), false);
        let tapped = state
            .messages
            .iter()
            .find(|m| m["chat_id"] == json!(chat) && m["message_id"] == json!(message_id));
        let text = tapped.map(|m| m["text"].clone()).unwrap_or(Value::Null);
        let thread = tapped.map(|m| m["message_thread_id"].clone()).unwrap_or(Value::Null);
        let forum = state.forums.contains_key(&chat);
        state.pending.push(json!({"update_id": id, "callback_query": {
            "id": query,
            "from": {"id": user, "is_bot": false, "first_name": name,
                     "username": format!("user{user}")},
            "message": {"message_id": message_id, "message_thread_id": thread,
                        "from": {"id": 42, "is_bot": true, "first_name": "relayq test", "username": BOT_USERNAME},
                        "chat": {"id": chat, "type": if chat == user { "private" } else { "supergroup" },
                                 "is_forum": forum},
                        "date": 1767225600, "text": text},
            "chat_instance": format!("-{}", chat.unsigned_abs()),
            "data": data,
        }}));
        ready.notify_all();
        query
    }

    /// The bot's messages as they are now, edits applied (`message_id`, `chat_id`, `text`,
    /// `reply_markup`).
    pub fn bot_messages(&self) -> Vec<Value> {
        self.shared.0.lock().unwrap().messages.clone()
    }

    /// The bot's message `id` as it is now, if it sent one.
    pub fn bot_message(&self, id: i64) -> Option<Value> {
        self.bot_messages()
            .into_iter()
            .find(|m| m["message_id"] == json!(id))
    }

    /// A bot message's inline buttons, in order: (label, `callback_data`).
    pub fn buttons(message: &Value) -> Vec<(String, String)> {
        let rows = message["reply_markup"]["inline_keyboard"].as_array();
        rows.into_iter()
            .flatten()
            .filter_map(Value::as_array)
            .flatten()
            .map(|b| {
                let label = b["text"].as_str().unwrap_or_default().to_string();
                (
                    label,
                    b["callback_data"].as_str().unwrap_or_default().to_string(),
                )
            })
            .collect()
    }

    /// The texts of the tap answers (`answerCallbackQuery`) so far, in order.
    pub fn tap_answers(&self) -> Vec<String> {
        self.callback_answers()
            .iter()
            .map(|a| a["text"].as_str().unwrap_or_default().to_string())
            .collect()
    }

    /// Every `editMessageText` answered ok so far.
    pub fn edits(&self) -> Vec<Value> {
        self.shared.0.lock().unwrap().edits.clone()
    }

    /// Every `answerCallbackQuery` so far (a refused one has `"refused": true`).
    pub fn callback_answers(&self) -> Vec<Value> {
        self.shared.0.lock().unwrap().callback_answers.clone()
    }

    /// A fresh message id, as Telegram numbers a chat's messages.
    pub fn take_message_id(&self) -> i64 {
        let mut state = self.shared.0.lock().unwrap();
        state.next_message_id += 1;
        state.next_message_id
    }

    /// A file `getFile` finds and the download serves.
    pub fn add_file(&self, file_id: &str, file_path: &str, bytes: &[u8]) {
        let mut state = self.shared.0.lock().unwrap();
        state
            .files
            .insert(file_id.into(), (file_path.into(), bytes.to_vec()));
    }

    /// The next `getUpdates` calls are answered `status` with `body`, one each.
    pub fn fail_polls(&self, status: u16, body: Value, times: usize) {
        let mut state = self.shared.0.lock().unwrap();
        for _ in 0..times {
            state.poll_failures.push_back((status, body.clone()));
        }
    }

    /// The next `sendMessage` calls are answered `status` with `body`, one each.
    pub fn fail_sends(&self, status: u16, body: Value, times: usize) {
        let mut state = self.shared.0.lock().unwrap();
        for _ in 0..times {
            state.send_failures.push_back((status, body.clone()));
        }
    }

    /// Every `sendMessage` answered ok so far.
    pub fn sent(&self) -> Vec<Value> {
        self.shared.0.lock().unwrap().sent.clone()
    }

    /// The texts sent to `chat`, in order.
    pub fn texts_to(&self, chat: i64) -> Vec<String> {
        self.sent()
            .iter()
            .filter(|m| m["chat_id"] == json!(chat))
            .filter_map(|m| m["text"].as_str().map(str::to_string))
            .collect()
    }

    /// Every `sendChatAction` so far.
    pub fn actions(&self) -> Vec<Value> {
        self.shared.0.lock().unwrap().actions.clone()
    }

    /// The offsets the `getUpdates` calls so far asked for.
    /// The `setWebhook` calls' bodies, in order.
    pub fn webhooks(&self) -> Vec<Value> {
        self.shared.0.lock().unwrap().webhooks.clone()
    }

    fn webhook_set(&self) -> bool {
        let state = self.shared.0.lock().unwrap();
        state
            .webhooks
            .last()
            .is_some_and(|w| w["url"].as_str().is_some_and(|u| !u.is_empty()))
    }

    pub fn polls(&self) -> Vec<i64> {
        self.shared.0.lock().unwrap().polls.clone()
    }

    /// The `limit` each `getUpdates` call asked for (0 when it gave none).
    pub fn poll_limits(&self) -> Vec<u64> {
        self.shared.0.lock().unwrap().limits.clone()
    }

    /// The polls answered with a failure: their place among [`Self::polls`], and when.
    pub fn refused_polls(&self) -> Vec<(usize, Instant)> {
        self.shared.0.lock().unwrap().refused_polls.clone()
    }

    /// The highest update id a poll has answered with (0: none yet).
    /// The most messages one chat got within any `window`, and the most the bot sent within
    /// any `window`: what Telegram's budgets are about.
    pub fn most_sends_within(&self, window: Duration) -> (usize, usize) {
        let state = self.shared.0.lock().unwrap();
        let most = |times: &[Instant]| {
            (0..times.len())
                .map(|i| {
                    times[i..]
                        .iter()
                        .take_while(|t| **t - times[i] < window)
                        .count()
                })
                .max()
                .unwrap_or(0)
        };
        let mut chats: HashMap<&str, Vec<Instant>> = HashMap::new();
        for (chat, at) in &state.sent_at {
            chats.entry(chat).or_default().push(*at);
        }
        let per_chat = chats.values().map(|times| most(times)).max().unwrap_or(0);
        let all: Vec<Instant> = state.sent_at.iter().map(|(_, at)| *at).collect();
        (per_chat, most(&all))
    }

    /// When polls were ended by another program's poll (Telegram's 409 "terminated by other
    /// getUpdates request").
    pub fn conflicts(&self) -> Vec<Instant> {
        self.shared.0.lock().unwrap().conflicts.clone()
    }

    pub fn served(&self) -> i64 {
        self.shared.0.lock().unwrap().served
    }

    /// Waits until `done` holds for the sent messages, or panics after `limit`.
    pub fn wait_sent(&self, limit: Duration, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
        let start = Instant::now();
        loop {
            let sent = self.sent();
            if done(&sent) {
                return sent;
            }
            assert!(
                start.elapsed() < limit,
                "not sent within {limit:?}; sent so far: {sent:#?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn answer(&self, asked: Asked) -> Answer {
        let transfer = asked.url.starts_with(&format!("/file/bot{}/", self.token))
            || asked.url.ends_with("/sendPhoto")
            || asked.url.ends_with("/sendDocument");
        if transfer {
            let hold = {
                let mut state = self.shared.0.lock().unwrap();
                let (n, wait) = state.held_transfers;
                state.held_transfers.0 = n.saturating_sub(1);
                (n > 0).then_some(wait)
            };
            if let Some(wait) = hold {
                std::thread::sleep(wait);
            }
        }
        let routed = match self.file_sent(&asked) {
            Some(answered) => answered,
            None => self.route(&asked.url, &asked.text()),
        };
        match routed {
            (status, Scripted::Json(v)) => {
                Answer::new(status, wire(&v)).header("Content-Type", "application/json")
            }
            (status, Scripted::Bytes(b)) => Answer::new(status, b),
        }
    }

    /// `sendPhoto` or `sendDocument` with a multipart form, as the Bot API takes a file: at
    /// most 10 MB as a photo, 50 MB as a document (413 past it, as Telegram's server).
    fn file_sent(&self, asked: &Asked) -> Option<(u16, Scripted)> {
        let method = asked.url.strip_prefix(&format!("/bot{}/", self.token))?;
        let field = match method {
            "sendPhoto" => "photo",
            "sendDocument" => "document",
            _ => return None,
        };
        let form = asked.form();
        let text = |name: &str| form.iter().find(|f| f.name == name).map(|f| f.text());
        let Some(file) = form.iter().find(|f| f.name == field) else {
            return Some((400, Scripted::Json(error(400, &format!("Bad Request: there is no {field} in the request")))));
        };
        let limit = if field == "photo" { 10 << 20 } else { 50 << 20 };
        let mut state = self.shared.0.lock().unwrap();
        if file.bytes.len() > limit {
            return Some((413, Scripted::Json(error(413, "Request Entity Too Large"))));
        }
        if field == "photo" && state.refuse_photos > 0 {
            state.refuse_photos -= 1;
            return Some((400, Scripted::Json(error(400, "Bad Request: PHOTO_INVALID_DIMENSIONS"))));
        }
        let message_id = state.next_message_id;
        state.next_message_id += 1;
        let digest = ring::digest::digest(&ring::digest::SHA256, &file.bytes);
        state.files_sent.push(FileSent {
            method: method.to_string(),
            chat_id: text("chat_id").unwrap_or_default(),
            thread: text("message_thread_id"),
            caption: text("caption"),
            filename: file.filename.clone().unwrap_or_default(),
            content_type: file.content_type.clone(),
            size: file.bytes.len(),
            sha256: digest.as_ref().iter().map(|b| format!("{b:02x}")).collect(),
        });
        Some(ok(json!({"message_id": message_id, "date": 1767225600,
                       "chat": {"id": text("chat_id").and_then(|c| c.parse::<i64>().ok())}})))
        .map(|(status, v)| (status, Scripted::Json(v)))
    }

    /// The files the bot sent, in order.
    pub fn files_sent(&self) -> Vec<FileSent> {
        self.shared.0.lock().unwrap().files_sent.clone()
    }

    /// Waits until the bot sent `n` files (or `limit` passed); the files sent.
    pub fn wait_files(&self, n: usize, limit: Duration) -> Vec<FileSent> {
        let end = Instant::now() + limit;
        while self.files_sent().len() < n && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(50));
        }
        self.files_sent()
    }

    /// The next `n` file transfers (downloads, files sent) are held `wait` before they are
    /// answered (see `held_transfers`).
    pub fn hold_transfers(&self, n: usize, wait: Duration) {
        self.shared.0.lock().unwrap().held_transfers = (n, wait);
    }

    /// Whether every transfer [`Self::hold_transfers`] asked to hold has come (and is held, or
    /// was).
    pub fn transfers_held(&self) -> bool {
        self.shared.0.lock().unwrap().held_transfers.0 == 0
    }

    /// The next `n` photos are refused as Telegram refuses one it cannot show.
    pub fn refuse_photos(&self, n: usize) {
        self.shared.0.lock().unwrap().refuse_photos = n;
    }

    fn route(&self, path: &str, body: &str) -> (u16, Scripted) {
        let bot = format!("/bot{}/", self.token);
        let files = format!("/file/bot{}/", self.token);
        if let Some(file_path) = path.strip_prefix(&files) {
            let state = self.shared.0.lock().unwrap();
            return match state.files.values().find(|(p, _)| p == file_path) {
                Some((_, bytes)) => (200, Scripted::Bytes(bytes.clone())),
                None => (404, Scripted::Json(error(404, "Not Found"))),
            };
        }
        let Some(method) = path.strip_prefix(&bot) else {
            return (401, Scripted::Json(error(401, "Unauthorized")));
        };
        let args: Value = serde_json::from_str(body).unwrap_or(json!({}));
        let counted = ["sendMessage", "editMessageText", "setMessageReaction", "sendMessageDraft"];
        let wait = counted
            .contains(&method)
            .then(|| self.over_limit(method, &args))
            .flatten();
        let (status, value) = match method {
            "getMe" => {
                let topics = self.shared.0.lock().unwrap().private_topics;
                ok(
                    json!({"id": 42, "is_bot": true, "first_name": "relayq test", "username": BOT_USERNAME,
                           "has_topics_enabled": topics}),
                )
            }
            "getUpdates" if self.webhook_set() => (
                409,
                error(409, "Conflict: can't use getUpdates method while webhook is active; use deleteWebhook to delete the webhook first"),
            ),
            "getUpdates" => self.get_updates(&args),
            "setWebhook" => {
                self.shared.0.lock().unwrap().webhooks.push(args);
                ok(json!(true))
            }
            "sendMessage" | "editMessageText" | "setMessageReaction" | "sendMessageDraft"
                if wait.is_some() =>
            {
                let wait = wait.unwrap_or(1);
                self.count_call(method, &args, true);
                (429, json!({"ok": false, "error_code": 429,
                             "description": format!("Too Many Requests: retry after {wait}"),
                             "parameters": {"retry_after": wait}}))
            }
            "sendMessage" => {
                self.count_call(method, &args, false);
                self.send_message(args)
            }
            "setMessageReaction" => {
                self.count_call(method, &args, false);
                self.set_message_reaction(args)
            }
            "sendMessageDraft" => {
                self.count_call(method, &args, false);
                self.send_message_draft(args)
            }
            "createForumTopic" => self.create_forum_topic(args),
            "setMyCommands" => {
                let list = args["commands"].as_array().cloned().unwrap_or_default();
                self.shared.0.lock().unwrap().commands = list;
                ok(json!(true))
            }
            "closeForumTopic" => self.close_forum_topic(args),
            "editMessageText" => {
                self.count_call(method, &args, false);
                self.edit_message_text(args)
            }
            "answerCallbackQuery" => self.answer_callback_query(args),
            "sendChatAction" => {
                self.shared.0.lock().unwrap().actions.push(args);
                ok(json!(true))
            }
            "getFile" => {
                let state = self.shared.0.lock().unwrap();
                let id = args["file_id"].as_str().unwrap_or_default();
                match state.files.get(id) {
                    Some((p, bytes)) => ok(
                        json!({"file_id": id, "file_unique_id": "u", "file_size": bytes.len(), "file_path": p}),
                    ),
                    None => (400, error(400, "Bad Request: invalid file_id")),
                }
            }
            _ => (404, error(404, "Not Found")),
        };
        (status, Scripted::Json(value))
    }

    fn get_updates(&self, args: &Value) -> (u16, Value) {
        let offset = args["offset"].as_i64().unwrap_or(0);
        let timeout = Duration::from_secs(args["timeout"].as_u64().unwrap_or(0));
        let (lock, ready) = &*self.shared;
        let mut state = lock.lock().unwrap();
        state.polls.push(offset);
        state.limits.push(args["limit"].as_u64().unwrap_or(0));
        if let Some((status, body)) = state.poll_failures.pop_front() {
            let place = state.polls.len() - 1;
            state.refused_polls.push((place, Instant::now()));
            return (status, body);
        }
        // An offset confirms every update below it: Telegram forgets them.
        state
            .pending
            .retain(|u| u["update_id"].as_i64().unwrap_or(0) >= offset);
        // As Telegram does, a newer poll ends this one while it waits: one reader at a time.
        state.poll_generation += 1;
        let generation = state.poll_generation;
        ready.notify_all();
        let deadline = Instant::now() + timeout;
        while state.pending.is_empty() && Instant::now() < deadline {
            state = ready
                .wait_timeout(state, deadline - Instant::now())
                .unwrap()
                .0;
            if state.poll_generation != generation {
                state.conflicts.push(Instant::now());
                return (
                    409,
                    error(409, "Conflict: terminated by other getUpdates request; make sure that only one bot instance is running"),
                );
            }
        }
        let limit = args["limit"].as_u64().unwrap_or(100).clamp(1, 100) as usize;
        if let Some(last) = state
            .pending
            .iter()
            .take(limit)
            .filter_map(|u| u["update_id"].as_i64())
            .max()
        {
            state.served = state.served.max(last);
        }
        // At most `limit` updates (1 to 100, 100 when not given), oldest first.
        let answer: Vec<Value> = state.pending.iter().take(limit).cloned().collect();
        ok(Value::Array(answer))
    }

    fn send_message(&self, args: Value) -> (u16, Value) {
        let mut state = self.shared.0.lock().unwrap();
        if let Some(failure) = state.send_failures.pop_front() {
            return failure;
        }
        if let Some(thread) = args.get("message_thread_id") {
            let chat = args["chat_id"].as_i64().unwrap_or_default();
            let there = state.forums.get(&chat).is_some_and(|topics| {
                topics
                    .iter()
                    .any(|t| t["message_thread_id"] == *thread && t["deleted"] != true)
            });
            if !there {
                return (400, error(400, "Bad Request: message thread not found"));
            }
        }
        state.next_message_id += 1;
        let id = state.next_message_id;
        state.sent.push(args.clone());
        state
            .sent_at
            .push((args["chat_id"].to_string(), Instant::now()));
        state
            .messages
            .push(json!({"message_id": id, "chat_id": args["chat_id"],
            "message_thread_id": args["message_thread_id"],
            "text": args["text"], "reply_markup": args["reply_markup"]}));
        ok(json!({
            "message_id": id,
            "from": {"id": 42, "is_bot": true, "first_name": "relayq test", "username": BOT_USERNAME},
            "chat": {"id": args["chat_id"], "type": "private"},
            "date": 1767225600,
            "text": args["text"],
        }))
    }
}

impl FakeTelegram {
    /// From now on, calls past Telegram's limits are refused with 429 and `retry_after`, as
    /// Telegram does: see [`CHAT_GAP`], [`GROUP_PER_MINUTE`], [`BOT_PER_SECOND`].
    pub fn enforce_limits(&self) {
        self.shared.0.lock().unwrap().limits_enforced = true;
    }

    /// Every counted call to a chat so far, refused ones too.
    pub fn chat_calls(&self) -> Vec<ChatCall> {
        self.shared.0.lock().unwrap().calls.clone()
    }

    /// The bot's reaction on message `message` of `chat` now, if it has one.
    pub fn reaction_on(&self, chat: i64, message: i64) -> Option<String> {
        let state = self.shared.0.lock().unwrap();
        state.reactions.get(&(chat, message)).cloned()
    }

    /// The drafts shown in `chat` (`sendMessageDraft`): (draft id, text), in order.
    pub fn drafts(&self, chat: i64) -> Vec<(i64, String)> {
        let state = self.shared.0.lock().unwrap();
        state
            .drafts
            .iter()
            .filter(|(c, _, _)| *c == chat)
            .map(|(_, id, text)| (*id, text.clone()))
            .collect()
    }

    /// `sendMessageDraft`: private chats only (Bot API 9.5), a non-zero draft id.
    fn send_message_draft(&self, args: Value) -> (u16, Value) {
        let chat = args["chat_id"].as_i64().unwrap_or_default();
        let draft = args["draft_id"].as_i64().unwrap_or_default();
        if chat <= 0 {
            return (400, error(400, "Bad Request: TEXTDRAFT_PEER_INVALID"));
        }
        if draft == 0 {
            return (400, error(400, "Bad Request: draft_id must be non-zero"));
        }
        let text = args["text"].as_str().unwrap_or_default().to_string();
        self.shared.0.lock().unwrap().drafts.push((chat, draft, text));
        ok(json!(true))
    }

    /// Queues a text from `user` in chat `chat`, as [`Self::push_text`]; its message id.
    pub fn user_says(&self, chat: i64, user: i64, text: &str) -> i64 {
        self.push_text(chat, user, text);
        let state = self.shared.0.lock().unwrap();
        let last = state.pending.last().expect("just pushed");
        last["message"]["message_id"].as_i64().unwrap_or_default()
    }

    /// The next `times` reactions and edits are answered 429 (retry after 2 s), as Telegram
    /// answers a bot it throttles.
    pub fn refuse_cosmetic_calls(&self, times: usize) {
        self.shared.0.lock().unwrap().cosmetic_refusals = times;
    }

    /// How long to wait (s) when a call of `method` to its chat now would be past a limit.
    fn over_limit(&self, method: &str, args: &Value) -> Option<u64> {
        let mut state = self.shared.0.lock().unwrap();
        let cosmetic = matches!(method, "setMessageReaction" | "editMessageText");
        if cosmetic && state.cosmetic_refusals > 0 {
            state.cosmetic_refusals -= 1;
            return Some(2);
        }
        if !state.limits_enforced {
            return None;
        }
        let chat = args["chat_id"].as_i64().unwrap_or_default();
        let now = Instant::now();
        let counted = state.calls.iter().filter(|c| !c.refused);
        let last = counted.clone().filter(|c| c.chat == chat).map(|c| c.at).max();
        if last.is_some_and(|at| now.duration_since(at) < CHAT_GAP) {
            return Some(1);
        }
        if chat < 0 {
            let minute: Vec<Instant> = counted
                .clone()
                .filter(|c| c.chat == chat && now.duration_since(c.at) < Duration::from_secs(60))
                .map(|c| c.at)
                .collect();
            if minute.len() >= GROUP_PER_MINUTE {
                let oldest = minute.iter().min().copied().unwrap_or(now);
                let left = Duration::from_secs(60).saturating_sub(now.duration_since(oldest));
                return Some(left.as_secs().max(1));
            }
        }
        let second = counted
            .filter(|c| now.duration_since(c.at) < Duration::from_secs(1))
            .count();
        (second >= BOT_PER_SECOND).then_some(1)
    }

    fn count_call(&self, method: &str, args: &Value, refused: bool) {
        let mut state = self.shared.0.lock().unwrap();
        state.calls.push(ChatCall {
            method: method.to_string(),
            chat: args["chat_id"].as_i64().unwrap_or_default(),
            at: Instant::now(),
            unix_ms: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as i64),
            body: args.clone(),
            refused,
        });
    }

    /// `setMessageReaction`: one emoji of the Bot API's list (`REACTION_INVALID` otherwise)
    /// replaces the bot's reaction; an empty list takes it away.
    fn set_message_reaction(&self, args: Value) -> (u16, Value) {
        let chat = args["chat_id"].as_i64().unwrap_or_default();
        let message = args["message_id"].as_i64().unwrap_or_default();
        let emoji: Vec<String> = args["reaction"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|r| r["emoji"].as_str().unwrap_or_default().to_string())
            .collect();
        let allowed = crate::kit::api::telegram::REACTION_EMOJI;
        if emoji.len() > 1 || emoji.iter().any(|e| !allowed.contains(&e.as_str())) {
            return (400, error(400, "Bad Request: REACTION_INVALID"));
        }
        let mut state = self.shared.0.lock().unwrap();
        match emoji.into_iter().next() {
            Some(e) => state.reactions.insert((chat, message), e),
            None => state.reactions.remove(&(chat, message)),
        };
        ok(json!(true))
    }

    /// `createForumTopic`: only in a forum, where the bot has the right; the new topic.
    fn create_forum_topic(&self, args: Value) -> (u16, Value) {
        let mut state = self.shared.0.lock().unwrap();
        let chat = args["chat_id"].as_i64().unwrap_or_default();
        let name = args["name"].as_str().unwrap_or_default().to_string();
        if !(1..=128).contains(&name.chars().count()) {
            return (400, error(400, "Bad Request: TOPIC_TITLE_EMPTY"));
        }
        // A private chat's id is the user's, a positive number.
        let private = chat > 0 && state.private_topics;
        if !state.forums.contains_key(&chat) && !private {
            return (400, error(400, "Bad Request: the chat is not a forum"));
        }
        if state.no_topic_rights.contains(&chat) {
            return (400, error(400, "Bad Request: not enough rights to create a topic"));
        }
        state.next_thread_id += 1;
        let id = 1000 + state.next_thread_id;
        let topic = json!({"message_thread_id": id, "name": name, "icon_color": 7322096});
        let mut kept = topic.clone();
        kept["closed"] = json!(false);
        state.forums.entry(chat).or_default().push(kept);
        ok(topic)
    }

    /// `closeForumTopic`: an open topic of the forum.
    fn close_forum_topic(&self, args: Value) -> (u16, Value) {
        let mut state = self.shared.0.lock().unwrap();
        let chat = args["chat_id"].as_i64().unwrap_or_default();
        let topic = state.forums.get_mut(&chat).and_then(|topics| {
            topics
                .iter_mut()
                .find(|t| t["message_thread_id"] == args["message_thread_id"] && t["deleted"] != true)
        });
        match topic {
            None => (400, error(400, "Bad Request: TOPIC_ID_INVALID")),
            Some(t) if t["closed"] == true => (400, error(400, "Bad Request: TOPIC_NOT_MODIFIED")),
            Some(t) => {
                t["closed"] = json!(true);
                ok(json!(true))
            }
        }
    }

    /// `editMessageText`: only the bot's own messages; the same text and markup again is
    /// "not modified"; without `reply_markup` the buttons go.
    fn edit_message_text(&self, args: Value) -> (u16, Value) {
        let mut state = self.shared.0.lock().unwrap();
        let Some(message) = state
            .messages
            .iter_mut()
            .find(|m| m["chat_id"] == args["chat_id"] && m["message_id"] == args["message_id"])
        else {
            return (400, error(400, "Bad Request: message to edit not found"));
        };
        if message["text"] == args["text"] && message["reply_markup"] == args["reply_markup"] {
            return (
                400,
                error(400, "Bad Request: message is not modified: specified new message content and reply markup are exactly the same as a current content and reply markup of the message"),
            );
        }
        message["text"] = args["text"].clone();
        message["reply_markup"] = args["reply_markup"].clone();
        let edited = json!({
            "message_id": message["message_id"],
            "from": {"id": 42, "is_bot": true, "first_name": "relayq test", "username": BOT_USERNAME},
            "chat": {"id": message["chat_id"], "type": "private"},
            "date": 1767225600,
            "edit_date": 1767225660,
            "text": message["text"],
        });
        state.edits.push(args);
        ok(edited)
    }

    /// `answerCallbackQuery`: once per query; a second answer, or an unknown query, is
    /// refused as Telegram refuses it.
    fn answer_callback_query(&self, args: Value) -> (u16, Value) {
        let mut state = self.shared.0.lock().unwrap();
        let id = args["callback_query_id"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let fresh = state.callbacks.get(&id) == Some(&false);
        let mut record = args.clone();
        if !fresh {
            record["refused"] = json!(true);
            state.callback_answers.push(record);
            return (
                400,
                error(400, "Bad Request: query is too old and response timeout expired or query ID is invalid"),
            );
        }
        state.callbacks.insert(id, true);
        state.callback_answers.push(record);
        ok(json!(true))
    }
}

enum Scripted {
    Json(Value),
    Bytes(Vec<u8>),
}

/// `value` as Telegram writes it: an update's `update_id` before its other fields.
fn wire(value: &Value) -> String {
    match value {
        Value::Object(map) => {
            let first = map.get_key_value("update_id");
            let fields: Vec<String> = first
                .into_iter()
                .chain(map.iter().filter(|(k, _)| *k != "update_id"))
                .map(|(k, v)| format!("{}:{}", Value::from(k.as_str()), wire(v)))
                .collect();
            format!("{{{}}}", fields.join(","))
        }
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(wire).collect();
            format!("[{}]", items.join(","))
        }
        other => other.to_string(),
    }
}

fn ok(result: Value) -> (u16, Value) {
    (200, json!({"ok": true, "result": result}))
}

fn error(code: u16, description: &str) -> Value {
    json!({"ok": false, "error_code": code, "description": description})
}
