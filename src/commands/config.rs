//! `relayq config check | show`: whether the effective configuration works here, and what it
//! is. The effective configuration is the file (`--config`, `$RELAYQ_CONFIG`, the per-user
//! file, or the built-in defaults) with `RELAYQ_<SECTION>__<KEY>` environment variables over it.

use relayq_actors::sources::SourceSpec;
use relayq_actors::ChannelSpec;

use crate::cli::{CliError, Invocation};
use crate::config::{settings_from_env, Config};

/// Every channel and source built, and what the operator should know.
pub struct Built {
    pub channels: Vec<(String, ChannelSpec)>,
    pub sources: Vec<(String, SourceSpec)>,
    /// Settings that work but are probably not what was meant, and channels that are not ready
    /// (a program not installed).
    pub notes: Vec<String>,
}

/// Builds every channel and source: what parsing cannot check because it depends on the
/// daemon's environment (`*_env` variables, `*_file` secrets) fails here. What `serve` does at
/// start and at each reload.
pub fn build(config: &Config, file: &str) -> Result<Built, String> {
    let invalid = |section: &str, name: &str, e: relayq_actors::settings::SettingError| {
        format!("invalid configuration: {file}: {section}.{name}.{e}")
    };
    let mut notes = config.warnings();
    let mut channels = Vec::new();
    for (name, channel) in &config.channels {
        let spec = channel
            .spec()
            .map_err(|e| invalid("channels", name, e))?
            .paced(config.pacing.get(name));
        if let Err(why) = spec.readiness() {
            notes.push(format!(
                "channel {name} is not ready: {why}; its deliveries are tried anyway"
            ));
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

/// `relayq config check`: the file parsed and checked (done before any command runs), then
/// every channel and source built as `serve` would; exit 2 if one cannot be.
pub fn check(ctx: &Invocation) -> Result<(), CliError> {
    let built =
        build(&ctx.config, &describe(ctx.config_file.as_deref())).map_err(CliError::Usage)?;
    println!("configuration ok: {}", origin(ctx));
    println!(
        "database: {}",
        ctx.config.db_path(ctx.db.as_deref()).display()
    );
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
