//! The HTTP API through real HTTP on loopback, against a real `relayq serve`: enqueue with the
//! CLI's checks and answers, one message's story, status, health, the token, body limits,
//! dead letters, sessions, hook events.

use std::time::Duration;

use serde_json::{json, Value};

use crate::common::api::{answer, failing_hook, free_port, send, Api};
use crate::common::{
    file_config, wait_until, webhook_config, App, Config, Endpoint, Gate, Reply, NOTICES,
};
use relayq_engine::QueueName;

fn rows(app: &App) -> i64 {
    app.engine().counts().unwrap().iter().map(|c| c.count).sum()
}

#[test]
fn an_inbound_message_enqueued_over_http_is_delivered_and_its_repeat_answers_200_with_the_same_row()
{
    let api = Api::start(file_config());
    let message = json!({"session": "s1", "origin": "telegram", "content": "hello",
                         "source_message_id": "m-1", "source_channel_id": "chat-9"});
    let (status, first) = answer(api.post("/v1/inbound", &message));
    assert_eq!(status, 201, "{first}");
    assert_eq!(first["duplicate"], false);
    let id = first["id"].as_i64().unwrap();

    let (status, again) = answer(api.post("/v1/inbound", &message));
    assert_eq!(
        (status, again["id"].as_i64(), &again["duplicate"]),
        (200, Some(id), &json!(true))
    );

    // The same message id from another chat is another message (not a duplicate).
    let other_chat = json!({"session": "s1", "origin": "telegram", "content": "hi",
                            "source_message_id": "m-1", "source_channel_id": "chat-10"});
    let (status, other) = answer(api.post("/v1/inbound", &other_chat));
    assert_eq!(status, 201, "{other}");
    assert_ne!(other["id"].as_i64(), Some(id));

    wait_until("both delivered", Duration::from_secs(10), || {
        api.app.lines("out.jsonl").len() == 2
    });
    let (status, row) = answer(api.get(&format!("/v1/messages/{id}")));
    assert_eq!(status, 200);
    assert_eq!(
        (row["id"].as_i64(), &row["state"]),
        (Some(id), &json!("delivered"))
    );
    assert_eq!(row["payload"]["content"], "hello");
    api.stop();
}

#[test]
fn a_bad_body_is_refused_400_naming_the_field_and_nothing_is_written() {
    let api = Api::start(file_config());
    for (body, field, says) in [
        (
            json!({"origin": "t", "content": "x"}),
            None,
            "missing field `session`",
        ),
        (
            json!({"session": "s", "origin": "t", "type": "fax"}),
            Some("type"),
            "unknown variant",
        ),
        (
            json!({"session": "s", "origin": "t", "colour": 1}),
            None,
            "unknown field `colour`",
        ),
        (
            json!({"session": "", "origin": "t", "content": "x"}),
            None,
            "session",
        ),
    ] {
        let (status, error) = answer(api.post("/v1/inbound", &body));
        assert_eq!(status, 400, "{body} → {error}");
        assert_eq!(error["error"]["code"], "invalid");
        let message = error["error"]["message"].as_str().unwrap();
        assert!(message.contains(says), "{says:?} not in {message:?}");
        if let Some(field) = field {
            assert_eq!(error["error"]["field"], field, "{error}");
        }
    }
    let not_json = api.post_raw(
        "/v1/inbound",
        ("content-type", "application/json"),
        Some("session=s"),
    );
    assert_eq!(not_json.status(), 400);
    let (status, error) = answer(api.post(
        "/v1/outbound",
        &json!({"channel": "nowhere", "to": "x", "text": "hi"}),
    ));
    assert_eq!(status, 400);
    assert!(error["error"]["message"]
        .as_str()
        .unwrap()
        .contains("channel 'nowhere' is not configured"));
    assert_eq!(rows(&api.app), 0, "a refused request writes nothing");
    api.stop();
}

