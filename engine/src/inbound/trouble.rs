//! What the chat is told when its message cannot reach the agent: once when it starts to wait
//! (which session, why, how long, how to start the agent), and once when it is dropped. Never
//! silence: a message that came from a chat never just vanishes from it.
//!
//! The notice goes to the chat the message came from (its origin), through the channel that
//! answers that origin; each is written at most once per message (its idempotency key), in the
//! transaction that records what became of the message.

use crate::tx::Tx;

use crate::error::Result;
use crate::hooks::EventType;
use crate::outbound::notice::Notice;
use crate::outbound::routes::NoticeRoutes;
use crate::outbound::OutboundMessage;
use crate::progress::ReactionState;
use crate::queue::Queue;
use crate::sessions::Origin;

/// What happened to a chat's message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trouble<'a> {
    /// It could not be delivered yet and is tried again: `why` says what stands in the way.
    Waits { why: &'a str },
    /// It will never be delivered.
    Dropped { why: &'a str },
}

/// A chat's message: its row, its session, and the chat it came from.
#[derive(Debug, Clone, Copy)]
pub struct FromChat<'a> {
    pub row: i64,
    pub session: &'a str,
    pub origin: &'a Origin,
}

/// Writes the chat's notice of `trouble` with `message`: the ordering key of the outbound row
/// written, or `None` when no channel answers its origin or the chat was told already.
pub fn tell_chat_in(
    outbound: &Queue,
    tx: &Tx<'_>,
    routes: &NoticeRoutes,
    message: FromChat<'_>,
    trouble: Trouble<'_>,
) -> Result<Option<String>> {
    let FromChat {
        row,
        session,
        origin,
    } = message;
    let Some(channel) = routes.replies.get(&origin.origin) else {
        return Ok(None);
    };
    let (headline, key, body) = match trouble {
        Trouble::Waits { why } => (
            "your message waits",
            format!("relayq-waits-{row}"),
            format!("{why}\nIt is delivered as soon as the agent can take it."),
        ),
        Trouble::Dropped { why } => (
            "your message was dropped",
            format!("relayq-dropped-{row}"),
            format!("{why}\nSend it again once the agent runs."),
        ),
    };
    let said = Said {
        channel,
        origin,
        session,
        event: EventType::Error,
        headline,
    };
    said.write_in(outbound, tx, body, key)
}

/// A notice about a chat's message, to that chat.
struct Said<'a> {
    channel: &'a str,
    origin: &'a Origin,
    session: &'a str,
    event: EventType,
    headline: &'a str,
}

impl Said<'_> {
    /// Writes it with `body`, once (`key`): the ordering key of the row written, or `None`
    /// when it was written before.
    fn write_in(
        self,
        outbound: &Queue,
        tx: &Tx<'_>,
        body: String,
        key: String,
    ) -> Result<Option<String>> {
        let message = OutboundMessage {
            notice: Some(Notice {
                session: self.session.to_string(),
                event: self.event,
                headline: self.headline.into(),
                body: Some(body),
                question: None,
                approval: None,
            }),
            idempotency_key: Some(key),
            session: Some(self.session.to_string()),
            event: Some("delivery".into()),
            thread: self.origin.thread.clone(),
            ..OutboundMessage::text(self.channel, &self.origin.chat, "")
        };
        let row = message.to_row();
        let written = outbound.enqueue_in(tx, &row)?;
        Ok((!written.duplicate).then_some(row.key))
    }
}

/// Tells the chat a message with files came from what it should know once they were fetched:
/// the words heard in each voice note (so the person sees what the agent got), and each file
/// that did not reach the agent, with why. One notice per message (its idempotency key);
/// nothing when all went to the agent as sent, or the message names no chat.
pub fn tell_about_files_in(
    outbound: &Queue,
    tx: &Tx<'_>,
    routes: &NoticeRoutes,
    row: i64,
    message: &crate::InboundMessage,
) -> Result<Option<String>> {
    use crate::inbound::attachments::Fetched;
    let Some(origin) = message.reply_origin() else {
        return Ok(None);
    };
    let Some(channel) = routes.replies.get(&origin.origin) else {
        return Ok(None);
    };
    let (mut heard, mut missing) = (Vec::new(), Vec::new());
    for a in &message.attachments {
        let what = a.describe();
        match (&a.skipped, &a.fetched) {
            (Some(why), _) | (None, Some(Fetched::Failed { why })) => {
                missing.push(format!("{what}: not attached, {why}"))
            }
            (None, Some(Fetched::Heard { words, .. })) => heard.push(format!("🎙 {what}: {words}")),
            (None, Some(Fetched::NotHeard { why, .. })) => missing.push(format!(
                "{what}: not transcribed, {why}; the agent has the recording"
            )),
            (None, Some(Fetched::Saved { .. }) | None) => {}
        }
    }
    let (event, headline) = match (heard.is_empty(), missing.is_empty()) {
        (_, false) => (
            EventType::Error,
            "not everything you sent reached the agent",
        ),
        (false, true) => (EventType::Notification, "the agent got your voice note as"),
        (true, true) => return Ok(None),
    };
    let body = heard
        .into_iter()
        .chain(missing)
        .collect::<Vec<_>>()
        .join("\n");
    let said = Said {
        channel,
        origin: &origin,
        session: &message.session,
        event,
        headline,
    };
    said.write_in(outbound, tx, body, format!("relayq-files-{row}"))
}

