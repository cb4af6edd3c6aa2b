//! `relayq migrate --to postgresql://…`: moves a single-node SQLite deployment to a PostgreSQL
//! database several daemons share (see `relayq_engine::migrate`). The file is locked
//! as a daemon locks it for the whole copy, so no daemon serves it meanwhile.

use relayq_engine::db::{DbConfig, SqliteDatabase};
use relayq_engine::migrate;
use relayq_engine::Database;

use crate::invocation::{CliError, Invocation};

pub fn run(ctx: &Invocation, to: &str) -> Result<(), CliError> {
    if !(to.starts_with("postgresql://") || to.starts_with("postgres://")) {
        return Err(CliError::Usage(
            "--to takes a PostgreSQL URL: postgresql://USER:PASSWORD@HOST/DATABASE".into(),
        ));
    }
    let path = ctx.config.db_path(ctx.db.as_deref());
    let path = std::path::absolute(&path).unwrap_or(path);
    if !path.exists() {
        return Err(CliError::Usage(format!(
            "no SQLite database at {}: nothing to move (give the file with --db)",
            path.display()
        )));
    }
    // Held for the whole copy: a daemon starting meanwhile is refused.
    let _lock = relayq_actors::daemon_lock::take(&path, false).map_err(|e| match e {
        relayq_actors::ActorError::AlreadyRunning(_) => CliError::Failed(format!(
            "a daemon serves {}: stop it first (`relayq stop`), then migrate, then start the \
             nodes on the PostgreSQL database",
            path.display()
        )),
        e => CliError::Failed(e.to_string()),
    })?;
    let sqlite = SqliteDatabase::open(&DbConfig::new(&path))?;
    let mut target = DbConfig::new(&path);
    target.url = Some(to.to_string());
    let postgres = Database::open(&target)?;
    let copied = postgres.write(|tx| migrate::copy_in(&sqlite, tx))?;
    println!("copied {} to {}:", path.display(), postgres.describe());
    for c in &copied {
        let kept = c.rows - c.new;
        match kept {
            0 => println!("  {:<18} {} row(s)", c.table, c.rows),
            _ => println!(
                "  {:<18} {} row(s), {kept} there already and kept",
                c.table, c.rows
            ),
        }
    }
    println!(
        "next: set [database] url (or url_env, url_file) on every node, and start them; \
         the file is no longer read"
    );
    Ok(())
}