/// A page on any site can make the user's browser POST a form or `text/plain` to loopback
/// without a preflight; only `application/json` needs one, which the API never grants.
#[test]
fn a_cross_site_form_post_without_a_json_content_type_is_refused_415_and_writes_nothing() {
    let api = Api::start(file_config());
    let body = r#"{"session":"s1","origin":"web","content":"rm -rf ~"}"#;
    for content_type in [
        Some("text/plain"),
        Some("application/x-www-form-urlencoded"),
        None,
    ] {
        let mut request = api.request(reqwest::Method::POST, "/v1/inbound").body(body);
        if let Some(t) = content_type {
            request = request.header("content-type", t);
        }
        let (status, error) = answer(request.send().unwrap());
        assert_eq!(status, 415, "{content_type:?}: {error}");
        assert_eq!(error["error"]["code"], "unsupported_media_type");
    }
    let (status, _) = answer(api.post_raw(
        "/v1/inbound",
        ("content-type", "application/json; charset=utf-8"),
        Some(body),
    ));
    assert_eq!(status, 201);
    assert_eq!(rows(&api.app), 1);
    let preflight = api
        .request(reqwest::Method::OPTIONS, "/v1/inbound")
        .header("origin", "https://evil.example")
        .header("access-control-request-method", "POST")
        .send()
        .unwrap();
    assert!(preflight
        .headers()
        .get("access-control-allow-origin")
        .is_none());
    api.stop();
}

#[test]
fn an_outbound_message_past_the_destinations_max_key_depth_is_refused_429_queue_full() {
    let config = file_config()
        .set("queues.outbound", "max_key_depth = 1")
        // A channel that cannot send (a closed port): the first row stays unfinished.
        .channel("hook", "webhook", &["url = \"http://127.0.0.1:9/\""]);
    let api = Api::start(config);
    let message = json!({"channel": "hook", "to": "ops", "text": "one"});
    let (status, first) = answer(api.post("/v1/outbound", &message));
    assert_eq!(status, 201, "{first}");
    let (status, full) = answer(api.post(
        "/v1/outbound",
        &json!({"channel": "hook", "to": "ops", "text": "two"}),
    ));
    assert_eq!(status, 429, "{full}");
    assert_eq!(full["error"]["code"], "queue_full");
    assert!(full["error"]["message"]
        .as_str()
        .unwrap()
        .contains("QUEUE_FULL"));
    // Another destination has room.
    let (status, _) = answer(api.post(
        "/v1/outbound",
        &json!({"channel": "hook", "to": "dev", "text": "three"}),
    ));
    assert_eq!(status, 201);
    assert_eq!(rows(&api.app), 2);
    api.stop();
}

#[test]
fn with_a_token_every_route_but_healthz_needs_it_and_a_wrong_one_is_refused_401() {
    let config = file_config().set("http", "token_env = \"API_TOKEN\"");
    let mut api = Api::start_with_env(config, &[("API_TOKEN", "s3cret-token")]);
    let status = |r: reqwest::blocking::Response| r.status().as_u16();
    assert_eq!(status(api.get("/v1/status")), 401);
    assert_eq!(status(api.get("/readyz")), 401);
    api.token = Some("s3cret-tokeX".into());
    let (code, refused) = answer(api.get("/v1/status"));
    assert_eq!(
        (code, &refused["error"]["code"]),
        (401, &json!("unauthorized"))
    );
    api.token = Some("s3cret-token-and-more".into());
    assert_eq!(status(api.get("/v1/status")), 401);
    api.token = Some("s3cret-token".into());
    assert_eq!(status(api.get("/v1/status")), 200);
    assert_eq!(status(api.get("/readyz")), 200);
    api.token = None;
    assert_eq!(status(api.get("/healthz")), 200);
    assert!(!api.daemon.as_ref().unwrap().log().contains("s3cret-token"));
    api.stop();
}

#[test]
fn the_daemon_refuses_to_serve_the_api_beyond_loopback_without_a_token() {
    let config = file_config()
        .set("http", "enabled = true")
        .set("http", &format!("listen = \"0.0.0.0:{}\"", free_port()));
    let app = App::new(config);
    let out = app.run(&["serve"]);
    let err = crate::common::assert_usage_error(&out, "http.token");
    assert!(err.contains("127.0.0.1"), "says how to fix it: {err}");
}

