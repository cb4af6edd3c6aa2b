//! `relayq hook --agent claude|codex|gemini [PAYLOAD]`: run by an agent CLI as its hook
//! command. Reads the agent's payload (stdin, or the last argument as Codex `notify` passes
//! it), maps the event, writes one row straight into SQLite, pokes a running daemon, and exits.
//! It never talks to the daemon otherwise and never touches the network, so events are kept
//! while the daemon is down. Exit 0 with empty stdout for every accepted or ignored event; 1 on
//! failure (never 2, which would block the agent). A database locked for longer than the
//! wait (`RELAYQ_HOOK_WAIT`, 20 s) does not lose the event: it is spooled beside the database.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;

use relayq_engine::hooks::{self, Received};
use relayq_engine::{Agent, DbConfig, Engine, EngineError, HookEvent, QueuePolicy};

use crate::cli::{CliError, Invocation};

/// The longest a hook waits for the database lock by default: long past any write the daemon
/// holds, and well within the agents' own hook timeouts (60 s for Claude Code and Gemini CLI).
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

/// Stores the event; when the database stays locked past the wait, keeps it in the spool
/// beside the database instead, which the next hook and the daemon's start record, oldest
/// first. Only an event neither stored nor spooled is an error.
fn store(ctx: &Invocation, event: HookEvent) -> Result<(), CliError> {
    let path = ctx.config.db_path(ctx.db.as_deref());
    if let Some(pid) = crate::pid_file::daemon_of_deleted(&path) {
        // Kept for the daemon's restart rather than written to a database it never reads.
        let kept = keep(&spool_dir(&path), event).map_err(|e| {
            CliError::Failed(format!(
                "{}; nor can the event be kept: {e}",
                crate::pid_file::deleted_under(&path, pid)
            ))
        })?;
        eprintln!(
            "relayq hook: {}; the event is kept in {}",
            crate::pid_file::deleted_under(&path, pid),
            kept.display()
        );
        return Ok(());
    }
    let mut db = ctx.db_config()?;
    db.busy_timeout = wait()?;
    let spool = spool_dir(&db.path);
    match record(&db, &spool, event.clone()) {
        Err(e) if e.is_busy() => {
            let kept = keep(&spool, event).map_err(|why| {
                CliError::Failed(format!(
                    "{e}; the event could not be kept in {}: {why}",
                    spool.display()
                ))
            })?;
            eprintln!(
                "relayq hook: the database stayed locked for {:?}; the event is kept in {} and                  is recorded by the next hook or the daemon's next start",
                db.busy_timeout,
                kept.display()
            );
            Ok(())
        }
        done => Ok(done?),
    }
}

fn wait() -> Result<Duration, CliError> {
    let Some(text) = std::env::var(WAIT_ENV)
        .ok()
        .filter(|v| !v.trim().is_empty())
    else {
        return Ok(LOCK_WAIT);
    };
    match humantime::parse_duration(text.trim()) {
        Ok(wait) if wait <= MAX_WAIT => Ok(wait),
        _ => Err(CliError::Usage(format!(
            "{WAIT_ENV}={text:?} is not a wait from 0 to {MAX_WAIT:?} (e.g. \"5s\")"
        ))),
    }
}

/// Spooled events first (they are older), then `event`; pokes a running daemon.
fn record(db: &DbConfig, spool: &Path, mut event: HookEvent) -> Result<(), EngineError> {
    let engine = Engine::open(db)?;
    drain(&engine, spool)?;
    event.received_at = engine.now();
    let queue = engine.queue(hooks::QUEUE, QueuePolicy::hooks());
    queue.enqueue(&event.to_row())?;
    relayq_actors::wake::notify(engine.database().path(), hooks::QUEUE, &event.session);
    Ok(())
}

/// Where events wait that the database could not take: `<database>.hook-spool/`.
pub fn spool_dir(db: &Path) -> PathBuf {
    let mut name = db.as_os_str().to_os_string();
    name.push(".hook-spool");
    PathBuf::from(name)
}

/// Writes `event` into the spool (a private folder, one file per event, named so that names
/// sort as the events came); its path.
fn keep(spool: &Path, mut event: HookEvent) -> std::io::Result<PathBuf> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(spool)?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    event.received_at = now.as_millis() as i64;
    let name = format!("{:020}-{:010}.json", now.as_nanos(), std::process::id());
    let (partial, path) = (spool.join(format!(".{name}")), spool.join(&name));
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&partial)?;
    std::io::Write::write_all(&mut file, &serde_json::to_vec(&event)?)?;
    file.sync_all()?;
    // Whole or absent: a reader never sees half an event.
    std::fs::rename(&partial, &path)?;
    Ok(path)
}

/// Records the spooled events, oldest first, each removed once its row is committed (a crash
/// between the two records it twice: at least once). Returns how many.
pub fn drain(engine: &Engine, spool: &Path) -> Result<usize, EngineError> {
    let Ok(entries) = std::fs::read_dir(spool) else {
        return Ok(0);
    };
    // One drainer at a time, or two hooks would both record an event before either removes it.
    let Ok(lock) = std::fs::File::create(spool.join(".lock")) else {
        return Ok(0);
    };
    // SAFETY: flock on a descriptor this function owns; released when `lock` is dropped.
    if unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&lock), libc::LOCK_EX) } != 0 {
        return Ok(0);
    }
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .filter(|p| {
            !p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with('.'))
        })
        .collect();
    files.sort();
    let queue = engine.queue(hooks::QUEUE, QueuePolicy::hooks());
    let mut recorded = 0;
    for file in files {
        let event = std::fs::read(&file)
            .ok()
            .and_then(|bytes| serde_json::from_slice::<HookEvent>(&bytes).ok());
        let Some(event) = event else {
            continue; // recorded by another hook meanwhile, or not an event: left as it is
        };
        queue.enqueue(&event.to_row())?;
        let _ = std::fs::remove_file(&file);
        relayq_actors::wake::notify(engine.database().path(), hooks::QUEUE, &event.session);
        recorded += 1;
    }
    Ok(recorded)
}
