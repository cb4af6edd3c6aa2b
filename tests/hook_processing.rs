//! Hook events processed by `relayq serve`: fired by real `relayq hook` processes while the
//! daemon is down, processed in order once it starts; and `kill -9` in the middle of the
//! handlers never leaves half an effect.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::common::{wait_until, App, Config, NOTICES};
use relayq_engine::{Agent, EventType, HookEvent, QueuePolicy};
use serde_json::{json, Value};

fn config() -> Config {
    Config::default()
        .set("daemon", "sweep_interval = \"200ms\"")
        .set("daemon", "shutdown_grace = \"5s\"")
}

/// Hook rows not yet finished.
fn unfinished(app: &App) -> i64 {
    app.engine()
        .counts()
        .unwrap()
        .iter()
        .filter(|c| c.queue == "hooks" && (c.state == "pending" || c.state == "leased"))
        .map(|c| c.count)
        .sum()
}

/// Outbound rows' texts per session, in row order (the order the handlers wrote them).
fn outbound_texts(app: &App) -> BTreeMap<String, Vec<String>> {
    let payloads = app.query(
        "SELECT payload FROM queue_rows WHERE queue = 'outbound' ORDER BY id",
        |r| r.get::<String, _>(0),
    );
    let mut map = BTreeMap::<String, Vec<String>>::new();
    for payload in payloads {
        let m = relayq_engine::OutboundMessage::from_payload(&payload).unwrap();
        // A notice is stored as data; this is the plain text a file or webhook channel sends.
        let text = match &m.notice {
            Some(notice) => relayq_actors::channels::notice::plain(notice),
            None => m.text.clone(),
        };
        map.entry(m.session.clone().unwrap())
            .or_default()
            .push(text);
    }
    map
}

#[test]
fn hooks_fired_while_the_daemon_is_down_are_processed_in_order_once_it_starts() {
    let app = App::new(config());
    // Three agent sessions, as three Claude Code instances would fire them, daemon down.
    let sessions = ["alpha", "beta", "gamma"];
    for round in 0..4 {
        for s in sessions {
            let env = [("RELAYQ_SESSION", s)];
            let fire = |payload: Value| {
                let out = app.hook("claude", &payload.to_string(), false, &env);
                assert!(
                    out.status.success(),
                    "{}",
                    String::from_utf8_lossy(&out.stderr)
                );
            };
            if round == 0 {
                fire(json!({"hook_event_name": "SessionStart", "session_id": s, "cwd": "/src"}));
            }
            fire(
                json!({"hook_event_name": "UserPromptSubmit", "session_id": s, "prompt": format!("p{round}")}),
            );
            fire(json!({"hook_event_name": "PreToolUse", "session_id": s, "tool_name": "Bash"}));
            fire(
                json!({"hook_event_name": "Stop", "session_id": s, "last_assistant_message": format!("a{round}")}),
            );
        }
    }
    assert_eq!(unfinished(&app), 3 * 13, "kept while the daemon was down");

    let daemon = app.serve();
    wait_until("hook rows processed", Duration::from_secs(20), || {
        unfinished(&app) == 0
    });
    wait_until("notices written", Duration::from_secs(20), || {
        app.lines(NOTICES).len() == 12
    });
    let mut seen = BTreeMap::<String, Vec<String>>::new();
    for line in app.lines(NOTICES) {
        seen.entry(line["session"].as_str().unwrap().into())
            .or_default()
            .push(line["text"].as_str().unwrap().into());
    }
    for s in sessions {
        let expected: Vec<String> = (0..4)
            .map(|r| format!("{s}: agent finished\n\na{r}"))
            .collect();
        assert_eq!(seen[s], expected, "session {s}");
    }
    let listed: Value = serde_json::from_str(&app.ok(&["session", "list", "--json"])).unwrap();
    let listed = listed.as_array().unwrap();
    assert_eq!(listed.len(), 3);
    for s in listed {
        assert_eq!(
            (s["current_turn"].as_i64(), s["last_user_input"].as_str()),
            (Some(4), Some("p3"))
        );
        assert_eq!(
            (s["cwd"].as_str(), s["turn_running"].as_bool()),
            (Some("/src"), Some(false))
        );
    }
    // A session end while the daemon runs: the session is ended, its pending input expired.
    let end = json!({"hook_event_name": "SessionEnd", "session_id": "alpha", "reason": "exit"});
    app.hook(
        "claude",
        &end.to_string(),
        false,
        &[("RELAYQ_SESSION", "alpha")],
    );
    wait_until("session ended", Duration::from_secs(10), || {
        app.engine().session("alpha").unwrap().unwrap().state == "ended"
    });
    daemon.stop();
}

#[test]
fn kill_9_during_the_handlers_never_leaves_half_an_effect() {
    let app = App::new(config());
    let sessions: Vec<String> = (0..20).map(|n| format!("s{n:02}")).collect();
    let rounds = 60;
    let mut rows = Vec::new();
    for round in 0..rounds {
        for s in &sessions {
            let event =
                |kind, data: Value| HookEvent::new(Agent::Claude, kind, s.clone(), data).to_row();
            rows.push(event(
                EventType::UserPromptSubmit,
                json!({"prompt": format!("p{round}")}),
            ));
            rows.push(event(EventType::ToolUse, json!({})));
            rows.push(event(
                EventType::AgentStop,
                json!({"last_assistant_message": format!("a{round}")}),
            ));
        }
    }
    let total = rows.len() as i64;
    app.engine()
        .queue(relayq_engine::QueueName::Hooks, QueuePolicy::hooks())
        .enqueue_many(&rows)
        .unwrap();

    let mut partial_kills = 0;
    for delay in [80, 160, 240, 320] {
        let mut daemon = app.serve();
        std::thread::sleep(Duration::from_millis(delay));
        daemon.signal("KILL");
        let left = unfinished(&app);
        if left > 0 && left < total {
            partial_kills += 1;
        }
    }
    assert!(partial_kills > 0, "at least one kill landed mid-stream");

    let daemon = app.serve();
    wait_until("every hook row processed", Duration::from_secs(60), || {
        unfinished(&app) == 0
    });
    daemon.stop();

    // Exactly one turn per prompt and one notice per stop: an effect applied without its row's
    // completion (or the reverse) would show as an extra or a missing one.
    let texts = outbound_texts(&app);
    for s in &sessions {
        let record = app.engine().session(s).unwrap().unwrap();
        assert_eq!(
            (record.current_turn, record.turn_running),
            (rounds, false),
            "session {s}"
        );
        let expected: Vec<String> = (0..rounds)
            .map(|r| format!("{s}: agent finished\n\na{r}"))
            .collect();
        assert_eq!(texts[s], expected, "session {s}");
    }
    let dead = app.engine().dead_rows(None).unwrap();
    assert!(dead.is_empty(), "{dead:?}");
}
