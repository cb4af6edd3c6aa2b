//! Discord's gateway, as a held connection (see [`HeldSource`]): relayq's own small client on
//! the kit's WebSocket.
//!
//! ```text
//!   stored offset { session, seq, url, last }?
//!     yes, and not spent ─▶ url ──▶ HELLO ──▶ RESUME {token, session, seq}
//!                                              Discord replays what came after seq, RESUMED
//!     no ─▶ GET /gateway/bot ─▶ url ──▶ HELLO ──▶ IDENTIFY {token, intents}
//!                                              READY {session_id, resume_gateway_url}
//!                                              history after `last`, per channel (what came
//!                                              while no session was open)
//!   dispatch (op 0, seq s): MESSAGE_CREATE ─▶ rows; INTERACTION_CREATE ─▶ answers; each with
//!     the offset { session, seq: s, url, last } committed in the SAME transaction
//!   every heartbeat_interval: op 1 {seq}; no op 11 since the last one: the connection is dead
//!   op 7 (reconnect), op 9 true, a close (4000..4009 but 4004): resume from the stored offset
//!   op 9 false, close 4007 / 4009: the session is spent; the next connection identifies, once
//!   close 4004 (token), 4013 / 4014 (intents): said in words an operator can act on; retried
//!   with the source's backoff
//! ```
//!
//! Why not `twilight-gateway`: it resumes from stored state too, but brings a second WebSocket
//! and HTTP stack (and its own TLS setup) beside the kit's, for the few messages relayq reads;
//! the protocol's part relayq needs is this file. The crate's reconnect loop would also hide
//! the one thing relayq must control: the resume token stored only with the rows it covers.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tokio::time::Instant;

use super::DiscordReader;
use crate::kit::http::{self, HttpClient};
use crate::kit::secret::Secret;
use crate::kit::websocket::{Frame, PlatformSocket};
use crate::sources::{Arrived, HeldConnection, HeldSource, OnConnection, Pushed};

/// The gateway's version and encoding, on every URL it is opened with.
const GATEWAY_QUERY: &str = "v=10&encoding=json";

/// What relayq reads: servers' messages (GUILDS for threads, GUILD_MESSAGES), direct
/// messages, and their text (MESSAGE_CONTENT, a privileged intent to enable in the Developer
/// Portal).
pub const INTENTS: u64 = (1 << 0) | (1 << 9) | (1 << 12) | (1 << 15);

/// The most channels whose last message the offset remembers, for the catch-up after a
/// session was lost (the most recent ones are kept).
const REMEMBERED_CHANNELS: usize = 50;

/// History pages read per channel when catching up (100 messages each).
const CATCH_UP_PAGES: usize = 10;

/// What the stored offset holds: the session to resume, and where each channel was read up to.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Resume {
    /// The gateway session's id (`READY`'s `session_id`).
    pub session: String,
    /// The sequence number of the last event committed.
    pub seq: u64,
    /// Where to resume (`READY`'s `resume_gateway_url`).
    pub url: String,
    /// Channel id → the id of the last message taken there.
    #[serde(default)]
    pub last: BTreeMap<String, String>,
}

impl Resume {
    fn read(stored: Option<&str>) -> Option<Resume> {
        serde_json::from_str(stored?).ok()
    }

    fn text(&self) -> String {
        serde_json::to_string(self).expect("a resume state is JSON")
    }

    /// Notes message `id` in `channel` as taken, forgetting the channels heard from longest
    /// ago beyond [`REMEMBERED_CHANNELS`] (message ids are snowflakes: they grow with time).
    fn taken(&mut self, channel: &str, id: &str) {
        let newer = |a: &str, b: &str| (a.len(), a) > (b.len(), b);
        match self.last.get_mut(channel) {
            Some(last) if newer(last, id) => {}
            Some(last) => *last = id.to_string(),
            None => {
                self.last.insert(channel.to_string(), id.to_string());
            }
        }
        while self.last.len() > REMEMBERED_CHANNELS {
            let oldest = self
                .last
                .iter()
                .min_by_key(|(_, id)| (id.len(), id.to_string()))
                .map(|(c, _)| c.clone())
                .expect("not empty");
            self.last.remove(&oldest);
        }
    }
}

