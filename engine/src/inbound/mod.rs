//! The inbound flow's message: what a chat adapter hands in for an agent session
//! (inbound-queue spec), how it is checked, and how it maps onto a queue row.

pub mod albums;
pub mod attachments;
pub mod sources;
pub mod trouble;
pub mod writes;

use crate::tx::Tx;
use serde::{Deserialize, Serialize};

pub use attachments::{Attachment, Fetched, FileKind};

use crate::error::{EngineError, Result};
use crate::queue::{Enqueued, NewRow, Queue};
use crate::sessions;

/// The name of the inbound queue.
pub const QUEUE: crate::QueueName = crate::QueueName::Inbound;

/// Largest message body accepted unless configured otherwise (1 MiB).
pub const DEFAULT_MAX_BODY_BYTES: usize = 1024 * 1024;

/// Why a platform's message over `daemon.max_body_bytes` was kept expired, cut (see
/// [`InboundMessage::refused_copy`]).
pub const REFUSED_TOO_LARGE: &str = "refused: over daemon.max_body_bytes";

/// What a stored message may take beyond `max_body_bytes` for its ids, names and field names:
/// the body limit bounds the whole message, not only its text.
pub const ENVELOPE_BYTES: usize = 4096;

/// Why a message for a session the registry shows ended is expired as it is written.
pub const SESSION_ENDED: &str = "session ended";

/// Writes an inbound row inside a caller's transaction. For a session the registry shows
/// ended (its agent exited and no `session_start` came since), the row is written expired with
/// reason `session ended`: typed into the pane, it would reach whatever answers there now.
/// A new message that names its chat also becomes the session's [origin](sessions::Origin):
/// a second write, so only a message without a chat is written with one statement (see
/// [`InboundMessage::writes_one_statement`]).
pub fn enqueue_in(queue: &Queue, tx: &Tx<'_>, message: &InboundMessage) -> Result<Enqueued> {
    let enqueued = queue.enqueue_for_session_in(tx, &message.to_row(), SESSION_ENDED)?;
    written_in(tx, message, enqueued)
}

/// Why a chat's message that no session takes is written expired.
pub const NO_SESSION: &str = "no session";

/// `message` as it is written: a chat source's message (`route_by_chat`) goes to its topic's
/// session, else to the chat's current one, else to the source's static route (see
/// [`chat_sessions::route`](crate::storage::chat_sessions::route)); with none of them it is written
/// under its chat's own key, expired ([`NO_SESSION`]), so the chat is told. Other messages
/// are written as they are. The flag says whether a session takes it.
pub fn routed_in(tx: &Tx<'_>, message: &InboundMessage) -> Result<(InboundMessage, bool)> {
    let mut routed = message.clone();
    let chat = message.source_channel_id.as_deref();
    let Some(chat) = chat.filter(|_| message.route_by_chat) else {
        return Ok((routed, true));
    };
    let fallback = Some(message.session.as_str()).filter(|s| !s.trim().is_empty());
    let thread = message.source_thread_id.as_deref();
    let found = crate::storage::chat_sessions::route(tx, &message.origin, chat, thread, fallback)?;
    routed.route_by_chat = false;
    Ok(match found {
        Some(session) => {
            routed.session = session;
            (routed, true)
        }
        None => {
            routed.session = format!("unrouted:{}:{chat}", message.origin);
            (routed, false)
        }
    })
}

/// [`enqueue_in`] of a chat source's message, routed first ([`routed_in`]): the message as
/// written (its session) and its row.
pub fn enqueue_routed_in(
    queue: &Queue,
    tx: &Tx<'_>,
    message: &InboundMessage,
) -> Result<(InboundMessage, Enqueued)> {
    let (routed, found) = routed_in(tx, message)?;
    let enqueued = match found {
        true => match albums::enqueue_in(queue, tx, &routed)? {
            Some(enqueued) => enqueued,
            None => enqueue_in(queue, tx, &routed)?,
        },
        false => queue.enqueue_expired_in(tx, &routed.to_row(), NO_SESSION)?,
    };
    Ok((routed, enqueued))
}