#[test]
fn a_body_over_max_request_bytes_is_refused_413_unread() {
    let config = file_config()
        .set("daemon", "max_body_bytes = 1024")
        .set("http", "max_request_bytes = 2048");
    let api = Api::start(config);
    let big = json!({"session": "s", "origin": "t", "content": "x".repeat(4096)});
    let (status, error) = answer(api.post("/v1/inbound", &big));
    assert_eq!(
        (status, &error["error"]["code"]),
        (413, &json!("too_large"))
    );
    // Under the request limit but over the message limit: the CLI's refusal, 400.
    let over = json!({"session": "s", "origin": "t", "content": "x".repeat(1500)});
    let (status, error) = answer(api.post("/v1/inbound", &over));
    assert_eq!(status, 400, "{error}");
    assert_eq!(rows(&api.app), 0);
    api.stop();
}

#[test]
fn status_readyz_and_unknown_routes_answer_json() {
    let api = Api::start(file_config());
    let (status, ready) = answer(api.get("/readyz"));
    assert_eq!((status, &ready["status"]), (200, &json!("ready")));
    let (_, written) = answer(api.post(
        "/v1/inbound",
        &json!({"session": "s", "origin": "t", "content": "x"}),
    ));
    let id = written["id"].as_i64().unwrap();
    // Recorded, not only written to the file: both reads must see the same counts.
    wait_until("delivered", Duration::from_secs(10), || {
        api.app.row(relayq_engine::QueueName::Inbound, id).state == "delivered"
    });
    let (status, report) = answer(api.get("/v1/status"));
    assert_eq!(status, 200);
    let cli: Value = serde_json::from_str(&api.app.ok(&["status", "--json"])).unwrap();
    assert_eq!(report["counts"], cli["counts"], "the API and the CLI agree");
    let (status, missing) = answer(api.get("/v1/messages/999"));
    assert_eq!(
        (status, &missing["error"]["code"]),
        (404, &json!("not_found"))
    );
    let (status, bad) = answer(api.get("/v1/messages/abc"));
    assert_eq!((status, &bad["error"]["field"]), (400, &json!("id")));
    let (status, _) = answer(api.get("/v2/anything"));
    assert_eq!(status, 404);
    api.stop();
}