#[derive(Clone)]
pub struct DiscordGateway {
    reader: Arc<DiscordReader>,
    /// The REST API's base URL, ending in `/`.
    api: url::Url,
    /// The bot's REST client (`Authorization: Bot <token>`).
    http: HttpClient,
    token: Secret,
    origin: String,
    /// The session Discord said cannot be resumed (op 9 false, close 4007 or 4009): a stored
    /// offset naming it is not resumed again, the next connection identifies.
    spent: Arc<Mutex<Option<String>>>,
}

impl DiscordGateway {
    pub fn new(reader: DiscordReader, api: url::Url, http: HttpClient, token: Secret) -> Self {
        DiscordGateway {
            reader: Arc::new(reader),
            api,
            http,
            token,
            origin: String::new(),
            spent: Arc::default(),
        }
    }

    /// `GET /gateway/bot`: where to open a new session, or what went wrong in words an
    /// operator can act on. A 429 waits out its `retry_after` before saying so.
    async fn gateway_url(&self) -> Result<String, String> {
        let url = self.api.join("gateway/bot").expect("a route joins");
        let reply = self
            .http
            .send(self.http.get(url))
            .await
            .map_err(|e| format!("cannot reach Discord: {}", e.text().unwrap_or_default()))?;
        let answer = reply.json::<Value>().unwrap_or_default();
        match reply.status {
            200 => {}
            401 => {
                return Err(
                    "Discord 401: the bot token is refused: check token_env / token_file \
                     (Developer Portal → your app → Bot → Reset Token)"
                        .into(),
                )
            }
            429 => {
                let wait = answer["retry_after"]
                    .as_f64()
                    .filter(|s| s.is_finite() && *s >= 0.0)
                    .map(Duration::from_secs_f64)
                    .or(reply.retry_after)
                    .unwrap_or(Duration::from_secs(5))
                    .min(http::MAX_RETRY_AFTER);
                tokio::time::sleep(wait).await;
                return Err(format!("Discord is rate limiting GET /gateway/bot; waited {wait:?}"));
            }
            _ => return Err(format!("GET /gateway/bot: {}", reply.error())),
        }
        if answer["session_start_limit"]["remaining"].as_u64() == Some(0) {
            let reset = answer["session_start_limit"]["reset_after"].as_u64().unwrap_or(0);
            return Err(format!(
                "Discord allows this bot no new gateway session for {:?} (session_start_limit)",
                Duration::from_millis(reset)
            ));
        }
        match answer["url"].as_str() {
            Some(url) if url.starts_with("wss://") || url.starts_with("ws://") => Ok(url.into()),
            _ => Err("GET /gateway/bot gave no gateway address".into()),
        }
    }

    /// Whether `session` was found spent.
    fn is_spent(&self, session: &str) -> bool {
        self.spent.lock().unwrap().as_deref() == Some(session)
    }

    fn spend(&self, session: &str) {
        *self.spent.lock().unwrap() = Some(session.to_string());
    }
}

/// `url` with the gateway's version and encoding.
fn with_query(url: &str) -> String {
    let base = url.trim_end_matches('/');
    format!("{base}/?{GATEWAY_QUERY}")
}

impl HeldSource for DiscordGateway {
    type Connection = GatewayConnection;

    fn named(&mut self, name: &str) {
        self.origin = super::origin(name);
    }