/// The row [`enqueue_in`] writes first, for the group commit to write ahead with its
/// neighbours' (see [`RowAhead`](crate::commit::RowAhead)); `None` when the queue's depth
/// limits need it counted first.
pub fn row_ahead(queue: &Queue, message: &InboundMessage) -> Option<crate::commit::RowAhead> {
    if message.route_by_chat {
        return None; // its session is known once routed, in the write's transaction
    }
    let row = message.to_row();
    (queue.writes_ahead() && !row.key.is_empty()).then_some(crate::commit::RowAhead {
        queue: queue.name(),
        row,
        session_ended: SESSION_ENDED,
    })
}

/// The rest of [`enqueue_in`] once the message's row is `enqueued`.
pub fn written_in(tx: &Tx<'_>, message: &InboundMessage, enqueued: Enqueued) -> Result<Enqueued> {
    if let (Some(origin), false) = (message.reply_origin(), enqueued.duplicate) {
        sessions::set_origin_in(tx, &message.session, &origin)?;
    }
    Ok(enqueued)
}

/// The agent says it took `prompt` (its prompt-submit event, or the input its turn's end
/// reports): when the session's message now being delivered was pasted and is that text, it is
/// delivered, with `receipt` (the agent's event) as its receipt. Returns its row id and the message.
pub fn confirm_pasted_in(
    queue: &Queue,
    tx: &Tx<'_>,
    session: &str,
    prompt: &str,
    receipt: &str,
) -> Result<Option<(i64, InboundMessage)>> {
    let Some((id, payload, _)) = queue.oldest_started_in(tx, session)? else {
        return Ok(None);
    };
    let Ok(pasted) = InboundMessage::from_payload(&payload) else {
        return Ok(None);
    };
    if !crate::sessions::agent_state::prompt_matches(prompt, pasted.for_agent()) {
        return Ok(None);
    }
    Ok(queue.confirm_in(tx, id, receipt)?.then_some((id, pasted)))
}

crate::words! {
    /// The kinds of user message the spec allows.
    #[derive(Default)]
    pub enum MessageType("message type") { #[default] Text = "text", Voice = "voice", File = "file" }
}

/// A user message on its way to an agent session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InboundMessage {
    pub session: String,
    /// Where it came from: `telegram`, `discord`, `terminal`, ...
    pub origin: String,
    #[serde(rename = "type", default)]
    pub message_type: MessageType,
    #[serde(default)]
    pub content: String,
    /// The platform's message id; with `origin` (and `source_channel_id`, when given) it
    /// deduplicates enqueues.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_message_id: Option<String>,
    /// The chat the message came from (Telegram `chat.id`, Discord channel id, Slack channel):
    /// Telegram message ids and Slack `ts` are unique only within a chat.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_channel_id: Option<String>,
    /// The thread in that chat (a Telegram forum topic's `message_thread_id`, a Slack
    /// `thread_ts`): replies to the session go back into it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_thread_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actor_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actor_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actor_avatar_url: Option<String>,
    /// Anything else the adapter wants the sink to see.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload: Option<serde_json::Value>,
    /// The files that came with it (`content` is then their caption): fetched by the node
    /// that delivers it, before it is pasted (see [`attachments`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attachments: Vec<Attachment>,
    /// The album it belongs to (Telegram's `media_group_id`): an album's messages that come
    /// within its quiet period become one row, one prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub album: Option<String>,
    /// How long an album's row waits for its next message (its source's `album_quiet`).
    #[serde(skip)]
    pub album_quiet: std::time::Duration,
    /// What the agent is given, once the attachments are fetched: the caption and a line per
    /// file (see [`attachments::prompt`]). Written before it is pasted, so a paste after a
    /// crash is the same text and the agent's echo of it confirms it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    /// A chat source's message: the sessions its chat made decide where it goes (see
    /// [`routed_in`]); `session` is the source's static route, empty when it has none.
    #[serde(skip)]
    pub route_by_chat: bool,
    /// The source's settings do not name the sender: it is taken only if pairing added them
    /// (see [`access::admit_in`](crate::access::admit_in)); a stranger's is dropped there.
    #[serde(skip)]
    pub unlisted: bool,
}

