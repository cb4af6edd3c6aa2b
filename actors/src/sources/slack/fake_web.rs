//! Slack's Web API on loopback, answering as <https://api.slack.com/web> documents (and as
//! `tests/fixtures/slack` shows): `auth.test`, `chat.postMessage` (a `ts` of its own for each
//! message), `chat.update` (only a message it posted; `message_not_found` otherwise),
//! `reactions.add` (`already_reacted`) and `reactions.remove` (`no_reaction`). With
//! [`FakeSlackWeb::enforce_limits`] it refuses, as Slack does (429, `ratelimited`,
//! `Retry-After`), a message to a channel within a second of the last one there (Slack's
//! "1 per second per channel", with 10 % slack for the network's jitter), and more than 50
//! calls a minute of one Tier 3 method (`chat.update`, `reactions.*`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::testing::loopback::{Answer, Asked, Loopback};

/// One call, as the fake counts it.
#[derive(Debug, Clone)]
pub struct WebCall {
    pub method: String,
    pub channel: String,
    pub at: Instant,
    pub body: Value,
    /// Refused with 429: past a limit.
    pub refused: bool,
}

/// The limits: a channel's messages (posts and updates) at least this far apart, and Tier 3
/// methods at most this many a minute.
pub const CHANNEL_GAP: Duration = Duration::from_millis(900);
pub const TIER_3_PER_MINUTE: usize = 50;

/// An upload `files.getUploadURLExternal` started: its name, announced length, and the bytes'
/// size and SHA-256 once they came.
#[derive(Debug, Clone)]
struct Upload {
    filename: String,
    length: usize,
    received: Option<(usize, String)>,
}

/// A file the bot shared.
#[derive(Debug, Clone, PartialEq)]
pub struct SharedFile {
    pub id: String,
    pub filename: String,
    pub size: usize,
    /// Hex.
    pub sha256: String,
    pub channel: String,
    pub thread: Option<String>,
    pub comment: Option<String>,
}

/// `%XX` and `+` of a form value decoded.
fn decode(value: &str) -> String {
    let spaced = value.replace('+', " ");
    percent_encoding::percent_decode_str(&spaced)
        .decode_utf8_lossy()
        .into_owned()
}

#[derive(Default)]
struct WebState {
    /// Files messages share: name → bytes.
    files: HashMap<String, Vec<u8>>,
    uploads: HashMap<String, Upload>,
    shared: Vec<SharedFile>,
    calls: Vec<WebCall>,
    /// The bot's messages now: ts → (channel, thread_ts, text).
    messages: HashMap<String, (String, Option<String>, String)>,
    /// The bot's reactions now: (channel, ts) → names.
    reactions: HashMap<(String, String), Vec<String>>,
    next: u64,
    limits: bool,
}

#[derive(Clone)]
pub struct FakeSlackWeb {
    /// The base URL to give as `api_url` (ends with `/`).
    pub url: String,
    state: Arc<Mutex<WebState>>,
}

impl FakeSlackWeb {
    /// Serves on a free loopback port.
    pub fn start() -> FakeSlackWeb {
        let mut fake = FakeSlackWeb {
            url: String::new(),
            state: Arc::default(),
        };
        let serving = fake.clone();
        let server = Loopback::start(0, move |asked| serving.answer(asked));
        fake.url = format!("{}/api/", server.url());
        // It serves for the rest of the process, as the platform would.
        std::mem::forget(server);
        fake
    }

    /// From now on, calls past Slack's limits are refused with 429 (see the module's doc).
    pub fn enforce_limits(&self) {
        self.state.lock().unwrap().limits = true;
    }

    /// Every call so far, refused ones too.
    pub fn calls(&self) -> Vec<WebCall> {
        self.state.lock().unwrap().calls.clone()
    }

    /// The bot's message `ts` now: its text.
    pub fn text_of(&self, ts: &str) -> Option<String> {
        let state = self.state.lock().unwrap();
        state.messages.get(ts).map(|(_, _, text)| text.clone())
    }

