//! The spool file, as the source conformance suite drives it (see `sources::conformance`).

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::json;

use crate::sources::conformance::{Case, Promise, Settings, SourceUnderTest};

/// A spool file has no people to refuse and no platform that refuses it.
pub fn cases() -> Vec<Case> {
    vec![Case {
        name: "jsonl",
        make: || Box::new(Spool::new()),
        promises: &[Promise::Kill9BeforeTheCommit, Promise::ReplayWritesNoDuplicate],
    }]
}

/// `kind = "jsonl"`: lines appended to a file of its own.
struct Spool {
    path: PathBuf,
}

impl Spool {
    fn new() -> Spool {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos();
        let dir = std::env::temp_dir().join(format!("relayq-spool-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        Spool {
            path: dir.join("spool.jsonl"),
        }
    }

    fn line(n: u64, text: &str) -> String {
        json!({"session": "alice", "origin": "spool", "content": text, "source_message_id": format!("m{n}")})
            .to_string()
            + "\n"
    }
}

impl SourceUnderTest for Spool {
    fn settings(&self) -> Settings {
        Settings {
            source: vec![
                "kind = \"jsonl\"".into(),
                format!("path = {:?}", self.path.display().to_string()),
                "poll_interval = \"20ms\"".into(),
            ],
            http_port: None,
        }
    }

    fn send(&self, n: u64, text: &str, _stranger: bool) {
        let mut spool = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)
            .unwrap();
        spool.write_all(Spool::line(n, text).as_bytes()).unwrap();
    }

    fn handed_over(&self) {}

    fn replay(&self, n: u64, text: &str) {
        // The file replaced by a shorter one: it is read again from the start.
        std::fs::write(&self.path, Spool::line(n, text)).unwrap();
        std::thread::sleep(Duration::from_millis(300));
    }
}
