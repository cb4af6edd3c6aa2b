//! The outbound flow's message: text on its way to a chat platform or webhook, addressed to a
//! channel and a destination on it, and how it maps onto a queue row (ordered per destination).

pub mod chunking;
pub mod notice;
pub mod routes;
pub mod writes;

use crate::tx::Tx;
use serde::{Deserialize, Serialize};

use crate::error::{EngineError, Result};
use crate::policy::{secs, QueuePolicy};
use crate::queue::{Enqueued, NewRow};

/// The name of the outbound queue.
pub const QUEUE: crate::QueueName = crate::QueueName::Outbound;

crate::words! {
    /// What part of an agent's reply a message is (the far end may render them differently).
    #[derive(Default)]
    pub enum Kind("kind") {
        /// A complete answer, or a notice that stands alone.
        #[default]
        Final = "final",
        /// One block of a longer, streamed answer.
        Block = "block",
        /// A tool call or its result.
        Tool = "tool",
    }
}

/// A message for a chat platform. Stored whole, so a retry after a restart sends exactly what
/// the first attempt sent, to exactly the same place.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OutboundMessage {
    /// The configured channel that sends it (`[channels.NAME]`).
    pub channel: String,
    /// Where on that channel: a chat id, a user, a thread.
    pub to: String,
    #[serde(default)]
    pub kind: Kind,
    /// The text to send. Empty for a hook event's notice, which each channel renders from
    /// `notice` in its platform's markup.
    #[serde(default)]
    pub text: String,
    /// A hook event's notice, as data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notice: Option<crate::outbound::notice::Notice>,
    /// Sent to the far end (e.g. the webhook's `Idempotency-Key` header); a second enqueue with
    /// the same key on the same channel is not written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
    /// The agent session it is about, when a hook event created it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    /// The hook event that created it (`agent_stop`, `notification`, `error`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event: Option<String>,
    /// Which part of a longer text this row is, when the text was split for its channel.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub part: Option<Part>,
    /// A thread of the destination to post in: a Telegram forum topic's `message_thread_id`, a
    /// Slack `thread_ts`. Kept with the row, so a retry posts in the same thread.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thread: Option<String>,
    /// The platform's id of the message this one answers (Telegram `reply_parameters`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply_to: Option<String>,
    /// The platform's id of an earlier message this one replaces (an approval's question,
    /// edited to its outcome): channels that can edit do, the others send it as a new message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub edit: Option<String>,
    /// Buttons under the message, in rows: a tap comes back to the source as the button's
    /// data. Channels without buttons leave them out (the text says what to type instead).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub buttons: Vec<Vec<Button>>,
    /// A file sent with `text` as its caption (`relayq send`), read from disk when it is sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<OutboundFile>,
}

/// A file to send, as `relayq send` found it: read from node `node`'s disk when it is sent,
/// and refused then if it is no longer what was written down (its size, its SHA-256).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutboundFile {
    /// Absolute, on `node`.
    pub path: String,
    /// The name the chat sees.
    pub name: String,
    pub size: u64,
    /// Hex.
    pub sha256: String,
    /// The type its first bytes say it is (never its name's extension).
    pub mime: String,
    /// The node whose disk holds it.
    pub node: String,
}

/// A button under a message: its label, and the data a tap sends back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Button {
    pub label: String,
    pub data: String,
}

/// One part of a text split for its channel's limit (see [`chunking`](crate::outbound::chunking)): part
/// `index` (from 1) of `of`. The parts are rows written together, one after another on the
/// destination's queue, so they go out in order and each keeps its own receipt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Part {
    pub index: u32,
    pub of: u32,
}

/// What an outbound enqueue wrote: the first row (or the one it repeats) and how many parts.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Written {
    #[serde(flatten)]
    pub first: Enqueued,
    /// Rows written for the message: more than one when its text was split.
    #[serde(skip_serializing_if = "is_one")]
    pub parts: u32,
}