    /// The bot's messages in `channel` now: (ts, thread_ts, text), oldest first.
    pub fn messages_in(&self, channel: &str) -> Vec<(String, Option<String>, String)> {
        let state = self.state.lock().unwrap();
        let mut found: Vec<_> = state
            .messages
            .iter()
            .filter(|(_, (c, _, _))| c == channel)
            .map(|(ts, (_, thread, text))| (ts.clone(), thread.clone(), text.clone()))
            .collect();
        found.sort();
        found
    }

    /// The bot's reactions on message `ts` of `channel` now.
    pub fn reactions_on(&self, channel: &str, ts: &str) -> Vec<String> {
        let state = self.state.lock().unwrap();
        let key = (channel.to_string(), ts.to_string());
        state.reactions.get(&key).cloned().unwrap_or_default()
    }

    /// The files the bot shared (`files.completeUploadExternal` of an upload it made), in order.
    pub fn files_shared(&self) -> Vec<SharedFile> {
        self.state.lock().unwrap().shared.clone()
    }

    /// A file a message shares, served at `<base>/files-pri/<name>` to the bot's token; its
    /// `url_private_download`.
    pub fn add_file(&self, name: &str, bytes: &[u8]) -> String {
        let mut state = self.state.lock().unwrap();
        state.files.insert(name.to_string(), bytes.to_vec());
        let base = self.url.trim_end_matches('/').trim_end_matches("/api");
        format!("{base}/files-pri/{name}")
    }

