//! The effectum reference, built and run as a child process: effectum links its own SQLite
//! (through rusqlite 0.31), and Cargo allows one SQLite per build, so it lives in its own
//! Cargo project at `bench/effectum-ref`.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::Result;

/// Builds the reference (release) and returns its binary.
pub fn build(root: &Path) -> Result<PathBuf> {
    crate::reference::build(root, "effectum-ref")
}

/// Jobs per second for `n` no-op jobs in `mode` (`best` or `default`).
pub fn run(bin: &Path, mode: &str, n: usize) -> Result<f64> {
    let mut command = Command::new(bin);
    command.arg(mode).arg(n.to_string());
    crate::reference::per_sec(command)
}