#[test]
fn dead_letters_over_http_are_listed_by_filter_a_page_at_a_time_retried_in_order_and_purged() {
    let gate = Gate::shut();
    let api = Api::start(webhook_config(&gate.hook.url).set("daemon", "shutdown_grace = \"5s\""));
    let ids: Vec<i64> = ["one", "two", "three"]
        .iter()
        .map(|t| send(&api, "chat-42", t))
        .collect();
    let elsewhere = send(&api, "elsewhere", "x");
    for id in ids.iter().chain([&elsewhere]) {
        api.app.wait_state(QueueName::Outbound, *id, "dead");
    }

    // Listed by key, two to a page.
    let key = "/v1/dead?queue=outbound&key=%5B%22hook%22%2C%22chat-42%22%5D";
    let (status, page) = answer(api.get(&format!("{key}&limit=2")));
    assert_eq!(status, 200, "{page}");
    let listed = |page: &Value| -> Vec<i64> {
        page["rows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["id"].as_i64().unwrap())
            .collect()
    };
    assert_eq!(
        (listed(&page), &page["total"]),
        (ids[..2].to_vec(), &json!(3))
    );
    let after = page["next_after"].as_i64().expect("a next page");
    let (_, last) = answer(api.get(&format!("{key}&limit=2&after={after}")));
    assert_eq!(
        (listed(&last), &last["next_after"]),
        (vec![ids[2]], &Value::Null)
    );
    let (_, by_reason) = answer(api.get("/v1/dead?reason=404"));
    assert_eq!(
        by_reason["total"], 4,
        "every row died of a 404: {by_reason}"
    );
    let (status, bad) = answer(api.get("/v1/dead?queue=outbox"));
    assert_eq!((status, &bad["error"]["code"]), (400, &json!("invalid")));

    // A bulk operation must say which rows; a dry run changes nothing.
    let (status, _) = answer(api.post("/v1/dead/purge", &json!({})));
    assert_eq!(status, 400, "no selection is not taken as every row");
    let (status, dry) = answer(api.post(
        "/v1/dead/purge",
        &json!({"key": "[\"hook\",\"elsewhere\"]", "dry_run": true}),
    ));
    assert_eq!((status, &dry["ids"]), (200, &json!([elsewhere])), "{dry}");
    assert_eq!(api.app.engine().dead_rows(None).unwrap().len(), 4);

    // Retried by filter: delivered in their original order.
    gate.set_open(true);
    let (status, retried) = answer(api.post(
        "/v1/dead/retry",
        &json!({"queue": "outbound", "key": "[\"hook\",\"chat-42\"]"}),
    ));
    assert_eq!((status, &retried["count"]), (200, &json!(3)), "{retried}");
    gate.assert_delivered_in_order(&api.app, &ids, 4, &["one", "two", "three"]);

    // A row whose later message was delivered is refused 409 unless forced.
    let early = gate.overtaken_dead_row(&api.app, |text| send(&api, "chat-42", text));
    let (status, refused) = answer(api.post("/v1/dead/retry", &json!({"ids": [early]})));
    assert_eq!(
        (status, &refused["error"]["code"]),
        (409, &json!("out_of_order")),
        "{refused}"
    );
    assert_eq!(api.app.row(QueueName::Outbound, early).state, "dead");
    let (status, _) = answer(api.post("/v1/dead/retry", &json!({"ids": [early], "force": true})));
    assert_eq!(status, 200);
    api.app.wait_state(QueueName::Outbound, early, "delivered");

    // Purged by id; an id that is not a dead row is refused, nothing changed.
    let (status, refused) = answer(api.post("/v1/dead/purge", &json!({"ids": [elsewhere, early]})));
    assert_eq!(
        (status, &refused["error"]["code"]),
        (409, &json!("not_dead")),
        "{refused}"
    );
    let (status, purged) = answer(api.post("/v1/dead/purge", &json!({"ids": [elsewhere]})));
    assert_eq!((status, &purged["count"]), (200, &json!(1)));
    assert!(api.app.engine().dead_rows(None).unwrap().is_empty());
    api.stop();
}

#[test]
fn hook_events_posted_over_http_are_processed_like_the_command_hooks_and_sessions_can_be_expired() {
    let api = Api::start(Config::default().set("daemon", "shutdown_grace = \"5s\""));
    let post_hook = |agent: &str, query: &str, body: &str| {
        api.request(reqwest::Method::POST, &format!("/v1/hooks/{agent}{query}"))
            .header("Content-Type", "application/json")
            .body(body.to_string())
            .send()
            .unwrap()
    };
    for event in [
        json!({"hook_event_name": "SessionStart", "session_id": "native-1", "cwd": "/src"}),
        json!({"hook_event_name": "UserPromptSubmit", "session_id": "native-1", "prompt": "p1"}),
        json!({"hook_event_name": "Stop", "session_id": "native-1", "last_assistant_message": "done"}),
    ] {
        let r = post_hook("claude", "?session=alpha", &event.to_string());
        assert_eq!(
            r.status(),
            204,
            "an empty 2xx: Claude Code reads it as success"
        );
        assert_eq!(r.text().unwrap(), "");
    }
    wait_until("the agent-finished notice", Duration::from_secs(10), || {
        api.app.lines(NOTICES).len() == 1
    });
    let notice = &api.app.lines(NOTICES)[0];
    assert_eq!(notice["text"], "alpha: agent finished\n\ndone");

    let (status, sessions) = answer(api.get("/v1/sessions"));
    assert_eq!(status, 200);
    let alpha = &sessions.as_array().unwrap()[0];
    assert_eq!(
        (&alpha["key"], &alpha["cwd"], &alpha["last_user_input"]),
        (&json!("alpha"), &json!("/src"), &json!("p1"))
    );

    // Not JSON: 400, and an error event stands for it; an unknown agent: 404.
    let r = post_hook("claude", "?session=alpha", "{not json");
    let (status, body) = answer(r);
    assert_eq!(status, 400, "{body}");
    assert!(body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("recorded as an error event"));
    let r = post_hook("cursor", "", "{}");
    assert_eq!(r.status(), 404);
    let error_events = || {
        api.app.query_value::<i64>(
            "SELECT COUNT(*) FROM queue_rows WHERE queue = 'hooks' AND payload LIKE '%\"event\":\"error\"%'",
        ).unwrap()
    };
    assert_eq!(error_events(), 1);

    // Expiring a session: its pending input will never be delivered.
    let (status, expired) = answer(api.post("/v1/sessions/alpha/expire", &json!({})));
    assert_eq!(
        (status, &expired["session"]),
        (200, &json!("alpha")),
        "{expired}"
    );
    api.stop();
}

#[test]
fn a_paused_destination_and_a_paused_queue_wait_across_a_restart_until_resumed() {
    let hook = Endpoint::start(|_| Reply::status(200));
    let config = webhook_config(&hook.url)
        .set("daemon", "shutdown_grace = \"5s\"")
        .default_channel("out")
        .channel("out", "file", &["path = \"out.jsonl\""]);
    let mut api = Api::start(config);
    let chat = json!({"queue": "outbound", "key": "[\"hook\",\"chat-42\"]"});
    let (status, paused) = answer(api.post("/v1/pause", &chat));
    assert_eq!((status, &paused["paused"]), (200, &json!(true)), "{paused}");
    let (_, queue_paused) = answer(api.post("/v1/pause", &json!({"queue": "inbound"})));
    assert_eq!(queue_paused["key"], Value::Null, "the whole queue");

    let held = [send(&api, "chat-42", "one"), send(&api, "chat-42", "two")];
    let free = send(&api, "elsewhere", "x");
    let (_, inbound) = answer(api.post(
        "/v1/inbound",
        &json!({"session": "s1", "origin": "test", "content": "hello"}),
    ));
    api.app.wait_state(QueueName::Outbound, free, "delivered");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        hook.calls().len(),
        1,
        "only the other destination was sent to"
    );
    assert!(
        api.app.lines("out.jsonl").is_empty(),
        "the inbound queue waits"
    );

    // A restart keeps both pauses.
    api.restart();
    let (_, listed) = answer(api.get("/v1/pauses"));
    assert_eq!(listed.as_array().unwrap().len(), 2, "{listed}");
    let (_, status) = answer(api.get("/v1/status"));
    assert_eq!(status["paused"].as_array().unwrap().len(), 2, "{status}");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(hook.calls().len(), 1, "still held after the restart");
    assert_eq!(api.app.row(QueueName::Outbound, held[0]).state, "pending");
    assert_eq!(
        api.app.row(QueueName::Outbound, held[0]).attempts,
        0,
        "no attempt charged"
    );

    let (status, resumed) = answer(api.post("/v1/resume", &chat));
    assert_eq!((status, &resumed["was_paused"]), (200, &json!(true)));
    for id in held {
        api.app.wait_state(QueueName::Outbound, id, "delivered");
    }
    let texts: Vec<_> = hook.texts(1);
    assert_eq!(texts, ["one", "two"], "in order once resumed");
    answer(api.post("/v1/resume", &json!({"queue": "inbound"})));
    api.app.wait_state(
        QueueName::Inbound,
        inbound["id"].as_i64().unwrap(),
        "delivered",
    );

    let (status, bad) = answer(api.post("/v1/pause", &json!({"queue": "outbox"})));
    assert_eq!(
        (status, &bad["error"]["field"]),
        (400, &json!("queue")),
        "{bad}"
    );
    // A NUL in the key was a 500 on PostgreSQL (schemathesis): refused as the key's fault.
    for route in ["/v1/pause", "/v1/resume"] {
        let nul = json!({"queue": "inbound", "key": "a\u{0}b"});
        let (status, bad) = answer(api.post(route, &nul));
        assert_eq!(
            (status, &bad["error"]["field"]),
            (400, &json!("key")),
            "{route}: {bad}"
        );
    }
    api.stop();
}