    fn connect(&self, resume: Option<String>) -> OnConnection<'static, GatewayConnection> {
        let gateway = self.clone();
        Box::pin(async move {
            let stored = Resume::read(resume.as_deref());
            let resuming = stored.clone().filter(|r| !gateway.is_spent(&r.session));
            let url = match &resuming {
                Some(r) => r.url.clone(),
                None => gateway.gateway_url().await?,
            };
            let mut socket = PlatformSocket::connect(&with_query(&url)).await?;
            let interval = hello(&mut socket).await?;
            let opening = match &resuming {
                Some(r) => json!({"op": 6, "d": {
                    "token": gateway.token.expose(), "session_id": r.session, "seq": r.seq}}),
                None => json!({"op": 2, "d": {
                    "token": gateway.token.expose(),
                    "intents": INTENTS,
                    "properties": {"os": std::env::consts::OS, "browser": "relayq", "device": "relayq"},
                }}),
            };
            socket.send_text(opening.to_string()).await?;
            tracing::info!(
                source = gateway.origin,
                resuming = resuming.is_some(),
                "Discord gateway connected"
            );
            let state = match resuming {
                Some(r) => r,
                // A new session: what came after the stored marks is read from history
                // once it is ready.
                None => Resume {
                    last: stored.map(|r| r.last).unwrap_or_default(),
                    ..Resume::default()
                },
            };
            Ok(GatewayConnection {
                gateway,
                socket,
                interval,
                next_beat: Instant::now() + interval.mul_f64(jitter()),
                acked: true,
                received: (state.seq > 0).then_some(state.seq),
                state,
            })
        })
    }

    fn acknowledge(&mut self, answered: Vec<relayq_engine::approvals::Answered>) {
        self.reader.acknowledge(answered);
    }

    fn tapped(&mut self, taps: Vec<(String, String)>) {
        self.reader.tapped(taps);
    }

    fn ready_check(&self) -> Option<crate::kit::ReadyCheck> {
        let gateway = self.clone();
        Some(Box::pin(async move { gateway.gateway_url().await.map(|_| ()) }))
    }
}

/// The first frame of a connection: HELLO, with the heartbeat's interval.
async fn hello(socket: &mut PlatformSocket) -> Result<Duration, String> {
    let frame = match socket.next_frame().await? {
        Frame::Text(text) => text,
        Frame::Closed(reason) => return Err(closed(&reason).0),
    };
    let payload: Value = serde_json::from_str(&frame).unwrap_or_default();
    match (payload["op"].as_u64(), payload["d"]["heartbeat_interval"].as_u64()) {
        (Some(10), Some(ms)) if ms > 0 => Ok(Duration::from_millis(ms)),
        _ => Err("the Discord gateway did not open with HELLO".into()),
    }
}

/// A fraction in [0, 1): the first heartbeat comes this far into its interval, as Discord
/// asks, so that many clients reconnecting at once do not beat together.
fn jitter() -> f64 {
    use ring::rand::{SecureRandom, SystemRandom};
    let mut byte = [0u8; 2];
    let _ = SystemRandom::new().fill(&mut byte);
    f64::from(u16::from_le_bytes(byte)) / 65536.0
}

/// What a close says: the error, and whether the session is spent.
fn closed(reason: &str) -> (String, bool) {
    let code: Option<u16> = reason.split_whitespace().next().and_then(|c| c.parse().ok());
    let said = |what: &str| format!("Discord closed the gateway connection ({reason}): {what}");
    match code {
        Some(4004) => (
            said("the bot token is refused: check token_env / token_file"),
            true,
        ),
        Some(4013 | 4014) => (
            said(
                "the bot may not read messages' text: enable the Message Content intent \
                 (Developer Portal → your app → Bot → Privileged Gateway Intents)",
            ),
            true,
        ),
        Some(4007 | 4009) => (said("the session cannot be resumed; a new one starts"), true),
        Some(4010..=4012) => (said("relayq's gateway request was refused"), true),
        _ => (said("resuming"), false),
    }
}

pub struct GatewayConnection {
    gateway: DiscordGateway,
    socket: PlatformSocket,
    interval: Duration,
    next_beat: Instant,
    /// Whether Discord acknowledged the last heartbeat (op 11).
    acked: bool,
    /// The last sequence number received (heartbeats carry it).
    received: Option<u64>,
    /// The session, and what has been handed over (the offset of the next batch).
    state: Resume,
}

