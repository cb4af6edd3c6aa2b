//! Regression tests: each one names a fault found by trying relayq from outside (issue 10:
//! "no silent failures") and fails on the code that had it.

use std::process::Stdio;
use std::time::Duration;

use crate::common::api;
use crate::common::*;
use serde_json::Value;

/// The hook rows stored in the app's database.
fn hook_row_count(app: &App) -> i64 {
    app.query_value("SELECT COUNT(*) FROM queue_rows WHERE queue = 'hooks'")
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
            .map(|_| app.spawn_hook("claude", STOP, false, &[]))
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

/// [`exec_config`] without sweeps, its command given `timeout`.
fn timed_exec(script: &str, timeout: &str) -> Config {
    exec_config(script)
        .no_sweep()
        .set("channels.bridge", &format!("timeout = {timeout:?}"))
}

/// The inbound row has reached a terminal state.
fn is_finished(app: &App, id: i64) -> bool {
    is_terminal(&app.row(relayq_engine::QueueName::Inbound, id).state)
}

fn is_terminal(state: &str) -> bool {
    !matches!(state, "pending" | "leased")
}

#[allow(dead_code)]
fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

const WAIT: Duration = Duration::from_secs(20);

/// Item 3: `max_attempts` was checked only when a failure was recorded, so a row whose daemon
/// was killed during its last attempt was sent a third time after the restart (attempt 3 of 2).
#[test]
fn a_row_killed_during_its_last_attempt_is_not_sent_again_after_restart() {
    // Attempt 1 fails; attempt 2 kills the daemon mid-delivery.
    let script = r#"echo "$RELAYQ_ATTEMPT" >> attempts.txt
if [ "$RELAYQ_ATTEMPT" = 2 ]; then kill -9 "$(cat daemon.pid)"; sleep 2; fi
exit 1"#;
    let app = App::new(
        exec_config(script)
            .no_sweep()
            .set("queues.inbound", "max_attempts = 2"),
    );
    let mut daemon = app.serve();
    std::fs::write(app.path("daemon.pid"), daemon.child.id().to_string()).unwrap();
    let id = app.enqueue("s", "hello");
    let status = daemon.child.wait().unwrap();
    assert!(!status.success(), "the script killed the daemon");
    let daemon = app.serve();
    wait_until("the row to go dead", WAIT, || {
        app.inbound().state_of(id).unwrap().unwrap().state == "dead"
    });
    std::thread::sleep(Duration::from_millis(300));
    daemon.stop();
    let attempts = std::fs::read_to_string(app.path("attempts.txt")).unwrap();
    assert_eq!(
        attempts.lines().collect::<Vec<_>>(),
        ["1", "2"],
        "no third send"
    );
    let row = app.inbound().state_of(id).unwrap().unwrap();
    assert_eq!(row.attempts, 2);
    assert!(row.reason.unwrap().contains("max_attempts = 2"));
}

/// Item 3, second half: a limit lowered below a row's attempts was ignored.
#[test]
fn a_lowered_attempt_limit_ends_rows_already_past_it() {
    let app = App::new(exec_config("exit 1").no_sweep());
    let daemon = app.serve();
    let id = app.enqueue("s", "hello");
    wait_until("three attempts", WAIT, || {
        app.inbound().state_of(id).unwrap().unwrap().attempts >= 3
    });
    daemon.stop();
    let lowered = exec_config("echo sent >> sent.txt")
        .no_sweep()
        .set("queues.inbound", "max_attempts = 2");
    app.write_config(lowered);
    let daemon = app.serve();
    wait_until("the row to go dead", WAIT, || {
        app.inbound().state_of(id).unwrap().unwrap().state == "dead"
    });
    daemon.stop();
    assert!(!app.path("sent.txt").exists(), "not sent past the limit");
}

/// Item 9: `max_age` was applied only at sweeps, so a row could be delivered up to a sweep
/// interval past its age.
#[test]
fn a_row_past_max_age_is_expired_when_leased_not_delivered() {
    // Attempt 1 fails; attempt 2 comes 1.5 s later, past the 1 s max age.
    let script = r#"if [ "$RELAYQ_ATTEMPT" = 1 ]; then exit 1; fi; echo sent >> sent.txt"#;
    let config = exec_config(script)
        .no_sweep()
        .set("queues.inbound", "backoff = [\"1500ms\"]");
    let app = App::new(config.set("queues.inbound", "max_age = \"1s\""));
    let daemon = app.serve();
    let id = app.enqueue("s", "hello");
    wait_until("the row to end", WAIT, || is_finished(&app, id));
    // Issue 27, item 5: the expiry at lease time was never logged (the sweep's was).
    let log = daemon.log();
    daemon.stop();
    let row = app.inbound().state_of(id).unwrap().unwrap();
    assert_eq!(
        (row.state.as_str(), row.reason.as_deref()),
        ("expired", Some("max age"))
    );
    assert!(!app.path("sent.txt").exists(), "not delivered past its age");
    let said = log
        .lines()
        .find(|l| l.contains("expired when leased"))
        .unwrap_or_else(|| panic!("the expiry is logged: {log}"));
    assert!(said.contains(&format!("row={id}")), "{said}");
}

/// Item 8: `prune --older-than` deleted dead letters, against its help and `dead_retention`.
#[test]
fn prune_older_than_keeps_dead_letters_unless_dead_is_given() {
    let app = App::new(
        exec_config("exit 1")
            .no_sweep()
            .set("queues.inbound", "max_attempts = 1"),
    );
    let daemon = app.serve();
    let id = app.enqueue("s", "hello");
    wait_until("the row to go dead", WAIT, || is_finished(&app, id));
    daemon.stop();
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(
        app.ok(&["prune", "--older-than", "10ms"]).trim(),
        "pruned 0 row(s)"
    );
    assert_eq!(app.count("dead"), 1, "the dead letter is kept");
    assert_eq!(
        app.ok(&["prune", "--older-than", "10ms", "--dead"]).trim(),
        "pruned 1 row(s)"
    );
    assert_eq!(app.count("dead"), 0);
}

/// Item 4: `(origin, source id)` was global, but Telegram message ids and Slack `ts` are unique
/// per chat only: a second chat's message with the same id was answered duplicate and dropped.
#[test]
fn the_same_message_id_in_two_chats_is_two_messages() {
    let app = App::new(file_config());
    let enqueue = |chat: &str, text: &str| {
        json(&app.ok(&inbound_args(
            "s",
            "telegram",
            &[
                "--source-id",
                "17",
                "--source-channel-id",
                chat,
                "--json",
                text,
            ],
        )))
    };
    let first = enqueue("1001", "from the first chat");
    let second = enqueue("1002", "from the second chat");
    let retry = enqueue("1002", "from the second chat");
    assert_eq!(first["duplicate"], false);
    assert_eq!(second["duplicate"], false, "another chat's message");
    assert_ne!(first["id"], second["id"]);
    assert_eq!(
        (retry["id"].clone(), retry["duplicate"].clone()),
        (second["id"].clone(), true.into())
    );
    let daemon = app.serve();
    wait_until("both deliveries", WAIT, || {
        app.lines("out.jsonl").len() == 2
    });
    daemon.stop();
}

/// Enqueues an outbound message for the `hook` channel; returns the row id.
fn send_outbound(app: &App, to: &str, text: &str) -> i64 {
    app.ok(&outbound_args("hook", to, &[text]))
        .trim()
        .parse()
        .unwrap()
}

fn outbound_row(app: &App, id: i64) -> relayq_engine::RowState {
    app.row(relayq_engine::QueueName::Outbound, id)
}

/// Item 2: a 301/302/303 was followed as a bodyless GET, and the GET's 2xx marked the row
/// delivered although the message went nowhere.
#[test]
fn a_webhook_301_is_a_permanent_failure_not_a_delivery_by_get() {
    let hook = Endpoint::start(|n| match n {
        0 => Reply {
            headers: vec![("Location", "/moved?token=s3cr3t".into())],
            ..Reply::status(301)
        },
        _ => Reply::status(200),
    });
    let app = App::new(webhook_config(&hook.url));
    let daemon = app.serve();
    let id = send_outbound(&app, "ops", "deploy finished");
    wait_until("the row to end", WAIT, || {
        is_terminal(&outbound_row(&app, id).state)
    });
    daemon.stop();
    let row = outbound_row(&app, id);
    assert_eq!(row.state, "dead", "{row:?}");
    let reason = row.reason.unwrap();
    let origin = hook.url.trim_end_matches("/hook");
    assert!(
        reason.contains(&format!("redirects to {origin}/…")),
        "{reason}"
    );
    assert!(
        !reason.contains("s3cr3t") && !reason.contains("moved"),
        "{reason}"
    );
    let calls = hook.calls();
    assert_eq!(calls.len(), 1, "the redirect was not followed: {calls:?}");
}

/// Item 2: 307/308 keep the method and the body, so they are followed, but only within the
/// URL's origin.
#[test]
fn a_webhook_307_is_followed_with_its_body_within_the_origin_only() {
    let hook = Endpoint::start(|n| match n {
        0 => Reply {
            headers: vec![("Location", "/next".into())],
            ..Reply::status(307)
        },
        1 => Reply::status(204),
        _ => Reply {
            headers: vec![("Location", "http://127.0.0.2:9/elsewhere".into())],
            ..Reply::status(308)
        },
    });
    let app = App::new(webhook_config(&hook.url));
    let daemon = app.serve();
    let followed = send_outbound(&app, "a", "first");
    app.wait_state(relayq_engine::QueueName::Outbound, followed, "delivered");
    let other = send_outbound(&app, "b", "second");
    app.wait_state(relayq_engine::QueueName::Outbound, other, "dead");
    daemon.stop();
    let calls = hook.calls();
    assert_eq!(
        (calls[1].method.as_str(), calls[1].url.as_str()),
        ("POST", "/next")
    );
    assert_eq!(calls[1].body["text"], "first", "the body went along");
    let reason = outbound_row(&app, other).reason.unwrap();
    assert!(
        reason.contains("redirects to http://127.0.0.2:9/…"),
        "{reason}"
    );
    assert_eq!(calls.len(), 3, "no call left the origin");
}

/// A Claude Code `Stop` payload with a field nested `depth` arrays deep.
fn deep_stop(depth: usize) -> String {
    format!(
        r#"{{"hook_event_name":"Stop","session_id":"deep","x":{}1{}}}"#,
        "[".repeat(depth),
        "]".repeat(depth)
    )
}

/// Item 6: a payload nested ~127 levels deep was accepted by `relayq hook` (exit 0) but the
/// daemon could not decode it and ended it `undecodable`: its Stop notice was lost.
#[test]
fn a_hook_payload_too_deep_for_the_daemon_is_an_error_event_at_receive_time() {
    let app = App::new("");
    let out = app.hook("claude", &deep_stop(126), false, &[]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let payload: String = app
        .query_value("SELECT payload FROM queue_rows WHERE queue = 'hooks'")
        .unwrap();
    let stored = relayq_engine::HookEvent::from_payload(&payload).expect("the daemon can read it");
    assert_eq!(stored.event, relayq_engine::EventType::Error);
    assert_eq!(stored.session, "deep");
    // A payload as deep as the daemon can read is kept as it came.
    let app = App::new("");
    assert_eq!(
        app.hook("claude", &deep_stop(100), false, &[])
            .status
            .code(),
        Some(0)
    );
}

const SESSION_START: &str = include_str!("fixtures/claude-code/SessionStart.json");
const SESSION_END: &str = include_str!("fixtures/claude-code/SessionEnd.json");

/// The registry's state of `session` (`active`, `ended`), once the daemon has processed it.
fn session_state(app: &App, session: &str) -> Option<String> {
    let list = json(&app.ok(&["session", "list", "--json"]));
    list.as_array()
        .unwrap()
        .iter()
        .find(|s| s["key"] == session)
        .map(|s| s["state"].as_str().unwrap().to_string())
}

/// Item 5: a message for a session the registry shows ended was delivered to whatever answered
/// there now.
#[test]
fn a_message_for_an_ended_session_is_expired_at_once_not_delivered() {
    let app = App::new(file_config());
    let daemon = app.serve();
    let env = [("RELAYQ_SESSION", "agent-1")];
    assert!(app
        .hook("claude", SESSION_START, false, &env)
        .status
        .success());
    assert!(app
        .hook("claude", SESSION_END, false, &env)
        .status
        .success());
    wait_until("the session to end", WAIT, || {
        session_state(&app, "agent-1").as_deref() == Some("ended")
    });
    let answer = json(&app.ok(&inbound_args("agent-1", "test", &["--json", "late"])));
    assert_eq!(answer["expired"], "session ended", "{answer}");
    let id = answer["id"].as_i64().unwrap();
    let row = app.inbound().state_of(id).unwrap().unwrap();
    assert_eq!(
        (row.state.as_str(), row.reason.as_deref()),
        ("expired", Some("session ended"))
    );
    // Started again: delivered as usual.
    assert!(app
        .hook("claude", SESSION_START, false, &env)
        .status
        .success());
    wait_until("the session to start again", WAIT, || {
        session_state(&app, "agent-1").as_deref() == Some("active")
    });
    app.enqueue("agent-1", "welcome back");
    wait_until("delivery", WAIT, || !app.lines("out.jsonl").is_empty());
    std::thread::sleep(Duration::from_millis(200));
    daemon.stop();
    let delivered = by_session(&app.lines("out.jsonl"));
    assert_eq!(delivered["agent-1"], ["welcome back"]);
}

/// `relayq serve` on `db` (another name for the app's database); waits for it to exit.
fn serve_through(app: &App, db: &std::path::Path) -> std::process::Output {
    let mut child = app
        .bare()
        .arg("--config")
        .arg(app.path("config.toml"))
        .arg("--db")
        .arg(db)
        .arg("serve")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    for _ in 0..800 {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = child.kill();
    child.wait_with_output().unwrap()
}

/// Item 7: two daemons on one database through a symlink or a hard link both started, and the
/// second replayed the first's in-flight rows.
#[test]
fn a_second_daemon_through_a_symlink_or_a_hard_link_is_refused() {
    let app = App::new(file_config());
    let daemon = app.serve();
    std::os::unix::fs::symlink(app.db(), app.path("symlink.db")).unwrap();
    std::fs::hard_link(app.db(), app.path("hardlink.db")).unwrap();
    for other in ["symlink.db", "hardlink.db"] {
        let out = serve_through(&app, &app.path(other));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{other}: {stderr}");
        let said = match app.database_url() {
            None => "already serving",
            Some(_) => "already uses the node files",
        };
        assert!(stderr.contains(said), "{other}: {stderr}");
    }
    daemon.stop();
}

/// Item 22: the wake socket was created with the umask's mode, and a database directory other
/// users may write to was accepted: they could replace the socket.
#[test]
fn the_wake_socket_is_private_whatever_the_umask_and_a_shared_directory_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let app = App::new(file_config());
    let mut child = std::process::Command::new("sh")
        .current_dir(app.dir.path())
        .args(["-c", "umask 000; exec \"$@\"", "sh"])
        .arg(bin())
        .args(["--config", "config.toml", "--db", "relayq.db", "serve"])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let socket = relayq_actors::wake::socket_path(&app.db());
    wait_until("the socket", WAIT, || socket.exists());
    let mode = std::fs::metadata(&socket).unwrap().permissions().mode() & 0o777;
    let db_mode = std::fs::metadata(app.db()).unwrap().permissions().mode() & 0o777;
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!((mode, db_mode), (0o600, 0o600));

    let shared = App::new(file_config());
    std::fs::set_permissions(shared.dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let out = serve_through(&shared, &shared.db());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("writable by other users"), "{stderr}");
}

/// Item 21: 200 hook events queued while the daemon was down drained in 1-second steps (about
/// 5 s in all), because rows given back when a session's buffer was full waited for a timer.
/// (Timing belongs in benchmarks; the bound here is several times what the drain takes, and
/// below what the old 1-second steps cost.) The drain is timed from its first row's end to
/// its last's, as the rows record them: timed from the start of `relayq serve`, the daemon's
/// start and the polling of `relayq status` (debug builds, PostgreSQL) took 3 s on their own.
#[test]
fn a_hook_backlog_drains_without_waiting_for_timers() {
    let app = App::new(file_config());
    let q = app.engine().queue(
        relayq_engine::QueueName::Hooks,
        relayq_engine::QueuePolicy::hooks(),
    );
    let prompt: Value = json(include_str!("fixtures/claude-code/UserPromptSubmit.json"));
    let rows: Vec<_> = (0..200)
        .map(|_| {
            relayq_engine::HookEvent {
                native_event: Some("UserPromptSubmit".into()),
                ..relayq_engine::HookEvent::new(
                    relayq_engine::Agent::Claude,
                    relayq_engine::EventType::UserPromptSubmit,
                    "busy",
                    prompt.clone(),
                )
            }
            .to_row()
        })
        .collect();
    q.enqueue_many(&rows).unwrap();
    let started = std::time::Instant::now();
    let daemon = app.serve();
    let pending = || {
        let status = json(&app.ok(&["status", "--json"]));
        status["counts"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["queue"] == "hooks" && c["state"] != "delivered")
            .map(|c| c["count"].as_i64().unwrap())
            .sum::<i64>()
    };
    wait_until("the backlog to drain", WAIT, || pending() == 0);
    let took = started.elapsed();
    daemon.stop();
    let drained_ms: i64 = app
        .query_value(
            "SELECT MAX(finished_at) - MIN(finished_at) FROM queue_rows WHERE queue = 'hooks'",
        )
        .unwrap();
    // PostgreSQL drains it in about 1.4 s in a debug build (SQLite: 0.3 s); the old timer
    // steps added 5 s to either. On PostgreSQL the bound leaves room for a loaded machine
    // (a 4 s bound failed twice in full suite runs on 2 cores), and is still under the old
    // 6.4 s.
    let bound = if app.database_url().is_some() {
        5500
    } else {
        2500
    };
    assert!(
        drained_ms < bound,
        "the drain took {drained_ms} ms ({took:?} with the daemon's start)"
    );
}

/// Enqueues `text` for `session` (which may start with '-').
fn enqueue_for(app: &App, session: &str, text: &str) -> i64 {
    let session = format!("--session={session}");
    app.ok(&["enqueue", "inbound", &session, "--origin", "test", text])
        .trim()
        .parse()
        .unwrap()
}

/// Item 10: session ids such as `victo` (a prefix of `victory`), `-x`, `%0`, `$0`, `@1` or
/// `oth?r` reached another pane and the row was marked delivered; an id ending in `;` split
/// the tmux command and was re-pasted forever.
#[test]
fn tmux_session_ids_reach_only_the_session_named_exactly() {
    let (tmux, app) = cat_pane("exact", "victory", &["missing_grace = \"1h\""]);
    let daemon = app.serve();
    // An id tmux cannot address at all is refused at the door (issue 41, item 19).
    let out = app.run(&[
        "enqueue",
        "inbound",
        "--session=x;",
        "--origin",
        "test",
        "hi",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("ends with ';'"), "{err}");
    let ids: Vec<(String, i64)> = ["victo", "-x", "+1", "%0", "$0", "@1", "oth?r", "vict*"]
        .iter()
        .map(|s| (s.to_string(), enqueue_for(&app, s, &format!("for {s}"))))
        .collect();
    let q = app.inbound();
    wait_until("every row tried", WAIT, || {
        ids.iter()
            .all(|(_, id)| q.state_of(*id).unwrap().unwrap().last_error.is_some())
    });
    daemon.stop();
    for (session, id) in &ids {
        let row = q.state_of(*id).unwrap().unwrap();
        assert_ne!(row.state, "delivered", "{session}: {row:?}");
    }
    assert!(
        !tmux.screen("victory").contains("for "),
        "{}",
        tmux.screen("victory")
    );
}

/// Item 11: text with the bracketed-paste end marker, escape sequences or control characters
/// reached the pane raw: it could end the paste early, submit extra prompts or interrupt the
/// agent.
#[test]
fn tmux_paste_cannot_break_out_of_the_bracketed_paste() {
    let (tmux, app) = cat_pane("breakout", "agent", &[]);
    let daemon = app.serve();
    let id = app.enqueue("agent", "before\x1b[201~after\x03\x1b[A end");
    wait_until("delivery", WAIT, || {
        app.inbound().state_of(id).unwrap().unwrap().state == "delivered"
    });
    let mut screen = String::new();
    wait_until("the echo", WAIT, || {
        screen = tmux.screen("agent");
        screen.contains("end")
    });
    daemon.stop();
    assert!(
        screen.contains("^[[200~before[201~after[A end^[[201~"),
        "{screen}"
    );
}

/// Item 12: when the agent in a pane exited, a queued chat message was pasted into the shell
/// left behind and ran as a command; a pane that never appeared was retried forever.
#[test]
fn tmux_never_pastes_into_a_shell_and_expires_rows_for_a_pane_that_never_came() {
    let tmux = Tmux::new("shell");
    // The agent has exited: the pane shows an interactive shell prompt.
    let app = App::new(tmux.config(&["missing_grace = \"1s\""]));
    tmux.start("agent", &format!("cd {:?} && exec sh -i", app.dir.path()));
    let daemon = app.serve();
    let into_shell = app.enqueue("agent", "touch pwned");
    let nowhere = app.enqueue("nobody", "hello");
    let q = app.inbound();
    wait_until("the row for the shell to be tried twice", WAIT, || {
        q.state_of(into_shell).unwrap().unwrap().attempts >= 2
    });
    wait_until("the row for no pane to expire", WAIT, || {
        is_finished(&app, nowhere)
    });
    // Issue 28: waiting for an agent that never comes is bounded too (it was forever).
    wait_until("the row for the shell to expire", WAIT, || {
        is_finished(&app, into_shell)
    });
    daemon.stop();
    let row = q.state_of(into_shell).unwrap().unwrap();
    assert_eq!(row.state, "expired", "{row:?}");
    assert!(row.reason.unwrap().contains("runs `sh`"));
    assert!(!app.path("pwned").exists(), "the text ran as a command");
    let row = q.state_of(nowhere).unwrap().unwrap();
    assert_eq!(
        (row.state.as_str(), row.reason.as_deref()),
        ("expired", Some("session not found"))
    );
}

/// Item 13: settings that break the daemon were accepted: a 5 ms lease (one slow send made 43
/// times), a zero sweep interval (CPUs busy while idle), a channel timeout of 0, and a timeout
/// of u64::MAX seconds (a panic that left the row leased).
#[test]
fn settings_that_break_the_daemon_are_refused_naming_file_key_and_range() {
    for (config, key) in [
        ("[queues.inbound]\nlease_timeout = \"5ms\"\n", "queues.inbound.lease_timeout"),
        ("[daemon]\nsweep_interval = \"0s\"\n", "daemon.sweep_interval"),
        ("[daemon]\nprune_interval = \"1ms\"\n", "daemon.prune_interval"),
        (
            "[channels.deliveries]\nkind = \"file\"\npath = \"d\"\ntimeout = \"0s\"\n",
            "channels.deliveries.timeout",
        ),
        (
            "[channels.deliveries]\nkind = \"file\"\npath = \"d\"\ntimeout = \"18446744073709551615s\"\n",
            "channels.deliveries.timeout",
        ),
    ] {
        let app = App::new(config);
        let out = app.run(&["status"]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{config}: {stderr}");
        assert!(
            stderr.contains(&format!("config.toml: {key}: ")) && stderr.contains("between"),
            "{stderr}"
        );
    }
}

/// Item 14: at its timeout only the exec channel's direct child was killed; a subshell went on
/// and delivered late, after the retry.
#[test]
fn an_exec_command_past_its_timeout_is_killed_with_everything_it_started() {
    let script = r#"if [ "$RELAYQ_ATTEMPT" = 1 ]; then (sleep 1; echo late >> late.txt); fi
echo "$RELAYQ_ATTEMPT" >> done.txt"#;
    let app = App::new(timed_exec(script, "300ms"));
    let daemon = app.serve();
    let id = app.enqueue("s", "hello");
    wait_until("delivery", WAIT, || is_finished(&app, id));
    std::thread::sleep(Duration::from_millis(1500));
    daemon.stop();
    assert_eq!(app.inbound().state_of(id).unwrap().unwrap().attempts, 2);
    assert!(
        !app.path("late.txt").exists(),
        "the subshell of attempt 1 wrote late"
    );
}

/// Item 14: exec children outlived a `kill -9` of the daemon, so after the restart one session
/// had two deliveries running at once.
#[test]
fn exec_children_die_with_the_daemon() {
    let script = r#"touch started.txt; (sleep 1; echo orphan >> orphan.txt) | cat; sleep 5"#;
    let app = App::new(exec_config(script).no_sweep());
    let mut daemon = app.serve();
    app.enqueue("s", "hello");
    wait_until("the command to start", WAIT, || {
        app.path("started.txt").exists()
    });
    daemon.child.kill().unwrap(); // SIGKILL
    daemon.child.wait().unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    assert!(
        !app.path("orphan.txt").exists(),
        "a child outlived the daemon"
    );
}

/// Item 15: a script could not report a permanent failure (every non-zero exit was retried),
/// and secrets had to be in the command line.
#[test]
fn exec_exit_65_is_permanent_and_env_values_come_from_the_daemons_environment() {
    let script = r#"echo "$BOT_TOKEN $MODE $RELAYQ_ADDRESS" >> env.txt
[ "$RELAYQ_SESSION" = bad ] && { echo "no such chat" >&2; exit 65; }; exit 0"#;
    let channel = r#"env = { BOT_TOKEN = { from_env = "TEST_SECRET" }, MODE = "test" }"#;
    let app = App::new(
        exec_config(script)
            .no_sweep()
            .set("channels.bridge", channel),
    );
    let daemon = app.serve_with_env(&[("TEST_SECRET", "s3cr3t")]);
    let good = app.enqueue("good", "hello");
    let bad = app.enqueue("bad", "hello");
    wait_until("both rows to end", WAIT, || {
        is_finished(&app, good) && is_finished(&app, bad)
    });
    daemon.stop();
    let row = app.inbound().state_of(bad).unwrap().unwrap();
    assert_eq!((row.state.as_str(), row.attempts), ("dead", 1), "{row:?}");
    assert_eq!(
        row.reason.as_deref(),
        Some("exit 65 (permanent): no such chat")
    );
    let env = std::fs::read_to_string(app.path("env.txt")).unwrap();
    assert!(env.contains("s3cr3t test good"), "{env}");
    // A variable the daemon does not have is a configuration error at start.
    assert_usage_error(
        &app.run(&["serve"]),
        "channels.bridge.env.BOT_TOKEN: takes $TEST_SECRET",
    );
}

/// Item 20: network failures said only "error sending request", not whether the connection was
/// refused, the name did not resolve or TLS failed.
#[test]
fn webhook_network_errors_name_their_cause() {
    // A server that answers plain text where a TLS handshake is expected.
    let plain = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let tls_to_plain = format!("https://{}/hook", plain.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in plain.incoming().flatten() {
            use std::io::Write;
            let _ = (&stream).write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n");
        }
    });
    for (url, cause) in [
        ("http://127.0.0.1:9/hook", "connection refused"),
        ("http://relayq-test.invalid/hook", "DNS lookup failed"),
        (tls_to_plain.as_str(), "TLS failed"),
    ] {
        let app = App::new(webhook_config(url));
        let daemon = app.serve();
        let id = send_outbound(&app, "ops", "hello");
        wait_until("an attempt", WAIT, || {
            outbound_row(&app, id).last_error.is_some()
        });
        daemon.stop();
        let error = outbound_row(&app, id).last_error.unwrap();
        assert!(error.contains(cause), "{url}: {error}");
        assert!(!error.contains("/hook"), "no URL in errors: {error}");
    }
}

/// Item 20: a config error printed the webhook URL, which may hold a secret.
#[test]
fn a_config_error_never_prints_the_urls_secret() {
    let app = App::new(
        "[channels.w]\nkind = \"webhook\"\nurl = \"hooks.example.com/services/T0/B0/s3cr3t\"\n",
    );
    let stderr = assert_usage_error(&app.run(&["status"]), "channels.w.url: is not a URL");
    assert!(!stderr.contains("s3cr3t"), "{stderr}");
}

/// Item 20: a Telegram group id (`-100123`) was taken for an option; `max_body_bytes` bounded
/// only the text, not the payload and ids; `--payload` took any JSON value.
#[test]
fn enqueue_takes_negative_chat_ids_and_bounds_ids_and_payload() {
    let app = App::new("[daemon]\nmax_body_bytes = 100\n");
    let out = app.run(&outbound_args("notices", "-100123", &["hi"]));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let long_id = "7".repeat(10_000);
    let too_big: [&[&str]; 2] = [
        &inbound_args("s", "t", &["--source-id", &long_id, "x"]),
        &outbound_args("notices", &long_id, &["x"]),
    ];
    for args in too_big {
        let out = app.run(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains("byte limit"), "{stderr}");
    }
    let out = app.run(&inbound_args("s", "t", &["--payload", "[1,2]", "x"]));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("payload must be a JSON object"), "{stderr}");
}

/// Item 16: the hook snippets, run by Claude Code in the agent's project directory, silently
/// created a new `./relayq.db` there, which no daemon read.
#[test]
fn every_command_finds_the_same_database_wherever_it_runs() {
    let app = App::sqlite("");
    let project = app.path("project");
    std::fs::create_dir(&project).unwrap();
    // Nothing says where the database is: the per-user default, whatever the directory.
    let status = app.bare().arg("status").output().unwrap();
    assert_eq!(status.status.code(), Some(2), "status on no database");
    assert!(String::from_utf8_lossy(&status.stderr).contains("no database at"));
    let state_db = app.path("xdg-state/relayq/relayq.db");
    assert!(!state_db.exists(), "status created nothing");
    let mut hook = app.bare();
    hook.current_dir(&project)
        .args(["hook", "--agent", "claude", STOP])
        .env_remove("RELAYQ_SESSION");
    assert!(hook.output().unwrap().status.success());
    assert!(
        !project.join("relayq.db").exists(),
        "no stray database in the project"
    );
    assert!(state_db.exists());
    let mode = std::fs::metadata(app.path("xdg-state/relayq"))
        .unwrap()
        .permissions();
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(mode.mode() & 0o777, 0o700, "the state directory is private");
    let mut serve = app.bare();
    serve
        .arg("serve")
        .stdin(Stdio::null())
        .stderr(std::fs::File::create(app.path("serve.log")).unwrap());
    let mut daemon = serve.spawn().unwrap();
    wait_until("the hook row to be processed", WAIT, || {
        let conn = rusqlite::Connection::open(&state_db).unwrap();
        conn.query_row(
            "SELECT COUNT(*) FROM queue_rows WHERE queue = 'hooks' AND state = 'delivered'",
            [],
            |r| r.get::<_, i64>(0),
        )
        .unwrap()
            == 1
    });
    daemon.kill().unwrap();
    daemon.wait().unwrap();
    let log = std::fs::read_to_string(app.path("serve.log")).unwrap();
    assert!(log.contains(&format!("db={}", state_db.display())), "{log}");
    assert!(log.contains("config=(built-in defaults)"), "{log}");

    // RELAYQ_CONFIG names the file; its relative paths are relative to it. RELAYQ_DB wins.
    let conf_dir = app.path("conf");
    std::fs::create_dir(&conf_dir).unwrap();
    std::fs::write(
        conf_dir.join("relayq.toml"),
        "[database]\npath = \"data.db\"\n",
    )
    .unwrap();
    let enqueue = |env: &[(&str, std::path::PathBuf)]| {
        let mut c = app.bare();
        c.current_dir(&project)
            .args(inbound_args("s", "t", &["hi"]));
        for (k, v) in env {
            c.env(k, v);
        }
        assert!(c.output().unwrap().status.success());
    };
    enqueue(&[("RELAYQ_CONFIG", conf_dir.join("relayq.toml"))]);
    assert!(conf_dir.join("data.db").exists());
    enqueue(&[
        ("RELAYQ_CONFIG", conf_dir.join("relayq.toml")),
        ("RELAYQ_DB", app.path("env.db")),
    ]);
    assert!(app.path("env.db").exists());
}

/// Item 18: there was no way to see one message's story, `status` did not show which rows were
/// stuck and why, and `--json` times were bare epoch milliseconds.
#[test]
fn show_tells_a_rows_story_and_status_lists_stuck_rows() {
    let config = exec_config("echo 'far end down' >&2; exit 1")
        .no_sweep()
        .set("queues.inbound", "backoff = [\"1h\"]");
    let app = App::new(&config);
    let daemon = app.serve();
    let id = app.enqueue("s", "hello");
    wait_until("a failed attempt", WAIT, || {
        app.inbound()
            .state_of(id)
            .unwrap()
            .unwrap()
            .last_error
            .is_some()
    });
    daemon.stop();
    let row = json(&app.ok(&["show", &id.to_string(), "--json"]));
    assert_eq!(
        (row["state"].as_str(), row["attempts"].as_i64()),
        (Some("pending"), Some(1))
    );
    assert_eq!(row["last_error"], "far end down");
    assert_eq!(row["payload"]["content"], "hello");
    let next = row["next_attempt_at"].as_str().unwrap();
    assert!(
        next.ends_with('Z') && next.contains('T'),
        "RFC 3339: {next}"
    );
    assert!(row["next_attempt_at_ms"].as_i64().unwrap() > row["created_at_ms"].as_i64().unwrap());
    let text = app.ok(&["show", &id.to_string()]);
    assert!(
        text.contains("next attempt") && text.contains("(in "),
        "{text}"
    );
    assert!(text.contains("last error    far end down"), "{text}");
    let status = app.ok(&["status"]);
    assert!(
        status.contains(&format!("row {id} inbound s attempt 1")),
        "{status}"
    );
    assert!(status.contains("far end down"), "{status}");
    assert_eq!(json(&app.ok(&["status", "--json"]))["stuck"][0]["id"], id);
    let missing = app.run(&["show", "999"]);
    assert_eq!(missing.status.code(), Some(2));
}

/// `relayq --db DB enqueue inbound` for session `s`, no config file: the built-in defaults.
fn enqueue_on_defaults(app: &App, text: &str) -> i64 {
    let mut enqueue = app.bare();
    enqueue.arg("--db").arg(app.db());
    enqueue.args(inbound_args("s", "t", &[text]));
    let out = enqueue.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// Item 19: SIGHUP killed the daemon without its graceful shutdown (exit 129). It reloads the
/// config now; an invalid file keeps the running one.
#[test]
fn sighup_reloads_the_config_and_an_invalid_file_keeps_the_running_one() {
    let config = |script: &str| exec_config(script).no_sweep();
    let app = App::new(config("cat >> first.jsonl; echo >> first.jsonl"));
    let mut daemon = app.serve();
    let first = app.enqueue("s", "one");
    wait_until("the first delivery", WAIT, || is_finished(&app, first));
    app.write_config(config("cat >> second.jsonl; echo >> second.jsonl"));
    let hup = |daemon: &Daemon| daemon.send("HUP");
    hup(&daemon);
    wait_until("the reload", WAIT, || {
        daemon.log().contains("configuration reloaded")
    });
    let second = app.enqueue("s", "two");
    wait_until("the second delivery", WAIT, || is_finished(&app, second));
    assert!(
        app.path("second.jsonl").exists(),
        "delivered through the reloaded channel"
    );
    assert_eq!(
        std::fs::read_to_string(app.path("first.jsonl"))
            .unwrap()
            .lines()
            .count(),
        1
    );
    // An invalid file: logged, the running configuration stays.
    std::fs::write(
        app.path("config.toml"),
        "[daemon]\nsweep_interval = \"0s\"\n",
    )
    .unwrap();
    hup(&daemon);
    wait_until("the refusal", WAIT, || {
        daemon.log().contains("keeping the running one")
    });
    // (The CLI reads the file too: this one enqueues on the built-in defaults.)
    let third = enqueue_on_defaults(&app, "three");
    wait_until("the third delivery", WAIT, || is_finished(&app, third));
    assert!(daemon.child.try_wait().unwrap().is_none(), "still running");
    assert!(daemon.signal("TERM").success(), "{}", daemon.log());
    let second = std::fs::read_to_string(app.path("second.jsonl")).unwrap();
    assert_eq!(second.matches("\"content\"").count(), 2, "{second}");
}

/// Item 16, found by the benchmark: with `--db` elsewhere and no config file, the built-in file
/// channels write to the state directory, which must then exist (it was never created, and
/// every delivery failed).
#[test]
fn built_in_channels_write_to_the_state_directory_when_the_database_is_elsewhere() {
    let app = App::new("");
    let mut serve = app.bare();
    serve
        .arg("--db")
        .arg(app.db())
        .arg("serve")
        .stdin(Stdio::null())
        .stderr(Stdio::null());
    let mut daemon = serve.spawn().unwrap();
    let socket = relayq_actors::wake::socket_path(&app.db());
    wait_until("serve to start", WAIT, || socket.exists());
    enqueue_on_defaults(&app, "hi");
    let out = app.path("xdg-state/relayq/relayq-deliveries.jsonl");
    wait_until("the delivery", WAIT, || out.exists());
    daemon.kill().unwrap();
    daemon.wait().unwrap();
}

/// Review: a far end's error text (and chat text, session ids) was printed as it came: an ESC
/// sequence in a webhook's 404 body would drive the operator's terminal from `relayq dead
/// list` or `relayq show`.
#[test]
fn a_far_ends_error_text_cannot_drive_the_terminal() {
    let hook = Endpoint::start(|_| Reply {
        body: "no such chat\u{1b}[2J\u{1b}]0;pwned\u{7}".into(),
        ..Reply::status(404)
    });
    let app = App::new(webhook_config(&hook.url));
    let daemon = app.serve();
    let id = send_outbound(&app, "ops\u{1b}[31m", "hello");
    app.wait_state(relayq_engine::QueueName::Outbound, id, "dead");
    daemon.stop();
    for args in [vec!["dead", "list"], vec!["show", &id.to_string()]] {
        let out = app.ok(&args.iter().map(|a| a.as_ref()).collect::<Vec<&str>>());
        assert!(
            !out.contains('\u{1b}') && !out.contains('\u{7}'),
            "{args:?}: {out:?}"
        );
        assert!(out.contains("no such chat\\u{1b}[2J"), "{args:?}: {out}");
    }
}

/// Long work shows progress on a terminal (a pty from `script`), on stderr, and the last line
/// still says what was done.
#[test]
fn prune_reports_progress_on_a_terminal() {
    let app = App::new(file_config());
    let rows: Vec<relayq_engine::NewRow> = (0..6000)
        .map(|i| relayq_engine::NewRow {
            key: "s".into(),
            payload: format!("{{\"session\":\"s\",\"origin\":\"t\",\"content\":\"m{i}\"}}"),
            dedup_key: None,
        })
        .collect();
    let queue = app.engine().queue(
        relayq_engine::QueueName::Inbound,
        relayq_engine::QueuePolicy::inbound(),
    );
    queue.enqueue_many(&rows).unwrap();
    app.ok(&["session", "expire", "s"]);
    let command: Vec<String> = app
        .argv(&["prune", "--older-than", "0s"])
        .iter()
        .map(|a| shell_word(a))
        .collect();
    let command = command.join(" ");
    let out = std::process::Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let seen = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{seen}");
    assert!(
        seen.contains("\rpruned 5000 row(s)…"),
        "progress after the first slice: {seen:?}"
    );
    assert!(
        seen.contains("pruned 6000 row(s)\r\n"),
        "the summary: {seen:?}"
    );
}

/// An idempotency key with a newline was taken at enqueue, but it is sent as an HTTP header,
/// where it cannot go: the row could never be delivered and ended as a dead letter.
#[test]
fn an_idempotency_key_with_a_newline_is_refused_at_enqueue_not_found_unsendable_later() {
    let app = App::new(webhook_config("http://127.0.0.1:9/hook"));
    let out = app.run(&outbound_args(
        "hook",
        "ops",
        &["--idempotency-key", "deploy\n42", "hi"],
    ));
    assert_usage_error(&out, "the idempotency key has a control character");
    assert!(
        !app.db().exists() || app.engine().counts().unwrap().is_empty(),
        "nothing written"
    );
}

// Issue 27: "no silent failures, round 2".

/// Issue 27, item 11: after a send that got no answer, one more 500 cleared the possible-repeat
/// mark, and the next send went out unflagged.
#[test]
fn the_possible_repeat_mark_survives_a_later_500() {
    let hook = Endpoint::start(|n| match n {
        0 => Reply {
            delay: Duration::from_secs(4),
            ..Reply::status(200)
        },
        1 => Reply::status(500),
        _ => Reply::status(200),
    });
    let app = App::new(webhook_config(&hook.url).set("channels.hook", "timeout = \"1s\""));
    let daemon = app.serve();
    let id = send_outbound(&app, "chat", "hello");
    app.wait_state(relayq_engine::QueueName::Outbound, id, "delivered");
    daemon.stop();
    let calls = hook.calls();
    assert_eq!(calls.len(), 3, "{calls:?}");
    assert_eq!(calls[0].body.get("possible_repeat"), None);
    assert_eq!(calls[1].body["possible_repeat"], true, "after no answer");
    assert_eq!(calls[2].body["possible_repeat"], true, "still, after a 500");
}

/// Issue 27, item 11: an inbound `exec` command rerun after its timeout was told
/// `RELAYQ_POSSIBLE_REPEAT=0`, also after a later failure.
#[test]
fn an_exec_rerun_after_a_timeout_is_a_possible_repeat() {
    let script = r#"echo "$RELAYQ_ATTEMPT $RELAYQ_POSSIBLE_REPEAT" >> repeats
case "$RELAYQ_ATTEMPT" in 1) sleep 5;; 2) exit 1;; esac"#;
    let app = App::new(timed_exec(script, "1s"));
    let daemon = app.serve();
    let id = app.enqueue("s", "hello");
    app.wait_state(relayq_engine::QueueName::Inbound, id, "delivered");
    daemon.stop();
    let runs = std::fs::read_to_string(app.path("repeats")).unwrap();
    assert_eq!(runs.lines().collect::<Vec<_>>(), ["1 0", "2 1", "3 1"]);
}

/// Issue 27, item 11: `unknown_outcome = "hold"` held outbound rows only; an inbound command
/// that timed out was run again.
#[test]
fn unknown_outcome_hold_holds_an_inbound_row_whose_command_timed_out() {
    let script = r#"echo run >> runs; sleep 5"#;
    let app =
        App::new(timed_exec(script, "1s").set("channels.bridge", "unknown_outcome = \"hold\""));
    let daemon = app.serve();
    let id = app.enqueue("s", "hello");
    let row = app.wait_state(relayq_engine::QueueName::Inbound, id, "dead");
    daemon.stop();
    assert!(
        row.reason
            .unwrap_or_default()
            .contains("unknown_outcome = \"hold\""),
        "held for an operator"
    );
    let runs = std::fs::read_to_string(app.path("runs")).unwrap();
    assert_eq!(runs.lines().count(), 1, "not run again by itself");
}

/// An API on loopback without a token, serving the `out` file channel.
fn open_api() -> api::Api {
    api::Api::start(file_config())
}

/// Issue 27, item 15: `POST /v1/sessions/{s}/expire` takes no body, so any web page could
/// make the browser expire a session's messages on a token-less loopback API.
#[test]
fn a_cross_site_page_cannot_expire_a_sessions_messages() {
    let api = open_api();
    let paused = api.post("/v1/pause", &serde_json::json!({"queue": "inbound"}));
    assert_eq!(paused.status(), 200);
    let id = api.app.enqueue("s1", "keep me");
    let from_a_page = api.post_raw(
        "/v1/sessions/s1/expire",
        ("origin", "https://evil.example"),
        None,
    );
    let (status, error) = api::answer(from_a_page);
    assert_eq!(
        (status, &error["error"]["code"]),
        (403, &"cross_origin".into())
    );
    let as_a_form = api.post_raw(
        "/v1/sessions/s1/expire",
        ("content-type", "application/x-www-form-urlencoded"),
        Some(""),
    );
    assert_eq!(
        as_a_form.status(),
        415,
        "a form post (an old browser sends no Origin)"
    );
    assert_eq!(
        api.app.inbound().state_of(id).unwrap().unwrap().state,
        "pending"
    );
    // The dashboard's own page (same origin), and programs that send no Origin, may.
    let own = api.post_raw(
        "/v1/sessions/s1/expire",
        ("origin", api.base.as_str()),
        None,
    );
    assert_eq!(own.status(), 200);
    assert_eq!(
        api.app.inbound().state_of(id).unwrap().unwrap().state,
        "expired"
    );
    api.stop();
}

/// Issue 27, item 16: any `Host` was answered, so a page on a DNS-rebinding domain could
/// enqueue text into an agent's pane.
#[test]
fn a_request_for_another_host_name_is_refused_without_a_token() {
    let api = open_api();
    let port = api.base.rsplit(':').next().unwrap().to_string();
    let rebound = format!("rebind.example:{port}");
    let enqueue = api
        .request(reqwest::Method::POST, "/v1/inbound")
        .header("host", rebound.as_str())
        .json(&serde_json::json!({"session": "s", "origin": "web", "content": "rm -rf ~"}))
        .send()
        .unwrap();
    assert_eq!(enqueue.status(), 421);
    let read = api.get_with("/v1/status", ("host", rebound.as_str()));
    assert_eq!(read.status(), 421, "nor read");
    assert_eq!(api.app.count("pending"), 0, "nothing written");
    for own in [format!("localhost:{port}"), format!("127.0.0.1:{port}")] {
        let ok = api.get_with("/v1/status", ("host", own.as_str()));
        assert_eq!(ok.status(), 200, "{own}");
    }
    api.stop();

    // With a token every request proves itself: a reverse proxy's name is answered.
    let mut api = api::Api::start(file_config().set("http", "token = \"s3cret-token-for-tests\""));
    api.token = Some("s3cret-token-for-tests".into());
    let proxied = api.get_with("/v1/status", ("host", "relayq.example.org"));
    assert_eq!(proxied.status(), 200);
    api.stop();
}

/// Issue 27, item 19: a body announced as 100 MB and never sent held the request for 8 s
/// before any answer.
#[test]
fn an_oversized_content_length_is_refused_at_once() {
    use std::io::{Read, Write};
    let api = open_api();
    let address = api.base.trim_start_matches("http://").to_string();
    let mut stream = std::net::TcpStream::connect(&address).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(3)))
        .unwrap();
    write!(
        stream,
        "POST /v1/inbound HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\n\
         Content-Length: 100000000\r\n\r\n{{\"session\":"
    )
    .unwrap();
    let mut head = [0u8; 64];
    let n = stream.read(&mut head).expect("an answer within 3 s");
    let head = String::from_utf8_lossy(&head[..n]);
    assert!(head.starts_with("HTTP/1.1 413"), "{head}");
    api.stop();
}

