//! `kind = "slack"`: sends outbound rows with the Web API's `chat.postMessage`.
//!
//! ```text
//!   row ──▶ an earlier send got no answer? ── yes ──▶ conversations.history: a message whose
//!             │ no                                    metadata names this row?  yes → delivered
//!             ▼                                                                 no  → send
//!           chat.postMessage {channel, text (mrkdwn), thread_ts?, metadata: {row},
//!                             blocks: an approval's question and its buttons}
//!           (an approval's outcome: chat.update of the question, buttons gone; a question
//!            Slack cannot edit any more gets a new message)
//!             200 ok: true {ts}                 → delivered, receipt = ts
//!             429 ratelimited + Retry-After     → throttled that long (not counted)
//!             200 ok: false channel_not_found, is_archived, not_in_channel,
//!                 invalid_auth, token_revoked, account_inactive, ... → permanent
//!             200 ok: false internal_error, fatal_error, service_unavailable,
//!                 request_timeout; 5xx; no connection → retry
//! ```
//!
//! Slack answers most errors with HTTP 200 and `ok: false`: never call a row delivered on the
//! status. `to` is a channel id (`C0123ABCDEF`, a DM's `D...`); `thread` (or `reply_to`) is a
//! thread's `ts`. Texts are split at 4000 characters when written.

mod config;
mod render;
#[cfg(test)]
pub(crate) mod tests;

use std::time::Duration;

use serde::Deserialize;
use serde_json::{json, Value};

use crate::kit::http::{HttpClient, Reply};
use super::contract::only_outbound;
use super::{Answer, Channel, Content, Delivery, Outcome, UnknownOutcome};
use crate::channels::bot::bot_channel_basics;

pub use config::Config;

/// Slack's limit on a message's `text` (it truncates longer ones).
pub const MAX_CHARS: usize = 4000;

/// The metadata `event_type` of relayq's messages; its payload holds the row.
pub const METADATA_EVENT: &str = "relayq_row";

/// How many pages of history a lookup reads before it gives up and sends.
const LOOKUP_PAGES: usize = 5;

/// Messages asked for per history page (halved while a page does not fit).
const PAGE_MESSAGES: usize = 100;

/// The bytes read per message of a history page: a 40 000-character text (Slack's most), its
/// blocks and metadata.
const MESSAGE_BYTES: usize = 256 * 1024;

#[derive(Clone)]
pub struct SlackChannel {
    /// The Web API's base URL, ending in `/`.
    api: url::Url,
    /// Sends `Authorization: Bearer <token>`; scrubs the token from errors.
    http: HttpClient,
    timeout: Duration,
    unknown_outcome: UnknownOutcome,
}

impl Channel for SlackChannel {
    fn deliver(&mut self, delivery: Delivery) -> Answer {
        let Content::Outbound(message) = &delivery.content else {
            return only_outbound("slack");
        };
        if let Some(file) = &message.file {
            let this = self.clone();
            let channel = message.to.trim().to_string();
            let thread = message.thread.clone().or(message.reply_to.clone());
            let caption = crate::files::marked_if_repeat(&message.text, delivery.possible_repeat);
            let file = file.clone();
            return Answer::later(async move { this.send_file(channel, thread, caption, file).await });
        }
        let row = RowMark {
            row: delivery.id,
            written: delivery.created_at,
        };
        let thread = message.thread.as_ref().or(message.reply_to.as_ref());
        let mut body = json!({
            "channel": message.to.trim(),
            "text": message.text,
            "mrkdwn": true,
            "unfurl_links": false,
            "metadata": {"event_type": METADATA_EVENT, "event_payload": row},
        });
        if let Some(ts) = thread {
            body["thread_ts"] = json!(ts.trim());
        }
        // An approval's question carries its answers as buttons (a `block_actions` push to the
        // Slack source); its outcome replaces it, buttons gone.
        if let Some(approval) = message.notice.as_ref().and_then(|n| n.approval.as_ref()) {
            body["blocks"] = approval_blocks(&message.text, approval);
        }
        // A message's own buttons (a session's list, a confirmation): a click comes back to
        // the source as the button's data.
        if !message.buttons.is_empty() {
            body["blocks"] = button_blocks(&message.text, &message.buttons);
        }
        let this = self.clone();
        let (channel, thread) = (message.to.trim().to_string(), thread.cloned());
        let check_first = delivery.possible_repeat;
        let edit = message.edit.clone();
        Answer::later(async move {
            if let Some(ts) = edit {
                if let Some(outcome) = this.update_message(&body, &ts).await {
                    return outcome;
                }
            } else if check_first {
                match this.find(&channel, thread.as_deref(), row).await {
                    Ok(Some(ts)) => return Outcome::delivered_as(ts),
                    Ok(None) => {}
                    Err(Lookup::Later(outcome)) => return outcome,
                    Err(Lookup::Cannot(why)) => tracing::warn!(
                        row = row.row,
                        why,
                        "cannot check whether an earlier send of the row reached Slack; sending it again"
                    ),
                }
            }
            this.post_message(body).await
        })
    }

