//! `kind = "tmux"`: types the message into the session's tmux pane, as a person pasting it:
//! the text goes into a tmux buffer, is pasted with bracketed paste (`paste-buffer -p`: the
//! paste markers are sent when the program in the pane asked for them, as agent CLIs do), and
//! Enter is pressed after a short pause so the program sees the paste end before the submit.

use std::process::Stdio;
use std::time::Duration;

use actix::prelude::*;
use serde::{Deserialize, Serialize};
use tokio::io::AsyncWriteExt;
use tokio::process::Command;

use super::{tail, Deliver, Delivery, Outcome};

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TmuxConfig {
    /// The target pane; `{session}` is replaced by the session id (for an outbound message,
    /// by its destination).
    #[serde(default = "default_target")]
    pub target: String,
    /// A tmux server socket name (`tmux -L`); the default server when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub socket_name: Option<String>,
    /// Pause between the paste and the Enter key.
    #[serde(default = "default_submit_delay", with = "humantime_serde")]
    pub submit_delay: Duration,
    #[serde(default = "default_tmux_timeout", with = "humantime_serde")]
    pub timeout: Duration,
}

fn default_target() -> String {
    "{session}".into()
}
fn default_submit_delay() -> Duration {
    Duration::from_millis(100)
}
fn default_tmux_timeout() -> Duration {
    Duration::from_secs(10)
}

pub struct TmuxChannel {
    config: TmuxConfig,
}

impl TmuxChannel {
    pub fn new(config: TmuxConfig) -> Self {
        TmuxChannel { config }
    }
}

impl Actor for TmuxChannel {
    type Context = Context<Self>;
}

impl Handler<Deliver> for TmuxChannel {
    type Result = ResponseFuture<Outcome>;

    fn handle(&mut self, Deliver(delivery): Deliver, _: &mut Context<Self>) -> Self::Result {
        let config = self.config.clone();
        Box::pin(async move {
            match tokio::time::timeout(config.timeout, paste(&config, &delivery)).await {
                Ok(Ok(())) => Outcome::Delivered,
                Ok(Err(outcome)) => outcome,
                Err(_) => {
                    Outcome::retry(format!("tmux did not answer within {:?}", config.timeout))
                }
            }
        })
    }
}

/// The pane a session's messages go to.
pub fn target_for(template: &str, session: &str) -> String {
    template.replace("{session}", session)
}

async fn paste(config: &TmuxConfig, delivery: &Delivery) -> Result<(), Outcome> {
    let session = delivery.address();
    if session.contains([':', '.']) && config.target.contains("{session}") {
        return Err(Outcome::Permanent {
            reason: format!("session id '{session}' has ':' or '.', which tmux reads as window/pane; it cannot name a tmux session"),
        });
    }
    let target = target_for(&config.target, session);
    let buffer = format!("relayq-{}", delivery.id);
    tmux(
        config,
        &["load-buffer", "-b", &buffer, "-"],
        Some(delivery.text()),
    )
    .await?;
    tmux(
        config,
        &["paste-buffer", "-p", "-d", "-b", &buffer, "-t", &target],
        None,
    )
    .await
    .inspect_err(|_| {
        // leave no stray buffer behind when the paste failed
        let cfg = config.clone();
        let buffer = buffer.clone();
        actix_rt::spawn(async move {
            let _ = tmux(&cfg, &["delete-buffer", "-b", &buffer], None).await;
        });
    })?;
    tokio::time::sleep(config.submit_delay).await;
    tmux(config, &["send-keys", "-t", &target, "Enter"], None).await
}

async fn tmux(config: &TmuxConfig, args: &[&str], stdin: Option<&str>) -> Result<(), Outcome> {
    let mut cmd = Command::new("tmux");
    if let Some(socket) = &config.socket_name {
        cmd.args(["-L", socket]);
    }
    cmd.args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = cmd
        .spawn()
        .map_err(|e| Outcome::retry(format!("cannot run tmux: {e}")))?;
    if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
        pipe.write_all(text.as_bytes())
            .await
            .map_err(|e| Outcome::retry(format!("tmux {}: {e}", args[0])))?;
    }
    let out = child
        .wait_with_output()
        .await
        .map_err(|e| Outcome::retry(format!("tmux {}: {e}", args[0])))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(Outcome::retry(format!(
            "tmux {} failed: {}",
            args[0],
            tail(&String::from_utf8_lossy(&out.stderr), 1024)
        )))
    }
}