/// The most memory the daemon ever held (`VmHWM`), in KiB.
fn peak_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// Issue 27, item 20: `GET /v1/dead?limit=1` read every dead row with its payload (20 000 rows
/// of 10 kB: RSS 34 → 466 MB), and the dashboard asks every 2 s. A page is read in SQL.
#[test]
fn a_page_of_dead_letters_reads_only_its_rows() {
    let api = open_api();
    let payload = serde_json::json!({"session": "s", "content": "x".repeat(20_000)}).to_string();
    {
        use relayq_engine::storage::sql::{Query, Sql};
        let dead = Sql::same(
            "INSERT INTO queue_rows (queue, key, payload, state, attempts, created_at,
                next_attempt_at, finished_at, reason)
             VALUES ('inbound', :key, :payload, 'dead', 1, 0, 0, 1, 'gave up')",
        );
        let engine = api.app.engine();
        engine
            .database()
            .write(|tx| {
                for n in 0..6_000 {
                    let key = format!("s{}", n % 7);
                    tx.exec(
                        &dead,
                        relayq_engine::params![":key" => key, ":payload" => payload],
                    )?;
                }
                Ok(())
            })
            .unwrap();
    }
    let pid = api.daemon.as_ref().unwrap().child.id();
    let before = peak_kib(pid);
    let (status, page) = api::answer(api.get("/v1/dead?limit=1"));
    assert_eq!(status, 200);
    assert_eq!(page["total"], 6_000);
    assert_eq!(page["rows"].as_array().unwrap().len(), 1);
    let first = page["next_after"].as_i64().unwrap();
    let (_, next) = api::answer(api.get(&format!("/v1/dead?limit=2&key=s3&after={first}")));
    let ids: Vec<i64> = next["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_i64().unwrap())
        .collect();
    assert_eq!(next["total"], 857, "the filter counts in SQL too");
    assert_eq!(ids.len(), 2);
    assert!(ids[0] > first && ids[1] > ids[0]);
    let grown_mib = (peak_kib(pid) - before) / 1024;
    assert!(
        grown_mib < 40,
        "a page of one row grew the daemon by {grown_mib} MiB (120 MB of payloads)"
    );
    api.stop();
}

