//! The effectum reference, built and run as a child process: effectum links its own SQLite
//! (through rusqlite 0.31), and Cargo allows one SQLite per build, so it lives in its own
//! Cargo project at `bench/effectum-ref`.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{ensure, Context, Result};

/// Builds the reference (release) and returns its binary. Its target directory is given
/// explicitly, so a `CARGO_TARGET_DIR` set for relayq's build does not move the binary.
pub fn build(root: &Path) -> Result<PathBuf> {
    let dir = root.join("bench/effectum-ref");
    let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(["build", "--release", "--quiet", "--manifest-path"])
        .arg(dir.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(dir.join("target"))
        .status()
        .context("running cargo to build bench/effectum-ref")?;
    ensure!(status.success(), "building bench/effectum-ref failed");
    Ok(dir.join("target/release/effectum-ref"))
}

/// Jobs per second for `n` no-op jobs in `mode` (`best` or `default`).
pub fn run(bin: &Path, mode: &str, n: usize) -> Result<f64> {
    let out = Command::new(bin).arg(mode).arg(n.to_string()).output()?;
    ensure!(
        out.status.success(),
        "effectum-ref {mode} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line: serde_json::Value = serde_json::from_slice(&out.stdout).with_context(|| {
        format!(
            "effectum-ref printed {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })?;
    line["per_sec"]
        .as_f64()
        .context("no per_sec in effectum-ref output")
}
