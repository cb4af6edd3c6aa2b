//! `relayq serve`: the daemon in the foreground. SIGINT or SIGTERM stops the leasing, lets the
//! deliveries in flight finish within `daemon.shutdown_grace`, and exits 0. SIGHUP reloads the
//! config file: queue policies, routes, session channels and the channels themselves change at
//! once; the database, claimer and daemon settings at the next start. An invalid file changes
//! nothing (the error is logged).

use relayq_actors::{Relayq, Reload};
use tokio::signal::unix::{signal, SignalKind};

use crate::commands::config::{build, describe, Built};
use crate::config::Config;
use crate::invocation::{CliError, Invocation};

/// How long `serve` waits at start for a database that cannot be used yet (restarting, busy).
const START_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

pub fn run(ctx: &Invocation) -> Result<(), CliError> {
    crate::logging::init("info", ctx.log_format);
    let mut config = ctx.config.clone();
    // The built-in channels write there unless the config file says otherwise. A daemon whose
    // database is elsewhere starts without it (those channels' writes fail and say why).
    if let Err(e) = crate::invocation::ensure_state_dir() {
        tracing::warn!(error = %e, "the state directory cannot be made; the built-in deliveries and notices files cannot be written there");
    }
    let mut runtime_config = config.runtime_config(ctx.db_config()?);
    runtime_config.clock_offset_ms = clock_offset()?;
    let db = std::path::absolute(&runtime_config.db.path).unwrap_or(runtime_config.db.path.clone());
    runtime_config.db.path = db.clone();
    runtime_config.launch = config.launch_settings(ctx.config_file.as_deref(), &runtime_config.db);
    let serving_db = runtime_config.db.clone();
    let described = runtime_config.db.describe();
    let file = describe(ctx.config_file.as_deref());
    let Built {
        channels,
        sources,
        notes,
        unready,
    } = build(&config, &file).map_err(CliError::Usage)?;
    for note in notes {
        tracing::warn!("{note}");
    }
    for why in unready {
        tracing::warn!("{why}; its deliveries are tried anyway");
    }
    let system = actix_rt::System::new();
    system.block_on(async move {
        // Before anything can report ready (the wake socket, the pid file, READY=1): a
        // SIGTERM from then on must stop the daemon gracefully, not kill it mid-delivery.
        let listen = |kind| signal(kind).map_err(|e| CliError::Failed(e.to_string()));
        let (mut term, mut int) = (listen(SignalKind::terminate())?, listen(SignalKind::interrupt())?);
        let mut hup = listen(SignalKind::hangup())?;
        // A database that is restarting (or not up yet) is waited for, as the other commands'
        // callers retry them: a service manager that starts relayq beside PostgreSQL would
        // otherwise see it exit 1.
        let began = std::time::Instant::now();
        let mut pause = std::time::Duration::from_millis(250);
        let runtime = loop {
            let mut builder = Relayq::builder(runtime_config.clone());
            for (name, spec) in &channels {
                builder = builder.channel(name, spec.clone());
            }
            for (name, spec) in &sources {
                builder = builder.source(name, spec.clone());
            }
            match builder.start().await {
                Ok(runtime) => break runtime,
                Err(relayq_actors::ActorError::Engine(e))
                    if e.is_busy() && began.elapsed() < START_WAIT =>
                {
                    tracing::warn!(error = %e, retry_in = ?pause, "the database cannot be used yet; trying again");
                    tokio::select! {
                        _ = tokio::time::sleep(pause) => {}
                        _ = term.recv() => return Ok(()),
                        _ = int.recv() => return Ok(()),
                    }
                    pause = (pause * 2).min(std::time::Duration::from_secs(5));
                }
                Err(e) => return Err(e.into()),
            }
        };
        let grace = config.daemon.shutdown_grace;
        let mut http = match config.http.enabled {
            false => None,
            true => match crate::http::Server::start(&config.http, runtime.handle().clone()) {
                Ok(server) => Some(server),
                Err(e) => {
                    runtime.shutdown(grace).await;
                    return Err(CliError::Usage(e));
                }
            },
        };
        // The database is ours (the runtime holds its lock): say where we are, and that we
        // are ready to a service manager that asked (`Type=notify`).
        // A daemon without its pid file still serves: `relayq stop` then says how to stop it.
        let _pid_file = crate::pid_file::PidFile::write(&db)
            .inspect_err(|e| tracing::warn!(error = %e, "cannot write the pid file beside the database; `relayq stop` will not find this daemon"))
            .ok();
        service_manager::notify(&[sd_notify::NotifyState::Ready]);
        tracing::info!(config = %file, db = %described, channels = ?config.channels.keys().collect::<Vec<_>>(), "relayq serving");
        let which = loop {
            tokio::select! {
                _ = term.recv() => break "SIGTERM",
                _ = int.recv() => break "SIGINT",
                _ = hup.recv() => {
                    service_manager::notify(&[sd_notify::NotifyState::Reloading]);
                    if let Some(new) = reload(ctx, &config, &serving_db, &runtime) {
                        if new.http != config.http {
                            http = restart_http(http, &config.http, &new.http, &runtime).await;
                        }
                        config = new;
                    }
                    service_manager::notify(&[sd_notify::NotifyState::Ready]);
                }
            }
        };
        service_manager::notify(&[sd_notify::NotifyState::Stopping]);
        tracing::info!(signal = which, ?grace, "stopping: finishing in-flight deliveries");
        // No request reaches a stopping runtime: the API stops first, its requests answered.
        if let Some(http) = http {
            http.stop().await;
        }
        runtime.shutdown(grace).await;
        tracing::info!("relayq stopped");
        Ok(())
    })
}