fn is_one(n: &u32) -> bool {
    *n == 1
}

/// Writes `message` inside a caller's transaction, split into parts when its text is over
/// `limit` (its channel's, when the channel has one). A message whose first part is already
/// written (the same idempotency key) is a duplicate as a whole: nothing is written. A refusal
/// (`QUEUE_FULL`) of any part is returned as the error, and the caller's transaction, rolled
/// back, writes none of them.
pub fn enqueue_in(
    queue: &crate::Queue,
    tx: &Tx<'_>,
    message: &OutboundMessage,
    limit: Option<crate::TextLimit>,
) -> Result<Written> {
    enqueue_parts_in(queue, tx, &message.parts(limit))
}

/// [`enqueue_in`] for a message already split (see [`OutboundMessage::parts`]): a caller that
/// splits first knows whether one statement writes it (one part) or several do.
pub fn enqueue_parts_in(
    queue: &crate::Queue,
    tx: &Tx<'_>,
    parts: &[OutboundMessage],
) -> Result<Written> {
    let mut rows = parts.iter().map(OutboundMessage::to_row);
    let first_row = rows.next().expect("a message has at least one part");
    let first = queue.enqueue_in(tx, &first_row)?;
    if first.duplicate {
        return Ok(Written { first, parts: 1 });
    }
    for row in rows {
        queue.enqueue_in(tx, &row)?;
    }
    Ok(Written {
        first,
        parts: parts.len() as u32,
    })
}

/// The idempotency key of part `index` of a message keyed `key`: the message's own for the
/// first part, with `#N` for part N.
pub fn part_key(key: &str, index: u32) -> String {
    match index {
        1 => key.to_string(),
        n => format!("{key}#{n}"),
    }
}

impl OutboundMessage {
    /// A final message of `text` to `to` on `channel`; the optional fields unset (set them
    /// with struct update syntax: `OutboundMessage { thread, ..OutboundMessage::text(..) }`).
    pub fn text(channel: &str, to: &str, text: &str) -> Self {
        OutboundMessage {
            channel: channel.into(),
            to: to.into(),
            kind: Kind::Final,
            text: text.into(),
            notice: None,
            idempotency_key: None,
            session: None,
            event: None,
            part: None,
            thread: None,
            reply_to: None,
            edit: None,
            buttons: Vec::new(),
            file: None,
        }
    }

    /// Checks what must hold before the message is written; the error says what to fix.
    pub fn validate(&self, max_body_bytes: usize) -> Result<()> {
        let invalid = |m: String| Err(EngineError::Invalid(m));
        if self.channel.trim().is_empty() {
            return invalid("the channel is empty: name a configured channel".into());
        }
        if self.to.trim().is_empty() {
            return invalid("the destination is empty: say where on the channel to send".into());
        }
        if self.text.is_empty() && self.notice.is_none() && self.file.is_none() {
            return invalid("the message text is empty: say what to send".into());
        }
        if self.idempotency_key.as_deref().is_some_and(str::is_empty) {
            return invalid("the idempotency key is empty: omit it or give a key".into());
        }
        // The key goes out as an HTTP header (`Idempotency-Key`), where control characters
        // cannot: such a row could never be sent.
        if self
            .idempotency_key
            .as_deref()
            .is_some_and(|k| k.chars().any(char::is_control))
        {
            return invalid(
                "the idempotency key has a control character (a newline, a tab): it is sent \
                 as an HTTP header; give a key without one"
                    .into(),
            );
        }
        if self.text.len() > max_body_bytes {
            return invalid(format!(
                "the message text is {} bytes, over the {} byte limit (daemon.max_body_bytes)",
                self.text.len(),
                max_body_bytes
            ));
        }
        let limit = max_body_bytes + crate::inbound::ENVELOPE_BYTES;
        let size = serde_json::to_string(self).map_or(usize::MAX, |s| s.len());
        if size > limit {
            return invalid(format!(
                "the message with its destination and ids is {size} bytes, over the {limit} \
                 byte limit (daemon.max_body_bytes, plus {} for ids and fields)",
                crate::inbound::ENVELOPE_BYTES
            ));
        }
        Ok(())
    }

