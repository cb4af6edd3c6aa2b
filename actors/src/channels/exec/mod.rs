//! `kind = "exec"`: runs a command with the delivery as JSON on stdin.
//!
//! Exit 0 means delivered; 65 (EX_DATAERR) means permanent: the row is dead with the command's
//! stderr as the reason; 75 (EX_TEMPFAIL) and any other exit mean try again later, with the
//! stderr as the error. The environment carries `RELAYQ_ROW_ID`, `RELAYQ_QUEUE`,
//! `RELAYQ_SESSION`, `RELAYQ_ADDRESS` (the session, or the outbound destination) and
//! `RELAYQ_ATTEMPT`, `RELAYQ_POSSIBLE_REPEAT=1` when an earlier run may have delivered it (it
//! timed out or was killed, or the daemon died meanwhile), plus the channel's `env` (values written in the config, or taken from the
//! daemon's environment, so a secret need not be in the command line).
//!
//! Each command runs in a process group of its own, under a small `sh` that kills the group
//! when the daemon dies (even by `kill -9`: the kernel sends it SIGTERM). When the command
//! exits or outlives `timeout`, whatever it left running in its group is killed, so no
//! pipeline or subshell delivers late, after the retry.

use std::collections::BTreeMap;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;

use crate::kit::{default_timeout, on_path, tail};
use super::UnknownOutcome;
use super::{Answer, Channel, ChannelKind, Delivery, Outcome, SettingError};

/// sysexits.h EX_TEMPFAIL: "try again later".
pub const EXIT_TEMPFAIL: i32 = 75;
/// sysexits.h EX_DATAERR: "this message cannot be delivered"; the row is dead.
pub const EXIT_PERMANENT: i32 = 65;

/// How much of the command's stderr is kept as the row's error.
const KEPT_STDERR: usize = 2048;

/// Runs the command (`"$@"`) in the background, keeping stdin (a background job of a
/// non-interactive `sh` would get /dev/null), and kills the whole process group on SIGTERM,
/// which the kernel sends when the daemon dies (`PR_SET_PDEATHSIG`).
const GUARD: &str = r#"trap 'kill -KILL 0' TERM; exec 3<&0; "$@" <&3 3<&- & wait $!"#;

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Program and arguments, e.g. `["sh", "-c", "my-bridge --deliver"]`.
    pub command: Vec<String>,
    #[serde(default = "default_timeout", with = "humantime_serde")]
    pub timeout: Duration,
    /// Extra environment variables: `NAME = "value"`, or `NAME = { from_env = "VAR" }` for
    /// the daemon's own `$VAR`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, EnvValue>,
    /// An outbound row whose earlier run may have delivered it: run again (`resend`, with
    /// `RELAYQ_POSSIBLE_REPEAT=1`) or `hold` it as a dead letter for an operator.
    #[serde(default)]
    pub unknown_outcome: UnknownOutcome,
}

/// One value of `env`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(untagged)]
pub enum EnvValue {
    Literal(String),
    FromEnv { from_env: String },
}

impl ChannelKind for Config {
    type Channel = ExecChannel;

    fn timeout(&self) -> Duration {
        self.timeout
    }

    fn check(&self) -> Result<(), SettingError> {
        match self.command.first() {
            Some(program) if !program.is_empty() => Ok(()),
            _ => Err(SettingError::new(
                "command",
                "must name a program, e.g. [\"sh\", \"-c\", \"...\"]",
            )),
        }
    }

    /// Resolves `env` against the daemon's environment; the error names the missing variable.
    fn build(&self) -> Result<ExecChannel, SettingError> {
        let env = self
            .env
            .iter()
            .map(|(name, value)| match value {
                EnvValue::Literal(v) => Ok((name.clone(), v.clone())),
                EnvValue::FromEnv { from_env } => std::env::var(from_env)
                    .map(|v| (name.clone(), v))
                    .map_err(|_| {
                        SettingError::new(
                            format!("env.{name}"),
                            format!("takes ${from_env}, which is not set in relayq's environment"),
                        )
                    }),
            })
            .collect::<Result<_, _>>()?;
        Ok(ExecChannel {
            config: Arc::new(self.clone()),
            env: Arc::new(env),
        })
    }
}

#[derive(Clone)]
pub struct ExecChannel {
    config: Arc<Config>,
    /// `env`, resolved when the channel was built.
    env: Arc<Vec<(String, String)>>,
}

impl Channel for ExecChannel {
    fn deliver(&mut self, delivery: Delivery) -> Answer {
        let channel = self.clone();
        Answer::later(async move { channel.run(&delivery).await })
    }

