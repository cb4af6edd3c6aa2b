//! Outbound messages through the webhook channel, end to end: `relayq enqueue outbound` while
//! `relayq serve` runs, against a real HTTP server on loopback answering as a webhook receiver
//! would. The sweep is off, so every send is started by the wake-up path.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::{
    assert_usage_error, outbound_args, webhook_config, App, Config, Endpoint, Gate, Reply,
};
use serde_json::Value;

fn config(url: &str, channel_timeout: &str) -> Config {
    webhook_config(url)
        .set("daemon", "shutdown_grace = \"5s\"")
        .set("queues.outbound", "lease_timeout = \"1s\"")
        .set("queues.outbound", "max_attempts = 5")
        .set("channels.hook", &format!("timeout = {channel_timeout:?}"))
}

/// `relayq enqueue outbound --channel hook --to chat-42 ARGS`.
fn enqueue_args<'a>(args: &[&'a str]) -> Vec<&'a str> {
    let to_chat = outbound_args("hook", "chat-42", &[]);
    [&to_chat[..], args].concat()
}

/// Runs it.
fn run_enqueue(app: &App, args: &[&str]) -> std::process::Output {
    app.run(&enqueue_args(args))
}

/// Runs it, expecting success; returns stdout.
fn enqueue(app: &App, args: &[&str]) -> String {
    app.ok(&enqueue_args(args))
}

/// Enqueues and returns the row id.
fn send(app: &App, args: &[&str]) -> i64 {
    enqueue(app, args).trim().parse().unwrap()
}

/// Enqueues `text` for destination `to` of the `hook` channel; returns the row id.
fn send_to(app: &App, to: &str, text: &str) -> i64 {
    let args = outbound_args("hook", to, &[text]);
    app.ok(&args).trim().parse().unwrap()
}

/// Waits until row `id` of the outbound queue is in `state`; returns its row.
fn wait_state(app: &App, id: i64, state: &str) -> relayq_engine::RowState {
    app.wait_state(relayq_engine::QueueName::Outbound, id, state)
}

#[test]
fn a_2xx_answer_delivers_once_with_the_idempotency_key_and_the_message() {
    let hook = Endpoint::start(|_| Reply::status(204));
    let app = App::new(config(&hook.url, "5s"));
    let daemon = app.serve();
    let keyed = send(
        &app,
        &["--idempotency-key", "k1", "--kind", "block", "hello"],
    );
    let plain = send(&app, &["world"]);
    wait_state(&app, plain, "delivered");
    let again = enqueue(&app, &["--idempotency-key", "k1", "--json", "hello"]);
    let again: Value = serde_json::from_str(&again).unwrap();
    assert_eq!(
        (again["id"].as_i64(), again["duplicate"].as_bool()),
        (Some(keyed), Some(true))
    );
    std::thread::sleep(Duration::from_millis(300));
    let calls = hook.calls();
    assert_eq!(
        calls.len(),
        2,
        "one call per message, none for the duplicate"
    );
    assert_eq!(calls[0].idempotency_key.as_deref(), Some("k1"));
    assert_eq!(
        calls[1].idempotency_key,
        Some(format!("relayq-outbound-{plain}")),
        "without a key, one fixed per row"
    );
    let body = &calls[0].body;
    assert_eq!(
        (
            body["channel"].as_str(),
            body["to"].as_str(),
            body["text"].as_str(),
            body["kind"].as_str()
        ),
        (Some("hook"), Some("chat-42"), Some("hello"), Some("block"))
    );
    assert_eq!(
        (body["id"].as_i64(), body["attempt"].as_i64()),
        (Some(keyed), Some(1))
    );
    daemon.stop();
}

#[test]
fn a_5xx_answer_is_retried_with_the_same_key_until_delivered() {
    let hook = Endpoint::start(|n| Reply::status(if n < 2 { 503 } else { 200 }));
    let app = App::new(config(&hook.url, "5s"));
    let daemon = app.serve();
    let id = send(&app, &["hi"]);
    let row = wait_state(&app, id, "delivered");
    assert_eq!(row.attempts, 3);
    assert_eq!(row.last_error.as_deref(), Some("HTTP 503"));
    let keys: Vec<_> = hook
        .calls()
        .into_iter()
        .map(|c| c.idempotency_key)
        .collect();
    assert_eq!(keys, vec![Some(format!("relayq-outbound-{id}")); 3]);
    daemon.stop();
}

#[test]
fn a_429_waits_for_retry_after_instead_of_the_backoff() {
    let hook = Endpoint::start(|n| match n {
        0 => Reply {
            headers: vec![("Retry-After", "1".into())],
            body: "slow down".into(),
            ..Reply::status(429)
        },
        _ => Reply::status(200),
    });
    let app = App::new(config(&hook.url, "5s"));
    let daemon = app.serve();
    let id = send(&app, &["hi"]);
    let row = wait_state(&app, id, "delivered");
    let calls = hook.calls();
    assert_eq!(calls.len(), 2);
    let gap = calls[1].at - calls[0].at;
    assert!(
        gap >= Duration::from_millis(950),
        "waited {gap:?}, not the 1s asked for"
    );
    assert_eq!(
        row.last_error.as_deref(),
        Some("throttled: HTTP 429: slow down")
    );
    daemon.stop();
}

