//! A local Discord, answering as discord.com/developers documents it: the REST API a bot
//! uses (`GET /gateway/bot`, messages, threads, reactions, interaction callbacks, history) and
//! the gateway (HELLO; IDENTIFY → READY with a new session; RESUME → what came after the
//! given sequence number, then RESUMED, or op 9 when the session is gone; heartbeats answered
//! with op 11; op 7 and close codes when scripted).
//!
//! Its model of events: one log of what happened (messages, clicks, threads), in order. A
//! session sees what happened from its IDENTIFY on, numbered from 2 (READY is 1), whether a
//! connection is open or not (Discord keeps a session's events for its resume); what happened
//! before a session began is not on it, only in the channels' history.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::Message;

use crate::testing::loopback::{serve_websockets, websocket_listener, Answer, Asked, Loopback};

/// The bot's user id, and its application's.
pub const BOT_ID: &str = "1300000000000000999";
pub const APPLICATION_ID: &str = "1300000000000000998";
/// The server the fake's channels are in.
pub const GUILD_ID: &str = "1300000000000000900";

#[derive(Clone)]
pub struct FakeDiscord {
    /// The REST API's base URL, to give as `api_url`.
    pub api_url: String,
    token: String,
    ws_port: u16,
    shared: Arc<Mutex<State>>,
}

/// A gateway session: where in the log it began, whether it can still be resumed.
struct Session {
    base: usize,
    valid: bool,
}

struct State {
    /// Every event, in order: its name and its data.
    log: Vec<(String, Value)>,
    sessions: HashMap<String, Session>,
    /// Sessions started (IDENTIFY) and resumed (RESUME), in order.
    identifies: Vec<Instant>,
    resumes: Vec<Instant>,
    /// Per session: the last sequence number sent on any connection.
    sent: HashMap<String, u64>,
    /// Open connections, each with the session it carries once known.
    open: usize,
    /// Bumped to end the open connections: with op 7, or with a close code.
    generation: u64,
    ending: Option<u16>,
    heartbeat_interval: u64,
    /// Answers the next `GET /gateway/bot` calls get, and when each refused one came.
    gateway_failures: VecDeque<(u16, Value)>,
    refused_gateway: Vec<Instant>,
    /// Every message, by channel, in order (history).
    messages: Vec<Value>,
    /// Channels the bot knows of beyond plain text channels: threads.
    channels: HashMap<String, Value>,
    /// Interaction callbacks: the interaction id, the body, when.
    callbacks: Vec<(String, Value, Instant)>,
    /// When each click was dispatched, by interaction id.
    clicks: HashMap<String, Instant>,
    /// Message edits (channel, message, body) and reactions (channel, message, emoji, added).
    edits: Vec<(String, String, Value)>,
    reactions: Vec<(String, String, String, bool)>,
    /// Attachments served, by `id/name`.
    files: HashMap<String, Vec<u8>>,
    next_id: u64,
}

/// The channel id in the attachments' URLs.
const CDN_CHANNEL: &str = "1300000000000000500";

impl FakeDiscord {
    /// Serves the REST API and the gateway on free loopback ports, for bot `token`.
    pub fn start(token: &str) -> FakeDiscord {
        let (ws, ws_port) = websocket_listener();
        let mut fake = FakeDiscord {
            api_url: String::new(),
            token: token.to_string(),
            ws_port,
            shared: Arc::new(Mutex::new(State {
                log: Vec::new(),
                sessions: HashMap::new(),
                identifies: Vec::new(),
                resumes: Vec::new(),
                sent: HashMap::new(),
                open: 0,
                generation: 0,
                ending: None,
                heartbeat_interval: 41_250,
                gateway_failures: VecDeque::new(),
                refused_gateway: Vec::new(),
                messages: Vec::new(),
                channels: HashMap::new(),
                callbacks: Vec::new(),
                clicks: HashMap::new(),
                edits: Vec::new(),
                reactions: Vec::new(),
                files: HashMap::new(),
                next_id: 1_400_000_000_000_000_000,
            })),
        };
        let serving = fake.clone();
        serve_websockets(ws, move |stream| serving.clone().serve(stream));
        let serving = fake.clone();
        let api = Loopback::start(0, move |asked| serving.answer(&asked));
        fake.api_url = format!("{}/api/v10", api.url());
        // It serves for the rest of the process, as the platform would.
        std::mem::forget(api);
        fake
    }

