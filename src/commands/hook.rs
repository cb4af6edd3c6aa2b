//! `relayq hook --agent claude|codex|gemini [PAYLOAD]`: run by an agent CLI as its hook
//! command. Reads the agent's payload (stdin, or the last argument as Codex `notify` passes
//! it), maps the event, writes one row straight into SQLite, pokes a running daemon, and exits.
//! It never talks to the daemon otherwise and never touches the network, so events are kept
//! while the daemon is down. Exit 0 with empty stdout for every accepted or ignored event; 1 on
//! failure (never 2, which would block the agent), within about a second.

use std::io::Read;
use std::time::Duration;

use relayq_engine::hooks::{self, Received};
use relayq_engine::{Agent, Engine, HookEvent, QueuePolicy};

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
    let session = std::env::var("RELAYQ_SESSION")
        .ok()
        .filter(|s| !s.trim().is_empty());
    match hooks::receive(agent, &input, session) {
        Received::Ignored => Ok(()),
        Received::Event(event) => store(ctx, event),
        Received::Invalid { event, error } => {
            store(ctx, event)?;
            Err(CliError::Failed(format!(
                "{error}; recorded as an error event"
            )))
        }
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
