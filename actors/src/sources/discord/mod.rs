//! `kind = "discord"`: a Discord bot's gateway, held open (`gateway.rs`). A message from an
//! allowed user becomes an inbound row for the session its channel (or thread) feeds; a click
//! on a question's button answers it.
//!
//! ```text
//!   MESSAGE_CREATE  (not a bot's, not a webhook's, a person's message)
//!     allowed user? channel (a thread: its parent, and the thread) → session →
//!       InboundMessage { origin "discord:NAME", source_channel_id channel,
//!                        source_thread_id thread, source_message_id id }
//!     `/new`, `/sessions`, `/stop`, `/resume` typed as messages → session requests
//!     `/allow ID`, `/deny ID`, yes / no in the question's thread → answers
//!   INTERACTION_CREATE  (a click on relayq's button: type 3, its custom_id)
//!     → ChatAnswer or a session button's tap, recorded; then, within Discord's 3 s:
//!       the first answer: a deferred update (type 6), the question edited to its outcome
//!       by the answering channel; a repeat or a stranger's click: an ephemeral reply (type 4,
//!       flag 64) with the line for who clicked
//! ```
//!
//! Session commands are messages, not registered application commands: they read the same in
//! a server's channel, a thread and a DM, as on Telegram and Slack; they need no registration
//! call at start (nor the `applications.commands` scope), and a command's row is the message
//! that typed it, deduplicated like any other.
//!
//! A thread is a channel of its own on Discord, and its messages name only the thread: its
//! parent is learned from the gateway (`GUILD_CREATE`'s active threads, `THREAD_CREATE`) or,
//! for a thread not seen yet, asked once (`GET /channels/{id}`).

#[cfg(feature = "test-helpers")]
pub mod conformance;
mod config;
#[cfg(any(test, feature = "test-helpers"))]
pub mod fake;
mod files;
mod gateway;

use std::collections::HashMap;
use std::sync::Mutex;

use relayq_engine::approvals::{self, Answered, Answerer, ChatAnswer};
use relayq_engine::chat_sessions::{Asked, SessionRequest, Tap};
use relayq_engine::inbound::attachments::{Attachment, FileKind};
use relayq_engine::{InboundMessage, MessageType};
use serde_json::{json, Value};

use crate::channels::discord::is_snowflake;
use crate::kit::http::HttpClient;
use crate::kit::routing::Role;
use crate::sources::{chat_words, Pushed};

pub use config::{Config, CHANNEL_PLACEHOLDER};
pub use files::DiscordFiles;
pub use gateway::{DiscordGateway, Resume, INTENTS};

/// The origin of source `name`'s messages.
pub fn origin(name: &str) -> String {
    format!("discord:{name}")
}

/// Discord's channel types that are threads (announcement, public, private).
const THREAD_TYPES: [u64; 3] = [10, 11, 12];

/// An interaction's answer: a deferred update of the message clicked (nothing shown).
const DEFERRED_UPDATE: u64 = 6;
/// An interaction's answer: a message (with [`EPHEMERAL`], seen only by who clicked).
const CHANNEL_MESSAGE: u64 = 4;
const EPHEMERAL: u64 = 1 << 6;

/// How Discord's messages and clicks read: who may write, which session a channel feeds, what
/// a click answers; and how a click is answered where it was made.
pub struct DiscordReader {
    config: Config,
    /// The REST API's base URL, ending in `/`.
    api: url::Url,
    /// The bot's REST client: interaction callbacks, channel lookups, history.
    http: HttpClient,
    /// Channel id → its parent, when it is a thread (`None`: not a thread).
    parents: Mutex<HashMap<String, Option<String>>>,
}

impl DiscordReader {
    pub fn new(config: Config, api: url::Url, http: HttpClient) -> Self {
        DiscordReader {
            config,
            api,
            http,
            parents: Mutex::default(),
        }
    }

    fn route(&self, path: &str) -> url::Url {
        self.api.join(path).expect("a route joins the API URL")
    }

    /// Notes a channel object's parent, if it is a thread.
    pub fn learn_channel(&self, channel: &Value) {
        let Some(id) = channel["id"].as_str() else {
            return;
        };
        let is_thread = channel["type"]
            .as_u64()
            .is_some_and(|t| THREAD_TYPES.contains(&t));
        let parent = channel["parent_id"].as_str().filter(|_| is_thread);
        self.parents
            .lock()
            .unwrap()
            .insert(id.to_string(), parent.map(str::to_string));
    }