    /// The heartbeat interval HELLO gives from now on.
    pub fn heartbeat_every(&self, interval: Duration) {
        self.shared.lock().unwrap().heartbeat_interval = interval.as_millis() as u64;
    }

    fn new_id(state: &mut State) -> String {
        state.next_id += 1;
        state.next_id.to_string()
    }

    /// A person writes `text` in `channel` (a thread's id for a thread): message `id`.
    pub fn push_message(&self, channel: &str, user: &str, id: &str, text: &str) {
        self.push_message_with(channel, user, id, text, json!([]), 0);
    }

    /// Serves `bytes` as an attachment named `name` (as Discord's CDN would): its URL.
    pub fn add_file(&self, name: &str, bytes: &[u8]) -> String {
        let mut state = self.shared.lock().unwrap();
        let id = Self::new_id(&mut state);
        state.files.insert(format!("{id}/{name}"), bytes.to_vec());
        let base = self.api_url.trim_end_matches("/api/v10");
        format!("{base}/attachments/{CDN_CHANNEL}/{id}/{name}?ex=6800&is=67ff&hm=signed")
    }

    /// As [`FakeDiscord::push_message`], with `attachments` (Discord's attachment objects)
    /// and the message's `flags` (`1 << 13`: a voice message).
    pub fn push_message_with(
        &self,
        channel: &str,
        user: &str,
        id: &str,
        text: &str,
        attachments: Value,
        flags: u64,
    ) {
        let message = json!({
            "id": id, "channel_id": channel, "guild_id": GUILD_ID, "type": 0,
            "content": text, "tts": false, "mention_everyone": false, "mentions": [],
            "attachments": attachments, "embeds": [], "pinned": false, "flags": flags,
            "timestamp": "2026-12-01T08:00:00.000000+00:00",
            "author": {"id": user, "username": format!("user{user}"), "global_name": null,
                       "discriminator": "0", "avatar": null},
            "member": {"roles": [], "joined_at": "2026-01-01T00:00:00.000000+00:00"},
        });
        self.dispatch("MESSAGE_CREATE", message);
    }

    /// A person clicks the button `custom_id` under message `message` in `channel`: the
    /// interaction's id.
    pub fn click(&self, channel: &str, message: &str, user: &str, custom_id: &str) -> String {
        let id = {
            let mut state = self.shared.lock().unwrap();
            Self::new_id(&mut state)
        };
        let interaction = json!({
            "id": id, "application_id": APPLICATION_ID, "type": 3,
            "token": format!("aW50ZXJhY3Rpb246{id}-token"), "version": 1,
            "channel_id": channel, "guild_id": GUILD_ID, "locale": "en-US",
            "member": {"user": {"id": user, "username": format!("user{user}"), "global_name": null},
                       "roles": [], "permissions": "2248473465835073"},
            "data": {"custom_id": custom_id, "component_type": 2},
            "message": {"id": message, "channel_id": channel},
        });
        self.shared
            .lock()
            .unwrap()
            .clicks
            .insert(id.clone(), Instant::now());
        self.dispatch("INTERACTION_CREATE", interaction);
        id
    }

    /// Dispatches event `name` with `data` on the gateway (a reaction, a channel's update).
    pub fn dispatch(&self, name: &str, data: Value) {
        let mut state = self.shared.lock().unwrap();
        if name == "MESSAGE_CREATE" {
            state.messages.push(data.clone());
        }
        state.log.push((name.to_string(), data));
    }