const HOOK_ROWS: &str = "SELECT key, payload FROM queue_rows WHERE queue = 'hooks' ORDER BY id";

/// The hook rows in `app`'s database, oldest first: (session, native event).
fn hook_rows(app: &App) -> Vec<(String, String)> {
    native_events(app.query(HOOK_ROWS, |r| Ok((r.get(0)?, r.get(1)?))))
}

/// The hook rows in the SQLite file at `db`, oldest first: (session, native event).
fn hook_rows_in(db: &std::path::Path) -> Vec<(String, String)> {
    use relayq_engine::storage::sql::{Query, Sql};
    let engine = relayq_engine::Engine::open(&relayq_engine::DbConfig::new(db)).unwrap();
    let conn = engine.database().read().unwrap();
    let rows = conn.query_all(&Sql::same(HOOK_ROWS), relayq_engine::params![], |r| {
        Ok((r.get(0)?, r.get(1)?))
    });
    native_events(rows.unwrap())
}

/// (session, stored event) as (session, the agent's name for the event).
fn native_events(rows: Vec<(String, String)>) -> Vec<(String, String)> {
    rows.into_iter()
        .map(|(key, payload)| {
            let event: Value = serde_json::from_str(&payload).unwrap();
            let native = event["native_event"].as_str().unwrap_or_default();
            (key, native.to_string())
        })
        .collect()
}

