//! Inbound delivery through the built binary: `serve` running, the CLI enqueueing from other
//! processes, real channels (file, exec, tmux).

use std::time::Duration;

use crate::common::*;

#[test]
fn rows_enqueued_by_the_cli_while_serving_reach_the_file_in_order_per_session() {
    let app = App::new(file_config());
    let daemon = app.serve();
    let sessions = 8;
    let per_session = 12;
    for i in 0..per_session {
        for s in 0..sessions {
            app.enqueue(&format!("session-{s}"), &format!("msg {i}"));
        }
    }
    // sweep_interval is 1h: these rows can only have arrived through the wake-up path.
    wait_until("all deliveries", Duration::from_secs(20), || {
        app.lines("out.jsonl").len() == sessions * per_session
    });
    let got = by_session(&app.lines("out.jsonl"));
    assert_eq!(got.len(), sessions);
    for (session, contents) in got {
        let expected: Vec<String> = (0..per_session).map(|i| format!("msg {i}")).collect();
        assert_eq!(
            contents, expected,
            "{session} delivered in order, each once"
        );
    }
    assert_eq!(app.count("delivered"), (sessions * per_session) as i64);
    daemon.stop();
}

#[test]
fn a_duplicate_source_id_is_delivered_once() {
    let app = App::new(file_config());
    let daemon = app.serve();
    let args = inbound_args("s", "telegram", &["--source-id", "99", "--json", "hi"]);
    let first: serde_json::Value = serde_json::from_str(&app.ok(&args)).unwrap();
    let second: serde_json::Value = serde_json::from_str(&app.ok(&args)).unwrap();
    assert_eq!(first["duplicate"], false);
    assert_eq!(
        (second["id"].clone(), second["duplicate"].clone()),
        (first["id"].clone(), true.into())
    );
    app.enqueue("s", "after");
    wait_until("delivery", Duration::from_secs(10), || {
        app.lines("out.jsonl").len() == 2
    });
    let contents = &by_session(&app.lines("out.jsonl"))["s"];
    assert_eq!(contents, &vec!["hi".to_string(), "after".to_string()]);
    daemon.stop();
}

#[test]
fn stdin_body_type_actor_and_payload_reach_the_channel() {
    let app = App::new(file_config());
    let daemon = app.serve();
    let mut child = app
        .cmd(&inbound_args(
            "s",
            "discord",
            &[
                "--type",
                "voice",
                "--actor-id",
                "u1",
                "--actor-name",
                "Ann",
                "--payload",
                r#"{"duration":3}"#,
                "-",
            ],
        ))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all("line one\nline two ✓".as_bytes())
        .unwrap();
    assert!(child.wait_with_output().unwrap().status.success());
    wait_until("delivery", Duration::from_secs(10), || {
        app.lines("out.jsonl").len() == 1
    });
    let line = &app.lines("out.jsonl")[0];
    assert_eq!(line["content"], "line one\nline two ✓");
    assert_eq!(
        (line["type"].as_str(), line["origin"].as_str()),
        (Some("voice"), Some("discord"))
    );
    assert_eq!(
        (line["actor_id"].as_str(), line["actor_name"].as_str()),
        (Some("u1"), Some("Ann"))
    );
    assert_eq!(line["payload"]["duration"], 3);
    assert_eq!(line["attempt"], 1);
    daemon.stop();
}

/// The command exits 75 (try later), then fails with stderr, then succeeds.
#[test]
fn exec_channel_failing_twice_then_succeeding_delivers_once_with_the_errors_recorded() {
    let script = r#"n=$(cat count 2>/dev/null || echo 0); n=$((n+1)); echo $n > count
if [ $n -eq 1 ]; then exit 75; fi
if [ $n -eq 2 ]; then echo "bridge unreachable" >&2; exit 3; fi
line=$(cat); printf '%s\n' "$line" >> out.jsonl"#;
    let app = App::new(exec_config(script));
    let daemon = app.serve();
    let id = app.enqueue("s", "hello");
    // The line is written before the command exits, and the delivery recorded after: wait for
    // the record, not the line.
    let row = app.wait_state(relayq_engine::QueueName::Inbound, id, "delivered");
    assert_eq!(app.lines("out.jsonl").len(), 1);
    assert_eq!((row.state.as_str(), row.attempts), ("delivered", 3));
    assert_eq!(
        row.last_error.as_deref(),
        Some("bridge unreachable"),
        "stderr of the failed run is kept"
    );
    let line = &app.lines("out.jsonl")[0];
    assert_eq!(
        (line["content"].as_str(), line["attempt"].as_i64()),
        (Some("hello"), Some(3))
    );
    assert_eq!(
        std::fs::read_to_string(app.path("count")).unwrap().trim(),
        "3"
    );
    daemon.stop();
}