    /// Whether a connection is open and a session can be resumed: what happens now reaches
    /// the bot (on this connection, or on the session's resume).
    pub fn connected(&self) -> bool {
        let state = self.shared.lock().unwrap();
        state.open > 0 && state.sessions.values().any(|s| s.valid)
    }

    /// Gateway connections open now.
    pub fn open_connections(&self) -> usize {
        self.shared.lock().unwrap().open
    }

    /// Sessions started with IDENTIFY, and resumed with RESUME, so far.
    pub fn identifies(&self) -> usize {
        self.shared.lock().unwrap().identifies.len()
    }

    pub fn resumes(&self) -> usize {
        self.shared.lock().unwrap().resumes.len()
    }

    /// Whether every event so far was sent on an open connection of a session that had it.
    pub fn all_sent(&self) -> bool {
        let state = self.shared.lock().unwrap();
        let total = state.log.len();
        state.open > 0
            && state.sessions.iter().any(|(id, s)| {
                s.valid && state.sent.get(id).copied().unwrap_or(0) as usize > total - s.base
            })
    }

    /// Ends the open connections with op 7 (reconnect), or closes them with `code`.
    pub fn end_connections(&self, code: Option<u16>) {
        let mut state = self.shared.lock().unwrap();
        state.generation += 1;
        state.ending = code;
    }

    /// Discord forgets every session: a RESUME gets op 9 (not resumable).
    pub fn invalidate_sessions(&self) {
        let mut state = self.shared.lock().unwrap();
        for session in state.sessions.values_mut() {
            session.valid = false;
        }
    }

    /// The next `GET /gateway/bot` calls are answered `status` with `body`, one each.
    pub fn fail_gateway(&self, status: u16, body: Value, times: usize) {
        let mut state = self.shared.lock().unwrap();
        for _ in 0..times {
            state.gateway_failures.push_back((status, body.clone()));
        }
    }

    /// When each refused `GET /gateway/bot` came.
    pub fn refused_gateway(&self) -> Vec<Instant> {
        self.shared.lock().unwrap().refused_gateway.clone()
    }

    /// Interaction callbacks so far: the interaction's id, the body, and how long after its
    /// click it came.
    pub fn callbacks(&self) -> Vec<(String, Value, Duration)> {
        let state = self.shared.lock().unwrap();
        state
            .callbacks
            .iter()
            .map(|(id, body, at)| {
                let clicked = state.clicks.get(id).copied().unwrap_or(*at);
                (id.clone(), body.clone(), at.saturating_duration_since(clicked))
            })
            .collect()
    }

    /// The messages the bot created, in order.
    pub fn bot_messages(&self) -> Vec<Value> {
        let state = self.shared.lock().unwrap();
        state
            .messages
            .iter()
            .filter(|m| m["author"]["id"] == BOT_ID)
            .cloned()
            .collect()
    }

    /// Message edits: channel, message id, the body sent.
    pub fn edits(&self) -> Vec<(String, String, Value)> {
        self.shared.lock().unwrap().edits.clone()
    }

    /// Reactions set (`true`) and taken off: channel, message id, emoji.
    pub fn reactions(&self) -> Vec<(String, String, String, bool)> {
        self.shared.lock().unwrap().reactions.clone()
    }

    /// Threads the bot started: their channel objects.
    pub fn threads(&self) -> Vec<Value> {
        let state = self.shared.lock().unwrap();
        let mut threads: Vec<Value> = state.channels.values().cloned().collect();
        threads.sort_by_key(|t| t["id"].as_str().unwrap_or_default().to_string());
        threads
    }