#[test]
fn a_send_slower_than_the_lease_timeout_is_sent_exactly_once() {
    // The endpoint takes 3.5 s; the lease lasts 1 s unless extended while the send runs.
    let hook = Endpoint::start(|_| Reply {
        delay: Duration::from_millis(3500),
        ..Reply::status(200)
    });
    let app = App::new(config(&hook.url, "10s"));
    let daemon = app.serve();
    let id = send(&app, &["slow"]);
    // Past the lease timeout, a new row for the same destination makes the claimer look: an
    // expired lease would be taken over and the first message sent again.
    std::thread::sleep(Duration::from_millis(2000));
    let next = send(&app, &["after"]);
    let row = wait_state(&app, id, "delivered");
    wait_state(&app, next, "delivered");
    let texts: Vec<_> = hook.texts(0);
    assert_eq!(texts, vec!["slow", "after"], "each sent once, in order");
    assert_eq!(row.attempts, 1);
    daemon.stop();
}

#[test]
fn a_webhook_that_does_not_answer_in_time_is_retried() {
    let hook = Endpoint::start(|n| Reply {
        delay: if n == 0 {
            Duration::from_millis(1500)
        } else {
            Duration::ZERO
        },
        ..Reply::status(200)
    });
    let app = App::new(config(&hook.url, "300ms"));
    let daemon = app.serve();
    let id = send(&app, &["hi"]);
    let row = wait_state(&app, id, "delivered");
    assert_eq!(row.attempts, 2);
    assert!(row.last_error.unwrap().contains("did not answer in time"));
    daemon.stop();
}