    fn timeout(&self) -> Duration {
        self.config.timeout
    }

    fn unknown_outcome(&self) -> UnknownOutcome {
        self.config.unknown_outcome
    }

    fn readiness(&self) -> Result<(), String> {
        let program = &self.config.command[0];
        match on_path(program) {
            true => Ok(()),
            false => Err(format!("{program} is not found (not a file, nor on PATH)")),
        }
    }
}

/// Kills a command's process group when dropped: at its exit, its timeout, or when the
/// delivery is abandoned.
struct Group(i32);

impl Drop for Group {
    fn drop(&mut self) {
        // SAFETY: kill(2) with a negative pid signals that process group; no memory is involved.
        unsafe {
            libc::kill(-self.0, libc::SIGKILL);
        }
    }
}

impl ExecChannel {
async fn run(&self, delivery: &Delivery) -> Outcome {
    let (config, env) = (&self.config, self.env.iter().cloned());
    let Some(program) = config.command.first() else {
        return Outcome::Permanent {
            reason: "exec channel has an empty command".into(),
        };
    };
    let daemon = std::process::id() as i32;
    let mut command = Command::new("/bin/sh");
    command
        .args(["-c", GUARD, "relayq-exec"])
        .args(&config.command)
        .envs(env)
        .env("RELAYQ_ROW_ID", delivery.id.to_string())
        .env("RELAYQ_QUEUE", &delivery.queue)
        .env("RELAYQ_SESSION", delivery.session().unwrap_or_default())
        .env("RELAYQ_ADDRESS", delivery.address())
        .env("RELAYQ_ATTEMPT", delivery.attempt.to_string())
        .env(
            "RELAYQ_POSSIBLE_REPEAT",
            if delivery.possible_repeat { "1" } else { "0" },
        )
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    // SAFETY: between fork and exec only async-signal-safe calls: prctl and getppid.
    unsafe {
        command.pre_exec(move || {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
            if libc::getppid() != daemon {
                // The daemon died before prctl took effect: do not run at all.
                return Err(std::io::Error::other("relayq exited"));
            }
            Ok(())
        });
    }
    let mut child = match command.spawn() {
        Ok(c) => c,
        Err(e) => return Outcome::retry(format!("cannot run {program}: {e}")),
    };
    let group = child.id().map(|pid| Group(pid as i32));
    let json = serde_json::to_vec(delivery).expect("a delivery always serialises");
    let mut stderr = child.stderr.take().expect("stderr is piped");
    let stdin = child.stdin.take();
    let exchange = async {
        if let Some(mut stdin) = stdin {
            // A command that exits without reading its input is judged by its exit code alone.
            let _ = stdin.write_all(&json).await;
        }
        let status = child.wait().await;
        // Leftovers in the group hold the stderr pipe open: end them, then read to the end.
        drop(group);
        let mut bytes = Vec::new();
        let _ = (&mut stderr).take(64 * 1024).read_to_end(&mut bytes).await;
        (status, bytes)
    };
    let (status, stderr) = match tokio::time::timeout(config.timeout, exchange).await {
        Ok(done) => done,
        Err(_) => {
            return Outcome::unknown(format!(
                "command timed out after {:?}; it and everything it started were killed",
                config.timeout
            ))
        }
    };
    let status = match status {
        Ok(s) => s,
        Err(e) => return Outcome::retry(format!("waiting for {program} failed: {e}")),
    };
    // The command may print what `env` gave it (an API key): never kept or shown.
    let stderr = crate::kit::secret::scrub(
        &String::from_utf8_lossy(&stderr),
        self.env.iter().map(|(_, value)| value.as_str()),
    );
    let stderr = tail(&stderr, KEPT_STDERR);
    match status.code() {
        Some(0) => Outcome::delivered(),
        Some(EXIT_PERMANENT) => Outcome::Permanent {
            reason: format!("exit 65 (permanent){}", with_detail(&stderr)),
        },
        Some(EXIT_TEMPFAIL) => {
            Outcome::retry(format!("exit 75 (try again later){}", with_detail(&stderr)))
        }
        Some(code) if stderr.is_empty() => Outcome::retry(format!("exit {code}")),
        Some(_) => Outcome::retry(stderr),
        None => Outcome::unknown(format!("killed by a signal{}", with_detail(&stderr))),
    }
}
}

fn with_detail(stderr: &str) -> String {
    if stderr.is_empty() {
        String::new()
    } else {
        format!(": {stderr}")
    }
}