impl InboundMessage {
    /// A text message with no source id or actor.
    pub fn text(session: &str, origin: &str, content: &str) -> Self {
        InboundMessage {
            session: session.into(),
            origin: origin.into(),
            message_type: MessageType::Text,
            content: content.into(),
            source_message_id: None,
            source_channel_id: None,
            source_thread_id: None,
            actor_id: None,
            actor_name: None,
            actor_avatar_url: None,
            payload: None,
            attachments: Vec::new(),
            album: None,
            album_quiet: std::time::Duration::ZERO,
            prompt: None,
            route_by_chat: false,
            unlisted: false,
        }
    }

    /// The text the agent gets: the prompt made once its files were fetched, else the text.
    pub fn for_agent(&self) -> &str {
        self.prompt.as_deref().unwrap_or(&self.content)
    }

    /// Whether it has files to fetch before it can be pasted.
    pub fn needs_fetching(&self) -> bool {
        !self.attachments.is_empty() && self.prompt.is_none()
    }

    /// What is kept of a platform's message over `max_body_bytes`, which the platform cannot
    /// send smaller and must not send again (a Telegram webhook retries a refused update for
    /// ever): the message with its text cut to fit, a line saying how long it was, and no
    /// payload, to be written expired with [`REFUSED_TOO_LARGE`] so `status` and `dead list`
    /// show it. `None` when the message is wrong in another way.
    pub fn refused_copy(&self, max_body_bytes: usize) -> Option<InboundMessage> {
        if self.content.len() <= max_body_bytes {
            return None;
        }
        let note = format!("\n[cut: the message was {} bytes]", self.content.len());
        let mut end = max_body_bytes.saturating_sub(note.len());
        while !self.content.is_char_boundary(end) {
            end -= 1;
        }
        let copy = InboundMessage {
            content: format!("{}{note}", &self.content[..end]),
            payload: None,
            ..self.clone()
        };
        copy.validate(max_body_bytes).is_ok().then_some(copy)
    }

    /// Checks what the spec requires; the error says what to fix.
    pub fn validate(&self, max_body_bytes: usize) -> Result<()> {
        let invalid = |m: String| Err(EngineError::Invalid(m));
        if self.session.trim().is_empty() && !self.route_by_chat {
            return invalid("the session id is empty: give the agent session to deliver to".into());
        }
        if let Some(c) = self.session.chars().find(|c| c.is_control()) {
            return invalid(format!(
                "the session id has a control character (U+{:04X}): session ids are names; \
                 give one without control characters",
                c as u32
            ));
        }
        if self.content.trim().is_empty() && self.payload.is_none() && self.attachments.is_empty() {
            return invalid(
                "the message is empty: give the text to deliver (an empty message would reach \
                 the agent as a bare Enter)"
                    .into(),
            );
        }
        if self.origin.trim().is_empty() {
            return invalid(
                "the origin is empty: say where the message came from (e.g. telegram)".into(),
            );
        }
        if self.source_message_id.as_deref().is_some_and(str::is_empty) {
            return invalid(
                "the source message id is empty: omit it or give the platform's id".into(),
            );
        }
        if self.source_channel_id.as_deref().is_some_and(str::is_empty) {
            return invalid(
                "the source channel id is empty: omit it or give the platform's chat id".into(),
            );
        }
        // The ids are kept as they are (the session's origin, the chat to answer), and
        // PostgreSQL's text refuses a NUL: found by fuzzing the API, a 500 from the database.
        let ids = [
            ("origin", Some(&self.origin)),
            ("source channel id", self.source_channel_id.as_ref()),
            ("source message id", self.source_message_id.as_ref()),
            ("source thread id", self.source_thread_id.as_ref()),
        ];
        for (name, id) in ids {
            if let Some(c) = id.and_then(|id| id.chars().find(|c| c.is_control())) {
                return invalid(format!(
                    "the {name} has a control character (U+{:04X}): ids are a platform's \
                     names and numbers; give one without control characters",
                    c as u32
                ));
            }
        }
        if self.content.len() > max_body_bytes {
            return invalid(format!(
                "the message body is {} bytes, over the {} byte limit (daemon.max_body_bytes)",
                self.content.len(),
                max_body_bytes
            ));
        }
        if self.payload.as_ref().is_some_and(|p| !p.is_object()) {
            return invalid(
                "the payload must be a JSON object, e.g. {\"file_id\": \"abc\"}".into(),
            );
        }
        let size = serde_json::to_string(self).map_or(usize::MAX, |s| s.len());
        if size > max_body_bytes + ENVELOPE_BYTES {
            return invalid(format!(
                "the message with its ids and payload is {size} bytes, over the {} byte limit \
                 (daemon.max_body_bytes, plus {ENVELOPE_BYTES} for ids and fields)",
                max_body_bytes + ENVELOPE_BYTES
            ));
        }
        Ok(())
    }