    fn answer(&self, asked: &Asked) -> Answer {
        let path = asked.url.split('?').next().unwrap_or_default();
        let path = path.strip_prefix("/api/v10").unwrap_or(path).to_string();
        let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
        let method = asked.method.as_str();
        // Attachments are served to anyone with their signed URL.
        if let ["attachments", _, id, name] = parts[..] {
            let state = self.shared.lock().unwrap();
            return match state.files.get(&format!("{id}/{name}")) {
                Some(bytes) => Answer::new(200, bytes.clone())
                    .header("Content-Type", "application/octet-stream"),
                None => Answer::new(404, "Not Found"),
            };
        }
        // Interaction callbacks are authorised by their token, not the bot's.
        if let ["interactions", id, _token, "callback"] = parts[..] {
            let body: Value = serde_json::from_slice(&asked.body).unwrap_or_default();
            self.shared
                .lock()
                .unwrap()
                .callbacks
                .push((id.to_string(), body, Instant::now()));
            return Answer::new(204, "");
        }
        if asked.header("Authorization") != Some(format!("Bot {}", self.token).as_str()) {
            return Answer::json(401, &json!({"message": "401: Unauthorized", "code": 0}));
        }
        let mut state = self.shared.lock().unwrap();
        match (method, &parts[..]) {
            ("GET", ["gateway", "bot"]) => {
                if let Some((status, body)) = state.gateway_failures.pop_front() {
                    state.refused_gateway.push(Instant::now());
                    let answer = Answer::json(status, &body);
                    return match status {
                        429 => answer.header("Retry-After", "1"),
                        _ => answer,
                    };
                }
                Answer::json(200, &json!({
                    "url": format!("ws://127.0.0.1:{}", self.ws_port), "shards": 1,
                    "session_start_limit": {"total": 1000, "remaining": 999,
                                            "reset_after": 14400000, "max_concurrency": 1},
                }))
            }
            ("GET", ["users", "@me"]) => Answer::json(
                200,
                &json!({"id": BOT_ID, "username": "relayq-fake", "bot": true, "discriminator": "0"}),
            ),
            ("GET", ["channels", id]) => match state.channels.get(*id) {
                Some(channel) => Answer::json(200, channel),
                None if crate::channels::discord::is_snowflake(id) => Answer::json(
                    200,
                    &json!({"id": id, "type": 0, "guild_id": GUILD_ID, "name": "general", "parent_id": null}),
                ),
                None => Answer::json(404, &json!({"message": "Unknown Channel", "code": 10003})),
            },
            ("GET", ["channels", channel, "messages"]) => {
                let query: HashMap<String, String> = url::Url::parse(&format!("http://x{}", asked.url))
                    .map(|u| u.query_pairs().into_owned().collect())
                    .unwrap_or_default();
                let after = query.get("after").cloned().unwrap_or_default();
                let limit: usize = query.get("limit").and_then(|l| l.parse().ok()).unwrap_or(50);
                let key = |id: &str| (id.len(), id.to_string());
                let mut found: Vec<Value> = state
                    .messages
                    .iter()
                    .filter(|m| m["channel_id"] == *channel)
                    .filter(|m| key(m["id"].as_str().unwrap_or_default()) > key(&after))
                    .map(|m| {
                        let mut m = m.clone();
                        // REST messages do not name their server.
                        m.as_object_mut().map(|o| o.remove("guild_id"));
                        m
                    })
                    .collect();
                found.sort_by_key(|m| key(m["id"].as_str().unwrap_or_default()));
                found.truncate(limit);
                found.reverse();
                Answer::json(200, &Value::Array(found))
            }
            ("POST", ["channels", channel, "messages"]) => {
                let body: Value = serde_json::from_slice(&asked.body).unwrap_or_default();
                let id = Self::new_id(&mut state);
                let message = json!({
                    "id": id, "channel_id": channel, "guild_id": GUILD_ID, "type": 0,
                    "content": body["content"], "components": body["components"],
                    "nonce": body["nonce"], "flags": 0,
                    "author": {"id": BOT_ID, "username": "relayq-fake", "bot": true},
                });
                state.messages.push(message.clone());
                state.log.push(("MESSAGE_CREATE".into(), message.clone()));
                Answer::json(200, &message)
            }
            ("PATCH", ["channels", channel, "messages", id]) => {
                let body: Value = serde_json::from_slice(&asked.body).unwrap_or_default();
                state.edits.push((channel.to_string(), id.to_string(), body.clone()));
                let Some(message) = state.messages.iter_mut().find(|m| m["id"] == *id) else {
                    return Answer::json(404, &json!({"message": "Unknown Message", "code": 10008}));
                };
                for key in ["content", "components"] {
                    if body.get(key).is_some() {
                        message[key] = body[key].clone();
                    }
                }
                Answer::json(200, &message.clone())
            }
            ("POST", ["channels", channel, "threads"]) => {
                let body: Value = serde_json::from_slice(&asked.body).unwrap_or_default();
                let id = Self::new_id(&mut state);
                let thread = json!({"id": id, "type": 11, "guild_id": GUILD_ID,
                                    "parent_id": channel, "name": body["name"],
                                    "thread_metadata": {"archived": false, "locked": false}});
                state.channels.insert(id.clone(), thread.clone());
                state.log.push(("THREAD_CREATE".into(), thread.clone()));
                Answer::json(201, &thread)
            }
            ("PATCH", ["channels", id]) => {
                let body: Value = serde_json::from_slice(&asked.body).unwrap_or_default();
                let Some(thread) = state.channels.get_mut(*id) else {
                    return Answer::json(404, &json!({"message": "Unknown Channel", "code": 10003}));
                };
                for key in ["archived", "locked"] {
                    if let Some(v) = body.get(key) {
                        thread["thread_metadata"][key] = v.clone();
                    }
                }
                Answer::json(200, &thread.clone())
            }
            (put_or_delete @ ("PUT" | "DELETE"), ["channels", channel, "messages", id, "reactions", emoji, "@me"]) => {
                let emoji = percent_encoding::percent_decode_str(emoji)
                    .decode_utf8_lossy()
                    .into_owned();
                state
                    .reactions
                    .push((channel.to_string(), id.to_string(), emoji, put_or_delete == "PUT"));
                Answer::new(204, "")
            }
            _ => Answer::json(404, &json!({"message": "404: Not Found", "code": 0})),
        }
    }

