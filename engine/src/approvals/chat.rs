//! The approvals as the chat sees them: a question's buttons, the answers a chat gives (a tap,
//! `/allow ID`, a yes replying to the question), who may give them, and the question edited
//! to its outcome once it ended.

use super::*;
use crate::error::Result;
use crate::tx::Tx;

impl AnswerResult {
    /// A line for the person who answered.
    pub fn reply(&self) -> String {
        match self {
            AnswerResult::Recorded(a) => capitalise(&a.outcome()),
            AnswerResult::AlreadyEnded(a) => format!("Already {}", a.outcome()),
            AnswerResult::NotHere(a) => format!(
                "Approval {} was not asked in this chat; answer it where it was asked",
                a.id
            ),
            AnswerResult::NotFound => "No such approval".into(),
            AnswerResult::NotAllowed => {
                "You may not answer this agent's questions: ask the bot's owner to add your \
                 user id to allowed_users"
                    .into()
            }
        }
    }
}

fn capitalise(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// What a chat button answering approval `id` with `decision` carries (Telegram's
/// `callback_data`, a Slack button's `value`): `relayq:<id>:<allow|deny|allow-session>`, well
/// within Telegram's 64 bytes.
pub fn button_data(id: &str, decision: Decision) -> String {
    format!("relayq:{id}:{}", decision.word())
}

/// The approval and decision a button's data names, if it is relayq's.
pub fn read_button_data(data: &str) -> Option<(String, Decision)> {
    let (id, word) = data.strip_prefix("relayq:")?.split_once(':')?;
    Some((id.to_string(), Decision::parse(word)?))
}

/// Which approval an answer from a chat is for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// Named by its id (a button's data, `/allow ID`).
    Id(String),
    /// The question this platform message is (a reply of yes or no to it).
    Question { message_id: String },
    /// The one question open in the chat (or its thread) the answer came from: a bare yes or
    /// no, replying to nothing, while a question is open.
    OpenInChat,
}

/// An answer that came from a chat: a button tapped, a text command, a reply to the question.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatAnswer {
    pub target: Target,
    pub decision: Decision,
    /// Who, from which chat (`who.chat` is set).
    pub who: Answerer,
    /// What the source's settings let this person do, raised by pairing when it is recorded:
    /// only an approver's answer counts (a chat allowed as a whole lets its members write to
    /// the agent, not answer its questions).
    pub role: crate::access::Role,
    /// The platform's handle to acknowledge the tap with (Telegram `callback_query.id`).
    pub callback: Option<String>,
    /// The platform's id of the message that carried a text answer (the reply goes to it).
    pub message_id: Option<String>,
    /// An answer that turns out to answer no question goes to the agent as this message: a
    /// yes or no replying to a message that is no question; a bare `allow WORD` (Slack) whose
    /// word names no approval.
    pub otherwise: Option<Box<crate::InboundMessage>>,
}

/// `/allow ID`, `/allow ID session`, `/deny ID` (also `/allow@bot ID`, as Telegram writes a
/// command in a group); or, replying to a question, `yes`/`no`/`allow`/`deny`. `None` for any
/// other text, which goes to the agent as it is.
pub fn command_of(text: &str, reply_to: Option<&str>) -> Option<(Target, Decision)> {
    let words: Vec<&str> = text.split_whitespace().collect();
    let command = |word: &str| {
        let word = word.strip_prefix('/')?;
        let word = word.split_once('@').map_or(word, |(w, _)| w);
        match word.to_ascii_lowercase().as_str() {
            "allow" => Some(Decision::Allow(Scope::Once)),
            "deny" => Some(Decision::Deny),
            _ => None,
        }
    };
    match words.as_slice() {
        [first, id] if is_id(id) => Some((Target::Id(id.to_string()), command(first)?)),
        [first, id, scope] if is_id(id) && scope.eq_ignore_ascii_case("session") => {
            match command(first)? {
                Decision::Allow(_) => {
                    Some((Target::Id(id.to_string()), Decision::Allow(Scope::Session)))
                }
                Decision::Deny => None,
            }
        }
        [word] => {
            let word = word.trim_end_matches(['.', '!']).to_ascii_lowercase();
            let decision = match word.as_str() {
                "yes" | "y" | "allow" | "/allow" => Decision::Allow(Scope::Once),
                "no" | "n" | "deny" | "/deny" => Decision::Deny,
                _ => return None,
            };
            let target = match reply_to {
                Some(message_id) => Target::Question {
                    message_id: message_id.to_string(),
                },
                None => Target::OpenInChat,
            };
            Some((target, decision))
        }
        _ => None,
    }
}