    /// Where a message in `channel` was written, as relayq's routing names it: the chat and the
    /// thread (a thread's parent, and the thread). A channel not seen yet in a server is asked
    /// for once; an error is the fetch's (the event comes again on the resumed session).
    async fn place(&self, channel: &str, in_server: bool) -> Result<(String, Option<String>), String> {
        let known = self.parents.lock().unwrap().get(channel).cloned();
        let parent = match known {
            Some(parent) => parent,
            // Only a snowflake is looked up (an id never walks the API's paths).
            None if !in_server || !is_snowflake(channel) => None,
            None => {
                let reply = self
                    .http
                    .send(self.http.get(self.route(&format!("channels/{channel}"))))
                    .await
                    .map_err(|e| format!("cannot ask Discord about channel {channel}: {}", e.text().unwrap_or_default()))?;
                match reply.status {
                    200 => self.learn_channel(&reply.json::<Value>().unwrap_or_default()),
                    403 | 404 => {
                        self.parents.lock().unwrap().insert(channel.to_string(), None);
                    }
                    _ => return Err(format!("GET /channels/{channel}: {}", reply.error())),
                }
                self.parents.lock().unwrap().get(channel).cloned().flatten()
            }
        };
        Ok(match parent {
            Some(parent) => (parent, Some(channel.to_string())),
            None => (channel.to_string(), None),
        })
    }

    /// The inbound message a `MESSAGE_CREATE` makes, if it is one relayq takes.
    async fn accept(&self, m: &Value, origin: &str) -> Result<Option<InboundMessage>, String> {
        let text = |v: &Value| v.as_str().map(str::to_string);
        // Bots' posts (relayq's answers among them), webhooks' and system messages (joins,
        // pins) are not someone writing to the agent. 0: a message; 19: a reply.
        let person = matches!(m["type"].as_u64(), Some(0 | 19) | None);
        if m["author"]["bot"] == json!(true) || m["webhook_id"].is_string() || !person {
            return Ok(None);
        }
        let (Some(user), Some(channel), Some(id)) = (
            text(&m["author"]["id"]),
            text(&m["channel_id"]),
            text(&m["id"]),
        ) else {
            tracing::warn!("skipping a Discord message without author, channel or id");
            return Ok(None);
        };
        // Pairing may have added a person the settings do not name: the write decides (see
        // `relayq_engine::access`).
        let unlisted = !self.config.routing.allows(&user);
        let (chat, thread) = self.place(&channel, m["guild_id"].is_string()).await?;
        // The channel's sessions (started with /new) decide in the write; this is the static
        // route under them, empty when config.toml names none.
        let session = self.config.routing.session_for(&chat).unwrap_or_default();
        let name = text(&m["author"]["global_name"]).or(text(&m["author"]["username"]));
        let content = m["content"].as_str().unwrap_or_default().to_string();
        let attachments = attachments_of(m, &id);
        let message_type = match attachments.first().map(|a| a.kind) {
            None => MessageType::Text,
            Some(FileKind::Voice) => MessageType::Voice,
            Some(_) => MessageType::File,
        };
        // A message in a thread is addressed `thread/message`, so that a reaction or a reply
        // reaches it (the chat's id does not: a thread is a channel of its own).
        let id = match &thread {
            Some(thread) => format!("{thread}/{id}"),
            None => id,
        };
        Ok(Some(InboundMessage {
            session,
            origin: origin.to_string(),
            message_type,
            content,
            source_message_id: Some(id),
            source_channel_id: Some(chat),
            source_thread_id: thread,
            actor_id: Some(user),
            actor_name: name,
            actor_avatar_url: None,
            payload: None,
            attachments,
            album: None,
            album_quiet: std::time::Duration::ZERO,
            prompt: None,
            route_by_chat: true,
            unlisted,
        }))
    }

    /// What a `MESSAGE_CREATE` carries: an allowed user's message, a session command, or an
    /// answer to a question.
    pub async fn message_created(&self, m: &Value, origin: &str) -> Result<Pushed, String> {
        let Some(message) = self.accept(m, origin).await? else {
            return Ok(Pushed::Messages(Vec::new()));
        };
        let user = message.actor_id.clone().unwrap_or_default();
        let role = self.config.routing.role_of(&user);
        let max = self.config.routing.max_sessions;
        // A server's channel holds a thread per session; a DM holds none.
        let threads = m["guild_id"].is_string();
        if let Some(request) = chat_words::request_in(&message, role, threads, max) {
            return Ok(Pushed::Requests(vec![request]));
        }
        Ok(match chat_words::answer_in(&message, role, true) {
            Some(answer) => Pushed::Answers(vec![answer]),
            None => Pushed::Messages(vec![message]),
        })
    }