    /// The message as the rows to write: itself when its text fits `limit`, else one message
    /// per part of the text, each with its part number and its own idempotency key (the
    /// caller's for the first part, with `#N` for part N), so parts go on the same FIFO.
    pub fn parts(&self, limit: Option<crate::TextLimit>) -> Vec<OutboundMessage> {
        if self.file.is_some() {
            return vec![self.clone()]; // a caption is checked against its own limit
        }
        let texts = match limit {
            Some(limit) if crate::outbound::chunking::length(&self.text) > limit.max => {
                crate::outbound::chunking::split(&self.text, limit)
            }
            _ => return vec![self.clone()],
        };
        let of = texts.len() as u32;
        if of <= 1 {
            return vec![self.clone()];
        }
        texts
            .into_iter()
            .zip(1..)
            .map(|(text, index)| OutboundMessage {
                text,
                part: Some(Part { index, of }),
                idempotency_key: self.idempotency_key.as_ref().map(|k| part_key(k, index)),
                // The buttons go under the last part, after the whole text.
                buttons: match index == of {
                    true => self.buttons.clone(),
                    false => Vec::new(),
                },
                ..self.clone()
            })
            .collect()
    }

    /// The message this part answers: the first part (or a text that was not split) replies;
    /// later parts follow it in the same thread without quoting the message again.
    pub fn reply_to_on_this_part(&self) -> Option<&str> {
        match self.part {
            Some(Part { index, .. }) if index > 1 => None,
            _ => self.reply_to.as_deref(),
        }
    }

    /// The ordering key: one FIFO per (channel, destination).
    pub fn destination_key(&self) -> String {
        serde_json::json!([self.channel, self.to]).to_string()
    }

    /// The queue row: keyed by destination, deduplicated on `(channel, idempotency_key)`.
    pub fn to_row(&self) -> NewRow {
        NewRow {
            key: self.destination_key(),
            payload: serde_json::to_string(self).expect("an outbound message always serialises"),
            dedup_key: self
                .idempotency_key
                .as_ref()
                .map(|k| serde_json::json!([self.channel, k]).to_string()),
        }
    }

    /// Reads a row's payload back.
    pub fn from_payload(payload: &str) -> Result<Self> {
        serde_json::from_str(payload)
            .map_err(|e| EngineError::Invalid(format!("stored outbound payload is not valid: {e}")))
    }

    /// The key the far end sees: the caller's, else one stable for this row across retries.
    pub fn idempotency_key_for(&self, row_id: i64) -> String {
        self.idempotency_key
            .clone()
            .unwrap_or_else(|| format!("relayq-outbound-{row_id}"))
    }
}

