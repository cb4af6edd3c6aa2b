//! `relayq session expire S`: the session is gone; its pending messages will never be
//! delivered. A running daemon is woken so the session's worker notices and stops.
//! `relayq session list`: the session registry the hook events keep.

use clap::Subcommand;
use relayq_engine::inbound;

use crate::commands::open_existing;
use crate::invocation::{CliError, Invocation};
use crate::output::{excerpt, list_printed, shown};

#[derive(Debug, Subcommand)]
pub enum SessionCommand {
    /// Expire a session's pending messages (the session is gone)
    Expire {
        session: String,
        /// Print {"session":S,"expired":N}
        #[arg(long)]
        json: bool,
    },
    /// The session registry kept by hook events
    List {
        #[arg(long)]
        json: bool,
    },
}

pub fn expire(ctx: &Invocation, session: &str, as_json: bool) -> Result<(), CliError> {
    if session.trim().is_empty() {
        return Err(CliError::Usage(
            "the session id is empty: give the session to expire".into(),
        ));
    }
    let store = open_existing(ctx)?;
    let n = store.inbound.expire_key(session, "session expired")?;
    if n == 0 {
        let registered = relayq_engine::sessions::get(&store.engine.database().read()?, session)?;
        if registered.is_none() && !store.inbound.has_key(session)? {
            return Err(CliError::Failed(format!(
                "no session {}: no message was ever queued for it and no agent reported it; \
                 `relayq session list` shows the sessions there are",
                shown(session)
            )));
        }
    }
    relayq_actors::wake::rows_written_beside(
        store.engine.database().path(),
        inbound::QUEUE,
        session,
    );
    match as_json {
        true => println!("{}", serde_json::json!({"session": session, "expired": n})),
        false => println!(
            "expired {n} pending message(s) of session {}",
            shown(session)
        ),
    }
    Ok(())
}

pub fn list(ctx: &Invocation, as_json: bool) -> Result<(), CliError> {
    let store = open_existing(ctx)?;
    let sessions = store.engine.sessions()?;
    let empty = "no sessions yet (they appear when hook events are processed)";
    if list_printed(&sessions, as_json, crate::views::session_json, empty) {
        return Ok(());
    }
    let now = store.engine.now();
    println!(
        "{:<38} {:<7} {:<7} {:<26} {:<10} {:>5} {:<16} {:<32} LAST USER INPUT",
        "SESSION", "AGENT", "STATE", "AGENT STATE", "SINCE", "TURN", "NODE", "ORIGIN"
    );
    for s in sessions {
        let input = s.last_user_input.as_deref().unwrap_or("-");
        let origin = s.origin.as_ref().map_or("-".to_string(), |o| {
            let thread = o
                .thread
                .as_ref()
                .map(|t| format!("/{t}"))
                .unwrap_or_default();
            format!("{} {}{thread}", o.origin, o.chat)
        });
        let agent_state = s.agent_state.map_or("-", relayq_engine::AgentState::as_str);
        // The permission mode beside it: in `auto`, no question reaches the chat.
        let agent_state = match &s.permission_mode {
            Some(mode) => format!("{agent_state} ({})", excerpt(mode, 8)),
            None => agent_state.to_string(),
        };
        let since = s
            .agent_state_since
            .map_or("-".to_string(), |t| crate::output::relative(t, now));
        println!(
            "{:<38} {:<7} {:<7} {:<26} {:<10} {:>5} {:<16} {:<32} {}",
            shown(&s.key),
            s.agent,
            s.state,
            agent_state,
            since,
            s.current_turn,
            s.node.as_deref().map_or("-".into(), |n| excerpt(n, 16)),
            excerpt(&origin, 32),
            excerpt(input, 60)
        );
    }
    Ok(())
}