impl GatewayConnection {
    /// A heartbeat, unless the last one went unanswered: then the connection is dead.
    async fn beat(&mut self) -> Result<(), String> {
        if !self.acked {
            return Err(
                "Discord did not acknowledge the last heartbeat: the connection is dead; resuming"
                    .into(),
            );
        }
        let beat = json!({"op": 1, "d": self.received});
        self.socket.send_text(beat.to_string()).await?;
        self.acked = false;
        self.next_beat = Instant::now() + self.interval;
        Ok(())
    }

    /// What one frame gives: something to commit, nothing, or the end of this connection.
    async fn read(&mut self, text: &str) -> Result<Option<Arrived>, String> {
        let payload: Value = serde_json::from_str(text)
            .map_err(|e| format!("Discord sent a frame that is not JSON: {e}"))?;
        match payload["op"].as_u64() {
            Some(0) => {}
            Some(1) => {
                // Discord asks for a heartbeat now.
                self.acked = true;
                self.beat().await?;
                return Ok(None);
            }
            Some(7) => return Err("Discord asked for a new connection (op 7); resuming".into()),
            Some(9) => {
                if payload["d"] != json!(true) {
                    self.gateway.spend(&self.state.session);
                    // Discord asks for a pause of 1 to 5 s before identifying again.
                    let pause = Duration::from_millis(1000 + (jitter() * 4000.0) as u64);
                    tokio::time::sleep(pause).await;
                    return Err("Discord invalidated the gateway session (op 9); a new one starts".into());
                }
                return Err("Discord invalidated the gateway session (op 9); resuming".into());
            }
            Some(11) => {
                self.acked = true;
                return Ok(None);
            }
            _ => return Ok(None),
        }
        if let Some(seq) = payload["s"].as_u64() {
            self.received = Some(seq);
        }
        let data = &payload["d"];
        let reader = self.gateway.reader.clone();
        let origin = self.gateway.origin.clone();
        let pushed = match payload["t"].as_str() {
            Some("READY") => return self.ready(data).await.map(Some),
            Some("RESUMED") => {
                tracing::info!(source = origin, seq = self.state.seq, "Discord gateway session resumed");
                return Ok(None);
            }
            Some("GUILD_CREATE" | "THREAD_LIST_SYNC") => {
                for thread in data["threads"].as_array().into_iter().flatten() {
                    reader.learn_channel(thread);
                }
                return Ok(None);
            }
            Some("THREAD_CREATE" | "THREAD_UPDATE" | "CHANNEL_CREATE") => {
                reader.learn_channel(data);
                return Ok(None);
            }
            Some("MESSAGE_CREATE") => reader.message_created(data, &origin).await?,
            Some("INTERACTION_CREATE") => reader.interaction_created(data, &origin).await?,
            _ => return Ok(None),
        };
        // Nothing to record (relayq's own messages, a stranger's): the sequence number is
        // stored with the next batch that has something, not written for each.
        let empty = match &pushed {
            Pushed::Messages(m) => m.is_empty(),
            Pushed::Answers(a) => a.is_empty(),
            Pushed::Requests(r) => r.is_empty(),
            Pushed::Answer(_) => true,
        };
        if empty {
            return Ok(None);
        }
        if let (Some(channel), Some(id)) = (data["channel_id"].as_str(), data["id"].as_str()) {
            if payload["t"] == "MESSAGE_CREATE" {
                self.state.taken(channel, id);
            }
        }
        self.state.seq = self.received.unwrap_or(self.state.seq);
        Ok(Some(self.arrived(pushed)))
    }

