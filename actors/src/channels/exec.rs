//! `kind = "exec"`: runs a command with the delivery as JSON on stdin.
//! Exit 0 means delivered; 75 (EX_TEMPFAIL) means try again later; any other exit means try
//! again later, with the command's stderr as the error. A command that outlives `timeout` is
//! killed and retried.

use std::process::Stdio;
use std::time::Duration;

use actix::prelude::*;
use serde::{Deserialize, Serialize};
use tokio::io::AsyncWriteExt;
use tokio::process::Command;

use super::{default_timeout, tail, Deliver, Delivery, Outcome};

/// sysexits.h EX_TEMPFAIL: "try again later".
pub const EXIT_TEMPFAIL: i32 = 75;

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ExecConfig {
    /// Program and arguments, e.g. `["sh", "-c", "my-bridge --deliver"]`.
    pub command: Vec<String>,
    #[serde(default = "default_timeout", with = "humantime_serde")]
    pub timeout: Duration,
}

pub struct ExecChannel {
    config: ExecConfig,
}

impl ExecChannel {
    pub fn new(config: ExecConfig) -> Self {
        ExecChannel { config }
    }
}

impl Actor for ExecChannel {
    type Context = Context<Self>;
}

impl Handler<Deliver> for ExecChannel {
    type Result = ResponseFuture<Outcome>;

    fn handle(&mut self, Deliver(delivery): Deliver, _: &mut Context<Self>) -> Self::Result {
        let config = self.config.clone();
        Box::pin(async move {
            match tokio::time::timeout(config.timeout, run(&config, &delivery)).await {
                Ok(outcome) => outcome,
                Err(_) => Outcome::retry(format!(
                    "command timed out after {:?} and was killed",
                    config.timeout
                )),
            }
        })
    }
}

async fn run(config: &ExecConfig, delivery: &Delivery) -> Outcome {
    let Some((program, args)) = config.command.split_first() else {
        return Outcome::Permanent {
            reason: "exec channel has an empty command".into(),
        };
    };
    let child = Command::new(program)
        .args(args)
        .env("RELAYQ_ROW_ID", delivery.id.to_string())
        .env("RELAYQ_QUEUE", &delivery.queue)
        .env("RELAYQ_SESSION", delivery.session().unwrap_or_default())
        .env("RELAYQ_ADDRESS", delivery.address())
        .env("RELAYQ_ATTEMPT", delivery.attempt.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) => return Outcome::retry(format!("cannot run {program}: {e}")),
    };
    let json = serde_json::to_vec(delivery).expect("a delivery always serialises");
    if let Some(mut stdin) = child.stdin.take() {
        // A command that exits without reading its input is judged by its exit code alone.
        let _ = stdin.write_all(&json).await;
    }
    let output = match child.wait_with_output().await {
        Ok(o) => o,
        Err(e) => return Outcome::retry(format!("waiting for {program} failed: {e}")),
    };
    let stderr = tail(&String::from_utf8_lossy(&output.stderr), 2048);
    match output.status.code() {
        Some(0) => Outcome::Delivered,
        Some(EXIT_TEMPFAIL) => {
            Outcome::retry(format!("exit 75 (try again later){}", with_detail(&stderr)))
        }
        Some(code) if stderr.is_empty() => Outcome::retry(format!("exit {code}")),
        Some(_) => Outcome::retry(stderr),
        None => Outcome::retry(format!("killed by a signal{}", with_detail(&stderr))),
    }
}

fn with_detail(stderr: &str) -> String {
    if stderr.is_empty() {
        String::new()
    } else {
        format!(": {stderr}")
    }
}