/// Tells the chat `message` (row `row`) came from of `trouble`, if it named its chat; see
/// [`tell_chat_in`]. A dropped message's reaction says it failed.
pub fn tell_message_in(
    outbound: &Queue,
    tx: &Tx<'_>,
    routes: &NoticeRoutes,
    row: i64,
    message: &crate::InboundMessage,
    trouble: Trouble<'_>,
) -> Result<Option<String>> {
    if let Trouble::Dropped { .. } = trouble {
        crate::progress::reaction_in(tx, routes, row, message, ReactionState::Failed)?;
    }
    let Some(origin) = message.reply_origin() else {
        return Ok(None);
    };
    let from = FromChat {
        row,
        session: &message.session,
        origin: &origin,
    };
    tell_chat_in(outbound, tx, routes, from, trouble)
}

/// What the chat of `message` hears as it is written, in the caller's transaction (see
/// [`tell_chat_in`]): that it was dropped (`enqueued.expired`: its session ended), or that it
/// waits behind a question the agent asked in that chat.
pub fn tell_on_arrival_in(
    outbound: &Queue,
    tx: &Tx<'_>,
    routes: &NoticeRoutes,
    message: &crate::InboundMessage,
    enqueued: &crate::Enqueued,
) -> Result<Option<String>> {
    if enqueued.duplicate {
        return Ok(None);
    }
    let Some(reason) = enqueued.expired else {
        return tell_if_behind_a_question_in(outbound, tx, routes, message, enqueued.id);
    };
    let why = match reason {
        crate::inbound::NO_SESSION => format!(
            "{reason}: this chat talks to no agent session yet. Start one with /new [project] \
             [agent] [name], or choose one with /sessions"
        ),
        _ if crate::storage::chat_sessions::session(tx, &message.session)?.is_some() => format!(
            "{reason}: the agent of {} has ended (stopped, or it exited). Start another with \
             /new, or pick one with /sessions",
            message.session
        ),
        _ => format!(
            "{reason}: the agent ended this session, so the message is not typed into whatever \
             runs in its pane now. Start the agent again (with RELAYQ_SESSION={})",
            message.session
        ),
    };
    let trouble = Trouble::Dropped { why: &why };
    tell_message_in(outbound, tx, routes, enqueued.id, message, trouble)
}

/// Tells the chat `message` came from that it waits behind a question the agent asked there
/// (a permission dialog is up: nothing is typed into the agent until it is answered), and how
/// to answer it; nothing when no question is open in that chat.
fn tell_if_behind_a_question_in(
    outbound: &Queue,
    tx: &Tx<'_>,
    routes: &NoticeRoutes,
    message: &crate::InboundMessage,
    row: i64,
) -> Result<Option<String>> {
    // Only chat messages, whose chat has a channel to be told on: one lookup, no statement.
    let Some(origin) = message.reply_origin() else {
        return Ok(None);
    };
    if !routes.replies.contains_key(&origin.origin) {
        return Ok(None);
    }
    let open = crate::approvals::open_for_session(tx, &message.session)?;
    let asked_here = |a: &&crate::approvals::Approval| {
        a.origin
            .as_ref()
            .is_some_and(|o| o.origin == origin.origin && o.chat == origin.chat)
    };
    let Some(asked) = open.iter().find(asked_here) else {
        return Ok(None);
    };
    let why = format!(
        "{} is asking you first: {}. Answer it (reply yes or no to the question, or send \
         /allow {id} or /deny {id}); until then nothing is typed into the agent",
        message.session,
        asked.action,
        id = asked.id
    );
    tell_message_in(
        outbound,
        tx,
        routes,
        row,
        message,
        Trouble::Waits { why: &why },
    )
}

/// Tells each chat whose message waits for a node that is gone (the node its agent runs on,
/// lost or stopped) why, once, and marks the message so (see
/// [`crate::storage::nodes::waiting_on_gone_nodes_in`]); the ordering keys of the notices
/// written, to wake their sender.
pub fn tell_waiting_on_gone_nodes_in(
    outbound: &Queue,
    tx: &Tx<'_>,
    routes: &NoticeRoutes,
) -> Result<Vec<String>> {
    let why = |w: &crate::storage::nodes::WaitsForNode| {
        let since = humantime::format_rfc3339_seconds(
            std::time::UNIX_EPOCH + std::time::Duration::from_millis(w.gone_since.max(0) as u64),
        );
        let (node, gone) = (&w.node, if w.stopped { "stopped" } else { "lost" });
        format!(
            "waits for node {node} ({gone} since {since}): the agent of this session runs there. \
             Start relayq on {node} again, and the message goes to the agent"
        )
    };
    let mut told = Vec::new();
    for (waiting, why) in crate::storage::nodes::waiting_on_gone_nodes_in(tx, why)? {
        let Ok(message) = crate::InboundMessage::from_payload(&waiting.payload) else {
            continue;
        };
        let trouble = Trouble::Waits { why: &why };
        told.extend(tell_message_in(
            outbound,
            tx,
            routes,
            waiting.row,
            &message,
            trouble,
        )?);
    }
    Ok(told)
}