    /// A thread per session: a message naming the session starts it, and its `ts` is the
    /// thread's id. Slack threads cannot be closed: the session's "stopped" notice in it is
    /// the last word.
    fn thread(&self, call: super::ThreadCall) -> Option<super::ThreadAnswer> {
        let this = self.clone();
        Some(Box::pin(async move { this.session_thread(call).await }))
    }

    /// Reactions (`reactions.remove` of the one shown, then `reactions.add`) and progress
    /// messages (`chat.postMessage`, then `chat.update`).
    fn cosmetic(&self, call: super::CosmeticCall) -> Option<super::CosmeticAnswer> {
        let this = self.clone();
        Some(Box::pin(async move { this.show(call).await }))
    }

    bot_channel_basics!(render: render::slack_mrkdwn, pace: config::pace, ready: auth_test);
}

/// Slack's limit: 4000 characters of mrkdwn.
pub fn text_limit() -> relayq_engine::TextLimit {
    relayq_engine::TextLimit {
        max: MAX_CHARS,
        markup: relayq_engine::Markup::Markdown,
    }
}

/// The row a message was sent for, in its metadata: its id and when it was written (so that
/// another database's row with the same id is not taken for it).
#[derive(Debug, Clone, Copy, PartialEq, Deserialize, serde::Serialize)]
pub struct RowMark {
    pub row: i64,
    pub written: i64,
}

/// Why a lookup did not say.
enum Lookup {
    /// Slack could not answer now: try the row later.
    Later(Outcome),
    /// It never will (a missing `*:history` scope): send.
    Cannot(String),
}

impl SlackChannel {
    fn method(&self, name: &str) -> url::Url {
        self.api.join(name).expect("a method name joins the API URL")
    }