impl QueuePolicy {
    /// The outbound queue's defaults (outbound delivery pipeline): 5 s, 25 s, 2 min, then
    /// 10 min; dead after 10 attempts; a one-minute lease, extended while a send runs; only
    /// final messages sent again after a restart; a message still unsent after an hour is
    /// expired (`max age`), not sent late.
    pub fn outbound() -> Self {
        QueuePolicy {
            backoff: secs(&[5, 25, 120, 600]),
            lease_timeout: std::time::Duration::from_secs(60),
            max_attempts: Some(10),
            // Progress and streaming parts are stale after a restart; answers are not.
            replay_kinds: Some(vec!["final".into()]),
            // A chat message an hour late is news nobody asked for: it is recorded, not sent.
            max_age: Some(std::time::Duration::from_secs(3600)),
            ..QueuePolicy::inbound()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg() -> OutboundMessage {
        OutboundMessage::text("team", "ops", "done")
    }

    #[test]
    fn ordered_per_destination_and_deduplicated_per_channel_key() {
        let mut m = msg();
        assert_eq!(m.to_row().key, r#"["team","ops"]"#);
        assert_eq!(m.to_row().dedup_key, None);
        assert_eq!(m.idempotency_key_for(7), "relayq-outbound-7");
        m.idempotency_key = Some("k1".into());
        assert_eq!(m.to_row().dedup_key.as_deref(), Some(r#"["team","k1"]"#));
        assert_eq!(m.idempotency_key_for(7), "k1");
        assert_eq!(
            OutboundMessage::from_payload(&m.to_row().payload).unwrap(),
            m
        );
    }

    #[test]
    fn backoff_is_5s_25s_2m_then_10m_and_gives_up_after_10() {
        let p = QueuePolicy::outbound();
        let got: Vec<u64> = (1..=6).map(|n| p.delay_after(n).as_secs()).collect();
        assert_eq!(got, vec![5, 25, 120, 600, 600, 600]);
        assert!(!p.exhausted(9) && p.exhausted(10));
    }

    #[test]
    fn validation_names_what_to_fix() {
        let err = |f: fn(&mut OutboundMessage)| {
            let mut m = msg();
            f(&mut m);
            m.validate(10).unwrap_err().to_string()
        };
        assert!(err(|m| m.channel.clear()).contains("channel is empty"));
        assert!(err(|m| m.to = " ".into()).contains("destination is empty"));
        assert!(err(|m| m.idempotency_key = Some(String::new())).contains("idempotency key"));
        assert!(err(|m| m.text = "x".repeat(11)).contains("over the 10 byte limit"));
        assert!("video"
            .parse::<Kind>()
            .unwrap_err()
            .to_string()
            .contains("final, block or tool"));
    }

    #[test]
    fn a_long_text_is_written_as_ordered_parts_and_a_repeat_writes_nothing() {
        let (_dir, db) = crate::db::temp_database();
        let engine = crate::Engine::with_clock(db, std::sync::Arc::new(crate::SystemClock));
        let q = engine.queue(QUEUE, QueuePolicy::outbound());
        let mut m = msg();
        m.text = "word ".repeat(60); // 300 characters
        m.idempotency_key = Some("k".into());
        let limit = Some(crate::TextLimit {
            max: 100,
            markup: crate::Markup::Plain,
        });
        let write = |m: &OutboundMessage| {
            engine
                .database()
                .write_at(q.now(), |tx| enqueue_in(&q, tx, m, limit))
                .unwrap()
        };
        let written = write(&m);
        assert_eq!((written.parts, written.first.duplicate), (3, false));
        let mut texts = Vec::new();
        for n in 1..=3u32 {
            let lease = q.lease_next(&m.destination_key()).unwrap().unwrap();
            assert_eq!(
                lease.id,
                written.first.id + i64::from(n) - 1,
                "rows in order"
            );
            let part = OutboundMessage::from_payload(&lease.payload).unwrap();
            assert_eq!(part.part, Some(Part { index: n, of: 3 }));
            let key = if n == 1 {
                "k".to_string()
            } else {
                format!("k#{n}")
            };
            assert_eq!(part.idempotency_key.as_deref(), Some(key.as_str()));
            texts.push(part.text);
            q.complete(lease.id, lease.token, None).unwrap();
        }
        assert_eq!(texts.concat(), m.text);
        let again = write(&m);
        assert_eq!(
            (again.first.id, again.first.duplicate),
            (written.first.id, true)
        );
        assert_eq!(
            serde_json::to_string(&again).unwrap(),
            format!(r#"{{"id":{},"duplicate":true}}"#, written.first.id)
        );
        m.text = "short".into();
        m.idempotency_key = None;
        assert_eq!(
            m.parts(limit),
            vec![m.clone()],
            "a text that fits is one row"
        );
    }
}
