//! `relayq hook --agent claude|codex|gemini [PAYLOAD]`: run by an agent CLI as its hook
//! command. Reads the agent's payload (stdin, or the last argument as Codex `notify` passes
//! it), maps the event, writes one row straight into SQLite, pokes a running daemon, and exits.
//! It never talks to the daemon otherwise and never touches the network, so events are kept
//! while the daemon is down. Exit 0 with empty stdout for every accepted or ignored event; 1 on
//! failure (never 2, which would block the agent), within about a second.

use std::io::Read;
use std::time::Duration;

use relayq_engine::hooks::{
    self, head_of, map_event, native_event, native_session_id, MAX_KEPT_INPUT,
};
use relayq_engine::{Agent, Engine, EventType, HookEvent, QueuePolicy};
use serde_json::{json, Value};

use crate::cli::{CliError, Invocation};

/// The longest the receiver waits for a database lock: the agent is waiting on us.
const LOCK_WAIT: Duration = Duration::from_secs(1);

pub fn run(ctx: &Invocation, agent: Agent, argument: Option<String>) -> Result<(), CliError> {
    let input = match argument {
        Some(text) => text,
        None => {
            let mut bytes = Vec::new();
            std::io::stdin().read_to_end(&mut bytes).map_err(|e| {
                CliError::Failed(format!("cannot read the hook payload from stdin: {e}"))
            })?;
            String::from_utf8_lossy(&bytes).into_owned()
        }
    };
    let session_override = std::env::var("RELAYQ_SESSION")
        .ok()
        .filter(|s| !s.trim().is_empty());
    let event = match serde_json::from_str::<Value>(&input) {
        Ok(payload) => {
            let Some(event) = native_event(&payload).and_then(|name| map_event(agent, name)) else {
                return Ok(()); // not an event relayq forwards
            };
            let native = native_event(&payload).map(str::to_string);
            let native_id = native_session_id(&payload).map(str::to_string);
            let session = session_override
                .clone()
                .or_else(|| native_id.clone())
                .unwrap_or_else(|| "unknown".into());
            HookEvent {
                agent,
                event,
                native_event: native,
                session,
                native_session_id: native_id,
                received_at: 0,
                data: payload,
            }
        }
        Err(e) => {
            let error = format!("invalid JSON from the {agent:?} hook: {e}");
            let session = session_override.unwrap_or_else(|| "unknown".into());
            store(ctx, error_event(agent, session, &error, &input))?;
            return Err(CliError::Failed(format!(
                "hook payload is not valid JSON ({e}); recorded as an error event"
            )));
        }
    };
    // The daemon must be able to read what is stored: check with its own decoder.
    if let Err(e) = HookEvent::from_payload(&event.to_row().payload) {
        let error = format!("the {agent:?} hook payload cannot be stored as it is: {e}");
        store(ctx, error_event(agent, event.session, &error, &input))?;
        return Err(CliError::Failed(format!(
            "{error}; recorded as an error event"
        )));
    }
    store(ctx, event)
}

/// An `error` event standing for an input that cannot be kept as it came: the error and the
/// start of the input.
fn error_event(agent: Agent, session: String, error: &str, input: &str) -> HookEvent {
    HookEvent {
        agent,
        event: EventType::Error,
        native_event: None,
        session,
        native_session_id: None,
        received_at: 0,
        data: json!({"error": error, "input": head_of(input, MAX_KEPT_INPUT)}),
    }
}

fn store(ctx: &Invocation, mut event: HookEvent) -> Result<(), CliError> {
    let mut db = ctx.db_config()?;
    db.busy_timeout = LOCK_WAIT;
    let engine = Engine::open(&db)?;
    event.received_at = engine.now();
    let queue = engine.queue(hooks::QUEUE, QueuePolicy::hooks());
    queue.enqueue(&event.to_row())?;
    relayq_actors::wake::notify(engine.database().path(), hooks::QUEUE, &event.session);
    Ok(())
}