    /// A file, as Slack takes one: `files.getUploadURLExternal` (its name and length), its
    /// bytes streamed from disk to the upload URL that gives, then
    /// `files.completeUploadExternal` shares it in the channel (and thread), the caption as
    /// its comment.
    async fn send_file(
        &self,
        channel: String,
        thread: Option<String>,
        caption: String,
        file: relayq_engine::outbound::OutboundFile,
    ) -> Outcome {
        use percent_encoding::{utf8_percent_encode, NON_ALPHANUMERIC};
        let form = format!(
            "filename={}&length={}",
            utf8_percent_encode(&file.name, NON_ALPHANUMERIC),
            file.size
        );
        let request = self
            .http
            .post(self.method("files.getUploadURLExternal"))
            .body(form, "application/x-www-form-urlencoded");
        let reply = match self.http.send(request).await {
            Ok(reply) => reply,
            Err(no_answer) => return no_answer,
        };
        let answer = reply.json::<Value>().unwrap_or_default();
        let (Some(url), Some(id)) = (answer["upload_url"].as_str(), answer["file_id"].as_str())
        else {
            return match classify(&reply) {
                Outcome::Delivered(_) => Outcome::unknown("Slack gave no upload URL"),
                outcome => outcome,
            };
        };
        let Ok(url) = url::Url::parse(url) else {
            return Outcome::retry("Slack gave an upload URL that is not one");
        };
        let upload = crate::kit::http::Upload {
            head: Default::default(),
            path: std::path::PathBuf::from(&file.path),
            size: file.size,
            tail: Default::default(),
        };
        let request = self.http.post(url).upload(upload, "application/octet-stream");
        match self.http.send_within(request, crate::files::SEND_TIMEOUT).await {
            Ok(reply) if reply.is_success() => {}
            // Nothing is shared until the upload is completed: trying again starts afresh.
            Ok(reply) => return Outcome::retry(format!("the upload was refused: {}", reply.error())),
            Err(no_answer) => return no_answer,
        }
        let mut body = json!({"files": [{"id": id, "title": file.name}], "channel_id": channel});
        if let Some(ts) = thread {
            body["thread_ts"] = json!(ts.trim());
        }
        if !caption.is_empty() {
            body["initial_comment"] = json!(caption);
        }
        let request = self
            .http
            .post(self.method("files.completeUploadExternal"))
            .body(body.to_string(), "application/json; charset=utf-8");
        let reply = match self.http.send(request).await {
            Ok(reply) => reply,
            Err(no_answer) => return no_answer,
        };
        match reply.json::<Value>() {
            Some(answer) if reply.is_success() && answer["ok"] == json!(true) => {
                Outcome::delivered_as(id.to_string())
            }
            _ => classify(&reply),
        }
    }

    async fn post_message(&self, body: Value) -> Outcome {
        let request = self
            .http
            .post(self.method("chat.postMessage"))
            .body(body.to_string(), "application/json; charset=utf-8");
        match self.http.send(request).await {
            Ok(reply) => classify(&reply),
            Err(no_answer) => no_answer,
        }
    }

    /// Makes a cosmetic call (see [`Channel::cosmetic`]).
    async fn show(&self, call: super::CosmeticCall) -> super::CosmeticOutcome {
        use super::{CosmeticCall, CosmeticOutcome};
        let calls: Vec<(&str, Value)> = match &call {
            CosmeticCall::React {
                to,
                message,
                emoji,
                previous,
            } => {
                let on = |name: &str| json!({"channel": to.trim(), "timestamp": message, "name": name});
                let mut calls: Vec<(&str, Value)> = previous
                    .iter()
                    .filter(|p| *p != emoji)
                    .map(|p| ("reactions.remove", on(p)))
                    .collect();
                calls.push(("reactions.add", on(emoji)));
                calls
            }
            CosmeticCall::Post { to, thread, text } => {
                let mut body = json!({"channel": to.trim(), "text": crate::kit::cut_chars(text, MAX_CHARS)});
                if let Some(thread) = thread {
                    body["thread_ts"] = json!(thread);
                }
                vec![("chat.postMessage", body)]
            }
            // Slack has no drafts (`drafts_in` is false): nothing to show.
            CosmeticCall::Draft { .. } => vec![],
            CosmeticCall::Edit { to, message, text } => vec![(
                "chat.update",
                json!({"channel": to.trim(), "ts": message, "text": crate::kit::cut_chars(text, MAX_CHARS)}),
            )],
        };
        // Slack's answers that mean it is done already.
        const ALREADY: [&str; 2] = ["already_reacted", "no_reaction"];
        let mut posted = None;
        for (method, body) in calls {
            let request = self
                .http
                .post(self.method(method))
                .body(body.to_string(), "application/json; charset=utf-8");
            let reply = match self.http.send(request).await {
                Ok(reply) => reply,
                Err(no_answer) => {
                    let why = no_answer.text().unwrap_or("no answer").to_string();
                    return CosmeticOutcome::Failed(format!("{method}: {why}"));
                }
            };
            let answered = reply.json::<WebApiReply>();
            match (&answered, classify(&reply)) {
                (_, Outcome::Throttled { wait, .. }) => return CosmeticOutcome::Wait(wait),
                (Some(WebApiReply { ok: true, ts, .. }), _) => posted = ts.clone(),
                (Some(WebApiReply { error: Some(e), .. }), _) if ALREADY.contains(&e.as_str()) => {}
                _ => return CosmeticOutcome::Failed(format!("{method}: {}", describe(&reply))),
            }
        }
        CosmeticOutcome::Done(posted)
    }

