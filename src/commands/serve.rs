//! `relayq serve`: the daemon in the foreground. SIGINT or SIGTERM stops the leasing, lets the
//! deliveries in flight finish within `daemon.shutdown_grace`, and exits 0.

use relayq_actors::{ChannelConfig, Runtime};
use tokio::signal::unix::{signal, SignalKind};

use crate::cli::{CliError, Context};

pub fn run(ctx: &Context) -> Result<(), CliError> {
    crate::logging::init("info");
    let config = ctx.config.clone();
    let mut runtime_config = config.runtime_config(ctx.db.as_deref());
    runtime_config.db = ctx.db_config()?;
    let db = std::path::absolute(&runtime_config.db.path).unwrap_or(runtime_config.db.path.clone());
    runtime_config.db.path = db.clone();
    for warning in config.warnings() {
        tracing::warn!("{warning}");
    }
    let file = ctx
        .config_file
        .as_ref()
        .map_or("(built-in defaults)".into(), |f| f.display().to_string());
    for (name, channel) in &config.channels {
        if let ChannelConfig::Exec(exec) = channel {
            if let Err(e) = exec.environment() {
                return Err(CliError::Usage(format!(
                    "invalid configuration: {file}: channels.{name}.{e}"
                )));
            }
        }
    }
    let system = actix_rt::System::new();
    system.block_on(async move {
        let mut builder = Runtime::builder(runtime_config);
        for (name, channel) in &config.channels {
            builder = builder.channel(name, channel.spec());
        }
        let runtime = builder.start().await?;
        let mut term = signal(SignalKind::terminate()).map_err(|e| CliError::Failed(e.to_string()))?;
        let mut int = signal(SignalKind::interrupt()).map_err(|e| CliError::Failed(e.to_string()))?;
        tracing::info!(config = %file, db = %db.display(), channels = ?config.channels.keys().collect::<Vec<_>>(), "relayq serving");
        let which = tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = int.recv() => "SIGINT",
        };
        tracing::info!(signal = which, grace = ?config.daemon.shutdown_grace, "stopping: finishing in-flight deliveries");
        runtime.shutdown(config.daemon.shutdown_grace).await;
        tracing::info!("relayq stopped");
        Ok(())
    })
}
