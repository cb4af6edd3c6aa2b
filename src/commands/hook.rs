//! `relayq hook --agent claude|codex|gemini [PAYLOAD]`: run by an agent CLI as its hook
//! command. Reads the agent's payload (stdin, or the last argument as Codex `notify` passes
//! it), maps the event, writes one row straight into the database, pokes a running daemon, and
//! exits.
//! It never talks to the daemon otherwise and never touches the network, so events are kept
//! while the daemon is down. Exit 0 with empty stdout for every accepted or ignored event; 1 on
//! failure (never 2, which would block the agent). A database locked for longer than the
//! wait (`RELAYQ_HOOK_WAIT`, 20 s) does not lose the event: it is spooled beside the database.

use std::io::Read;
use std::path::Path;
use std::time::Duration;

use relayq_engine::approvals::writes::{AgentReached, AskWithEvent, ExpireApproval};
use relayq_engine::approvals::{self, Approval};
use relayq_engine::hooks::spool as hook_spool;
use relayq_engine::hooks::{self, Received};
use relayq_engine::{Agent, DbConfig, Engine, EngineError, HookEvent, WriteDoor};

use crate::invocation::{CliError, Invocation};

/// The longest a hook waits for the database lock by default: long past any write the daemon
/// holds, and within the agents' own default hook timeouts (Gemini CLI's is 60 s; Claude
/// Code's is longer).
const LOCK_WAIT: Duration = Duration::from_secs(20);

/// Sets the wait (`2s`, `500ms`; 0 to 120 s) for agents whose hooks must return sooner.
pub const WAIT_ENV: &str = "RELAYQ_HOOK_WAIT";

/// The most `RELAYQ_HOOK_WAIT` may say.
const MAX_WAIT: Duration = Duration::from_secs(120);

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
    let pane = std::env::var("TMUX_PANE")
        .ok()
        .filter(|p| p.starts_with('%') && p[1..].chars().all(|c| c.is_ascii_digit()));
    let session = std::env::var("RELAYQ_SESSION")
        .ok()
        .filter(|s| !s.trim().is_empty())
        .or_else(|| session_of_pane(&ctx.config, pane.as_deref()?));
    match hooks::receive(agent, &input, session) {
        Received::Ignored => Ok(()),
        Received::Event(mut event) => {
            event.pane = pane;
            store(ctx, event)
        }
        Received::Invalid { event, error } => {
            store(ctx, event)?;
            Err(CliError::Failed(format!(
                "{error}; recorded as an error event"
            )))
        }
    }
}

/// The relayq session whose messages relayq types into `pane` (`$TMUX_PANE`), for a hook run
/// without `RELAYQ_SESSION`: the pane's place read back through the config's channels'
/// targets (`ChannelKind::session_in_pane`), kept only when that session's messages go to
/// that channel. The agent's own session id stays with the event as its native id.
pub(crate) fn session_of_pane(config: &crate::config::Config, pane: &str) -> Option<String> {
    let place = relayq_actors::channels::tmux::PanePlace::of(pane)?;
    config.channels.iter().find_map(|(name, channel)| {
        let candidate = channel.session_in_pane(&place)?;
        (config.sessions.channel_for(&candidate) == name).then_some(candidate)
    })
}

/// Stores the event; when the database stays locked past the wait, keeps it in the spool
/// beside the database instead, which the next hook and the daemon (at its start and at each
/// sweep) record, oldest first. Only an event neither stored nor spooled is an error.
fn store(ctx: &Invocation, mut event: HookEvent) -> Result<(), CliError> {
    // The agent runs on this node: its session's inbound rows are this node's to deliver.
    let node = ctx.config.node.name();
    event.node = Some(node.clone());
    let path = ctx.config.db_path(ctx.db.as_deref());
    let file = !ctx.config.database.is_shared();
    if let Some(pid) = crate::pid_file::daemon_of_deleted(&path).filter(|_| file) {
        // Kept for the daemon's restart rather than written to a database it never reads.
        let why = crate::pid_file::deleted_under(&path, pid);
        return keep_in_spool(&hook_spool::dir(&path), event, &why);
    }
    let mut db = match ctx.db_config() {
        Ok(db) => db,
        // The database cannot be named (a URL whose variable or file is missing): the event
        // waits in the spool, which the daemon records once it runs.
        Err(e) => return keep_in_spool(&hook_spool::dir(&path), event, &e.to_string()),
    };
    db.busy_timeout = wait();
    let spool = hook_spool::dir(&db.path);
    match record(&db, &node, &spool, event.clone(), &ctx.config.approvals) {
        Ok(Some((door, approval))) => answer_when_decided(&door, approval),
        Ok(None) => Ok(()),
        // PostgreSQL cannot be reached: waiting here would not help the agent, which waits on
        // its hook. The daemon records the spool once the database is back (or fixed).
        Err(e @ EngineError::Connect { .. }) => keep_in_spool(&spool, event, &e.to_string()),
        Err(e) if e.is_busy() => {
            let why = format!("the database stayed locked for {:?}: {e}", db.busy_timeout);
            keep_in_spool(&spool, event, &why)
        }
        Err(e) => Err(e.into()),
    }
}