    /// Opens a session's thread (see [`Channel::thread`]): the new thread's `ts`.
    async fn session_thread(&self, call: super::ThreadCall) -> Result<Option<String>, String> {
        let super::ThreadCall::Open { to, name } = call else {
            return Ok(None);
        };
        let body = json!({
            "channel": to.trim(),
            "text": format!("Session *{name}*: write in this thread to talk to it."),
            "mrkdwn": true,
        });
        let request = self
            .http
            .post(self.method("chat.postMessage"))
            .body(body.to_string(), "application/json; charset=utf-8");
        let reply = match self.http.send(request).await {
            Ok(reply) => reply,
            Err(no_answer) => return Err(format!("chat.postMessage got no answer: {no_answer:?}")),
        };
        match reply.json::<WebApiReply>() {
            Some(WebApiReply {
                ok: true,
                ts: Some(ts),
                ..
            }) => Ok(Some(ts)),
            _ => Err(format!(
                "Slack refused the session's thread: {}",
                describe(&reply)
            )),
        }
    }

    /// `chat.update` of message `ts` to `body`'s text, its blocks (buttons) gone. `None` when
    /// Slack cannot edit that message (deleted, too old): the caller sends it new.
    async fn update_message(&self, body: &Value, ts: &str) -> Option<Outcome> {
        let update = json!({
            "channel": body["channel"],
            "ts": ts,
            "text": body["text"],
            "blocks": [],
        });
        let request = self
            .http
            .post(self.method("chat.update"))
            .body(update.to_string(), "application/json; charset=utf-8");
        let reply = match self.http.send(request).await {
            Ok(reply) => reply,
            Err(no_answer) => return Some(no_answer),
        };
        let error = reply.json::<WebApiReply>().and_then(|a| a.error);
        if error.as_deref().is_some_and(|e| CANNOT_UPDATE.contains(&e)) {
            tracing::info!(error, "Slack cannot update the message; sending it as a new one");
            return None;
        }
        Some(classify(&reply))
    }

    /// The `ts` of the message sent for `row` in `channel` (in `thread`), if Slack has it.
    async fn find(
        &self,
        channel: &str,
        thread: Option<&str>,
        row: RowMark,
    ) -> Result<Option<String>, Lookup> {
        // Slack's `oldest` is in seconds; the message cannot predate its row.
        let oldest = format!("{}", (row.written / 1000).saturating_sub(1));
        let (method, mut query) = match thread {
            Some(ts) => (
                "conversations.replies",
                vec![("channel", channel), ("ts", ts)],
            ),
            None => ("conversations.history", vec![("channel", channel)]),
        };
        query.extend([("oldest", oldest.as_str()), ("include_all_metadata", "true")]);
        let mut cursor = String::new();
        let mut limit = PAGE_MESSAGES;
        let mut pages = 0;
        while pages < LOOKUP_PAGES {
            let mut page = query.clone();
            let limit_text = limit.to_string();
            page.push(("limit", limit_text.as_str()));
            if !cursor.is_empty() {
                page.push(("cursor", cursor.as_str()));
            }
            let request = self
                .http
                .get(self.method(method))
                .query(&page)
                .read_up_to(limit * MESSAGE_BYTES);
            let reply = self.http.send(request).await.map_err(Lookup::Later)?;
            if reply.cut {
                // Never logged: the page holds what people wrote. Ask for fewer messages.
                if limit == 1 {
                    return Err(Lookup::Cannot(format!(
                        "{method} answered one message in over {MESSAGE_BYTES} bytes"
                    )));
                }
                limit /= 2;
                continue;
            }
            pages += 1;
            let history = match reply.json::<History>() {
                Some(h) if reply.is_success() && h.ok => h,
                _ => {
                    return Err(match classify(&reply) {
                        Outcome::Permanent { reason } => Lookup::Cannot(reason),
                        later => Lookup::Later(later),
                    })
                }
            };
            let found = history.messages.iter().find(|m| {
                m.metadata.as_ref().is_some_and(|meta| {
                    meta.event_type == METADATA_EVENT
                        && serde_json::from_value::<RowMark>(meta.event_payload.clone()).ok()
                            == Some(row)
                })
            });
            if let Some(message) = found {
                return Ok(Some(message.ts.clone()));
            }
            match history.response_metadata.and_then(|m| m.next_cursor) {
                Some(next) if history.has_more && !next.is_empty() => cursor = next,
                _ => return Ok(None),
            }
        }
        Ok(None)
    }