/// `relayq --config config.toml hook --agent claude` with `payload` on stdin, no `--db`.
fn hook_by_config(app: &App, payload: &str) -> std::process::Output {
    let mut hook = app.bare();
    hook.args(["--config", "config.toml", "hook", "--agent", "claude"])
        .env_remove("RELAYQ_SESSION");
    App::run_with_stdin(hook, payload)
}

/// Issue 27, item 3: a typo in the config made every hook exit 1 and record nothing, while the
/// daemon kept serving on its running config.
#[test]
fn a_broken_config_file_does_not_lose_the_agents_event() {
    let app = App::sqlite("[database]\npath = \"agent.db\"\n\n[daemon]\nshutdown_grace = \"5s\n");
    let out = hook_by_config(&app, STOP);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{said}");
    assert!(
        said.contains("config is not valid") && said.contains("agent.db"),
        "{said}"
    );
    assert_one_sentence(&said);
    assert_eq!(
        hook_rows_in(&app.path("agent.db")).len(),
        1,
        "in the database the file names"
    );

    // A file that names no database: the default location, said so.
    app.write_config("[daemon]\nshutdown_grace = 5\n");
    let out = hook_by_config(&app, STOP);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{said}");
    assert!(said.contains("the default"), "{said}");
    let default = app.path("xdg-state/relayq/relayq.db");
    assert_eq!(hook_rows_in(&default).len(), 1);
}

