//! The map stays true: every name the docs give in backticks that reads as code (a type, a
//! function, a constant, a setting, a `Type::method` path) exists in the code. A rename that
//! forgets the docs fails here, naming the file and the name.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

/// Names the docs give that belong to other programs, not to relayq's code: Claude Code's
/// settings and permission updates, SQLite's C API.
const OUTSIDE: &[&str] = &["addDirectories", "allowedEnvVars", "sqlite3Reprepare"];

/// Where the code is: Rust, SQL migrations, the shipped config and the CI and install scripts.
const CODE: &[&str] = &[
    "src",
    "actors",
    "engine",
    "bench/src",
    "tests",
    "examples",
    "config.toml",
    "Cargo.toml",
    ".ci",
];

/// The documents whose names are checked.
fn documents(root: &Path) -> Vec<PathBuf> {
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("docs/")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.push(root.join("README.md"));
    docs.sort();
    docs
}

/// Every identifier in the code, and the code's text (for the metric names it builds).
fn code_words(root: &Path) -> (HashSet<String>, String) {
    let mut text = String::new();
    let mut stack: Vec<PathBuf> = CODE.iter().map(|p| root.join(p)).collect();
    while let Some(path) = stack.pop() {
        if path.is_dir() {
            if path
                .file_name()
                .is_some_and(|n| n == "target" || n == "node_modules")
            {
                continue;
            }
            stack.extend(
                std::fs::read_dir(&path)
                    .unwrap()
                    .flatten()
                    .map(|e| e.path()),
            );
        } else if path
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| ["rs", "sql", "toml", "sh"].contains(&e))
        {
            text.push_str(&std::fs::read_to_string(&path).unwrap_or_default());
            text.push('\n');
        }
    }
    let words = identifiers(&text).map(str::to_string).collect();
    (words, text)
}

fn identifiers(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| w.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_'))
}

/// The backticked spans of `doc` that read as code names: a path of identifiers holding `::`,
/// `_` or a capital letter (plain lowercase words are prose or commands: `serve`, `top`).
fn names_in(doc: &str) -> Vec<&str> {
    doc.split('`')
        .skip(1)
        .step_by(2)
        .filter(|span| {
            let parts: Vec<&str> = span.split("::").collect();
            let is_path = parts.iter().all(|p| {
                p.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
                    && p.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            });
            is_path
                && (parts.len() > 1
                    || span.contains('_')
                    || span.chars().any(|c| c.is_ascii_uppercase()))
        })
        .collect()
}

/// Why `name` names nothing in the code, if it does not.
fn missing(name: &str, words: &HashSet<String>, text: &str) -> Option<String> {
    if OUTSIDE.contains(&name) {
        return None;
    }
    // Metrics are registered by their short name and exposed as `relayq_NAME_total`.
    if let Some(metric) = name
        .strip_prefix("relayq_")
        .and_then(|n| n.strip_suffix("_total"))
    {
        let registered = format!("\"{metric}\"");
        return (!text.contains(&registered))
            .then(|| format!("no metric registered as {registered}"));
    }
    let absent: Vec<&str> = name.split("::").filter(|p| !words.contains(*p)).collect();
    (!absent.is_empty()).then(|| format!("no {} in the code", absent.join(", ")))
}

#[test]
fn every_name_the_docs_give_in_backticks_exists_in_the_code() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let (words, text) = code_words(root);
    assert!(
        words.contains("SessionActor") && words.len() > 1_000,
        "the code was not found under {}",
        root.display()
    );
    let mut wrong = Vec::new();
    let mut checked = 0;
    for doc in documents(root) {
        let content = std::fs::read_to_string(&doc).unwrap();
        for name in names_in(&content) {
            checked += 1;
            if let Some(why) = missing(name, &words, &text) {
                let file = doc.strip_prefix(root).unwrap_or(&doc).display();
                wrong.push(format!("{file}: `{name}`: {why}"));
            }
        }
    }
    assert!(checked > 200, "only {checked} names found in the docs");
    assert!(
        wrong.is_empty(),
        "names in the docs that the code no longer has (rename them in the doc, or remove \
         them):\n{}",
        wrong.join("\n")
    );
}

/// The check itself: a renamed function, type or constant is caught, a path is checked
/// segment by segment, prose is left alone.
#[test]
fn the_docs_check_catches_a_renamed_name() {
    let words: HashSet<String> = ["Engine", "queues", "DELIVERED_SQL", "Database"]
        .map(String::from)
        .into();
    let doc = "Read `Engine::queues`, then `Engine::queue_list`, `DELIVERED_SQL`, \
               `RECORDED_SQL`, `Databse`, run `serve` and `top`.";
    let names = names_in(doc);
    assert_eq!(
        names,
        [
            "Engine::queues",
            "Engine::queue_list",
            "DELIVERED_SQL",
            "RECORDED_SQL",
            "Databse"
        ]
    );
    let wrong: Vec<&str> = names
        .into_iter()
        .filter(|n| missing(n, &words, "").is_some())
        .collect();
    assert_eq!(wrong, ["Engine::queue_list", "RECORDED_SQL", "Databse"]);
}