    /// `auth.test`: the bot's user name when the token is good.
    pub async fn auth_test(&self) -> Result<String, String> {
        let request = self.http.post(self.method("auth.test"));
        let reply = self
            .http
            .send(request)
            .await
            .map_err(|no_answer| no_answer.text().unwrap_or_default().to_string())?;
        match reply.json::<Value>() {
            Some(v) if reply.is_success() && v["ok"] == true => {
                Ok(v["user"].as_str().unwrap_or_default().to_string())
            }
            _ => Err(describe(&reply)),
        }
    }
}

/// `conversations.history` / `conversations.replies`, as far as a lookup reads them.
#[derive(Debug, Deserialize)]
struct History {
    ok: bool,
    #[serde(default)]
    messages: Vec<HistoryMessage>,
    #[serde(default)]
    has_more: bool,
    #[serde(default)]
    response_metadata: Option<ResponseMetadata>,
}

#[derive(Debug, Deserialize)]
struct HistoryMessage {
    ts: String,
    #[serde(default)]
    metadata: Option<Metadata>,
}

#[derive(Debug, Deserialize)]
struct Metadata {
    event_type: String,
    #[serde(default)]
    event_payload: Value,
}

#[derive(Debug, Deserialize)]
struct ResponseMetadata {
    #[serde(default)]
    next_cursor: Option<String>,
}

/// The Web API's answer: `{"ok": true, "ts": ...}` or `{"ok": false, "error": "..."}`.
#[derive(Debug, Deserialize)]
struct WebApiReply {
    ok: bool,
    #[serde(default)]
    ts: Option<String>,
    #[serde(default)]
    error: Option<String>,
}

/// `chat.update`'s errors for a message it cannot edit: it is then sent as a new one.
const CANNOT_UPDATE: &[&str] = &["message_not_found", "cant_update_message", "edit_window_closed"];

/// Slack's limit on a section block's text.
const SECTION_CHARS: usize = 3000;

/// The blocks of an approval's question: its text, and the buttons Allow, Deny, and "Allow
/// for this session" where the agent has it. A click comes back as a `block_actions` push
/// whose action `value` is the button's data (see
/// [`button_data`](relayq_engine::approvals::button_data)).
fn approval_blocks(text: &str, approval: &relayq_engine::outbound::notice::ApprovalAsked) -> Value {
    use relayq_engine::approvals::{button_data, Decision, Scope};
    let button = |label: &str, decision: Decision, style: Option<&str>| {
        let mut b = json!({
            "type": "button",
            "text": {"type": "plain_text", "text": label},
            "action_id": format!("relayq-{}", decision.word()),
            "value": button_data(&approval.id, decision),
        });
        if let Some(style) = style {
            b["style"] = json!(style);
        }
        b
    };
    let mut buttons = vec![
        button("Allow", Decision::Allow(Scope::Once), Some("primary")),
        button("Deny", Decision::Deny, Some("danger")),
    ];
    if approval.for_session {
        buttons.push(button(
            "Allow for this session",
            Decision::Allow(Scope::Session),
            None,
        ));
    }
    json!([
        {"type": "section", "text": {"type": "mrkdwn", "text": crate::kit::cut_chars(text, SECTION_CHARS)}},
        {"type": "actions", "block_id": format!("relayq-approval-{}", approval.id), "elements": buttons},
    ])
}