/// Holds the database's write lock for `held`, from another connection, on a thread.
fn hold_write_lock(app: &App, held: Duration) -> std::thread::JoinHandle<()> {
    let lock = app.hold_writes();
    std::thread::spawn(move || {
        std::thread::sleep(held);
        drop(lock);
    })
}

/// Issue 27, item 4: `relayq hook` gave up after a 1 s busy timeout ("database is locked", 100
/// of 51 756 calls under load) and the event was lost.
#[test]
fn a_hook_waits_out_a_locked_database_and_spools_past_its_wait() {
    let app = App::new(file_config());
    app.enqueue("s", "the database exists");
    let holder = hold_write_lock(&app, Duration::from_secs(3));
    let out = app.hook("claude", STOP, false, &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    holder.join().unwrap();
    assert_eq!(hook_row_count(&app), 1, "waited for the lock");

    // Locked past the wait: kept in the spool, recorded by the next hook before its own event.
    let holder = hold_write_lock(&app, Duration::from_secs(4));
    let notification = include_str!("fixtures/claude-code/Notification.json");
    let out = app.hook("claude", notification, false, &[("RELAYQ_HOOK_WAIT", "1s")]);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{said}");
    assert!(said.contains(".hook-spool"), "{said}");
    holder.join().unwrap();
    assert_eq!(hook_row_count(&app), 1, "spooled, not yet recorded");
    let out = app.hook("claude", STOP, false, &[]);
    assert!(out.status.success());
    let events: Vec<String> = hook_rows(&app).into_iter().map(|(_, e)| e).collect();
    assert_eq!(
        events,
        ["Stop", "Notification", "Stop"],
        "the spooled event first"
    );

    // A wait that is not a wait is said and the default used: the event is kept.
    let out = app.hook("claude", STOP, false, &[("RELAYQ_HOOK_WAIT", "soon")]);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{said}");
    assert!(said.contains("RELAYQ_HOOK_WAIT"), "{said}");
    assert_eq!(hook_row_count(&app), 4, "recorded");

    // The daemon's start records what is spooled too.
    let holder = hold_write_lock(&app, Duration::from_secs(3));
    let out = app.hook("claude", notification, false, &[("RELAYQ_HOOK_WAIT", "1s")]);
    assert!(out.status.success());
    holder.join().unwrap();
    let daemon = app.serve();
    wait_until("the spooled event", WAIT, || hook_row_count(&app) == 5);
    daemon.stop();

    // And a running daemon's sweeps, when no other hook comes.
    app.write_config(file_config().set("daemon", "sweep_interval = \"300ms\""));
    let daemon = app.serve();
    let holder = hold_write_lock(&app, Duration::from_secs(3));
    let out = app.hook("claude", notification, false, &[("RELAYQ_HOOK_WAIT", "1s")]);
    assert!(out.status.success());
    holder.join().unwrap();
    wait_until("the sweep to record it", WAIT, || hook_row_count(&app) == 6);
    daemon.stop();
}

/// Issue 27, item 21: `serve` always made `~/.local/state/relayq`, even with `--db` elsewhere,
/// and could not start under a HOME it cannot write.
#[test]
fn serve_starts_with_its_database_elsewhere_when_the_state_directory_cannot_be_made() {
    let app = App::new(file_config());
    let daemon = app.serve_with_env(&[("XDG_STATE_HOME", "/proc/no-such-dir")]);
    let id = app.enqueue("s", "hello");
    app.wait_state(relayq_engine::QueueName::Inbound, id, "delivered");
    let log = daemon.log();
    daemon.stop();
    assert!(log.contains("the state directory cannot be made"), "{log}");
}

/// Issue 27, item 9: `--reply-to` went on every part of a split message: each part quoted the
/// message it answers. It belongs on the first part; the thread on every part.
#[test]
fn reply_to_goes_on_the_first_part_only_and_the_thread_on_every_part() {
    let hook = Endpoint::start(|_| Reply::status(200));
    let app = App::new(webhook_config(&hook.url).set("channels.hook", "max_chars = 100"));
    let daemon = app.serve();
    let text = "word ".repeat(60);
    let args = outbound_args(
        "hook",
        "chat",
        &["--reply-to", "17", "--thread", "5", &text],
    );
    let first: i64 = app.ok(&args).trim().parse().unwrap();
    app.wait_state(relayq_engine::QueueName::Outbound, first + 2, "delivered");
    daemon.stop();
    let calls = hook.calls();
    let sent: Vec<(Value, Value)> = calls
        .iter()
        .map(|c| (c.body["reply_to"].clone(), c.body["thread"].clone()))
        .collect();
    assert_eq!(
        sent,
        [
            ("17".into(), "5".into()),
            (Value::Null, "5".into()),
            (Value::Null, "5".into())
        ],
        "{calls:#?}"
    );
}

/// Issue 27, item 7: an inbound message and an outbound notice to the same pane went paste,
/// paste, Enter, Enter: one merged prompt. A pane takes one paste-and-submit at a time.
#[test]
fn two_flows_into_one_tmux_pane_never_interleave() {
    let tmux = Tmux::new("interleave");
    let app = App::new(
        tmux.config(&["programs = [\"cat\"]", "submit_delay = \"150ms\""])
            .set("queues.outbound", "backoff = [\"100ms\"]"),
    );
    let lines = app.path("lines.txt");
    tmux.start(
        "agent",
        &format!(r"printf '\033[?2004h'; exec cat -v > {}", lines.display()),
    );
    let daemon = app.serve();
    for n in 0..6 {
        app.enqueue("agent", &format!("inbound {n}"));
        app.ok(&outbound_args("pane", "agent", &[&format!("notice {n}")]));
    }
    let mut got = Vec::new();
    wait_until("twelve submitted lines", WAIT, || {
        got = std::fs::read_to_string(&lines)
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect();
        got.len() >= 12
    });
    daemon.stop();
    for line in &got {
        assert!(
            line.starts_with("^[[200~")
                && line.ends_with("^[[201~")
                && line.matches("200~").count() == 1,
            "one paste per submitted line: {got:#?}"
        );
    }
}

/// Issue 27, item 22: a restart right after a `kill -9` was refused "already serving" (1 of 594
/// starts): the killed daemon's lock had not been dropped yet. A lock let go within moments is
/// waited for.
#[test]
fn a_start_waits_a_moment_for_the_lock_of_a_daemon_that_is_exiting() {
    let app = App::new(file_config());
    app.enqueue("s", "the database exists");
    // The node's lock file on PostgreSQL, the database itself on SQLite.
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(app.db())
        .unwrap();
    file.lock().unwrap();
    let exiting = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(700));
        drop(file);
    });
    let daemon = app.serve();
    exiting.join().unwrap();
    let id = app.enqueue("s", "after the restart");
    app.wait_state(relayq_engine::QueueName::Inbound, id, "delivered");
    daemon.stop();
}