/// Keeps `event` in `spool` with `why` it could not be recorded (the daemon logs it when it
/// records the event), and says so on stderr; an error only when it cannot be kept either.
fn keep_in_spool(spool: &Path, event: HookEvent, why: &str) -> Result<(), CliError> {
    let kept = hook_spool::keep(spool, event, why).map_err(|e| {
        CliError::Failed(format!(
            "{why}; nor can the event be kept in {}: {e}",
            spool.display()
        ))
    })?;
    eprintln!(
        "relayq hook: {why}; the event is kept in {} and is recorded by the next hook or the \
         daemon that reaches the database",
        kept.display()
    );
    Ok(())
}

/// `RELAYQ_HOOK_WAIT`, or the default. A value that is not a wait is said on stderr and the
/// default used: a typo must not cost the agent's event.
fn wait() -> Duration {
    let Some(text) = std::env::var(WAIT_ENV)
        .ok()
        .filter(|v| !v.trim().is_empty())
    else {
        return LOCK_WAIT;
    };
    match humantime::parse_duration(text.trim()) {
        Ok(wait) if wait <= MAX_WAIT => wait,
        _ => {
            eprintln!(
                "relayq hook: {WAIT_ENV}={:?} is not a wait from 0 to {MAX_WAIT:?} (e.g. \"5s\"); \
                 waiting {LOCK_WAIT:?}",
                text.escape_debug().to_string()
            );
            LOCK_WAIT
        }
    }
}

/// Spooled events first (they are older), then `event`; pokes a running daemon. A permission
/// request the session's chat can answer opens an approval in the same transaction as its
/// event: the write door and the approval are returned when the hook is to wait on it.
fn record(
    db: &DbConfig,
    node: &str,
    spool: &Path,
    event: HookEvent,
    settings: &approvals::Settings,
) -> Result<Option<(WriteDoor, Approval)>, EngineError> {
    let engine = Engine::open(db)?.with_node(node);
    // The hooks queue's own policy; the hook tells no chat itself (the daemon does).
    let door = WriteDoor::new(engine.queues(&Default::default()), Default::default());
    for drained in hook_spool::drain(&door, spool)? {
        let path = engine.database().path();
        relayq_actors::wake::rows_written_beside(path, hooks::QUEUE, &drained.session);
    }
    let session = event.session.clone();
    let asked = door.apply_now(AskWithEvent {
        event,
        settings: settings.clone(),
        waiter_pid: std::process::id(),
    })?;
    relayq_actors::wake::rows_written_beside(engine.database().path(), hooks::QUEUE, &session);
    // Gemini CLI's questions are answered by the dialog's keys, which the daemon presses: no
    // hook waits on them (see docs/agent-approvals.md).
    let waited_on = asked.filter(|approval| approval.means == approvals::Means::Hook);
    Ok(waited_on.map(|approval| (door, approval)))
}

/// How often a waiting hook reads its approval.
const ANSWER_POLL: Duration = Duration::from_millis(200);

/// Waits for the approval's answer (from the chat, `relayq approvals`, the API) and prints the
/// agent's decision output, once. At its expiry the hook expires it and prints a deny: the
/// agent never waits on silence, and never past its own hook timeout. A database that stays
/// busy at expiry still gets the deny printed (the daemon's sweep records the expiry later).
fn answer_when_decided(door: &WriteDoor, approval: Approval) -> Result<(), CliError> {
    let engine = &door.engine;
    let id = approval.id.clone();
    let db = engine.database();
    loop {
        let now = engine.now();
        let current = db.read().and_then(|conn| approvals::get(&conn, &id));
        let current = match current {
            Ok(Some(current)) => current,
            Ok(None) => return Err(CliError::Failed(format!("approval {id} vanished"))),
            Err(e) if now < approval.expires_at => {
                tracing::debug!(error = %e, "reading approval {id}; trying again");
                std::thread::sleep(ANSWER_POLL);
                continue;
            }
            Err(e) => return deny_unrecorded(&approval, &e),
        };
        if current.state == approvals::State::Asked {
            if now < current.expires_at {
                std::thread::sleep(ANSWER_POLL);
                continue;
            }
            match door.apply_now(ExpireApproval(id.clone())) {
                Ok(_) => continue, // read again: expired now, or answered just before
                Err(e) => return deny_unrecorded(&current, &e),
            }
        }
        let first = door.apply_now(AgentReached {
            id: id.clone(),
            session: current.session.clone(),
        });
        if let Err(e) = first {
            tracing::debug!(error = %e, "approval {id}: could not record that the agent has it");
        }
        // Every waiting hook prints it: each is one request of the agent's for this call.
        if let Some(output) = approvals::hook_output(&current) {
            println!("{output}");
        }
        // The session's next message may go now (its agent no longer asks).
        relayq_actors::wake::rows_written_beside(
            db.path(),
            relayq_engine::inbound::QUEUE,
            &current.session,
        );
        return Ok(());
    }
}

/// The approval could not be recorded as expired (the database stays busy): the agent is told
/// no all the same, and stderr says why.
fn deny_unrecorded(approval: &Approval, error: &EngineError) -> Result<(), CliError> {
    let (session, id) = (&approval.session, &approval.id);
    eprintln!("relayq hook: approval {id} of session {session} expired, and recording it failed ({error}): denied");
    let output = approvals::expired_hook_output(id);
    println!("{output}");
    Ok(())
}
