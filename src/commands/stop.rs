//! `relayq stop`: stops the daemon serving this database from another terminal or a script.
//! It sends SIGTERM to the pid in the daemon's pid file, then waits until the database's lock
//! is free: the daemon has finished its in-flight deliveries (within `daemon.shutdown_grace`)
//! and exited. Nothing to stop is not an error, as for `systemctl stop`.

use std::path::Path;
use std::time::{Duration, Instant};

use relayq_actors::daemon_lock;

use crate::invocation::{CliError, Invocation};
use crate::pid_file;

/// How often the database's lock is looked at while waiting.
const POLL: Duration = Duration::from_millis(50);

pub fn run(ctx: &Invocation, timeout: Option<Duration>) -> Result<(), CliError> {
    let db = ctx.config.db_path(ctx.db.as_deref());
    let db = std::path::absolute(&db).unwrap_or(db);
    if !db.exists() {
        println!(
            "no daemon serves {}: there is no database there",
            db.display()
        );
        return Ok(());
    }
    let Some(pid) = running_daemon(&db)? else {
        println!("no daemon serves {}", db.display());
        return Ok(());
    };
    // SAFETY: kill(2) with a pid and a signal number; no memory is shared.
    if unsafe { libc::kill(pid, libc::SIGTERM) } != 0 {
        let e = std::io::Error::last_os_error();
        return Err(CliError::Failed(format!(
            "cannot signal the daemon (pid {pid}) serving {}: {e}",
            db.display()
        )));
    }
    let grace = ctx.config.daemon.shutdown_grace;
    let limit = timeout.unwrap_or(grace + Duration::from_secs(5));
    let asked = Instant::now();
    while held(&db)? {
        if asked.elapsed() >= limit {
            return Err(CliError::Failed(format!(
                "the daemon (pid {pid}) serving {} is still running {} after SIGTERM; it may be \
                 finishing its deliveries (daemon.shutdown_grace = {}): wait, or `kill -9 \
                 {pid}`, which loses nothing written (sends cut short are retried, flagged as \
                 possible repeats)",
                db.display(),
                humantime::format_duration(limit),
                humantime::format_duration(grace)
            )));
        }
        std::thread::sleep(POLL);
    }
    println!("stopped the daemon (pid {pid}) serving {}", db.display());
    Ok(())
}

/// The pid of the daemon serving `db`, or `None` when none does (a pid file left by a killed
/// daemon is removed).
fn running_daemon(db: &Path) -> Result<Option<i32>, CliError> {
    let pid = pid_file::read(db).map_err(CliError::Failed)?;
    if !held(db)? {
        if pid.is_some() {
            let _ = std::fs::remove_file(pid_file::path_for(db));
        }
        return Ok(None);
    }
    pid.map(Some).ok_or_else(|| {
        CliError::Failed(format!(
            "a process holds {} but there is no pid file {} (a daemon still starting, or a \
             relayq older than `stop`): find it with `fuser {}` and send it SIGTERM",
            db.display(),
            pid_file::path_for(db).display(),
            db.display()
        ))
    })
}

fn held(db: &Path) -> Result<bool, CliError> {
    daemon_lock::is_held(db).map_err(|e| CliError::Failed(e.to_string()))
}
