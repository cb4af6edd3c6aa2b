//! What an allowed person's message in a chat means beyond its text, the same on every chat
//! source: a session command (`/new demo`) becomes a [`SessionRequest`], an answer to an
//! agent's question (`/allow ID`, a yes replying to it) a [`ChatAnswer`]; anything else goes
//! to the agent as written.

use relayq_engine::approvals::{self, Answerer, ChatAnswer};
use relayq_engine::chat_sessions::{self, Asked, SessionRequest};
use relayq_engine::InboundMessage;

use crate::kit::routing::Role;

/// The session request `message` types, if it is a session command; `role` is what the
/// source's settings let its sender do. `topics`: a session started here gets a thread (or
/// topic) of its own.
pub fn request_in(
    message: &InboundMessage,
    role: Role,
    topics: bool,
    max_sessions: u32,
) -> Option<SessionRequest> {
    let typed = chat_sessions::command_of(message.content.trim())?;
    Some(SessionRequest {
        origin: message.origin.clone(),
        chat: message.source_channel_id.clone().unwrap_or_default(),
        thread: message.source_thread_id.clone(),
        message_id: message.source_message_id.clone(),
        user_id: message.actor_id.clone(),
        user_name: message
            .actor_name
            .clone()
            .or(message.actor_id.clone())
            .unwrap_or_else(|| "someone".into()),
        may: role >= Role::Approver,
        known: role >= Role::Writer,
        topics,
        max_sessions,
        asked: Asked::Typed(typed),
    })
}

/// The answer a message gives, if it is one (its sender's `role` decides, when recorded,
/// whether it counts): `/allow ID`, `/deny ID`, or yes /
/// no in the question's thread. `bare`: the platform keeps a leading `/` for its own commands
/// (Slack), so `allow ID` works too. A yes or no that answers no question goes on as the
/// message it is.
pub fn answer_in(message: &InboundMessage, role: Role, bare: bool) -> Option<ChatAnswer> {
    let text = message.content.trim();
    let thread = message.source_thread_id.as_deref();
    let (command, was_bare) = match approvals::command_of(text, thread) {
        Some(command) => (command, false),
        None if bare => (approvals::command_of(&format!("/{text}"), None)?, true),
        None => return None,
    };
    let (target, decision) = command;
    let chat = message.source_channel_id.clone()?;
    let may_be_a_message = was_bare
        || matches!(
            target,
            approvals::Target::Question { .. } | approvals::Target::OpenInChat
        );
    Some(ChatAnswer {
        otherwise: may_be_a_message.then(|| Box::new(message.clone())),
        target,
        decision,
        who: Answerer {
            name: message
                .actor_name
                .clone()
                .or(message.actor_id.clone())
                .unwrap_or_else(|| "someone".into()),
            id: message.actor_id.clone(),
            via: message.origin.clone(),
            chat: Some((message.origin.clone(), chat)),
        },
        role,
        callback: None,
        message_id: message.source_message_id.clone(),
    })
}