    /// The queue row: keyed by session, deduplicated on `(origin, source_channel_id,
    /// source_message_id)`, or `(origin, source_message_id)` without a channel id (migration 4
    /// rewrote older keys to this form).
    pub fn to_row(&self) -> NewRow {
        let dedup_key = self.source_message_id.as_ref().map(|id| {
            match &self.source_channel_id {
                Some(chat) => serde_json::json!([self.origin, chat, id]),
                None => serde_json::json!([self.origin, id]),
            }
            .to_string()
        });
        NewRow {
            key: self.session.clone(),
            payload: serde_json::to_string(self).expect("an inbound message always serialises"),
            dedup_key,
        }
    }

    /// Where an answer to this message goes, when it names its chat.
    pub fn reply_origin(&self) -> Option<sessions::Origin> {
        Some(sessions::Origin {
            origin: self.origin.clone(),
            chat: self.source_channel_id.clone()?,
            thread: self.source_thread_id.clone(),
        })
    }

    /// Whether [`enqueue_in`] writes this message with a single statement (it has no chat to
    /// record as the session's origin), so a caller may skip the savepoint.
    pub fn writes_one_statement(&self) -> bool {
        self.source_channel_id.is_none()
    }

    /// Reads a row's payload back.
    pub fn from_payload(payload: &str) -> Result<Self> {
        serde_json::from_str(payload)
            .map_err(|e| EngineError::Invalid(format!("stored inbound payload is not valid: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dedup_key_is_origin_and_source_id_and_absent_without_source_id() {
        let mut m = InboundMessage::text("s", "telegram", "hi");
        assert_eq!(m.to_row().dedup_key, None);
        m.source_message_id = Some("42".into());
        assert_eq!(
            m.to_row().dedup_key.as_deref(),
            Some(r#"["telegram","42"]"#)
        );
        m.source_channel_id = Some("-100".into());
        assert_eq!(
            m.to_row().dedup_key.as_deref(),
            Some(r#"["telegram","-100","42"]"#)
        );
    }

    #[test]
    fn validation_names_what_to_fix() {
        let ok = InboundMessage::text("s", "o", "hello");
        ok.validate(10).unwrap();
        let err = |m: InboundMessage| m.validate(10).unwrap_err().to_string();
        assert!(err(InboundMessage::text("", "o", "x")).contains("session id is empty"));
        assert!(err(InboundMessage::text("s", " ", "x")).contains("origin is empty"));
        assert!(
            err(InboundMessage::text("s", "o", "hello world")).contains("over the 10 byte limit")
        );
        assert!("video"
            .parse::<MessageType>()
            .unwrap_err()
            .to_string()
            .contains("text, voice or file"));
    }

    #[test]
    fn payload_round_trips() {
        let mut m = InboundMessage::text("s", "o", "hi");
        m.message_type = MessageType::Voice;
        m.actor_name = Some("Ann".into());
        m.payload = Some(serde_json::json!({"duration": 3}));
        assert_eq!(
            InboundMessage::from_payload(&m.to_row().payload).unwrap(),
            m
        );
    }
}