    /// What an `INTERACTION_CREATE` carries: a click on one of relayq's buttons (an approval's
    /// answer, or a session button's tap). Anything else is answered at once, changing nothing.
    pub async fn interaction_created(&self, i: &Value, origin: &str) -> Result<Pushed, String> {
        let callback = match (i["id"].as_str(), i["token"].as_str()) {
            (Some(id), Some(token)) => format!("{id}/{token}"),
            _ => return Ok(Pushed::Messages(Vec::new())),
        };
        let user = if i["member"]["user"].is_object() { &i["member"]["user"] } else { &i["user"] };
        let (Some(user_id), Some(channel), Some(custom_id)) = (
            user["id"].as_str(),
            i["channel_id"].as_str(),
            i["data"]["custom_id"].as_str().filter(|_| i["type"] == json!(3)),
        ) else {
            tracing::debug!(kind = ?i["type"], "answering a Discord interaction that is no click on relayq's buttons");
            self.answer_clicks(vec![(callback, String::new())]);
            return Ok(Pushed::Messages(Vec::new()));
        };
        let user_name = user["global_name"]
            .as_str()
            .or(user["username"].as_str())
            .unwrap_or(user_id)
            .to_string();
        let role = self.config.routing.role_of(&user_id.to_string());
        let (chat, thread) = self.place(channel, i["guild_id"].is_string()).await?;
        if let Some(tap) = Tap::read(custom_id) {
            return Ok(Pushed::Requests(vec![SessionRequest {
                origin: origin.to_string(),
                chat,
                thread,
                message_id: None,
                user_id: Some(user_id.to_string()),
                user_name,
                may: role >= Role::Approver,
                known: role >= Role::Writer,
                topics: i["guild_id"].is_string(),
                max_sessions: self.config.routing.max_sessions,
                asked: Asked::Tapped {
                    tap,
                    callback: Some(callback),
                },
            }]));
        }
        let Some((id, decision)) = approvals::read_button_data(custom_id) else {
            self.answer_clicks(vec![(callback, "This button is no longer in use.".into())]);
            return Ok(Pushed::Messages(Vec::new()));
        };
        if role < Role::Approver {
            tracing::warn!(user = user_id, channel, "a Discord user who may not answer questions clicked an approval's button: refused");
        }
        Ok(Pushed::Answers(vec![ChatAnswer {
            target: approvals::Target::Id(id),
            decision,
            who: Answerer {
                name: user_name,
                id: Some(user_id.to_string()),
                via: origin.to_string(),
                chat: Some((origin.to_string(), chat)),
            },
            role,
            callback: Some(callback),
            message_id: None,
            otherwise: None,
        }]))
    }

    /// Each click answered once its answer is recorded: the first, with a deferred update
    /// (its question is edited to the outcome by the answering channel); a repeat or a
    /// stranger's, with the line for who clicked, seen only by them.
    pub fn acknowledge(&self, answered: Vec<Answered>) {
        let replies = answered
            .into_iter()
            .filter_map(|a| {
                let line = if a.took_effect { String::new() } else { a.reply };
                Some((a.answer.callback?, line))
            })
            .collect();
        self.answer_clicks(replies);
    }

    /// Each session button's click answered as an approval's is (see [`Self::acknowledge`]).
    pub fn tapped(&self, taps: Vec<(String, String)>) {
        self.answer_clicks(taps);
    }

    /// `POST /interactions/{id}/{token}/callback`: a deferred update where `line` is empty,
    /// else an ephemeral message. Discord shows "interaction failed" to who clicked when no
    /// answer comes: a failure is logged.
    fn answer_clicks(&self, clicks: Vec<(String, String)>) {
        let calls: Vec<(url::Url, Value)> = clicks
            .into_iter()
            .filter(|(callback, _)| {
                callback
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_./".contains(&b))
            })
            .map(|(callback, line)| {
                let url = self.route(&format!("interactions/{callback}/callback"));
                let body = match line.is_empty() {
                    true => json!({"type": DEFERRED_UPDATE}),
                    false => json!({"type": CHANNEL_MESSAGE,
                                    "data": {"content": line, "flags": EPHEMERAL,
                                             "allowed_mentions": {"parse": []}}}),
                };
                (url, body)
            })
            .collect();
        if calls.is_empty() {
            return;
        }
        let http = self.http.clone();
        actix_rt::spawn(async move {
            for (url, body) in calls {
                match http.send(http.post(url).json(body.to_string())).await {
                    Ok(reply) if reply.is_success() => {}
                    Ok(reply) => tracing::warn!(status = reply.status, error = reply.error(), "Discord refused the answer to a click"),
                    Err(no_answer) => tracing::warn!(error = no_answer.text().unwrap_or_default(), "the answer to a Discord click was not sent"),
                }
            }
        });
    }