#[test]
fn exec_channel_that_hangs_is_killed_and_retried() {
    let script = r#"if [ ! -f first ]; then touch first; sleep 30; fi; line=$(cat); printf '%s\n' "$line" >> out.jsonl"#;
    let app = App::new(exec_config(script).set("channels.bridge", r#"timeout = "300ms""#));
    let daemon = app.serve();
    let id = app.enqueue("s", "hello");
    wait_until("delivery", Duration::from_secs(15), || {
        app.lines("out.jsonl").len() == 1
    });
    let row = app.inbound().state_of(id).unwrap().unwrap();
    assert_eq!(row.attempts, 2);
    assert!(row.last_error.unwrap().contains("timed out"));
    daemon.stop();
}

/// Delivery into a real tmux pane. The pane runs `cat -v` after asking for bracketed paste, so
/// the capture shows the paste markers tmux sent around the text, then the text, then Enter.
#[test]
fn tmux_channel_pastes_into_the_sessions_pane_with_bracketed_paste_and_enter() {
    let (tmux, app) = cat_pane("paste", "agent-1", &[]);
    let daemon = app.serve();
    let first = app.enqueue("agent-1", "hello from relayq");
    let second = app.enqueue("agent-1", "second message");
    let q = app.inbound();
    wait_until("both delivered", Duration::from_secs(15), || {
        q.state_of(second).unwrap().unwrap().state == "delivered"
    });
    assert_eq!(q.state_of(first).unwrap().unwrap().state, "delivered");
    let mut screen = String::new();
    wait_until("cat to echo the lines", Duration::from_secs(5), || {
        screen = tmux.screen("agent-1");
        screen.matches("second message").count() >= 2
    });
    // The terminal echoes the typed line and cat -v prints it back: bracketed, in order, submitted.
    assert!(
        screen.contains("^[[200~hello from relayq^[[201~"),
        "{screen}"
    );
    let at = |s: &str| screen.find(s).unwrap();
    assert!(at("hello from relayq") < at("second message"), "{screen}");
    daemon.stop();
}

#[test]
fn tmux_channel_retries_while_the_pane_does_not_exist() {
    let tmux = Tmux::new("missing");
    let app = App::new(tmux.config(&[]));
    let daemon = app.serve();
    let id = app.enqueue("nobody-here", "hello");
    let q = app.inbound();
    wait_until("two failed attempts", Duration::from_secs(10), || {
        q.state_of(id).unwrap().unwrap().attempts >= 2
    });
    let row = q.state_of(id).unwrap().unwrap();
    assert!(
        matches!(row.state.as_str(), "pending" | "leased"),
        "kept for retry: {row:?}"
    );
    assert!(
        row.last_error
            .unwrap()
            .contains("tmux has no pane nobody-here:"),
        "the tmux error is recorded"
    );
    daemon.stop();
}

/// An outbound row whose command outlived its timeout may have been delivered: the row says
/// `outcome unknown` and the next run is told it may be a repeat.
#[test]
fn exec_channel_rerun_after_a_timeout_is_told_it_may_be_a_repeat() {
    let script = r#"echo "$RELAYQ_POSSIBLE_REPEAT" >> repeats; if [ ! -f first ]; then touch first; sleep 30; fi"#;
    let app = App::new(
        exec_config(script)
            .set("channels.bridge", r#"timeout = "300ms""#)
            .set("queues.outbound", r#"backoff = ["100ms"]"#),
    );
    let daemon = app.serve();
    let out = app.ok(&outbound_args("bridge", "ops", &["hi"]));
    let id: i64 = out.trim().parse().unwrap();
    let row = app.wait_state(relayq_engine::QueueName::Outbound, id, "delivered");
    daemon.stop();
    assert_eq!(row.attempts, 2);
    let error = row.last_error.unwrap_or_default();
    assert!(
        error.starts_with("outcome unknown: command timed out"),
        "{error}"
    );
    let repeats = std::fs::read_to_string(app.path("repeats")).unwrap();
    assert_eq!(repeats, "0\n1\n", "the second run is flagged");
}