/// The blocks of a message with buttons: its text, and an actions block per row (Slack takes
/// at most 25 elements in one; a row holds a few).
fn button_blocks(text: &str, rows: &[Vec<relayq_engine::outbound::Button>]) -> Value {
    let mut blocks = vec![json!({"type": "section", "text": {"type": "mrkdwn", "text": crate::kit::cut_chars(text, SECTION_CHARS)}})];
    for (r, row) in rows.iter().enumerate() {
        let elements: Vec<Value> = row
            .iter()
            .enumerate()
            .map(|(i, b)| {
                json!({
                    "type": "button",
                    "text": {"type": "plain_text", "text": crate::kit::cut_chars(&b.label, 75)},
                    "action_id": format!("relayq-button-{r}-{i}"),
                    "value": b.data,
                })
            })
            .collect();
        blocks.push(json!({"type": "actions", "elements": elements}));
    }
    Value::Array(blocks)
}

/// Slack's errors that a later try may get past; every other `ok: false` is permanent.
const TRANSIENT: &[&str] = &[
    "internal_error",
    "fatal_error",
    "service_unavailable",
    "request_timeout",
];

fn classify(reply: &Reply) -> Outcome {
    let answered = reply.json::<WebApiReply>();
    let described = describe(reply);
    // Slack says `ratelimited` with a 429 (and, from some methods, under a 200).
    let ratelimited = reply.status == 429
        || matches!(&answered, Some(WebApiReply { error: Some(e), .. }) if e == "ratelimited");
    if ratelimited {
        return Outcome::Throttled {
            reason: described,
            wait: reply.retry_after.unwrap_or(Duration::from_secs(1)),
            channel_wide: false,
        };
    }
    if !reply.is_success() {
        return Outcome::Retry {
            error: described,
            after: reply.retry_after,
        };
    }
    match answered {
        Some(WebApiReply {
            ok: true,
            ts: Some(ts),
            ..
        }) => Outcome::delivered_as(ts),
        Some(WebApiReply {
            ok: false,
            error: Some(error),
            ..
        }) => match error.as_str() {
            e if TRANSIENT.contains(&e) => Outcome::Retry {
                error: described,
                after: reply.retry_after,
            },
            e => Outcome::Permanent {
                reason: match hint(e) {
                    Some(hint) => format!("{described}: {hint}"),
                    None => described,
                },
            },
        },
        // A 200 that says neither: the message may or may not exist.
        _ => Outcome::unknown(format!("unexpected answer: {}", reply.error())),
    }
}

/// What to do about the errors a bridge meets.
fn hint(error: &str) -> Option<&'static str> {
    Some(match error {
        "channel_not_found" => "no such channel: `to` is a channel id like C0123ABCDEF",
        "not_in_channel" => "invite the app to the channel (/invite @yourapp)",
        "is_archived" => "the channel is archived",
        "invalid_auth" | "not_authed" | "token_revoked" | "account_inactive" => {
            "fix the token (token_env / token_file), then `relayq dead retry` these rows"
        }
        "missing_scope" => "add the scope to the app (chat:write) and reinstall it",
        _ => return None,
    })
}

/// `Slack: channel_not_found`, or the HTTP status and body.
fn describe(reply: &Reply) -> String {
    match reply.json::<WebApiReply>().and_then(|a| a.error) {
        Some(error) => format!("Slack: {error}"),
        None => reply.error(),
    }
}