    /// The messages in `channel` after message `after`, oldest first, at most `pages` pages of
    /// 100: what came while no gateway session was open.
    pub async fn history_after(&self, channel: &str, after: &str, pages: usize) -> Result<Vec<Value>, String> {
        let mut read = Vec::new();
        if !is_snowflake(channel) || !is_snowflake(after) {
            return Ok(read);
        }
        let mut after = after.to_string();
        for _ in 0..pages {
            let mut url = self.route(&format!("channels/{channel}/messages"));
            url.query_pairs_mut()
                .append_pair("after", &after)
                .append_pair("limit", "100");
            let reply = self
                .http
                .send(self.http.get(url))
                .await
                .map_err(|e| format!("cannot read channel {channel}'s history: {}", e.text().unwrap_or_default()))?;
            if matches!(reply.status, 403 | 404) {
                // The bot can no longer see the channel: nothing to read there.
                tracing::warn!(channel, status = reply.status, "cannot read a channel's history to catch up; what came there while relayq was away is not read");
                return Ok(read);
            }
            let Some(mut page) = reply.json::<Vec<Value>>().filter(|_| reply.is_success()) else {
                return Err(format!("GET /channels/{channel}/messages: {}", reply.error()));
            };
            // Discord gives the newest first.
            page.sort_by_key(|m| {
                let id = m["id"].as_str().unwrap_or_default().to_string();
                (id.len(), id)
            });
            let full = page.len() == 100;
            if let Some(last) = page.last().and_then(|m| m["id"].as_str()) {
                after = last.to_string();
            }
            read.extend(page);
            if !full {
                break;
            }
        }
        Ok(read)
    }
}

/// A message's flag: it is a voice message (its one attachment, an audio recording).
const IS_VOICE_MESSAGE: u64 = 1 << 13;

/// A message's `attachments`, as Discord describes them: fetched from their `url` by the
/// delivering node.
fn attachments_of(m: &Value, message: &str) -> Vec<Attachment> {
    let voice = m["flags"].as_u64().is_some_and(|f| f & IS_VOICE_MESSAGE != 0);
    let Some(files) = m["attachments"].as_array() else {
        return Vec::new();
    };
    files
        .iter()
        .map(|f| {
            let text = |key: &str| f[key].as_str().map(str::to_string);
            let mime = text("content_type").unwrap_or_default();
            let kind = match voice {
                true => FileKind::Voice,
                false => FileKind::of_mime(&mime),
            };
            let mut a = match text("url") {
                Some(url) => Attachment::new(kind, url),
                None => Attachment::not_fetched(kind, "Discord gave no address to fetch it from"),
            };
            a.name = text("filename");
            a.size = f["size"].as_u64();
            a.mime = Some(mime).filter(|m| !m.is_empty());
            a.duration = f["duration_secs"].as_f64().map(|s| s.round() as u64);
            a.message = Some(message.to_string());
            a
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_voice_message_is_a_voice_note_and_other_attachments_are_named_by_their_type() {
        let voice = serde_json::json!({"flags": 8192, "attachments": [{
            "id": "1", "filename": "voice-message.ogg", "size": 5000, "duration_secs": 6.6,
            "url": "https://cdn.discordapp.com/attachments/1/2/voice-message.ogg",
            "content_type": "audio/ogg"}]});
        let read = attachments_of(&voice, "m1");
        assert_eq!(read[0].kind, FileKind::Voice);
        assert_eq!(read[0].duration, Some(7));
        assert_eq!(read[0].message.as_deref(), Some("m1"));
        let files = serde_json::json!({"attachments": [
            {"filename": "a.png", "url": "https://cdn.discordapp.com/a.png", "content_type": "image/png"},
            {"filename": "b.mp3", "url": "https://cdn.discordapp.com/b.mp3", "content_type": "audio/mpeg"},
            {"filename": "c.log", "url": "https://cdn.discordapp.com/c.log"},
            {"filename": "d.bin"}]});
        let kinds: Vec<FileKind> = attachments_of(&files, "m2").iter().map(|a| a.kind).collect();
        assert_eq!(kinds, [FileKind::Photo, FileKind::Audio, FileKind::Document, FileKind::Document]);
        assert!(attachments_of(&files, "m2")[3].skipped.is_some(), "no address: not fetched, said");
    }
}