    /// One gateway connection.
    async fn serve(self, stream: tokio::net::TcpStream) {
        let Ok(mut socket) = tokio_tungstenite::accept_async(stream).await else {
            return;
        };
        let (generation, interval) = {
            let mut state = self.shared.lock().unwrap();
            state.open += 1;
            (state.generation, state.heartbeat_interval)
        };
        self.connection(&mut socket, generation, interval).await;
        self.shared.lock().unwrap().open -= 1;
    }

    async fn connection(
        &self,
        socket: &mut tokio_tungstenite::WebSocketStream<tokio::net::TcpStream>,
        generation: u64,
        interval: u64,
    ) {
        let send = |v: Value| Message::text(v.to_string());
        let hello = json!({"op": 10, "d": {"heartbeat_interval": interval}, "s": null, "t": null});
        if socket.send(send(hello)).await.is_err() {
            return;
        }
        // The opening: IDENTIFY or RESUME.
        let Some(Ok(Message::Text(opening))) = socket.next().await else {
            return;
        };
        let opening: Value = serde_json::from_str(opening.as_str()).unwrap_or_default();
        let close = |code: u16, reason: &str| {
            Message::Close(Some(CloseFrame {
                code: CloseCode::from(code),
                reason: reason.to_string().into(),
            }))
        };
        if opening["d"]["token"] != json!(self.token) {
            let _ = socket.send(close(4004, "Authentication failed.")).await;
            return;
        }
        let session = match opening["op"].as_u64() {
            Some(2) => {
                let id = {
                    let mut state = self.shared.lock().unwrap();
                    state.identifies.push(Instant::now());
                    let id = format!("fake-session-{}", state.identifies.len());
                    let base = state.log.len();
                    state.sessions.insert(id.clone(), Session { base, valid: true });
                    state.sent.insert(id.clone(), 1);
                    id
                };
                let ready = json!({"op": 0, "s": 1, "t": "READY", "d": {
                    "v": 10, "session_id": id,
                    "resume_gateway_url": format!("ws://127.0.0.1:{}/resume", self.ws_port),
                    "user": {"id": BOT_ID, "username": "relayq-fake", "bot": true},
                    "guilds": [{"id": GUILD_ID, "unavailable": true}],
                    "application": {"id": APPLICATION_ID, "flags": 0},
                }});
                if socket.send(send(ready)).await.is_err() {
                    return;
                }
                id
            }
            Some(6) => {
                let id = opening["d"]["session_id"].as_str().unwrap_or_default().to_string();
                let seq = opening["d"]["seq"].as_u64().unwrap_or(0);
                let valid = {
                    let mut state = self.shared.lock().unwrap();
                    state.resumes.push(Instant::now());
                    let valid = state.sessions.get(&id).is_some_and(|s| s.valid);
                    if valid {
                        state.sent.insert(id.clone(), seq);
                    }
                    valid
                };
                if !valid {
                    let _ = socket.send(send(json!({"op": 9, "d": false, "s": null, "t": null}))).await;
                    // Discord closes it after a while; the client closes first.
                    let _ = tokio::time::timeout(Duration::from_secs(5), socket.next()).await;
                    return;
                }
                id
            }
            _ => {
                let _ = socket.send(close(4003, "Not authenticated.")).await;
                return;
            }
        };
        let mut resumed = opening["op"] == json!(6);
        loop {
            let (due, ending) = {
                let mut state = self.shared.lock().unwrap();
                let ending = (state.generation != generation).then_some(state.ending);
                let base = state.sessions.get(&session).map_or(0, |s| s.base);
                let valid = state.sessions.get(&session).is_some_and(|s| s.valid);
                let sent = state.sent.get(&session).copied().unwrap_or(1);
                let mut due = Vec::new();
                if ending.is_none() && valid {
                    for (i, (name, data)) in state.log.iter().enumerate().skip(base) {
                        let seq = (i - base) as u64 + 2;
                        if seq > sent {
                            due.push(json!({"op": 0, "s": seq, "t": name, "d": data}));
                        }
                    }
                    let last = (state.log.len() - base) as u64 + 1;
                    state.sent.insert(session.clone(), last.max(sent));
                }
                (due, ending)
            };
            match ending {
                Some(None) => {
                    let _ = socket.send(send(json!({"op": 7, "d": null, "s": null, "t": null}))).await;
                    let _ = tokio::time::timeout(Duration::from_secs(5), socket.next()).await;
                    return;
                }
                Some(Some(code)) => {
                    let _ = socket.send(close(code, "Closed by the fake.")).await;
                    return;
                }
                None => {}
            }
            for event in due {
                if socket.send(send(event)).await.is_err() {
                    return;
                }
            }
            if std::mem::take(&mut resumed)
                && socket
                    .send(send(json!({"op": 0, "s": null, "t": "RESUMED", "d": {}})))
                    .await
                    .is_err()
            {
                return;
            }
            match tokio::time::timeout(Duration::from_millis(10), socket.next()).await {
                Err(_) => {}
                Ok(Some(Ok(Message::Text(text)))) => {
                    let frame: Value = serde_json::from_str(text.as_str()).unwrap_or_default();
                    if frame["op"] == json!(1) {
                        let ack = json!({"op": 11, "d": null, "s": null, "t": null});
                        if socket.send(send(ack)).await.is_err() {
                            return;
                        }
                    }
                }
                Ok(Some(Ok(_))) => {}
                Ok(None) | Ok(Some(Err(_))) => return,
            }
        }
    }
}