    /// A new session is ready: stored at once (so a restart resumes it), with what came in
    /// the remembered channels while no session was open.
    async fn ready(&mut self, data: &Value) -> Result<Arrived, String> {
        let (Some(session), Some(url)) = (
            data["session_id"].as_str(),
            data["resume_gateway_url"].as_str(),
        ) else {
            return Err("Discord's READY names no session to resume".into());
        };
        self.state.session = session.to_string();
        self.state.url = url.to_string();
        self.state.seq = self.received.unwrap_or(0);
        let origin = self.gateway.origin.clone();
        tracing::info!(source = origin, "Discord gateway session started");
        let mut arrived = Arrived::default();
        let marks: Vec<(String, String)> = self.state.last.clone().into_iter().collect();
        for (channel, after) in marks {
            let missed = self.gateway.reader.history_after(&channel, &after, CATCH_UP_PAGES).await?;
            if !missed.is_empty() {
                tracing::info!(source = origin, channel, messages = missed.len(), "read from history what came while no gateway session was open");
            }
            for mut message in missed {
                // Messages read over REST do not name their server: ask about the channel as
                // for a server's (a thread's parent is learned so).
                if message["guild_id"].is_null() {
                    message["guild_id"] = json!("");
                }
                if let Some(id) = message["id"].as_str() {
                    self.state.taken(&channel, id);
                }
                match self.gateway.reader.message_created(&message, &origin).await? {
                    Pushed::Messages(m) => arrived.messages.extend(m),
                    Pushed::Answers(a) => arrived.answers.extend(a),
                    Pushed::Requests(r) => arrived.requests.extend(r),
                    Pushed::Answer(_) => {}
                }
            }
        }
        arrived.resume = Some(self.state.text());
        Ok(arrived)
    }

    fn arrived(&self, pushed: Pushed) -> Arrived {
        let mut arrived = Arrived {
            resume: Some(self.state.text()),
            ..Arrived::default()
        };
        match pushed {
            Pushed::Messages(messages) => arrived.messages = messages,
            Pushed::Answers(answers) => arrived.answers = answers,
            Pushed::Requests(requests) => arrived.requests = requests,
            Pushed::Answer(_) => {}
        }
        arrived
    }
}

impl HeldConnection for GatewayConnection {
    fn next(&mut self) -> OnConnection<'_, Arrived> {
        Box::pin(async move {
            loop {
                let frame = tokio::select! {
                    frame = self.socket.next_frame() => frame?,
                    _ = tokio::time::sleep_until(self.next_beat) => {
                        self.beat().await?;
                        continue;
                    }
                };
                match frame {
                    Frame::Closed(reason) => {
                        let (error, spent) = closed(&reason);
                        if spent {
                            self.gateway.spend(&self.state.session);
                        }
                        return Err(error);
                    }
                    Frame::Text(text) => {
                        if let Some(arrived) = self.read(&text).await? {
                            return Ok(arrived);
                        }
                    }
                }
            }
        })
    }

    /// Discord has no acknowledgement: the stored offset is where a resume starts.
    fn acknowledge(&mut self, _acks: Vec<String>) -> OnConnection<'_, ()> {
        Box::pin(async { Ok(()) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_offset_remembers_each_channels_newest_message_and_forgets_the_quietest_channels() {
        let mut state = Resume::default();
        state.taken("c1", "1300000000000000010");
        state.taken("c1", "1300000000000000009");
        assert_eq!(state.last["c1"], "1300000000000000010", "an older id moves nothing");
        state.taken("c1", "1300000000000000011");
        assert_eq!(state.last["c1"], "1300000000000000011");
        for n in 0..REMEMBERED_CHANNELS {
            state.taken(&format!("other{n}"), &format!("14000000000000000{n:02}"));
        }
        assert_eq!(state.last.len(), REMEMBERED_CHANNELS);
        assert!(!state.last.contains_key("c1"), "the quietest channel is forgotten");
        let read = Resume::read(Some(&state.text())).unwrap();
        assert_eq!(read, state);
    }

    #[test]
    fn a_close_says_what_to_do_and_whether_the_session_can_be_resumed() {
        let (said, spent) = closed("4004 Authentication failed.");
        assert!(said.contains("token") && spent, "{said}");
        let (said, spent) = closed("4014 Disallowed intent(s).");
        assert!(said.contains("Message Content intent") && spent, "{said}");
        assert!(closed("4009 Session timed out.").1);
        assert!(!closed("4000 Unknown error.").1);
        assert!(!closed("1001 going away").1);
    }
}