/// Issue 27, item 18: a symlink planted in a shared directory (mode 0777) was followed by the
/// CLI, which created the database at the link's target with mode 0644.
#[test]
fn a_database_link_in_a_shared_directory_is_not_followed() {
    use std::os::unix::fs::PermissionsExt;
    let app = App::sqlite(file_config());
    let shared = app.path("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o777)).unwrap();
    let target = app.path("planted.db");
    std::os::unix::fs::symlink(&target, shared.join("relayq.db")).unwrap();
    let out = app
        .bare()
        .args(["--config", "config.toml", "--db"])
        .arg(shared.join("relayq.db"))
        .args(inbound_args("s", "t", &["secret chat"]))
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{said}");
    assert!(
        said.contains("symbolic link") && said.contains("not follow"),
        "{said}"
    );
    assert_one_sentence(&said);
    assert!(!target.exists(), "nothing written where the link points");
}

/// Issue 27, item 8: a database deleted while the daemon served was silently replaced by the
/// next CLI call, and the running daemon delivered none of its rows.
#[test]
fn a_database_deleted_under_the_daemon_is_said_and_not_silently_replaced() {
    let app = App::sqlite(file_config().set("daemon", "sweep_interval = \"1s\""));
    let daemon = app.serve();
    app.enqueue("s", "before");
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", app.db().display()));
    }
    wait_until("the daemon to say so", WAIT, || {
        daemon.log().contains("was deleted while in use")
    });
    let out = app.run(&inbound_args("s", "t", &["lost?"]));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{said}");
    assert!(said.contains("was deleted while relayq serve"), "{said}");
    assert_one_sentence(&said);
    assert!(
        !app.db().exists(),
        "no new database beside the running daemon"
    );
    // An agent's event is kept for the restart.
    let out = app.hook("claude", STOP, false, &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    daemon.stop();
    let daemon = app.serve();
    wait_until("the kept event", WAIT, || hook_row_count(&app) == 1);
    daemon.stop();
}

/// Issue 27, item 13: `[http]` added and reloaded with SIGHUP did nothing, while the log said
/// "configuration reloaded". The API starts (and stops, and moves) with the reload.
#[test]
fn sighup_starts_stops_and_moves_the_http_api() {
    let app = App::new(file_config());
    let daemon = app.serve();
    let hup = || daemon.send("HUP");
    let healthy = |port: u16| {
        reqwest::blocking::get(format!("http://127.0.0.1:{port}/healthz"))
            .is_ok_and(|r| r.status() == 200)
    };
    let port = api::free_port();
    let with_http = |port: u16| file_config().http_on(port);
    app.write_config(with_http(port));
    hup();
    wait_until("the API to start", WAIT, || healthy(port));
    let moved = api::free_port();
    app.write_config(with_http(moved));
    hup();
    wait_until("the API to move", WAIT, || healthy(moved) && !healthy(port));
    app.write_config(file_config());
    hup();
    wait_until("the API to stop", WAIT, || !healthy(moved));
    daemon.stop();
}

/// Issue 27, item 14: the notices file landed next to the config file (with `init`'s config,
/// in `~/.config/relayq`), world-readable, growing without limit, holding every agent answer.
#[test]
fn the_notices_file_is_private_in_the_state_directory_whatever_config_is_read() {
    use std::os::unix::fs::PermissionsExt;
    let app = App::new("");
    let config_dir = app.path("xdg-config/relayq");
    std::fs::create_dir_all(&config_dir).unwrap();
    std::fs::write(
        config_dir.join("config.toml"),
        "[daemon]\nshutdown_grace = \"5s\"\n",
    )
    .unwrap();
    let mut serve = app.bare();
    serve.arg("--db").arg(app.db()).arg("serve");
    let daemon = app.spawn_serve(serve, &app.db());
    let mut hook = app.bare();
    hook.arg("--db")
        .arg(app.db())
        .args(["hook", "--agent", "claude"])
        .env("RELAYQ_SESSION", "s1");
    assert!(App::run_with_stdin(hook, STOP).status.success());
    let notices = app.path(NOTICES);
    wait_until("the notice", WAIT, || notices.exists());
    daemon.stop();
    assert!(
        !config_dir.join("relayq-notices.jsonl").exists(),
        "not beside the config"
    );
    let mode = std::fs::metadata(&notices).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "private");
}

/// Issue 27, item 17: what a far end echoed of the channel's secrets was only partly scrubbed:
/// a query token's value on its own, a short token in the path, Basic credentials in base64;
/// and an exec command's stderr showed the secrets its `env` gave it.
#[test]
fn secrets_a_far_end_or_a_command_echoes_never_reach_the_row() {
    // The receiver echoes what it was sent: the credentials as Basic, the path and the query.
    let echo = "401 for Basic dXNlcjpwdzEyMzQ1 (user pw12345) at /hook/ab12cd34 token=s3cr3tq";
    let hook = Endpoint::start(move |_| Reply {
        body: echo.into(),
        ..Reply::status(404)
    });
    let port = hook
        .url
        .trim_start_matches("http://127.0.0.1:")
        .split('/')
        .next()
        .unwrap()
        .to_string();
    let url = format!("http://user:pw12345@127.0.0.1:{port}/hook/ab12cd34?token=s3cr3tq");
    let app = App::new(
        webhook_config(&url)
            .set("channels.bridge", "kind = \"exec\"")
            .set(
                "channels.bridge",
                "command = [\"sh\", \"-c\", \"echo key is $API_KEY >&2; exit 65\"]",
            )
            .set(
                "channels.bridge",
                "env = { API_KEY = { from_env = \"THE_KEY\" } }",
            )
            .default_channel("bridge"),
    );
    let daemon = app.serve_with_env(&[("THE_KEY", "k3y-9f8e7d")]);
    let out = send_outbound(&app, "chat", "hello");
    let inbound = app.enqueue("s", "hello");
    app.wait_state(relayq_engine::QueueName::Outbound, out, "dead");
    app.wait_state(relayq_engine::QueueName::Inbound, inbound, "dead");
    let log = daemon.log();
    daemon.stop();
    let shown = [
        app.ok(&["show", &out.to_string(), "--json"]),
        app.ok(&["show", &inbound.to_string(), "--json"]),
        app.ok(&["dead", "list", "--json"]),
        app.ok(&["status"]),
        log,
    ]
    .join("\n");
    assert!(shown.contains("[redacted]"), "{shown}");
    for secret in [
        "dXNlcjpwdzEyMzQ1",
        "pw12345",
        "ab12cd34",
        "s3cr3tq",
        "k3y-9f8e7d",
    ] {
        assert!(!shown.contains(secret), "{secret} shown: {shown}");
    }
}

/// Issue 27, item 12: `relayq config check` said "configuration ok" for what `serve` refuses or
/// cannot work with: a wrong bot token, an API token that is unset or empty, a bad database
/// path, a missing exec program; and `readers` took values that break the daemon.
#[test]
fn config_check_fails_on_what_keeps_relayq_from_working_here() {
    use relayq_actors::sources::telegram::fake::FakeTelegram;
    let fake = FakeTelegram::start("123:right-token");
    let check = |config: Config, args: &[&str]| {
        let app = App::new(config);
        let mut cmd = app.cmd(&["config", "check"]);
        cmd.args(args).env("TG_TOKEN", "123:wrong-token");
        let out = cmd.output().unwrap();
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.code(), said)
    };
    let telegram = |kind: &str, token: &str| {
        let mut lines = vec![
            "kind = \"telegram\"".to_string(),
            format!("token = {token:?}"),
            format!("api_url = {:?}", fake.url),
        ];
        if kind == "sources" {
            lines.extend([
                "allowed_users = [1]".into(),
                "chats = { \"1\" = \"a\" }".into(),
            ]);
        }
        let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
        file_config().table(&format!("{kind}.tg"), &lines)
    };
    let (code, said) = check(telegram("channels", "123:wrong-token"), &[]);
    assert_eq!(code, Some(1), "{said}");
    assert!(
        said.contains("channel tg is not ready") && said.contains("401"),
        "{said}"
    );
    assert!(
        !said.contains("wrong-token"),
        "the token is never shown: {said}"
    );
    let (code, said) = check(telegram("sources", "123:wrong-token"), &[]);
    assert_eq!(code, Some(1), "{said}");
    assert!(said.contains("source tg is not ready"), "{said}");
    let (code, said) = check(telegram("channels", "123:right-token"), &[]);
    assert_eq!(code, Some(0), "{said}");

    let http = |line: &str| {
        file_config()
            .set("http", "enabled = true")
            .set("http", line)
    };
    let (code, said) = check(http("token_env = \"NO_SUCH_VAR\""), &[]);
    assert_eq!(code, Some(1), "{said}");
    assert!(said.contains("NO_SUCH_VAR"), "{said}");
    let (code, said) = check(http("token = \"\""), &[]);
    assert_eq!(code, Some(1), "{said}");
    assert!(said.contains("empty"), "{said}");

    let (code, said) = check(file_config(), &["--db", "/no/such/dir/relayq.db"]);
    assert_eq!(code, Some(1), "{said}");
    assert!(said.contains("/no/such/dir"), "{said}");
    let (code, said) = check(
        file_config().channel("bridge", "exec", &["command = [\"no-such-program-xyz\"]"]),
        &[],
    );
    assert_eq!(code, Some(1), "{said}");
    assert!(said.contains("no-such-program-xyz"), "{said}");

    for readers in ["0", "999999999"] {
        let (code, said) = check(
            file_config().set("database", &format!("readers = {readers}")),
            &[],
        );
        assert_eq!(code, Some(2), "{said}");
        assert!(
            said.contains("database.readers") && said.contains("between 1 and"),
            "{said}"
        );
    }
}