/// SIGHUP: reads the config again (the same file, or the same search when there was none) and
/// applies it. Returns the new config, or `None` (logged) when the running one stays.
fn reload(
    ctx: &Invocation,
    running: &Config,
    db: &relayq_engine::DbConfig,
    runtime: &Relayq,
) -> Option<Config> {
    let (new, file) = match Config::load(ctx.config_file.as_deref()) {
        Ok(loaded) => loaded,
        Err(e) => {
            tracing::error!(error = %e, "SIGHUP: the configuration is not valid; keeping the running one");
            return None;
        }
    };
    let file = describe(file.as_deref());
    let (channels, sources) = match build(&new, &file) {
        Ok(built) => {
            for note in built.notes.iter().chain(&built.unready) {
                tracing::warn!("{note}");
            }
            (built.channels, built.sources)
        }
        Err(e) => {
            tracing::error!(error = %e, "SIGHUP: keeping the running configuration");
            return None;
        }
    };
    let runtime_config = new.runtime_config(relayq_engine::DbConfig::new(""));
    let launch = new.launch_settings(ctx.config_file.as_deref(), db);
    let reloaded = runtime.reload(Reload {
        queues: runtime_config.queues,
        notice_routes: runtime_config.notice_routes,
        session_channels: runtime_config.session_channels,
        channels,
        sources,
        launch,
        progress: runtime_config.progress,
        files: runtime_config.files,
    });
    if let Err(e) = reloaded {
        tracing::error!(error = %e, "SIGHUP: keeping the running configuration");
        return None;
    }
    for (section, changed) in [
        ("database", new.database != running.database),
        ("claimer", new.claimer != running.claimer),
        ("daemon", new.daemon != running.daemon),
    ] {
        if changed {
            tracing::warn!(
                section,
                "SIGHUP: [{section}] changed: it takes effect at the next start"
            );
        }
    }
    tracing::info!(config = %file, channels = ?new.channels.keys().collect::<Vec<_>>(), "SIGHUP: configuration reloaded");
    Some(new)
}

/// SIGHUP with a changed `[http]`: the running API (if any) stops, its requests answered, and
/// the new one starts (if enabled). A new one that cannot start is logged, and the old one
/// started again.
async fn restart_http(
    running: Option<crate::http::Server>,
    old: &crate::http::HttpConfig,
    new: &crate::http::HttpConfig,
    runtime: &Relayq,
) -> Option<crate::http::Server> {
    if let Some(server) = running {
        server.stop().await;
        tracing::info!("SIGHUP: [http] changed: the HTTP API stopped");
    }
    let start = |config: &crate::http::HttpConfig| match config.enabled {
        false => Ok(None),
        true => crate::http::Server::start(config, runtime.handle().clone()).map(Some),
    };
    match start(new) {
        Ok(server) => server,
        Err(e) => {
            tracing::error!(error = %e, "SIGHUP: the new [http] cannot start; the one before is started again");
            start(old).unwrap_or_else(|e| {
                tracing::error!(error = %e, "the HTTP API cannot start again");
                None
            })
        }
    }
}

/// Telling a service manager (systemd's `Type=notify`) how the daemon is: ready, reloading,
/// stopping. Nothing happens when none asked (`NOTIFY_SOCKET` unset).
mod service_manager {
    pub fn notify(states: &[sd_notify::NotifyState]) {
        if std::env::var_os("NOTIFY_SOCKET").is_none() {
            return;
        }
        if let Err(e) = sd_notify::notify(states) {
            tracing::warn!(error = %e, "cannot tell the service manager the daemon's state");
        }
    }
}

/// `RELAYQ_CLOCK_OFFSET`: how far to set this daemon's clock off (`1h`, `-90s`), to test that
/// a node whose host clock is wrong steals no lease (times on a shared database are its own).
fn clock_offset() -> Result<i64, CliError> {
    let Ok(text) = std::env::var("RELAYQ_CLOCK_OFFSET") else {
        return Ok(0);
    };
    let (sign, magnitude) = match text.trim().strip_prefix('-') {
        Some(rest) => (-1, rest),
        None => (1, text.trim()),
    };
    humantime::parse_duration(magnitude)
        .map(|d| sign * d.as_millis() as i64)
        .map_err(|e| {
            CliError::Usage(format!(
                "RELAYQ_CLOCK_OFFSET={text:?}: {e} (e.g. \"1h\", \"-90s\")"
            ))
        })
}