    fn answer(&self, asked: Asked) -> Answer {
        if let Some(name) = asked.url.strip_prefix("/files-pri/") {
            // Slack serves a private file only with a token that may read it.
            let state = self.state.lock().unwrap();
            let authorized = asked.header("authorization").is_some_and(|a| a.starts_with("Bearer xoxb-"));
            return match (state.files.get(name), authorized) {
                (Some(bytes), true) => Answer::new(200, bytes.clone()),
                (Some(_), false) => Answer::new(403, "not authorized"),
                (None, _) => Answer::new(404, "not found"),
            };
        }
        if let Some(id) = asked.url.strip_prefix("/upload/") {
            // The upload URL `files.getUploadURLExternal` gave: the file's bytes, raw.
            let mut state = self.state.lock().unwrap();
            let digest = ring::digest::digest(&ring::digest::SHA256, &asked.body);
            let hex = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
            return match state.uploads.get_mut(id) {
                Some(upload) => {
                    upload.received = Some((asked.body.len(), hex));
                    Answer::new(200, format!("OK - {}", asked.body.len()))
                }
                None => Answer::new(404, "no such upload"),
            };
        }
        let method = asked.url.rsplit('/').next().unwrap_or_default().to_string();
        if method == "files.getUploadURLExternal" {
            // Form-encoded, as Slack documents it: filename and length.
            let form: HashMap<String, String> = asked
                .text()
                .split('&')
                .filter_map(|pair| pair.split_once('='))
                .map(|(k, v)| (k.to_string(), decode(v)))
                .collect();
            let mut state = self.state.lock().unwrap();
            state.next += 1;
            let id = format!("F0{:08}", state.next);
            let upload = Upload {
                filename: form.get("filename").cloned().unwrap_or_default(),
                length: form.get("length").and_then(|l| l.parse().ok()).unwrap_or(0),
                received: None,
            };
            if upload.filename.is_empty() || upload.length == 0 {
                return Answer::json(200, &json!({"ok": false, "error": "invalid_arguments"}));
            }
            state.uploads.insert(id.clone(), upload);
            let host = asked.header("host").unwrap_or("127.0.0.1").to_string();
            let url = format!("http://{host}/upload/{id}");
            return Answer::json(200, &json!({"ok": true, "upload_url": url, "file_id": id}));
        }
        let body: Value = serde_json::from_slice(&asked.body).unwrap_or(json!({}));
        let channel = body["channel"].as_str().unwrap_or_default().to_string();
        let mut state = self.state.lock().unwrap();
        let now = Instant::now();
        if let Some(wait) = state.over_limit(&method, &channel, now) {
            state.calls.push(WebCall {
                method,
                channel,
                at: now,
                body,
                refused: true,
            });
            return Answer::json(429, &json!({"ok": false, "error": "ratelimited"}))
                .header("Retry-After", &wait.to_string());
        }
        state.calls.push(WebCall {
            method: method.clone(),
            channel: channel.clone(),
            at: now,
            body: body.clone(),
            refused: false,
        });
        let text = body["text"].as_str().unwrap_or_default().to_string();
        let ts_of = |body: &Value, field: &str| body[field].as_str().unwrap_or_default().to_string();
        let answer = match method.as_str() {
            "auth.test" => json!({"ok": true, "user": "relayq", "team": "Demo"}),
            "files.completeUploadExternal" => {
                let files = body["files"].as_array().cloned().unwrap_or_default();
                let mut shared = Vec::new();
                for file in &files {
                    let id = file["id"].as_str().unwrap_or_default();
                    match state.uploads.get(id) {
                        // Slack refuses to complete an upload whose bytes did not all come.
                        Some(Upload { received: Some((size, sha256)), filename, length }) if size == length => {
                            shared.push(SharedFile {
                                id: id.to_string(),
                                filename: filename.clone(),
                                size: *size,
                                sha256: sha256.clone(),
                                channel: body["channel_id"].as_str().unwrap_or_default().to_string(),
                                thread: body["thread_ts"].as_str().map(str::to_string),
                                comment: body["initial_comment"].as_str().map(str::to_string),
                            })
                        }
                        _ => return Answer::json(200, &json!({"ok": false, "error": "file_not_found"})),
                    }
                }
                state.shared.extend(shared);
                json!({"ok": true, "files": files})
            }
            "chat.postMessage" => {
                state.next += 1;
                let ts = format!("1767226000.{:06}", state.next);
                let thread = body["thread_ts"].as_str().map(str::to_string);
                state.messages.insert(ts.clone(), (channel.clone(), thread, text));
                json!({"ok": true, "channel": channel, "ts": ts})
            }
            "chat.update" => {
                let ts = ts_of(&body, "ts");
                match state.messages.get_mut(&ts) {
                    Some(m) if m.0 == channel => {
                        m.2 = text;
                        json!({"ok": true, "channel": channel, "ts": ts})
                    }
                    _ => json!({"ok": false, "error": "message_not_found"}),
                }
            }
            "reactions.add" | "reactions.remove" => {
                let key = (channel.clone(), ts_of(&body, "timestamp"));
                let name = ts_of(&body, "name");
                let on = state.reactions.entry(key).or_default();
                match (method.as_str(), on.contains(&name)) {
                    ("reactions.add", true) => json!({"ok": false, "error": "already_reacted"}),
                    ("reactions.add", false) => {
                        on.push(name);
                        json!({"ok": true})
                    }
                    (_, false) => json!({"ok": false, "error": "no_reaction"}),
                    (_, true) => {
                        on.retain(|n| *n != name);
                        json!({"ok": true})
                    }
                }
            }
            _ => json!({"ok": false, "error": "unknown_method"}),
        };
        Answer::json(200, &answer)
    }
}

impl WebState {
    /// Seconds to wait when `method` to `channel` now is past a limit.
    fn over_limit(&self, method: &str, channel: &str, now: Instant) -> Option<u64> {
        if !self.limits {
            return None;
        }
        let counted = self.calls.iter().filter(|c| !c.refused);
        if matches!(method, "chat.postMessage" | "chat.update") {
            let last = counted
                .clone()
                .filter(|c| c.channel == channel && c.method.starts_with("chat."))
                .map(|c| c.at)
                .max();
            if last.is_some_and(|at| now.duration_since(at) < CHANNEL_GAP) {
                return Some(1);
            }
        }
        let tier_3 = matches!(method, "chat.update" | "reactions.add" | "reactions.remove");
        let minute = counted
            .filter(|c| c.method == method && now.duration_since(c.at) < Duration::from_secs(60))
            .count();
        (tier_3 && minute >= TIER_3_PER_MINUTE).then_some(5)
    }
}