/// A message for people is sentences, not a source line's wrapping: no runs of spaces (a lost
/// line continuation leaves them).
fn assert_one_sentence(said: &str) {
    assert!(
        !said.contains("  "),
        "one sentence, no runs of spaces: {said}"
    );
}

/// Issue 41: the `$RELAYQ_ROW_ID $RELAYQ_POSSIBLE_REPEAT` lines an exec channel wrote to `seen`.
fn seen_rows(app: &App) -> Vec<(i64, bool)> {
    let text = std::fs::read_to_string(app.path("seen")).unwrap_or_default();
    text.lines()
        .map(|l| {
            let (id, repeat) = l.split_once(' ').expect("id and mark");
            (id.parse().unwrap(), repeat == "1")
        })
        .collect()
}

/// Issue 41, items 9 and 11: while a run's first answer could not be recorded (the database
/// locked past the lease), the run's leases ran out and were taken back by the sweep; the
/// session went on delivering the rest of the run on its lost leases, and the run was then
/// delivered again from its head, unmarked (`A B C A B C`). A row is delivered only on a lease
/// with time left, a lost lease ends the run, and a row taken over is a possible repeat.
#[test]
fn a_run_whose_answers_cannot_be_recorded_is_not_delivered_again_out_of_order_or_unmarked() {
    let script = r#"echo "$RELAYQ_ROW_ID $RELAYQ_POSSIBLE_REPEAT" >> seen; sleep 0.2"#;
    let app = App::new(
        exec_config(script)
            .set("queues.inbound", "lease_timeout = \"1s\"")
            .set("daemon", "sweep_interval = \"200ms\""),
    );
    let ids: Vec<i64> = (0..4).map(|i| app.enqueue("s", &format!("m{i}"))).collect();
    let daemon = app.serve();
    wait_until("the first delivery", WAIT, || !seen_rows(&app).is_empty());
    let held = app.hold_writes();
    std::thread::sleep(Duration::from_secs(3));
    drop(held);
    for id in &ids {
        app.wait_state(relayq_engine::QueueName::Inbound, *id, "delivered");
    }
    std::thread::sleep(Duration::from_millis(500));
    daemon.stop();
    let seen = seen_rows(&app);
    let order: Vec<i64> = seen.iter().map(|(id, _)| *id).collect();
    assert!(
        order.windows(2).all(|w| w[0] <= w[1]),
        "a newer row went before an older one was finished: {seen:?}"
    );
    for (i, (id, repeat)) in seen.iter().enumerate() {
        let before = seen[..i].iter().any(|(earlier, _)| earlier == id);
        assert!(
            !before || *repeat,
            "row {id} delivered again without the possible-repeat mark: {seen:?}"
        );
    }
    assert_eq!(order.first(), ids.first(), "{seen:?}");
    assert!(ids.iter().all(|id| order.contains(id)), "{seen:?}");
}

/// Issue 41, item 10: a row of a run delivered and then killed with the daemon (`kill -9`)
/// before its answer was recorded was delivered again after the restart with
/// `RELAYQ_POSSIBLE_REPEAT=0`: inbound runs were leased unmarked. They are leased marked now.
#[test]
fn a_row_delivered_again_after_a_kill_carries_the_possible_repeat_mark() {
    let script = r#"echo "$RELAYQ_ROW_ID $RELAYQ_POSSIBLE_REPEAT" >> seen
if [ "$(wc -l < seen)" = 3 ]; then kill -9 "$(cat daemon.pid)"; sleep 2; fi"#;
    let app = App::new(exec_config(script).no_sweep());
    let ids: Vec<i64> = (0..5).map(|i| app.enqueue("s", &format!("m{i}"))).collect();
    let mut daemon = app.serve();
    std::fs::write(app.path("daemon.pid"), daemon.child.id().to_string()).unwrap();
    let status = daemon.child.wait().unwrap();
    assert!(!status.success(), "the script killed the daemon");
    let daemon = app.serve();
    for id in &ids {
        app.wait_state(relayq_engine::QueueName::Inbound, *id, "delivered");
    }
    daemon.stop();
    let seen = seen_rows(&app);
    assert_eq!(
        seen[..3],
        [(ids[0], false), (ids[1], false), (ids[2], false)]
    );
    assert_eq!(
        seen[3],
        (ids[2], true),
        "the row killed unrecorded comes again, marked: {seen:?}"
    );
    for (i, (id, repeat)) in seen.iter().enumerate() {
        let before = seen[..i].iter().any(|(earlier, _)| earlier == id);
        assert!(!before || *repeat, "row {id} repeated unmarked: {seen:?}");
    }
}

/// Issue 41, item 15: `relayq status | grep -q ...` panicked when its reader had gone (a
/// closed pipe: "failed printing to stdout", exit 101). Every printing command ends quietly,
/// by SIGPIPE, as Unix tools do.
#[test]
fn a_command_whose_reader_went_away_ends_quietly_not_with_a_panic() {
    use std::os::unix::process::ExitStatusExt;
    let app = App::new(file_config());
    for i in 0..50 {
        app.enqueue(&format!("s{i}"), "a row for status to list");
    }
    for args in [
        &["status"][..],
        &["show", "1"],
        &["session", "list"],
        &["dead", "list"],
        &["approvals", "list"],
    ] {
        let mut command = app.cmd(args);
        command.stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = command.spawn().unwrap();
        drop(child.stdout.take()); // the reader is gone before the first line
        let out = child.wait_with_output().unwrap();
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(!said.contains("panicked"), "{args:?}: {said}");
        assert!(
            out.status.success() || out.status.signal() == Some(libc::SIGPIPE),
            "{args:?}: {:?} {said}",
            out.status
        );
    }
}

/// Issue 41, item 3: a wrong database URL (no such database, an unknown role, a closed port,
/// an unknown host) was reported after 5 s as "database busy ... another process holds the
/// database; try again" by every command, `config check` said "configuration ok", and each
/// agent hook waited 20 s for a database that could never answer. Each now says what
/// PostgreSQL or the network said, at once; `config check` connects; the hook spools at once.
#[test]
fn a_wrong_database_url_is_told_as_postgresql_says_it_and_a_hook_spools_at_once() {
    let database = relayq_engine::storage::postgresql::test_server::TestDatabase::create();
    let socket = database.url();
    let wrong = [
        (
            format!("{}/nosuch", socket.rsplit_once('/').unwrap().0),
            "3D000",
        ),
        (socket.replace("postgres@", "nobody@"), "28000"),
        (
            "postgresql://relayq:s3cret@127.0.0.1:1/relayq".to_string(),
            "refused",
        ),
        (
            "postgresql://relayq@no-such-host.invalid/relayq".to_string(),
            "no-such-host.invalid",
        ),
    ];
    for (url, said) in wrong {
        let app = App::sqlite(format!("[database]\nurl = {url:?}\n"));
        for args in [&["status"][..], &inbound_args("s", "terminal", &["hi"])] {
            let began = std::time::Instant::now();
            let out = app.run(args);
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(1), "{args:?} {url}: {err}");
            assert!(
                err.contains("cannot connect to PostgreSQL") && err.contains(said),
                "{args:?} {url}: {err}"
            );
            assert!(!err.contains("another process"), "{err}");
            assert!(!err.contains("s3cret"), "the password is masked: {err}");
            assert!(
                began.elapsed() < Duration::from_secs(4),
                "{args:?} {url}: at once"
            );
        }
        let check = app.run(&["config", "check"]);
        let err = String::from_utf8_lossy(&check.stderr);
        assert_eq!(check.status.code(), Some(1), "config check {url}: {err}");
        assert!(err.contains(said), "config check {url}: {err}");

        let began = std::time::Instant::now();
        let out = app.hook("claude", STOP, false, &[]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "the event is kept: {err}");
        assert!(
            err.contains(said) && err.contains("kept in"),
            "the hook says why it spooled: {err}"
        );
        assert!(
            began.elapsed() < Duration::from_secs(4),
            "{url}: spooled at once"
        );
    }
}

/// Issue 41, item 7: `config check` on a PostgreSQL node printed the SQLite path as its
/// database; every start logged `NOTICE: relation "relayq_schema" already exists`; two nodes on
/// one host sharing the node files were refused with "another relayq daemon is already serving
/// .../relayq.db", which did not say what to change.
#[test]
fn a_postgresql_node_names_its_database_by_url_and_its_files_as_the_nodes() {
    let database = relayq_engine::storage::postgresql::test_server::TestDatabase::create();
    let url = database.url();
    let app = App::sqlite(file_config().set("database", &format!("url = {url:?}")));
    let check = app.ok(&["config", "check"]);
    assert!(
        check.contains(&format!("database: {url} (this node's lock")),
        "{check}"
    );
    let first = app.serve();
    std::thread::sleep(Duration::from_millis(500));
    let second = app.run(&["serve"]);
    let err = String::from_utf8_lossy(&second.stderr);
    assert!(!second.status.success());
    assert!(
        err.contains("another relayq node on this host") && err.contains("database.path"),
        "{err}"
    );
    let log = first.log();
    first.stop();
    let second = app.serve();
    let log = log + &second.log();
    second.stop();
    assert!(!log.contains("NOTICE"), "{log}");
}

/// Issue 41, item 17: type errors in a channel's or a source's table named no key
/// (`sources.telegram: invalid type: string "123456789", expected i64`) and gave no hint of the
/// right form (`poll_timeout = "5"`, with no unit). They name the key and say how to write it.
#[test]
fn a_type_error_in_the_config_names_the_key_and_the_fix() {
    let cases = [
        (
            "[sources.telegram]\nkind = \"telegram\"\ntoken = \"1:a\"\nallowed_users = [\"123456789\"]\n",
            "sources.telegram.allowed_users:",
            "without quotes",
        ),
        (
            "[channels.pane]\nkind = \"tmux\"\ntarget = \"{session}\"\nprograms = \"claude\"\n",
            "channels.pane.programs:",
            "[\"claude\"]",
        ),
        (
            "[sources.telegram]\nkind = \"telegram\"\ntoken = \"1:a\"\npoll_timeout = \"5\"\n",
            "sources.telegram.poll_timeout:",
            "\"5s\"",
        ),
        (
            "[channels.hook]\nkind = \"webhook\"\nurl = \"http://127.0.0.1:9/x\"\ntimeout = 5\n",
            "channels.hook.timeout:",
            "\"5s\"",
        ),
    ];
    for (config, key, fix) in cases {
        let app = App::sqlite(config);
        let out = app.run(&["config", "check"]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains(key) && err.contains(fix), "{config}\n{err}");
    }
}

/// Sessions to a tmux channel, and a Telegram channel `tg` no request reaches.
fn pane_and_telegram() -> Config {
    Config::default()
        .default_channel("pane")
        .channel("pane", "tmux", &["target = \"{session}\""])
        .channel(
            "tg",
            "telegram",
            &["token = \"1:a\"", "api_url = \"http://127.0.0.1:9\""],
        )
}

