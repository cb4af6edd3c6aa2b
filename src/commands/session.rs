//! `relayq session expire S`: the session is gone; its pending messages will never be
//! delivered. A running daemon is woken so the session's worker notices and stops.
//! `relayq session list`: the session registry the hook events keep.
//! `relayq session new PROJECT` / `relayq session stop S`: what /new and /stop do in a chat,
//! recorded through the same write (see `relayq_engine::chat_sessions`) and carried out by
//! the project's node; the command waits for the outcome.

use clap::Subcommand;
use relayq_engine::inbound;

use crate::commands::open_existing;
use crate::invocation::{CliError, Invocation};
use crate::output::{excerpt, list_printed, shown};

#[derive(Debug, Subcommand)]
pub enum SessionCommand {
    /// Start an agent in a project (`[projects.NAME]`), as /new does in a chat; waits until
    /// it is ready
    New {
        project: String,
        /// claude, codex or gemini; default: the project's first
        #[arg(long)]
        agent: Option<relayq_engine::Agent>,
        /// The session's name; default: PROJECT-AGENT-N
        #[arg(long)]
        name: Option<String>,
        /// Print the command's row as JSON
        #[arg(long)]
        json: bool,
    },
    /// End a session started from a chat or by `session new`, as /stop does; waits until it
    /// has ended
    Stop {
        session: String,
        #[arg(long)]
        json: bool,
    },
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
        "{:<38} {:<7} {:<16} {:<7} {:<26} {:<10} {:>5} {:<16} {:<32} LAST USER INPUT",
        "SESSION", "AGENT", "PROJECT", "STATE", "AGENT STATE", "SINCE", "TURN", "NODE", "ORIGIN"
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
            "{:<38} {:<7} {:<16} {:<7} {:<26} {:<10} {:>5} {:<16} {:<32} {}",
            shown(&s.key),
            s.agent,
            s.project.as_deref().map_or("-".into(), |p| excerpt(p, 16)),
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

/// How long `session new` and `session stop` wait for the node to carry them out.
const OUTCOME_WAIT: std::time::Duration = std::time::Duration::from_secs(120);

pub fn new(
    ctx: &Invocation,
    project: &str,
    agent: Option<relayq_engine::Agent>,
    name: Option<&str>,
    as_json: bool,
) -> Result<(), CliError> {
    use relayq_engine::chat_sessions::names;
    let project = names::check_project_name(project).map_err(CliError::Usage)?;
    let name = name
        .map(names::check_session_name)
        .transpose()
        .map_err(CliError::Usage)?;
    let command = relayq_engine::chat_sessions::ChatCommand::New {
        project: Some(project),
        agent,
        name,
    };
    carry_out(ctx, command, as_json)
}

pub fn stop(ctx: &Invocation, session: &str, as_json: bool) -> Result<(), CliError> {
    let session = relayq_engine::chat_sessions::names::check_session_name(session)
        .map_err(CliError::Usage)?;
    let command = relayq_engine::chat_sessions::ChatCommand::Stop {
        session: Some(session),
    };
    carry_out(ctx, command, as_json)
}

/// Records the operator's `command` and waits for its node to carry it out; prints the
/// outcome (exit 1 when it failed or nobody carried it out in time).
fn carry_out(
    ctx: &Invocation,
    command: relayq_engine::chat_sessions::ChatCommand,
    as_json: bool,
) -> Result<(), CliError> {
    use relayq_engine::chat_sessions::{self, CommandState, RecordRequests, SessionRequest};
    let door = crate::commands::open_for_writes(ctx)?;
    let token = format!("cli-{}-{}", std::process::id(), crate::output::now_ms());
    let who = format!(
        "operator {}",
        std::env::var("USER").unwrap_or_else(|_| "(cli)".into())
    );
    let request = SessionRequest::operator(command, &token, &who);
    door.apply_now(RecordRequests(vec![request]))?;
    let db = door.queues.engine.database().clone();
    let id = chat_sessions::command_of_message(
        &db.read()?,
        chat_sessions::OPERATOR,
        chat_sessions::OPERATOR,
        &token,
    )?
    .ok_or_else(|| CliError::Failed("the command was not recorded".into()))?;
    let began = std::time::Instant::now();
    let row = loop {
        let row = chat_sessions::command(&db.read()?, id)?
            .ok_or_else(|| CliError::Failed(format!("session command {id} vanished")))?;
        if matches!(row.state, CommandState::Done | CommandState::Failed) {
            break row;
        }
        if began.elapsed() > OUTCOME_WAIT {
            let node = row.node.as_deref().unwrap_or("its node");
            return Err(CliError::Failed(format!(
                "session command {id} is recorded ({}), but no daemon carried it out within {}: \
                 is `relayq serve` running on {node}? It is carried out once one runs",
                row.state,
                humantime::format_duration(OUTCOME_WAIT)
            )));
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    let outcome = row.outcome.clone().unwrap_or_default();
    match as_json {
        true => println!("{}", serde_json::to_string(&row).unwrap_or_default()),
        false => println!("{}", shown(&outcome)),
    }
    match row.state {
        CommandState::Done => Ok(()),
        _ => Err(CliError::Failed(format!("session command {id} failed"))),
    }
}
