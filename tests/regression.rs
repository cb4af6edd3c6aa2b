//! Regression tests: each one names a fault found by trying relayq from outside (issue 10:
//! "no silent failures") and fails on the code that had it.

mod common;

use std::process::Stdio;
use std::time::Duration;

use common::*;
use serde_json::Value;

/// The hook rows stored in the app's database.
fn hook_row_count(app: &App) -> i64 {
    let conn = rusqlite::Connection::open(app.db()).unwrap();
    conn.query_row(
        "SELECT COUNT(*) FROM queue_rows WHERE queue = 'hooks'",
        [],
        |r| r.get(0),
    )
    .unwrap()
}

const STOP: &str = include_str!("fixtures/claude-code/Stop.json");

/// Item 1: two processes opening a new database at once raced in the migrations ("table
/// queue_rows already exists") and hook events were lost.
#[test]
fn concurrent_first_use_of_a_new_database_loses_no_hook_event() {
    for round in 0..50 {
        let app = App::new("");
        let children: Vec<_> = (0..8)
            .map(|_| {
                let mut child = app
                    .cmd(&["hook", "--agent", "claude"])
                    .env_remove("RELAYQ_SESSION")
                    .stdin(Stdio::piped())
                    .stdout(Stdio::null())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap();
                use std::io::Write;
                child
                    .stdin
                    .take()
                    .unwrap()
                    .write_all(STOP.as_bytes())
                    .unwrap();
                child
            })
            .collect();
        for child in children {
            let out = child.wait_with_output().unwrap();
            assert!(
                out.status.success(),
                "round {round}: a hook call failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        assert_eq!(hook_row_count(&app), 8, "round {round}: events lost");
    }
}

#[allow(dead_code)]
fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

#[allow(dead_code)]
const WAIT: Duration = Duration::from_secs(20);