/// Issue 41, item 19: `relayq enqueue` took what could never be delivered (empty text, a
/// session id tmux cannot address, an ESC in a session id, `--to abc` for Telegram), refused
/// only at delivery or never; `session expire nosuch` said "expired 0" with exit 0.
#[test]
fn enqueue_refuses_at_the_door_what_can_never_be_delivered() {
    let app = App::new(pane_and_telegram());
    let refused = [
        (inbound_args("s", "terminal", &[""]), "empty"),
        (inbound_args("s", "terminal", &["  \n"]), "empty"),
        (inbound_args("a:b", "terminal", &["hi"]), "tmux"),
        (
            inbound_args("a\u{1b}[2Jb", "terminal", &["hi"]),
            "control character",
        ),
        (outbound_args("tg", "abc", &["hi"]), "not a Telegram chat"),
    ];
    for (args, said) in refused {
        let out = app.run(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(said), "{args:?}: {err}");
        assert!(
            !err.contains('\u{1b}'),
            "the ESC is not printed raw: {err:?}"
        );
    }
    assert_eq!(app.inbound_rows(), 0, "nothing written");
    for to in ["-1001234567890", "42", "@my_channel"] {
        app.ok(&outbound_args("tg", to, &["hi"]));
    }
    let out = app.run(&["session", "expire", "nosuch"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("no session nosuch"), "{err}");
}

/// Issue 41, item 19, through the API: `POST /v1/inbound` took a session id its tmux channel
/// can never reach and `POST /v1/outbound` a Telegram destination that is no chat, as the CLI
/// did; the API refuses them as `relayq enqueue` does, and writes nothing.
#[test]
fn the_api_refuses_at_the_door_what_can_never_be_delivered() {
    let api = api::Api::start(pane_and_telegram().set("daemon", "shutdown_grace = \"5s\""));
    let inbound = serde_json::json!({"session": "a:b", "origin": "test", "content": "hi"});
    let (status, body) = api::answer(api.post("/v1/inbound", &inbound));
    assert_eq!(status, 400, "{body}");
    assert!(body.to_string().contains("tmux"), "{body}");
    let outbound = serde_json::json!({"channel": "tg", "to": "abc", "text": "hi"});
    let (status, body) = api::answer(api.post("/v1/outbound", &outbound));
    assert_eq!(status, 400, "{body}");
    assert!(body.to_string().contains("not a Telegram chat"), "{body}");
    let rows: i64 = api
        .app
        .query_value("SELECT COUNT(*) FROM queue_rows")
        .unwrap();
    assert_eq!(rows, 0, "nothing written");
    let fine = serde_json::json!({"channel": "tg", "to": "-1001234567890", "text": "hi"});
    let (status, body) = api::answer(api.post("/v1/outbound", &fine));
    assert_eq!(status, 201, "{body}");
    api.stop();
}

/// Issue 41, item 21: each pass of the suites left 26 tmux socket files in /tmp/tmux-UID: a
/// test's tmux server was killed, its socket file kept.
#[test]
fn a_tests_tmux_server_leaves_no_socket_file() {
    let tmux = Tmux::new("socket-left");
    tmux.start("s", "sleep 30");
    let socket = tmux.socket_path();
    assert!(socket.exists(), "{} while it serves", socket.display());
    drop(tmux);
    assert!(!socket.exists(), "{} left behind", socket.display());
}

/// Issue 41, item 16: a bot token the platform refused showed only in the log and `/readyz`;
/// `relayq status` said "no rows" and the dashboard showed the node alive. What is not ready,
/// and why, is in `relayq status` and its JSON (as `GET /v1/status`).
#[test]
fn a_refused_bot_token_is_said_by_status() {
    let fake = relayq_actors::sources::telegram::fake::FakeTelegram::start("123:right");
    let app = App::new(file_config().channel(
        "tg",
        "telegram",
        &[
            "token = \"123:wrong\"",
            &format!("api_url = {:?}", fake.url),
        ],
    ));
    let daemon = app.serve();
    let mut status = String::new();
    wait_until("status to say the channel is not ready", WAIT, || {
        status = app.ok(&["status"]);
        status.contains("channel tg is not ready")
    });
    assert!(status.contains("Unauthorized"), "{status}");
    let json: Value = serde_json::from_str(&app.ok(&["status", "--json"])).unwrap();
    let unready = json["nodes"][0]["unready"].to_string();
    assert!(unready.contains("channel tg is not ready"), "{json:#}");
    daemon.stop();
}

/// Issue 41, item 12b: a clean stop of every node left outbound rows leased. A claim still
/// being read when the stop came was not waited for: its rows were leased after the sender
/// said it had drained, and stayed leased (until their leases ran out) with nothing sending
/// them. Stopped again and again while rows flow, the daemon leaves no row leased.
#[test]
fn a_clean_stop_leaves_no_outbound_row_leased() {
    let hook = Endpoint::start(|_| Reply {
        delay: Duration::from_millis(2),
        ..Reply::status(200)
    });
    let app = App::new(
        webhook_config(&hook.url)
            .set("daemon", "shutdown_grace = \"10s\"")
            .set("claimer", "outbound_in_flight = 4")
            .set("claimer", "drain_in_flight = 2"),
    );
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|scope| {
        scope.spawn(|| {
            for i in 0..600 {
                send_outbound(&app, &format!("chat-{}", i % 40), &format!("note {i}"));
            }
            done.store(true, std::sync::atomic::Ordering::SeqCst);
        });
        for round in 0.. {
            let mut daemon = app.serve();
            std::thread::sleep(Duration::from_millis(200 + 37 * (round % 7)));
            assert!(daemon.signal("TERM").success(), "{}", daemon.log());
            let leased: Vec<(i64, String)> = app.query(
                "SELECT id, lease_owner FROM queue_rows WHERE state = 'leased'",
                |r| Ok((r.get(0)?, r.get(1)?)),
            );
            assert!(
                leased.is_empty(),
                "stop {round}: rows left leased: {leased:?}\n{}",
                daemon.log()
            );
            if done.load(std::sync::atomic::Ordering::SeqCst) && round >= 20 {
                break;
            }
        }
    });
}

/// Fuzzing the API (schemathesis, on PostgreSQL) found a source channel id with a NUL
/// answered 500 "invalid byte sequence for encoding UTF8: 0x00" by the database, where SQLite
/// took it: an id with a control character is refused 400 on both, naming the field, and
/// writes nothing.
#[test]
fn an_inbound_id_with_a_nul_is_refused_400_not_a_database_error() {
    use crate::common::api::{answer, Api};
    let api = Api::start(file_config());
    for field in [
        "origin",
        "source_channel_id",
        "source_message_id",
        "source_thread_id",
    ] {
        let mut body = serde_json::json!({
            "session": "s", "origin": "telegram", "content": "hi",
            "source_message_id": "1", "source_channel_id": "42",
        });
        body[field] = serde_json::json!("4\u{0}2");
        let (status, error) = answer(api.post("/v1/inbound", &body));
        assert_eq!(status, 400, "{field}: {error}");
        let message = error["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("control character (U+0000)"),
            "{field}: {message}"
        );
    }
    assert_eq!(
        api.app.inbound_rows(),
        0,
        "a refused request writes nothing"
    );
    api.stop();
}

/// Schemathesis sent `GET /v1/dead?key=%00` on PostgreSQL: a 500 from the database ("invalid
/// byte sequence for encoding UTF8: 0x00") where SQLite found nothing. A control character in
/// any path or query is refused 400 before a route runs, on both backends.
#[test]
fn a_nul_in_a_query_filter_or_a_path_is_refused_400_not_a_database_error() {
    use crate::common::api::{answer, Api};
    let api = Api::start(file_config());
    for (path, place) in [
        ("/v1/dead?key=a%00b", "query parameter \"key\""),
        ("/v1/dead?reason=%1B", "query parameter \"reason\""),
        (
            "/v1/dead?queue=outbound&after=0&key%00=x",
            "query parameter \"key\\0\"",
        ),
    ] {
        let (status, error) = answer(api.get(path));
        assert_eq!(status, 400, "{path}: {error}");
        let message = error["error"]["message"].as_str().unwrap();
        assert!(
            message.contains(place) && message.contains("control character (U+00"),
            "{path}: {message}"
        );
    }
    let (status, error) = answer(api.post("/v1/sessions/a%00b/expire", &serde_json::json!({})));
    assert_eq!(status, 400, "{error}");
    assert!(error["error"]["message"]
        .as_str()
        .unwrap()
        .contains("the path has"));
    // A NUL in any string of a body is taken (text is data) or refused, never a 500.
    let inbound = serde_json::json!({"session": "s", "origin": "telegram", "content": "hi",
        "actor_id": "7", "actor_name": "ann"});
    let outbound = serde_json::json!({"channel": "out", "to": "x", "text": "hi",
        "thread": "1", "reply_to": "2"});
    for (path, body) in [("/v1/inbound", inbound), ("/v1/outbound", outbound)] {
        assert_eq!(answer(api.post(path, &body)).0, 201, "{path} {body}");
        for field in body.as_object().unwrap().keys() {
            let mut body = body.clone();
            body[field] = serde_json::json!("a\u{0}b");
            let (status, error) = answer(api.post(path, &body));
            assert!(
                [201, 400, 404].contains(&status),
                "{path} {field}: {status} {error}"
            );
        }
    }
    // What has no control character still reaches its route.
    let (status, error) = answer(api.get("/v1/dead?key=a%20b"));
    assert_eq!(status, 200, "{error}");
    api.stop();
}

/// Found looking at `relayq hook` after the query fix: on PostgreSQL a NUL in an agent's own
/// text (its session id, its cwd, its answer) failed the hook ("invalid byte sequence for
/// encoding UTF8: 0x00", exit 1, the event lost) or held the session's hook rows, retried until
/// dead. Text is stored with U+FFFD in place of a NUL, on both backends alike.
#[test]
fn an_agents_text_with_a_nul_is_recorded_not_a_lost_event_or_a_stuck_hook_row() {
    let app = App::new(file_config());
    let daemon = app.serve();
    let env = [("RELAYQ_SESSION", "agent-1")];
    let nul = |s: &str, at: &str| s.replacen(at, &format!("{at}\\u0000"), 1);
    let start = nul(
        &nul(SESSION_START, "\"cwd\": \"/home"),
        "\"session_id\": \"3f1c",
    );
    let stop = nul(include_str!("fixtures/claude-code/Stop.json"), "All 128");
    for (what, payload, env) in [
        ("start", &start, &env[..]),
        ("stop", &stop, &env[..]),
        ("start without RELAYQ_SESSION", &start, &[][..]),
    ] {
        let out = app.hook("claude", payload, false, env);
        assert!(
            out.status.success(),
            "{what}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let sessions = || json(&app.ok(&["session", "list", "--json"]));
    wait_until("both sessions recorded, the answer with them", WAIT, || {
        let list = sessions();
        list.as_array().unwrap().len() == 2
            && list[0]["last_assistant_message"].is_string() == (list[0]["key"] == "agent-1")
    });
    for session in sessions().as_array().unwrap() {
        if session["key"] == "agent-1" {
            // The stop came later, with the fixture's own cwd and id.
            let answer = session["last_assistant_message"].as_str().unwrap();
            assert!(
                answer.starts_with("All 128\u{FFFD} tests pass"),
                "{session}"
            );
        } else {
            let id = "3f1c\u{FFFD}9e52-7a4b-4d0e-9c61-2b8f5d7e0a13";
            assert_eq!(session["key"], id, "{session}");
            assert_eq!(session["native_session_id"], id, "{session}");
            assert_eq!(
                session["cwd"], "/home\u{FFFD}/alice/src/demo-app",
                "{session}"
            );
        }
    }
    let status = app.ok(&["status"]);
    assert!(
        !status.contains("stuck") && !status.contains("pending"),
        "no hook row waits: {status}"
    );
    daemon.stop();
}