/// Parses Prometheus/OpenMetrics text strictly: every sample line is `name{labels} value`,
/// names and labels well formed; returns each sample as `name{labels}` → value.
fn parse_metrics(text: &str) -> std::collections::BTreeMap<String, f64> {
    let name_ok = |n: &str| {
        !n.is_empty()
            && n.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
            && !n.starts_with(|c: char| c.is_ascii_digit())
    };
    let mut samples = std::collections::BTreeMap::new();
    assert!(text.ends_with("# EOF\n"), "OpenMetrics ends with # EOF");
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let (series, value) = line.rsplit_once(' ').unwrap_or_else(|| panic!("{line:?}"));
        let value: f64 = value
            .parse()
            .unwrap_or_else(|_| panic!("value of {line:?}"));
        let name = series.split('{').next().unwrap();
        assert!(
            name_ok(name) && name.starts_with("relayq_"),
            "name of {line:?}"
        );
        if let Some(labels) = series.strip_prefix(name) {
            if !labels.is_empty() {
                let inner = labels.strip_prefix('{').and_then(|l| l.strip_suffix('}'));
                for pair in inner.unwrap_or_else(|| panic!("{line:?}")).split(',') {
                    let (k, v) = pair.split_once('=').unwrap_or_else(|| panic!("{line:?}"));
                    assert!(
                        name_ok(k) && v.starts_with('"') && v.ends_with('"'),
                        "{line:?}"
                    );
                }
            }
        }
        samples.insert(series.to_string(), value);
    }
    samples
}