/// Records an answer from a chat: only from a user the source allows to answer, only in the
/// chat it was asked in, only while it is open. `Ok(None)` when the target names no approval
/// (a reply to a message that is no question: the text goes to the agent).
pub fn answer_from_chat_in(tx: &Tx<'_>, answer: &ChatAnswer) -> Result<Option<AnswerResult>> {
    let id = match &answer.target {
        // A bare `allow WORD` that names no approval is a message after all.
        Target::Id(id) if answer.otherwise.is_some() && get(tx, id)?.is_none() => return Ok(None),
        Target::Id(id) => id.clone(),
        Target::Question { message_id } => {
            let Some((origin, chat)) = &answer.who.chat else {
                return Ok(None);
            };
            match asked_by_question(tx, origin, chat, message_id)? {
                Some(id) => id,
                None => return Ok(None),
            }
        }
        // None open, or more than one (which one is meant?): the word is a message after all.
        Target::OpenInChat => {
            let Some((origin, chat)) = &answer.who.chat else {
                return Ok(None);
            };
            let thread = answer
                .otherwise
                .as_ref()
                .and_then(|m| m.source_thread_id.as_deref());
            match open_in_chat(tx, origin, chat, thread)?.as_slice() {
                [id] => id.clone(),
                _ => return Ok(None),
            }
        }
    };
    if answer.role < crate::access::Role::Approver {
        return Ok(Some(AnswerResult::NotAllowed));
    }
    answer_in(tx, &id, answer.decision, &answer.who).map(Some)
}

/// Tells the chat how the approval ended, once: its question, edited to say the outcome
/// (buttons gone), or a new message where the question's id is not known (never delivered,
/// or a channel that cannot edit). The ordering key of the row written, to wake its sender.
pub fn tell_in(
    outbound: &crate::Queue,
    tx: &Tx<'_>,
    approval: &Approval,
) -> Result<Option<String>> {
    told_in(tx, &approval.id)?;
    let Some(row) = approval.question_row else {
        return Ok(None);
    };
    let Some(question) = crate::storage::queue::row_detail(tx, row)? else {
        return Ok(None);
    };
    let Ok(asked) = crate::OutboundMessage::from_payload(&question.payload) else {
        return Ok(None);
    };
    let what = asked
        .notice
        .as_ref()
        .and_then(|n| n.question.as_deref())
        .unwrap_or(&approval.action);
    let mark = match approval.decision() {
        Some(Decision::Allow(_)) => "✅",
        _ => "⛔",
    };
    let text = format!(
        "{} asked: {what}\n\n{mark} {}",
        approval.session,
        capitalise(&approval.outcome())
    );
    let message = crate::OutboundMessage {
        edit: question.receipt.filter(|_| question.state == "delivered"),
        idempotency_key: Some(format!("relayq-approval-{}-outcome", approval.id)),
        session: Some(approval.session.clone()),
        event: Some("approval".into()),
        thread: asked.thread.clone(),
        ..crate::OutboundMessage::text(&asked.channel, &asked.to, &text)
    };
    let written = crate::outbound::enqueue_in(outbound, tx, &message, None)?;
    Ok((!written.first.duplicate).then(|| message.destination_key()))
}