#[test]
fn a_4xx_answer_is_permanent_and_dead_rows_can_be_listed_retried_and_purged() {
    let hook = Endpoint::start(|n| match n {
        0 => Reply {
            body: r#"{"error":"no such chat"}"#.into(),
            ..Reply::status(404)
        },
        1 => Reply::status(200),
        _ => Reply::status(410),
    });
    let app = App::new(config(&hook.url, "5s"));
    let daemon = app.serve();
    let first = send(&app, &["one"]);
    let row = wait_state(&app, first, "dead");
    assert_eq!(row.attempts, 1, "a 4xx is not retried");

    let listed: Value = serde_json::from_str(&app.ok(&["dead", "list", "--json"])).unwrap();
    let listed = listed.as_array().unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(
        (listed[0]["id"].as_i64(), listed[0]["queue"].as_str()),
        (Some(first), Some("outbound"))
    );
    assert!(listed[0]["last_error"]
        .as_str()
        .unwrap()
        .contains("HTTP 404: {\"error\":\"no such chat\"}"));
    assert_eq!(listed[0]["payload"]["text"], "one");
    assert!(app.ok(&["dead", "list"]).contains("HTTP 404"));

    // Retrying an id that is not dead changes nothing and says so.
    let out = app.run(&["dead", "retry", &first.to_string(), "999999"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("row 999999 is not a dead row"));
    assert_eq!(
        app.run(&["dead", "retry"]).status.code(),
        Some(2),
        "ids or --all"
    );

    // The far end is fixed: retry delivers it (the endpoint answers 200 to the second call).
    app.ok(&["dead", "retry", &first.to_string()]);
    let row = wait_state(&app, first, "delivered");
    assert_eq!(
        row.attempts, 1,
        "a retried dead row starts a fresh attempt count"
    );

    let second = send(&app, &["two"]);
    wait_state(&app, second, "dead");
    assert!(app
        .ok(&["dead", "purge", "--all"])
        .contains("purged 1 dead row(s)"));
    assert_eq!(app.ok(&["dead", "list"]).trim(), "no dead rows");
    let q = app.engine().queue(
        relayq_engine::QueueName::Outbound,
        relayq_engine::QueuePolicy::outbound(),
    );
    assert!(q.state_of(second).unwrap().is_none());
    assert_eq!(hook.calls().len(), 3);
    daemon.stop();
}

#[test]
fn enqueue_outbound_refuses_an_unknown_channel_and_bad_input_without_writing() {
    let app = App::new(config("http://127.0.0.1:9/hook", "5s"));
    // (channel, to, extra flags, what the error says)
    let cases: &[(&str, &str, &[&str], &str)] = &[
        ("nope", "x", &[], "channel 'nope' is not configured"),
        ("hook", " ", &[], "destination is empty"),
        ("hook", "x", &["--kind", "gif"], "final, block or tool"),
        (
            "hook",
            "x",
            &["--idempotency-key", ""],
            "idempotency key is empty",
        ),
    ];
    for (channel, to, flags, message) in cases {
        let mut args = vec!["enqueue", "outbound", "--channel", channel, "--to", to];
        args.extend_from_slice(flags);
        args.push("hi");
        let out = app.run(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(message), "{args:?}: {stderr}");
    }
    assert!(
        !app.db().exists() || app.engine().counts().unwrap().is_empty(),
        "nothing written"
    );
}

#[test]
fn a_throttled_send_does_not_use_up_an_attempt() {
    // One attempt allowed: a 429 counted as an attempt would leave the row dead.
    let hook = Endpoint::start(|n| match n {
        0 | 1 => Reply {
            headers: vec![("Retry-After", "0.2".into())],
            body: "slow down".into(),
            ..Reply::status(429)
        },
        _ => Reply::status(200),
    });
    let app = App::new(config(&hook.url, "5s").set("queues.outbound", "max_attempts = 1"));
    let daemon = app.serve();
    let id = send(&app, &["hi"]);
    let row = wait_state(&app, id, "delivered");
    assert_eq!(hook.calls().len(), 3);
    assert_eq!(row.attempts, 1, "only the send that went through counts");
    assert_eq!(
        row.last_error.as_deref(),
        Some("throttled: HTTP 429: slow down")
    );
    daemon.stop();
}

#[test]
fn a_delivered_row_keeps_the_far_ends_receipt() {
    let hook = Endpoint::start(|_| Reply {
        body: r#"{"id": "evt-77"}"#.into(),
        ..Reply::status(200)
    });
    let app = App::new(config(&hook.url, "5s"));
    let daemon = app.serve();
    let id = send(&app, &["hi"]);
    wait_state(&app, id, "delivered");
    daemon.stop();
    let shown: Value = serde_json::from_str(&app.ok(&["show", &id.to_string(), "--json"])).unwrap();
    assert_eq!(shown["receipt"], "evt-77");
    assert!(
        shown["took_ms"].as_i64().is_some_and(|ms| ms >= 0),
        "{shown}"
    );
    let text = app.ok(&["show", &id.to_string()]);
    assert!(
        text.contains("receipt") && text.contains("evt-77"),
        "{text}"
    );
}

#[test]
fn the_webhook_url_may_come_from_the_daemons_environment() {
    let hook = Endpoint::start(|_| Reply::status(200));
    let app = App::new(Config::default().no_sweep().channel(
        "hook",
        "webhook",
        &["url_env = \"RELAYQ_TEST_HOOK_URL\""],
    ));
    // Without the variable the daemon refuses to start, naming the key.
    assert_usage_error(
        &app.run(&["serve"]),
        "channels.hook.url_env: names $RELAYQ_TEST_HOOK_URL, which is not set",
    );
    let daemon = app.serve_with_env(&[("RELAYQ_TEST_HOOK_URL", &hook.url)]);
    let id = send(&app, &["hi"]);
    wait_state(&app, id, "delivered");
    assert_eq!(hook.calls().len(), 1);
    daemon.stop();
}

#[test]
fn an_enqueue_past_max_depth_exits_3_and_writes_nothing() {
    // No daemon: rows stay pending, so the queue fills.
    let app = App::new(config("http://127.0.0.1:9/", "5s").set("queues.outbound", "max_depth = 2"));
    send(&app, &["one"]);
    let second = send(&app, &["two", "--idempotency-key", "k2"]);
    let out = run_enqueue(&app, &["three"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "exit 3 for a full queue: {err}");
    assert!(
        err.contains("QUEUE_FULL: the outbound queue holds 2 unfinished rows")
            && err.contains("queues.outbound.max_depth = 2"),
        "{err}"
    );
    // A retry of a message already written is still answered with its row.
    let again = enqueue(&app, &["--idempotency-key", "k2", "--json", "two"]);
    let again: Value = serde_json::from_str(&again).unwrap();
    assert_eq!(
        (again["id"].as_i64(), again["duplicate"].as_bool()),
        (Some(second), Some(true))
    );
    let rows: i64 = app
        .engine()
        .counts()
        .unwrap()
        .iter()
        .filter(|c| c.queue == "outbound")
        .map(|c| c.count)
        .sum();
    assert_eq!(rows, 2, "nothing written past the limit");
}

#[test]
fn hook_events_cannot_be_given_a_depth_limit() {
    let app = App::new(Config::default().set("queues.hooks", "max_depth = 10"));
    assert_usage_error(
        &app.run(&["status"]),
        "queues.hooks.max_depth: hook events are never refused",
    );
}

#[test]
fn progress_left_from_before_a_restart_is_superseded_and_final_messages_are_sent() {
    let hook = Endpoint::start(|_| Reply::status(200));
    for (replay, block_state) in [
        (None, "expired"),
        (Some("[\"final\", \"block\"]"), "delivered"),
    ] {
        let mut config = config(&hook.url, "5s");
        if let Some(kinds) = replay {
            config = config.set("queues.outbound", &format!("replay_kinds = {kinds}"));
        }
        let app = App::new(config);
        // Written while no daemon runs, as a bridge would while relayq was down.
        let block = send(&app, &["--kind", "block", "partial answer"]);
        let tool = send(&app, &["--kind", "tool", "running tests"]);
        let last = send(&app, &["the answer"]);
        let daemon = app.serve();
        wait_state(&app, last, "delivered");
        daemon.stop();
        let block = app.row(relayq_engine::QueueName::Outbound, block);
        assert_eq!(block.state, block_state, "{replay:?}: {block:?}");
        let tool = app.row(relayq_engine::QueueName::Outbound, tool);
        assert_eq!(
            (tool.state.as_str(), tool.reason.as_deref()),
            ("expired", Some("superseded")),
            "{replay:?}"
        );
    }
    let texts: Vec<_> = hook.texts(0);
    assert_eq!(texts, ["the answer", "partial answer", "the answer"]);
}

#[test]
fn a_message_older_than_max_age_is_expired_or_sent_as_expire_action_says() {
    let hook = Endpoint::start(|_| Reply::status(200));
    for (action, expected) in [("expire", "expired"), ("deliver", "delivered")] {
        let app = App::new(
            config(&hook.url, "5s")
                .set("queues.outbound", "max_age = \"1s\"")
                .set("queues.outbound", &format!("expire_action = {action:?}")),
        );
        // Queued during an outage longer than max_age.
        let id = send(&app, &[&format!("queued, then {action}")]);
        std::thread::sleep(Duration::from_millis(1200));
        let daemon = app.serve();
        let row = wait_state(&app, id, expected);
        daemon.stop();
        if action == "expire" {
            assert_eq!(row.reason.as_deref(), Some("max age"));
            let status = app.ok(&["status"]);
            assert!(status.contains("max age"), "counted by status: {status}");
        }
    }
    let texts: Vec<_> = hook.texts(0);
    assert_eq!(
        texts,
        ["queued, then deliver"],
        "only the deliver policy sends it"
    );
}

#[test]
fn dead_rows_of_one_destination_replay_in_order_and_out_of_order_replay_needs_force() {
    // Everything is refused until the endpoint is told to accept.
    let gate = Gate::shut();
    let app = App::new(config(&gate.hook.url, "5s"));
    let daemon = app.serve();
    let ids: Vec<i64> = ["one", "two", "three"]
        .iter()
        .map(|t| send(&app, &[t]))
        .collect();
    for id in &ids {
        wait_state(&app, *id, "dead");
    }
    let other = send_to(&app, "elsewhere", "x");
    wait_state(&app, other, "dead");

    // Bulk selection: by key; purge --dry-run changes nothing.
    let dry = app.ok(&[
        "dead",
        "purge",
        "--key",
        "[\"hook\",\"elsewhere\"]",
        "--dry-run",
    ]);
    assert!(dry.contains("would purge 1 dead row(s)"), "{dry}");
    assert_eq!(app.engine().dead_rows(None).unwrap().len(), 4);

    gate.set_open(true);
    let key = "[\"hook\",\"chat-42\"]";
    app.ok(&["dead", "retry", "--queue", "outbound", "--key", key]);
    gate.assert_delivered_in_order(&app, &ids, 4, &["one", "two", "three"]);

    // A dead row whose later message was delivered is not replayed behind its back.
    let early = gate.overtaken_dead_row(&app, |text| send(&app, &[text]));
    assert_usage_error(
        &app.run(&["dead", "retry", &early.to_string()]),
        "already delivered: replayed, it arrives after them; --force replays it anyway",
    );
    assert_eq!(
        app.row(relayq_engine::QueueName::Outbound, early).state,
        "dead"
    );
    app.ok(&["dead", "retry", &early.to_string(), "--force"]);
    wait_state(&app, early, "delivered");
    daemon.stop();
}

#[test]
fn a_paced_destination_gets_its_budget_and_others_are_not_held_behind_it() {
    let hook = Endpoint::start(|_| Reply::status(200));
    let app = App::new(config(&hook.url, "5s").set("pacing.hook", "per_destination = \"1/400ms\""));
    // A backlog to one chat, written while the daemon is down, and one message to another.
    let backlog: Vec<i64> = (0..5).map(|i| send(&app, &[&format!("m{i}")])).collect();
    let other = send_to(&app, "other", "hi");
    let daemon = app.serve();
    for id in &backlog {
        wait_state(&app, *id, "delivered");
    }
    let other = wait_state(&app, other, "delivered");
    daemon.stop();
    let calls = hook.calls();
    let to_chat: Vec<_> = calls.iter().filter(|c| c.body["to"] == "chat-42").collect();
    let texts: Vec<_> = to_chat.iter().map(|c| c.body["text"].clone()).collect();
    assert_eq!(texts, ["m0", "m1", "m2", "m3", "m4"], "in order");
    for pair in to_chat.windows(2) {
        let gap = pair[1].at - pair[0].at;
        assert!(
            gap >= Duration::from_millis(350),
            "sent {gap:?} apart, over the budget"
        );
    }
    let to_other = calls.iter().position(|c| c.body["to"] == "other").unwrap();
    assert!(
        to_other < 3,
        "the other chat's message waited behind the backlog: call {to_other}"
    );
    assert_eq!(other.attempts, 1);
    for id in &backlog {
        assert_eq!(
            app.row(relayq_engine::QueueName::Outbound, *id).attempts,
            1,
            "waiting for the budget is not an attempt"
        );
    }
}

#[test]
fn a_failing_channel_opens_its_breaker_and_its_rows_wait_uncharged() {
    // The far end is down until 1.2 s after the daemon is up (set below: starting the daemon
    // on a PostgreSQL server of its own takes a while), then answers.
    let up = std::sync::Arc::new(std::sync::OnceLock::<std::time::Instant>::new());
    let answers_from = up.clone();
    let hook = Endpoint::start(move |_| match answers_from.get() {
        Some(at) if std::time::Instant::now() >= *at => Reply::status(200),
        _ => Reply::status(503),
    });
    let app = App::new(
        config(&hook.url, "5s")
            .set("queues.outbound", "backoff = [\"100ms\"]")
            .set("queues.outbound", "max_attempts = 3")
            .table(
                "pacing.hook",
                &["breaker_after = 3", "breaker_open = \"1s\""],
            ),
    );
    let daemon = app.serve();
    let up_at = *up.get_or_init(|| std::time::Instant::now() + Duration::from_millis(1200));
    let ids: Vec<i64> = ["a", "b", "c"]
        .iter()
        .map(|to| send_to(&app, to, "hi"))
        .collect();
    // Read from the table, where the pause stays once over: `status` shows it only while it
    // runs (1 s), which a slow `status` (a loaded machine, a remote database) can miss.
    crate::common::wait_until("the breaker to open", Duration::from_secs(10), || {
        let reason: Option<String> =
            app.query_value("SELECT reason FROM channel_penalties WHERE channel = 'hook'");
        reason.is_some_and(|r| r.contains("breaker open after failed sends in a row"))
    });
    for id in &ids {
        let row = wait_state(&app, *id, "delivered");
        assert!(row.attempts <= 3, "{row:?}");
    }
    daemon.stop();
    // Without the breaker each row would have used its 3 attempts in 0.3 s and died.
    let failed = hook.calls().iter().filter(|c| c.at < up_at).count();
    assert!(failed <= 5, "{failed} sends while the far end was down");
}

/// The drain's summary line, once the daemon has logged it; the daemon is stopped.
fn drain_summary(daemon: crate::common::Daemon) -> String {
    crate::common::wait_until("the drain summary", Duration::from_secs(10), || {
        daemon
            .log()
            .contains("outbound backlog from before the start drained")
    });
    let log = daemon.log();
    daemon.stop();
    log.lines()
        .find(|l| l.contains("outbound backlog from before the start drained"))
        .unwrap()
        .to_string()
}

#[test]
fn a_restart_backlog_drains_within_its_budget_beside_new_messages_and_is_summed_up() {
    let hook = Endpoint::start(|_| Reply {
        delay: Duration::from_millis(200),
        ..Reply::status(200)
    });
    let app = App::new(
        config(&hook.url, "5s")
            .set("claimer", "outbound_in_flight = 4")
            .set("claimer", "drain_in_flight = 2"),
    );
    // An outage's backlog: one message to each of 20 chats.
    let backlog: Vec<i64> = (0..20)
        .map(|i| {
            let to = format!("chat-{i}");
            send_to(&app, &to, "old")
        })
        .collect();
    let daemon = app.serve();
    std::thread::sleep(Duration::from_millis(300));
    let live = send_to(&app, "live", "new");
    wait_state(&app, live, "delivered");
    for id in &backlog {
        wait_state(&app, *id, "delivered");
    }
    let summary = drain_summary(daemon);
    let position = hook
        .calls()
        .iter()
        .position(|c| c.body["to"] == "live")
        .unwrap();
    assert!(
        position < 10,
        "the new message waited behind the backlog: call {position}"
    );
    assert!(
        summary.contains("attempted=20")
            && summary.contains("delivered=20")
            && summary.contains("failed=0"),
        "{summary}"
    );
}

/// Issue 41: the drain's summary counted the rows sent in runs (a destination's backlog after
/// its first row) as attempted but never as delivered: "delivered=3" for 90 rows delivered.
#[test]
fn the_drain_summary_counts_the_rows_sent_in_runs() {
    let hook = Endpoint::start(|_| Reply::status(200));
    let app = App::new(config(&hook.url, "5s"));
    let backlog: Vec<i64> = (0..90)
        .map(|i| send_to(&app, &format!("chat-{}", i % 3), &format!("old {i}")))
        .collect();
    let daemon = app.serve();
    for id in &backlog {
        wait_state(&app, *id, "delivered");
    }
    let summary = drain_summary(daemon);
    assert!(
        summary.contains("attempted=90")
            && summary.contains("delivered=90")
            && summary.contains("failed=0"),
        "{summary}"
    );
}

/// The webhook's `max_chars` set to `max`, so a long text is split.
fn chunked_config(url: &str, max: usize) -> Config {
    config(url, "5s").set("channels.hook", &format!("max_chars = {max}"))
}

/// A text of `n` numbered lines, each 50 characters with its newline.
fn numbered_lines(n: usize) -> String {
    (0..n)
        .map(|i| format!("line {i:05} {}\n", "x".repeat(38)))
        .collect()
}

#[test]
fn a_long_text_goes_out_in_order_as_parts_and_a_failed_part_holds_back_the_rest() {
    // The second request (part 2) fails once; every answer names the part it got.
    let hook = Endpoint::start(|n| match n {
        1 => Reply::status(503),
        n => Reply {
            body: format!(r#"{{"id": "msg-{n}"}}"#),
            ..Reply::status(200)
        },
    });
    let app = App::new(chunked_config(&hook.url, 4000));
    let daemon = app.serve();
    let text = numbered_lines(200); // 10,000 characters
    let out = run_enqueue(&app, &["--json", &text]);
    assert!(out.status.success(), "{out:?}");
    let written: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(written["parts"], 3, "{written}");
    let first = written["id"].as_i64().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("written as 3 parts"), "{stderr}");
    for id in first..first + 3 {
        wait_state(&app, id, "delivered");
    }
    daemon.stop();

    let calls = hook.calls();
    let parts: Vec<(u64, String)> = calls
        .iter()
        .map(|c| {
            (
                c.body["part"]["index"].as_u64().unwrap(),
                c.body["text"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let order: Vec<u64> = parts.iter().map(|(i, _)| *i).collect();
    assert_eq!(order, vec![1, 2, 2, 3], "part 3 waits for part 2's retry");
    for (_, part) in &parts {
        assert!(part.chars().count() <= 4000);
        assert!(
            part.ends_with('\n'),
            "cut at a line: {:?}",
            &part[part.len() - 20..]
        );
    }
    let joined: String = [&parts[0].1, &parts[2].1, &parts[3].1]
        .into_iter()
        .cloned()
        .collect();
    assert_eq!(joined, text, "the parts joined are the text, once");
    let receipts: Vec<Value> = (first..first + 3)
        .map(|id| serde_json::from_str(&app.ok(&["show", &id.to_string(), "--json"])).unwrap())
        .map(|shown: Value| shown["receipt"].clone())
        .collect();
    assert_eq!(
        receipts,
        vec!["msg-0", "msg-2", "msg-3"],
        "each part its own receipt"
    );
}

#[test]
fn a_part_that_fails_for_good_takes_the_later_parts_to_the_dead_letters_and_retry_sends_them_in_order(
) {
    // Part 2's first request is refused for good (400); after `dead retry`, all is accepted.
    let hook = Endpoint::start(|n| Reply::status(if n == 1 { 400 } else { 200 }));
    let app = App::new(chunked_config(&hook.url, 100));
    let daemon = app.serve();
    let first = send(&app, &[&numbered_lines(6)]); // 300 characters: 3 parts
    wait_state(&app, first, "delivered");
    let dead = wait_state(&app, first + 1, "dead");
    let later = wait_state(&app, first + 2, "dead");
    assert_eq!(dead.reason.as_deref(), Some("HTTP 400"));
    let why = later.reason.unwrap_or_default();
    assert!(
        why.contains(&format!("part 2 of 3 (row {}) failed", first + 1)),
        "{why}"
    );
    assert_eq!(
        hook.calls().len(),
        2,
        "part 3 was never sent without part 2"
    );

    app.ok(&["dead", "retry", "--queue", "outbound"]);
    wait_state(&app, first + 2, "delivered");
    daemon.stop();
    let order: Vec<u64> = hook
        .calls()
        .iter()
        .map(|c| c.body["part"]["index"].as_u64().unwrap())
        .collect();
    assert_eq!(order, vec![1, 2, 2, 3]);
}

#[test]
fn max_chars_out_of_range_is_refused_with_the_key_and_the_range() {
    let app = App::new(chunked_config("http://127.0.0.1:9/", 10));
    let out = app.run(&["config", "check"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("max_chars") && err.contains("between 64 and"),
        "{err}"
    );
}

/// Starts the daemon, waits until the endpoint holds the first request open, and kills the
/// daemon with SIGKILL mid-send: whether the far end got the message is unknown.
fn kill_mid_send(app: &App, hook: &Endpoint) -> i64 {
    let mut daemon = app.serve();
    let id = send(app, &["are you there?"]);
    crate::common::wait_until("the request to arrive", Duration::from_secs(10), || {
        !hook.calls().is_empty()
    });
    daemon.signal("KILL");
    id
}

/// The first request is held open for a minute (the far end took it, the answer never
/// comes); later ones are answered at once.
fn held_then_answered(n: usize) -> Reply {
    Reply {
        delay: Duration::from_secs(if n == 0 { 60 } else { 0 }),
        ..Reply::status(200)
    }
}

#[test]
fn a_send_cut_by_a_crash_is_sent_again_as_a_possible_repeat_with_the_same_key() {
    let hook = Endpoint::start(held_then_answered);
    let app = App::new(config(&hook.url, "30s"));
    let id = kill_mid_send(&app, &hook);
    let daemon = app.serve();
    let row = wait_state(&app, id, "delivered");
    daemon.stop();
    let calls = hook.calls();
    assert_eq!(calls.len(), 2, "{calls:?}");
    assert_eq!(calls[0].body.get("possible_repeat"), None);
    assert_eq!(
        calls[1].body["possible_repeat"], true,
        "flagged for the far end"
    );
    assert_eq!(
        calls[0].idempotency_key, calls[1].idempotency_key,
        "the same key: a far end that honours it keeps exactly one copy"
    );
    let copies: std::collections::HashSet<_> =
        calls.iter().map(|c| c.idempotency_key.clone()).collect();
    assert_eq!(copies.len(), 1);
    assert_eq!(row.attempts, 2);
}

#[test]
fn a_send_cut_by_a_crash_is_held_for_an_operator_when_the_channel_says_hold() {
    let hook = Endpoint::start(held_then_answered);
    let app = App::new(config(&hook.url, "30s").set("channels.hook", "unknown_outcome = \"hold\""));
    let id = kill_mid_send(&app, &hook);
    let shown = app.ok(&["show", &id.to_string()]);
    assert!(shown.contains("send started"), "the row says so: {shown}");
    let daemon = app.serve();
    let row = wait_state(&app, id, "dead");
    let why = row.reason.unwrap_or_default();
    assert!(
        why.starts_with("outcome unknown: a send started at"),
        "{why}"
    );
    assert!(why.contains("relayq dead retry"), "says what to do: {why}");
    assert_eq!(hook.calls().len(), 1, "not sent again by itself");

    // The operator checked the far end and sends it.
    app.ok(&["dead", "retry", &id.to_string()]);
    wait_state(&app, id, "delivered");
    daemon.stop();
    let calls = hook.calls();
    assert_eq!(calls.len(), 2);
    assert_eq!(
        calls[1].body.get("possible_repeat"),
        None,
        "an operator's retry is a fresh send"
    );
}

/// The first send is answered after a second (the rows behind it are written meanwhile), the
/// send at `held` is held open for a minute, the others are answered at once.
fn slow_first_then_held_at(held: usize) -> impl Fn(usize) -> Reply + Send + Sync + 'static {
    move |n| Reply {
        delay: match n {
            0 => Duration::from_secs(1),
            n if n == held => Duration::from_secs(60),
            _ => Duration::ZERO,
        },
        ..Reply::status(200)
    }
}

/// Five rows to one destination: the first is sent alone, the other four are written while it
/// is answered, so they go one after the other behind it; the daemon is killed while the
/// far end holds the send at `held` open. Returns the row ids.
fn kill_behind_a_backlog(app: &App, hook: &Endpoint, held: usize) -> Vec<i64> {
    let mut daemon = app.serve();
    let mut ids = vec![send(app, &["m0"])];
    crate::common::wait_until("the first request", Duration::from_secs(10), || {
        !hook.calls().is_empty()
    });
    ids.extend((1..5).map(|i| send(app, &[&format!("m{i}")])));
    crate::common::wait_until("the held request", Duration::from_secs(10), || {
        hook.calls().len() > held
    });
    daemon.signal("KILL");
    ids
}

/// Rows of a webhook destination go out one after the other, their answers recorded together:
/// a crash may repeat rows the far end answered but relayq had not recorded. Every repeat is
/// flagged `possible_repeat` with the row's own `Idempotency-Key`, and the rows end delivered
/// in order: never a silent repeat, never a row lost or reordered.
#[test]
fn rows_sent_in_a_run_are_repeated_after_a_crash_only_as_flagged_possible_repeats_in_order() {
    let hook = Endpoint::start(slow_first_then_held_at(3));
    let app = App::new(config(&hook.url, "30s"));
    let ids = kill_behind_a_backlog(&app, &hook, 3);
    let daemon = app.serve();
    for &id in &ids {
        wait_state(&app, id, "delivered");
    }
    daemon.stop();
    let calls = hook.calls();
    let mut seen = std::collections::HashSet::new();
    for call in &calls {
        let key = call.idempotency_key.clone().expect("every send has a key");
        if !seen.insert(key.clone()) {
            assert_eq!(
                call.body["possible_repeat"], true,
                "a second send of {key} is flagged: {calls:?}"
            );
        }
    }
    let texts: Vec<&str> = calls
        .iter()
        .filter_map(|c| c.body["text"].as_str())
        .collect();
    let mut last_of_each: Vec<&str> = Vec::new();
    for (i, text) in texts.iter().enumerate() {
        if !texts[i + 1..].contains(text) {
            last_of_each.push(text);
        }
    }
    assert_eq!(
        last_of_each,
        ["m0", "m1", "m2", "m3", "m4"],
        "the final copies arrive in order: {texts:?}"
    );
}

/// A channel that holds a possible repeat for an operator (`unknown_outcome = "hold"`) sends
/// each row marked alone, just before its send: a crash holds only the row whose send was cut,
/// never the rows queued behind it that were not sent.
#[test]
fn a_crash_holds_only_the_row_whose_send_was_cut_not_the_rows_queued_behind_it() {
    let hook = Endpoint::start(slow_first_then_held_at(1));
    let app = App::new(config(&hook.url, "30s").set("channels.hook", "unknown_outcome = \"hold\""));
    let ids = kill_behind_a_backlog(&app, &hook, 1);
    let daemon = app.serve();
    let held = wait_state(&app, ids[1], "dead");
    assert!(
        held.reason
            .unwrap_or_default()
            .starts_with("outcome unknown"),
        "the cut send is held"
    );
    for &id in &ids[2..] {
        let row = wait_state(&app, id, "delivered");
        assert_eq!(row.attempts, 1, "row {id} was sent once: {row:?}");
    }
    daemon.stop();
    let calls = hook.calls();
    assert!(
        calls
            .iter()
            .all(|c| c.body.get("possible_repeat").is_none()),
        "nothing was sent twice: {calls:?}"
    );
}

#[test]
fn an_unreachable_far_end_consumes_no_attempts() {
    // Nothing listens on the port until the far end comes up.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}/hook");
    let app = App::new(
        config(&url, "5s")
            .set("queues.outbound", "backoff = [\"100ms\"]")
            .set("queues.outbound", "max_attempts = 2"),
    );
    let daemon = app.serve();
    let id = send(&app, &["hello"]);
    // Refused for 3 s: at 100 ms a try, ~30 tries against a limit of 2.
    std::thread::sleep(Duration::from_secs(3));
    // Read between two tries (a try holds the row leased for a moment).
    let row = wait_state(&app, id, "pending");
    assert_eq!(
        (row.state.as_str(), row.attempts),
        ("pending", 0),
        "{row:?}"
    );
    assert!(
        row.last_error
            .as_deref()
            .unwrap_or("")
            .contains("connection refused"),
        "{row:?}"
    );
    let hook = Endpoint::start_on(port, |_| Reply::status(200));
    let row = wait_state(&app, id, "delivered");
    daemon.stop();
    assert_eq!(row.attempts, 1);
    assert_eq!(hook.calls().len(), 1);
}

#[test]
fn every_command_that_prints_data_prints_json_with_json_and_no_progress_when_not_on_a_terminal() {
    let hook = Endpoint::start(|_| Reply::status(404));
    let app = App::new(config(&hook.url, "5s"));
    let daemon = app.serve();
    let id = send(&app, &["doomed"]);
    wait_state(&app, id, "dead");
    daemon.stop();
    let json_of = |args: &[&str]| -> serde_json::Value {
        let out = app.run(args);
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            out.stderr.is_empty(),
            "no progress off a terminal: {args:?}"
        );
        let text = String::from_utf8_lossy(&out.stdout);
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{args:?} printed {text:?}: {e}"))
    };
    let listed = json_of(&[
        "dead",
        "list",
        "--json",
        "--reason",
        "404",
        "--key",
        "[\"hook\",\"chat-42\"]",
    ]);
    assert_eq!(listed[0]["id"], id);
    assert_eq!(
        json_of(&["dead", "list", "--json", "--reason", "500"]),
        serde_json::json!([])
    );
    let dry = json_of(&["dead", "purge", "--all", "--dry-run", "--json"]);
    assert_eq!(
        (&dry["dry_run"], &dry["ids"]),
        (&serde_json::json!(true), &serde_json::json!([id]))
    );
    let retried = json_of(&["dead", "retry", &id.to_string(), "--json"]);
    assert_eq!(retried["ids"], serde_json::json!([id]));
    app.enqueue("s1", "waits for no daemon");
    let expired = json_of(&["session", "expire", "s1", "--json"]);
    assert_eq!(expired, serde_json::json!({"session": "s1", "expired": 1}));
    assert_eq!(json_of(&["prune", "--json"])["pruned"], 0);
    assert!(json_of(&["status", "--json"]).is_object());
    assert_eq!(json_of(&["show", &id.to_string(), "--json"])["id"], id);
    assert!(json_of(&["session", "list", "--json"]).is_array());
}

/// A server on loopback that keeps the head of each request it gets and answers each with
/// `answer` (then closes): a far end whose headers are checked, a forward proxy's answer to a
/// plain-http request, or a proxy's refusal of a CONNECT.
fn heads_server(answer: &'static str) -> (String, Arc<Mutex<Vec<String>>>) {
    use std::io::{BufRead, BufReader, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let heads = Arc::new(Mutex::new(Vec::new()));
    let seen = heads.clone();
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            let mut head = String::new();
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            while reader.read_line(&mut head).is_ok_and(|n| n > 2) {}
            // The body is read too: closing with unread bytes would reset the connection
            // under the answer.
            let length = head
                .lines()
                .filter_map(|l| l.split_once(':'))
                .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
                .and_then(|(_, v)| v.trim().parse().ok())
                .unwrap_or(0);
            let _ = std::io::Read::read_exact(&mut reader, &mut vec![0; length]);
            seen.lock().unwrap().push(head);
            let _ = stream.write_all(answer.as_bytes());
        }
    });
    (url, heads)
}

const OK_AND_CLOSE: &str = "HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n";

/// `serve` with `var` naming the proxy at `proxy_url`, with `user:pa55` as its credentials.
fn serve_behind(app: &App, var: &str, proxy_url: &str) -> crate::common::Daemon {
    let with_credentials = proxy_url.replace("http://", "http://user:pa55@");
    app.serve_with_env(&[(var, &with_credentials), ("NO_PROXY", ""), ("no_proxy", "")])
}

/// `user:pa55` as Basic credentials.
const PA55: &str = "Basic dXNlcjpwYTU1";

/// The head of the first request `heads_server` got, checked to start with `line` and to
/// have the header `name` (any case) set to `value`.
fn first_request(heads: &Mutex<Vec<String>>, line: &str, (name, value): (&str, &str)) -> String {
    let head = heads.lock().unwrap()[0].clone();
    assert!(head.starts_with(&format!("{line}\r\n")), "{head}");
    let has = head.lines().any(|l| {
        l.split_once(':')
            .is_some_and(|(n, v)| n.eq_ignore_ascii_case(name) && v.trim() == value)
    });
    assert!(has, "{name}: {value} in {head}");
    head
}

#[test]
fn a_webhook_goes_through_the_http_proxy_of_the_daemons_environment() {
    let (proxy_url, heads) = heads_server(OK_AND_CLOSE);
    // A name that resolves nowhere: only the proxy can have taken the request.
    let app = App::new(config("http://relayq-proxied.invalid/hook", "5s"));
    let daemon = serve_behind(&app, "HTTP_PROXY", &proxy_url);
    let id = send(&app, &["through the proxy"]);
    wait_state(&app, id, "delivered");
    daemon.stop();
    // To the proxy, in absolute form.
    let line = "POST http://relayq-proxied.invalid/hook HTTP/1.1";
    first_request(&heads, line, ("proxy-authorization", PA55));
}

#[test]
fn an_https_webhook_tunnels_through_the_https_proxy_and_a_refusal_sends_nothing() {
    let (proxy_url, heads) = heads_server("HTTP/1.1 407 Proxy Authentication Required\r\n\r\n");
    let app = App::new(config("https://relayq-proxied.invalid/hook", "5s"));
    let daemon = serve_behind(&app, "HTTPS_PROXY", &proxy_url);
    let id = send(&app, &["through the tunnel"]);
    crate::common::wait_until("an attempt", Duration::from_secs(10), || {
        app.row(relayq_engine::QueueName::Outbound, id)
            .last_error
            .is_some()
    });
    daemon.stop();
    let row = app.row(relayq_engine::QueueName::Outbound, id);
    let error = row.last_error.clone().unwrap();
    assert!(
        error.contains("proxy"),
        "the error names the proxy: {error}"
    );
    assert!(!error.contains("pa55"), "no credentials in errors: {error}");
    // Refused at the proxy: nothing reached the far end; the attempt is not charged.
    assert_eq!(
        (row.state.as_str(), row.attempts),
        ("pending", 0),
        "{row:?}"
    );
    let line = "CONNECT relayq-proxied.invalid:443 HTTP/1.1";
    first_request(&heads, line, ("proxy-authorization", PA55));
}

/// The move from reqwest to the channels' own client (d27b8ce) dropped credentials written in a
/// webhook URL (`https://user:password@host/…`): reqwest sent them as Basic auth, the new client
/// sent the request without them, and the far end refused it.
#[test]
fn credentials_in_a_webhook_url_are_sent_as_basic_auth_not_dropped() {
    let (url, heads) = heads_server(OK_AND_CLOSE);
    let with_credentials = format!("{}/hook", url.replace("http://", "http://user:p%40ss@"));
    let app = App::new(config(&with_credentials, "5s"));
    let daemon = app.serve();
    let id = send(&app, &["with credentials"]);
    wait_state(&app, id, "delivered");
    daemon.stop();
    // base64("user:p@ss"); the request line has no credentials.
    first_request(
        &heads,
        "POST /hook HTTP/1.1",
        ("authorization", "Basic dXNlcjpwQHNz"),
    );
}
