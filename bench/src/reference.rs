//! References that live in Cargo projects of their own under `bench/` (their dependency trees
//! would clash with or double relayq's): built in release, run as child processes that print
//! one JSON line with `per_sec`.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{ensure, Context, Result};

/// Builds `bench/NAME` (release) and returns its binary `NAME`. Its target directory is given
/// explicitly, so a `CARGO_TARGET_DIR` set for relayq's build does not move the binary.
pub fn build(root: &Path, name: &str) -> Result<PathBuf> {
    let dir = root.join("bench").join(name);
    let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(["build", "--release", "--quiet", "--manifest-path"])
        .arg(dir.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(dir.join("target"))
        .status()
        .with_context(|| format!("running cargo to build bench/{name}"))?;
    ensure!(status.success(), "building bench/{name} failed");
    Ok(dir.join("target/release").join(name))
}

/// Runs a reference's `command` and reads the `per_sec` of the JSON line it printed.
pub fn per_sec(mut command: Command) -> Result<f64> {
    let name = command.get_program().to_string_lossy().into_owned();
    let out = command.output()?;
    ensure!(
        out.status.success(),
        "{name} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line: serde_json::Value = serde_json::from_slice(&out.stdout)
        .with_context(|| format!("{name} printed {}", String::from_utf8_lossy(&out.stdout)))?;
    line["per_sec"]
        .as_f64()
        .with_context(|| format!("no per_sec in {name}'s output"))
}
