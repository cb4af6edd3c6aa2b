//! Inbound sources, end to end: `relayq serve` reading a `kind = "jsonl"` spool file, killed
//! with SIGKILL while it reads. The source's offset is stored with the rows it read, so each
//! line becomes exactly one row, whatever moment the daemon died at.

use std::io::Write;
use std::time::Duration;

use crate::common::{assert_usage_error, by_session, file_config, wait_until, App, Config};

const WAIT: Duration = Duration::from_secs(30);
const ROUNDS: usize = 6;

fn config() -> Config {
    file_config().table(
        "sources.spool",
        &[
            "kind = \"jsonl\"",
            "path = \"spool.jsonl\"",
            "poll_interval = \"20ms\"",
            "batch = 3",
        ],
    )
}

/// Appends `n` messages numbered from `from`, spread over three sessions, to the spool.
fn append(app: &App, from: usize, n: usize) {
    let mut spool = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(app.path("spool.jsonl"))
        .unwrap();
    let mut text = String::new();
    for i in from..from + n {
        // No source_message_id: a line read twice would be two rows, not a duplicate.
        let line = serde_json::json!({"session": format!("s{}", i % 3), "origin": "spool", "content": i.to_string()});
        text.push_str(&format!("{line}\n"));
    }
    spool.write_all(text.as_bytes()).unwrap();
}

#[test]
fn each_spool_line_is_enqueued_exactly_once_across_kill_9() {
    let app = App::new(config());
    let per_round = 150;
    for round in 0..ROUNDS {
        append(&app, round * per_round, per_round);
        let mut daemon = app.serve();
        let before = app.inbound_rows();
        // Killed while it is still reading this round's lines.
        wait_until("some rows read", WAIT, || app.inbound_rows() > before);
        daemon.signal("KILL");
    }
    let total = ROUNDS * per_round;
    let daemon = app.serve();
    wait_until("every line delivered", WAIT, || {
        app.count("delivered") == total as i64
    });
    daemon.stop();
    assert_eq!(
        app.inbound_rows(),
        total as i64,
        "one row per line, none lost, none twice"
    );
    // Delivered in spool order within each session (a delivery repeated after a kill is
    // at-least-once: each message is compared at its first delivery).
    for (session, delivered) in by_session(&app.lines("out.jsonl")) {
        let mut texts: Vec<String> = Vec::new();
        for text in delivered {
            if !texts.contains(&text) {
                texts.push(text);
            }
        }
        let n: usize = session[1..].parse().unwrap();
        let expected: Vec<String> = (0..total)
            .filter(|i| i % 3 == n)
            .map(|i| i.to_string())
            .collect();
        assert_eq!(texts, expected, "{session}");
    }
    let offset = app.engine().source_offset("spool").unwrap().unwrap();
    let len = std::fs::metadata(app.path("spool.jsonl")).unwrap().len();
    assert_eq!(
        offset,
        len.to_string(),
        "the offset is the end of the spool"
    );
}

#[test]
fn a_bad_source_setting_names_the_key() {
    let app = App::new(config().table(
        "sources.other",
        &["kind = \"jsonl\"", "path = \"x\"", "batch = 0"],
    ));
    assert_usage_error(
        &app.run(&["status"]),
        "sources.other.batch: 0 is out of range",
    );
}
