//! `relayq config check | show`: whether the effective configuration works here, and what it
//! is. The effective configuration is the file (`--config`, `$RELAYQ_CONFIG`, the per-user
//! file, or the built-in defaults) with `RELAYQ_<SECTION>__<KEY>` environment variables over it.

use clap::Subcommand;
use relayq_actors::sources::SourceSpec;
use relayq_actors::ChannelSpec;

use crate::config::{settings_from_env, Config};
use crate::invocation::{CliError, Invocation};

#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Check that the configuration works here: parse it, build every channel and source
    Check,
    /// Print the effective configuration (file, then RELAYQ_* variables) as TOML
    Show,
}

/// Every channel and source built, and what the operator should know.
pub struct Built {
    pub channels: Vec<(String, ChannelSpec)>,
    pub sources: Vec<(String, SourceSpec)>,
    /// Settings that work but are probably not what was meant.
    pub notes: Vec<String>,
    /// Channels that cannot deliver here (a program not installed): `serve` tries them anyway,
    /// `config check` fails on them.
    pub unready: Vec<String>,
}

/// Builds every channel and source: what parsing cannot check because it depends on the
/// daemon's environment (`*_env` variables, `*_file` secrets) fails here. What `serve` does at
/// start and at each reload.
pub fn build(config: &Config, file: &str) -> Result<Built, String> {
    let invalid = |section: &str, name: &str, e: relayq_actors::settings::SettingError| {
        format!("invalid configuration: {file}: {section}.{name}.{e}")
    };
    let notes = config.warnings();
    let mut unready = Vec::new();
    let mut channels = Vec::new();
    for (name, channel) in &config.channels {
        let spec = channel
            .spec()
            .map_err(|e| invalid("channels", name, e))?
            .paced(config.pacing.get(name));
        if let Err(why) = spec.readiness() {
            unready.push(format!("channel {name} is not ready: {why}"));
        }
        channels.push((name.clone(), spec));
    }
    let mut sources = Vec::new();
    for (name, source) in &config.sources {
        let spec = source.spec().map_err(|e| invalid("sources", name, e))?;
        sources.push((
            name.clone(),
            spec.answered_by(source.replies(name).map(|r| r.channel)),
        ));
    }
    Ok(Built {
        channels,
        sources,
        notes,
        unready,
    })
}

/// The config file for logs and errors.
pub fn describe(file: Option<&std::path::Path>) -> String {
    file.map_or("(built-in defaults)".into(), |f| f.display().to_string())
}

/// Where the effective configuration comes from, in words.
fn origin(ctx: &Invocation) -> String {
    let vars: Vec<String> = settings_from_env().into_iter().map(|s| s.var).collect();
    match vars.is_empty() {
        true => describe(ctx.config_file.as_deref()),
        false => format!(
            "{} with {}",
            describe(ctx.config_file.as_deref()),
            vars.join(", ")
        ),
    }
}

/// How long `config check` waits for a platform to answer whether it takes a token.
const ASK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// What would keep `serve` from starting, or a channel or source from working, here: the API
/// token, the database's place, programs, and the platforms' answer to each token (`getMe`,
/// `auth.test`, `/users/@me`).
fn problems(ctx: &Invocation, built: &Built) -> Vec<String> {
    let state = crate::config::state_dir();
    // serve makes the state directory: a file there (the built-in channels') is fine.
    let mut problems: Vec<String> = built
        .unready
        .iter()
        .filter(|why| state.exists() || !why.contains(&state.display().to_string()))
        .cloned()
        .collect();
    if ctx.config.http.enabled {
        if let Err(e) = ctx.config.http.token() {
            problems.push(e);
        }
    }
    let db = ctx.config.db_path(ctx.db.as_deref());
    if db.is_dir() {
        problems.push(format!(
            "the database {} is a directory; give a file path",
            db.display()
        ));
    } else if db.parent() == Some(state.as_path()) && !state.exists() {
        // serve makes the state directory.
    } else if let Err(e) = relayq_actors::daemon_lock::check_private_directory(&db) {
        problems.push(format!(
            "serve would refuse the database {}: {e}",
            db.display()
        ));
    }
    // A PostgreSQL database is asked for a connection (nothing is written).
    match ctx.config.db_config(ctx.db.as_deref()) {
        Ok(db) => {
            if let Some(url) = &db.url {
                if let Err(e) = relayq_engine::Database::reach(url, ASK_TIMEOUT) {
                    problems.push(e.to_string());
                }
            }
        }
        Err(e) => problems.push(format!("{}: {}", e.key, e.message)),
    }
    let asks: Vec<(String, relayq_actors::channels::ReadyCheck)> = built
        .channels
        .iter()
        .filter_map(|(name, spec)| Some((format!("channel {name}"), spec.ready_check()?)))
        .chain(
            built
                .sources
                .iter()
                .filter_map(|(name, spec)| Some((format!("source {name}"), spec.ready_check()?))),
        )
        .collect();
    if !asks.is_empty() {
        let answers = actix_rt::System::new().block_on(async move {
            let mut refused = Vec::new();
            for (what, ask) in asks {
                match tokio::time::timeout(ASK_TIMEOUT, ask).await {
                    Ok(Ok(())) => {}
                    Ok(Err(why)) => refused.push(format!("{what} is not ready: {why}")),
                    Err(_) => refused.push(format!(
                        "{what} is not ready: its platform did not answer within {ASK_TIMEOUT:?}"
                    )),
                }
            }
            refused
        });
        problems.extend(answers);
    }
    problems
}

/// `relayq config check`: the file parsed and checked (done before any command runs), then
/// every channel and source built as `serve` would (exit 2 if one cannot be), then what would
/// keep them from working here, their platforms asked (exit 1 on any problem).
pub fn check(ctx: &Invocation) -> Result<(), CliError> {
    let built =
        build(&ctx.config, &describe(ctx.config_file.as_deref())).map_err(CliError::Usage)?;
    let problems = problems(ctx, &built);
    if !problems.is_empty() {
        for problem in &problems {
            eprintln!("relayq: {}", crate::output::shown(problem));
        }
        return Err(CliError::Failed(format!(
            "{} problem(s) above: the file is valid, but relayq cannot work with it here",
            problems.len()
        )));
    }
    println!("configuration ok: {}", origin(ctx));
    let database = match ctx.config.db_config(ctx.db.as_deref()) {
        Ok(db) => db.describe(),
        Err(_) => ctx.config.db_path(ctx.db.as_deref()).display().to_string(),
    };
    println!("database: {database}");
    let names = |list: Vec<String>| match list.is_empty() {
        true => "(none)".to_string(),
        false => list.join(", "),
    };
    println!(
        "channels: {}",
        names(built.channels.into_iter().map(|(n, _)| n).collect())
    );
    println!(
        "sources: {}",
        names(built.sources.into_iter().map(|(n, _)| n).collect())
    );
    for note in built.notes {
        println!("warning: {note}");
    }
    Ok(())
}

/// `relayq config show`: the effective configuration as TOML, every default written out and
/// every secret masked.
pub fn show(ctx: &Invocation) -> Result<(), CliError> {
    let text = toml::to_string_pretty(&ctx.config)
        .map_err(|e| CliError::Failed(format!("cannot write the configuration as TOML: {e}")))?;
    println!("# effective configuration: {}", origin(ctx));
    print!("{text}");
    Ok(())
}