#[test]
fn metrics_are_scraped_as_prometheus_text_with_counts_outcomes_durations_and_hook_errors() {
    let hook = Endpoint::start(|call| match call {
        2 => Reply::status(404),
        _ => Reply::status(200),
    });
    let config = webhook_config(&hook.url)
        .set("daemon", "shutdown_grace = \"5s\"")
        .default_channel("out")
        .channel("out", "file", &["path = \"out.jsonl\""]);
    let api = Api::start(config);
    let ids: Vec<i64> = ["a", "b", "c"].iter().map(|t| send(&api, t, t)).collect();
    let (_, inbound) = answer(api.post(
        "/v1/inbound",
        &json!({"session": "s1", "origin": "test", "content": "hello"}),
    ));
    let bad_hook = api.post_raw(
        "/v1/hooks/claude?session=s1",
        ("Content-Type", "application/json"),
        Some("{not json"),
    );
    assert_eq!(bad_hook.status(), 400);
    for id in &ids {
        wait_until("each row answered", Duration::from_secs(10), || {
            let state = api.app.row(QueueName::Outbound, *id).state;
            state == "delivered" || state == "dead"
        });
    }
    api.app.wait_state(
        QueueName::Inbound,
        inbound["id"].as_i64().unwrap(),
        "delivered",
    );
    let scrape = || {
        let r = api.get_with(
            "/metrics",
            ("accept", "application/openmetrics-text; version=1.0.0"),
        );
        assert_eq!(r.status(), 200);
        let kind = r.headers()["content-type"].to_str().unwrap().to_string();
        assert!(kind.starts_with("application/openmetrics-text"), "{kind}");
        parse_metrics(&r.text().unwrap())
    };
    wait_until("the error event processed", Duration::from_secs(10), || {
        scrape().get("relayq_hook_receiver_errors_total{agent=\"claude\"}") == Some(&1.0)
    });
    // The row gauges are the database's counts (the hook error's notice is a row too). That
    // notice may still be sent between a scrape and the read of the counts (CI on PostgreSQL:
    // 2 delivered scraped, 3 counted): they are compared once the rows are still.
    let differs = |m: &std::collections::BTreeMap<String, f64>| {
        let counts = api.app.engine().counts().unwrap();
        counts.iter().find_map(|c| {
            let series = format!("relayq_rows{{queue=\"{}\",state=\"{}\"}}", c.queue, c.state);
            let same_state: i64 = counts
                .iter()
                .filter(|d| d.queue == c.queue && d.state == c.state)
                .map(|d| d.count)
                .sum();
            (m.get(&series) != Some(&(same_state as f64))).then(|| {
                format!(
                    "{series}: scraped {:?}, counted {same_state}",
                    m.get(&series)
                )
            })
        })
    };
    let mut m = Default::default();
    wait_until(
        "the row gauges to be the database's counts",
        Duration::from_secs(10),
        || {
            m = scrape();
            match differs(&m) {
                Some(difference) => {
                    eprintln!("not yet: {difference}");
                    false
                }
                None => true,
            }
        },
    );
    let at = |series: &str| {
        *m.get(series)
            .unwrap_or_else(|| panic!("no {series} in {m:#?}"))
    };
    assert_eq!(at("relayq_rows{queue=\"outbound\",state=\"dead\"}"), 1.0);
    assert_eq!(
        at("relayq_rows{queue=\"inbound\",state=\"pending\"}"),
        0.0,
        "every queue and state is there"
    );
    let hook_label = "{queue=\"outbound\",channel=\"hook\"}";
    assert_eq!(at(&format!("relayq_enqueued_total{hook_label}")), 3.0);
    assert_eq!(at(&format!("relayq_delivered_total{hook_label}")), 2.0);
    assert_eq!(at(&format!("relayq_dead_total{hook_label}")), 1.0);
    assert_eq!(
        at("relayq_delivered_total{queue=\"inbound\",channel=\"out\"}"),
        1.0
    );
    assert_eq!(
        at("relayq_delivery_duration_seconds_count{channel=\"hook\"}"),
        3.0
    );
    assert!(at("relayq_delivery_duration_seconds_sum{channel=\"hook\"}") > 0.0);
    assert_eq!(
        at("relayq_oldest_pending_age_seconds{queue=\"outbound\"}"),
        0.0
    );
    assert_eq!(at("relayq_channel_ready{channel=\"hook\"}"), 1.0);
    assert_eq!(at("relayq_channel_paused{channel=\"hook\"}"), 0.0);
    assert_eq!(at("relayq_leases_reclaimed_total"), 0.0);
    assert_eq!(at("relayq_operator_pauses{queue=\"outbound\"}"), 0.0);
    api.stop();
}

