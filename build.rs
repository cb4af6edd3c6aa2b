//! Puts the git commit relayq is built from into `relayq --version`, so a bug report names the
//! exact code. A build outside a git checkout (a source tarball) says so instead.

use std::process::Command;

fn main() {
    let git = |args: &[&str]| -> Option<String> {
        let out = Command::new("git").args(args).output().ok()?;
        let text = String::from_utf8(out.stdout).ok()?;
        (out.status.success() && !text.trim().is_empty()).then(|| text.trim().to_string())
    };
    let built_from = match (
        git(&["rev-parse", "--short=12", "HEAD"]),
        git(&["log", "-1", "--format=%cs"]),
    ) {
        (Some(commit), Some(date)) => format!("commit {commit}, {date}"),
        (Some(commit), None) => format!("commit {commit}"),
        _ => "not built from a git checkout".to_string(),
    };
    println!("cargo:rustc-env=RELAYQ_BUILT_FROM={built_from}");
    // A new commit moves HEAD or the branch it names.
    if let Some(dir) = git(&["rev-parse", "--git-dir"]) {
        for file in ["HEAD", "refs/heads", "packed-refs"] {
            println!("cargo:rerun-if-changed={dir}/{file}");
        }
    }
    println!("cargo:rerun-if-changed=build.rs");
}