#[test]
fn lanes_tell_a_failing_head_holding_rows_back_from_a_destination_delivering() {
    let (_hook, api) = failing_hook();
    let first = send(&api, "chat-1", "one");
    send(&api, "chat-1", "two");
    wait_until("the head to fail", Duration::from_secs(10), || {
        api.app.row(QueueName::Outbound, first).attempts == 1
            && api.app.row(QueueName::Outbound, first).state == "pending"
    });
    let (status, lanes) = answer(api.get("/v1/lanes"));
    assert_eq!(status, 200, "{lanes}");
    let lane = &lanes[0];
    assert_eq!(
        (
            &lane["key"],
            &lane["rows"],
            &lane["state"],
            &lane["head_id"]
        ),
        (
            &json!("[\"hook\",\"chat-1\"]"),
            &json!(2),
            &json!("blocked by a failing head"),
            &json!(first)
        )
    );
    assert!(
        lane["head_last_error"].as_str().unwrap().contains("500"),
        "{lane}"
    );
    assert!(
        lane["head_next_attempt_at"].is_string(),
        "RFC 3339 with _ms beside it"
    );
    let (status, _) = answer(api.get("/v1/lanes?limit=0"));
    assert_eq!(status, 400);
    api.stop();
}

/// Issue 27, item 24: `promtool check metrics` warned that five counters had no HELP text: the
/// OpenMetrics HELP names the family (`relayq_enqueued`), the samples `relayq_enqueued_total`.
/// A scraper that does not ask for OpenMetrics gets the Prometheus text format, in which every
/// sample's metric has its HELP and TYPE, as promtool's lint asks.
#[test]
fn metrics_without_openmetrics_in_accept_give_every_sample_its_help() {
    let api = Api::start(file_config());
    let id = api.app.enqueue("s", "hello");
    api.app.wait_state(QueueName::Inbound, id, "delivered");
    let r = api.get("/metrics");
    let kind = r.headers()["content-type"].to_str().unwrap().to_string();
    assert!(kind.starts_with("text/plain; version=0.0.4"), "{kind}");
    let text = r.text().unwrap();
    assert!(
        !text.contains("# EOF") && !text.contains("# UNIT"),
        "{text}"
    );
    let helped: std::collections::BTreeSet<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# HELP ")?.split(' ').next())
        .collect();
    let mut samples = 0;
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let name = line.split(['{', ' ']).next().unwrap();
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| name.strip_suffix(s).filter(|f| helped.contains(f)))
            .unwrap_or(name);
        assert!(helped.contains(family), "{name} has no HELP: {text}");
        samples += 1;
    }
    assert!(helped.contains("relayq_delivered_total"), "{text}");
    assert!(samples > 10);
    api.stop();
}
