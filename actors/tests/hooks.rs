//! Hook rows processed by the running actor system (HookClaimer → HookWorker → handlers) on
//! real SQLite files: order per session, coalescing, critical rows under a flood, and the
//! notices the handlers send through a real file channel.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use relayq_actors::channels::file;
use relayq_actors::hooks::buffer::Limits;
use relayq_actors::{ChannelConfig, Relayq, RelayqConfig};
use relayq_engine::hooks::handlers::relayed_events;
use relayq_engine::storage::sql::{Query, Sql};
use relayq_engine::storage::test_db::TestDb;
use relayq_engine::{
    Agent, Engine, EventType, HookEvent, NewRow, NoticeRoute, NoticeRoutes, QueuePolicy,
};
use serde_json::{json, Value};

fn config(dir: &TestDb, limits: Limits) -> RelayqConfig {
    let mut c = RelayqConfig::new(dir.path().join("q.db"), "out");
    c.db = dir.config.clone();
    c.queues.hooks = QueuePolicy {
        backoff: vec![Duration::from_millis(50)],
        ..QueuePolicy::hooks()
    };
    c.notice_routes = NoticeRoutes {
        default: vec![NoticeRoute {
            channel: Some("out".into()),
            to: "log".into(),
            events: relayed_events(),
        }],
        sessions: Default::default(),
        replies: Default::default(),
        limits: Default::default(),
        progress: Default::default(),
        idle_reminders: false,
    };
    c.claims.hook_buffer = limits.capacity;
    c.claims.hook_reserved_critical = limits.reserved_critical;
    c.listen_for_wakes = false;
    c
}

fn hook(session: &str, event: EventType, data: Value) -> NewRow {
    HookEvent::new(Agent::Claude, event, session, data).to_row()
}

fn tool(session: &str, i: usize) -> NewRow {
    let kind = if i.is_multiple_of(2) {
        EventType::ToolUse
    } else {
        EventType::ToolDone
    };
    hook(session, kind, json!({"tool_name": "Bash", "n": i}))
}

/// relayq on `dir` with `limits`, every notice and delivery to the file channel `out`.
async fn start(dir: &TestDb, limits: Limits) -> Relayq {
    let spec = ChannelConfig::File(file::Config {
        timeout: Duration::from_secs(5),
        ..file::Config::new(dir.path().join("out.jsonl"))
    })
    .spec()
    .unwrap();
    Relayq::builder(config(dir, limits))
        .channel("out", spec)
        .start()
        .await
        .unwrap()
}

/// Writes the rows (as `relayq hook` would, daemon down), then starts relayq and waits until
/// no hook row is left pending or leased. Returns the row ids and the running runtime.
async fn run(dir: &TestDb, limits: Limits, rows: &[NewRow]) -> (Vec<i64>, Relayq, Engine) {
    let engine = Engine::open(&dir.config).unwrap();
    let ids = engine
        .queue(relayq_engine::QueueName::Hooks, QueuePolicy::hooks())
        .enqueue_many(rows)
        .unwrap()
        .iter()
        .map(|e| e.id)
        .collect();
    let rt = start(dir, limits).await;
    let unfinished = || {
        engine
            .counts()
            .unwrap()
            .iter()
            .filter(|c| c.state == "pending" || c.state == "leased")
            .map(|c| c.count)
            .sum::<i64>()
    };
    for _ in 0..3000 {
        if unfinished() == 0 {
            return (ids, rt, engine);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!(
        "rows still unfinished after 30s: {:?}",
        engine.counts().unwrap()
    );
}

/// Hook rows' (state, reason) by id.
fn hook_states(engine: &Engine) -> BTreeMap<i64, (String, Option<String>)> {
    let sql = Sql::same("SELECT id, state, reason FROM queue_rows WHERE queue = 'hooks'");
    let conn = engine.database().read().unwrap();
    conn.query_all(&sql, relayq_engine::params![], |r| {
        Ok((r.get(0)?, (r.get(1)?, r.get(2)?)))
    })
    .unwrap()
    .into_iter()
    .collect()
}

/// The notices written to the file channel, per session, in order.
fn notices(dir: &Path) -> BTreeMap<String, Vec<String>> {
    let mut map = BTreeMap::<String, Vec<String>>::new();
    for line in std::fs::read_to_string(dir.join("out.jsonl"))
        .unwrap_or_default()
        .lines()
    {
        let v: Value = serde_json::from_str(line).unwrap();
        map.entry(v["session"].as_str().unwrap().into())
            .or_default()
            .push(v["text"].as_str().unwrap().into());
    }
    map
}

#[actix_rt::test]
async fn bursty_rows_coalesce_within_a_segment_and_never_across_a_critical_row() {
    let dir = TestDb::from_env();
    let s = "s";
    let rows = vec![
        hook(s, EventType::ToolUse, json!({})),
        hook(s, EventType::ToolDone, json!({})),
        hook(s, EventType::ToolUse, json!({})),
        hook(s, EventType::ToolDone, json!({})),
        hook(s, EventType::UserPromptSubmit, json!({"prompt": "go"})),
        hook(s, EventType::ToolUse, json!({})),
        hook(s, EventType::ToolUse, json!({})),
        hook(
            s,
            EventType::AgentStop,
            json!({"last_assistant_message": "done"}),
        ),
    ];
    let (ids, rt, engine) = run(&dir, Limits::default(), &rows).await;
    let states = hook_states(&engine);
    let reason = |i: usize| states[&ids[i]].1.as_deref();
    for i in 0..ids.len() {
        assert_eq!(states[&ids[i]].0, "delivered", "row {i}");
    }
    // First segment: rows 0 and 1 replaced by the newer 2 and 3. Second segment: 5 by 6. The
    // tool_use rows 2 and 6 are both kept: the prompt (4) separates them.
    let coalesced: Vec<usize> = (0..ids.len())
        .filter(|&i| reason(i) == Some("coalesced"))
        .collect();
    assert_eq!(coalesced, vec![0, 1, 5]);
    for i in [2, 3, 4, 6, 7] {
        assert_eq!(reason(i), None, "row {i} was run");
    }
    let counts = engine.counts().unwrap();
    assert!(counts
        .iter()
        .any(|c| c.queue == "hooks" && c.reason.as_deref() == Some("coalesced") && c.count == 3));
    let session = engine.session(s).unwrap().unwrap();
    assert_eq!((session.current_turn, session.turn_running), (1, false));
    assert_eq!(notices(dir.path())[s], vec!["s: agent finished\n\ndone"]);
    rt.shutdown(Duration::from_secs(5)).await;
}

#[actix_rt::test]
async fn every_critical_row_survives_a_flood_of_bursty_ones_in_order() {
    let dir = TestDb::from_env();
    let s = "flood";
    // One notification every fourth row, tool events between: segments of three bursty rows.
    let mut rows = Vec::new();
    let mut expected = Vec::new();
    for i in 0..400usize {
        if i.is_multiple_of(4) {
            rows.push(hook(
                s,
                EventType::Notification,
                json!({"message": format!("n{i}")}),
            ));
            expected.push(format!("flood needs you: n{i}"));
        } else {
            rows.push(tool(s, i));
        }
    }
    // A small buffer (8 rows, 2 for critical) against batches of 25: eviction and deferral.
    let limits = Limits {
        capacity: 8,
        reserved_critical: 2,
    };
    let (ids, rt, engine) = run(&dir, limits, &rows).await;
    let states = hook_states(&engine);
    let mut dropped = 0;
    for (i, id) in ids.iter().enumerate() {
        let (state, reason) = &states[id];
        assert_eq!(state, "delivered", "row {i} ended {state}");
        if i.is_multiple_of(4) {
            assert_eq!(
                reason.as_deref(),
                None,
                "critical row {i} was run, never dropped"
            );
        } else if reason.is_some() {
            dropped += 1;
        }
    }
    assert!(
        dropped > 100,
        "the flood was thinned ({dropped} bursty rows dropped)"
    );
    assert_eq!(
        notices(dir.path())[s],
        expected,
        "every notice, once, in order"
    );
    rt.shutdown(Duration::from_secs(5)).await;
}

#[actix_rt::test]
async fn many_sessions_at_once_each_strictly_in_order() {
    let dir = TestDb::from_env();
    let sessions: Vec<String> = (0..40).map(|n| format!("s{n:02}")).collect();
    let mut rows = Vec::new();
    // Interleaved as many agents firing at once would write them.
    for round in 0..10 {
        for s in &sessions {
            rows.push(hook(
                s,
                EventType::UserPromptSubmit,
                json!({"prompt": format!("p{round}")}),
            ));
            rows.push(tool(s, round));
            rows.push(hook(
                s,
                EventType::AgentStop,
                json!({"last_assistant_message": format!("a{round}")}),
            ));
        }
    }
    let (_, rt, engine) = run(&dir, Limits::default(), &rows).await;
    let notices = notices(dir.path());
    for s in &sessions {
        let expected: Vec<String> = (0..10)
            .map(|r| format!("{s}: agent finished\n\na{r}"))
            .collect();
        assert_eq!(notices[s], expected, "session {s}");
        let record = engine.session(s).unwrap().unwrap();
        assert_eq!(
            (
                record.current_turn,
                record.turn_running,
                record.last_user_input.as_deref()
            ),
            (10, false, Some("p9")),
            "session {s}"
        );
    }
    rt.shutdown(Duration::from_secs(5)).await;
}

#[actix_rt::test]
async fn a_chatty_session_does_not_hold_up_a_quiet_one() {
    let dir = TestDb::from_env();
    let engine = Engine::open(&dir.config).unwrap();
    let hooks = engine.queue(relayq_engine::QueueName::Hooks, QueuePolicy::hooks());
    // 1500 critical rows written first for one session, then three for another.
    let chatty: Vec<NewRow> = (0..1500)
        .map(|i| {
            hook(
                "chatty",
                EventType::Notification,
                json!({"message": format!("n{i}")}),
            )
        })
        .collect();
    hooks.enqueue_many(&chatty).unwrap();
    let quiet: Vec<i64> = (0..3)
        .map(|i| {
            let row = hook(
                "quiet",
                EventType::Notification,
                json!({"message": format!("q{i}")}),
            );
            hooks.enqueue(&row).unwrap().id
        })
        .collect();
    let rt = start(&dir, Limits::default()).await;
    let quiet_done = || {
        quiet
            .iter()
            .all(|id| hooks.state_of(*id).unwrap().unwrap().state == "delivered")
    };
    for _ in 0..1000 {
        if quiet_done() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(quiet_done(), "the quiet session was processed");
    let chatty_left = engine
        .counts()
        .unwrap()
        .iter()
        .filter(|c| c.queue == "hooks" && (c.state == "pending" || c.state == "leased"))
        .map(|c| c.count)
        .sum::<i64>();
    assert!(
        chatty_left > 0,
        "…while the chatty one still had rows waiting"
    );
    rt.shutdown(Duration::from_secs(5)).await;
}

/// Regression, "hook rows finished out of order after the database went away" (the three-node
/// chaos run: "hooks h2: row 97 finished … after row 104"): PostgreSQL stops while a worker
/// runs one of a session's rows. The worker gave that row and the rows buffered behind it back
/// in a write that failed too (the database was still down), so they stayed leased to this
/// node, out of every worker's hands. A claim does not wait for rows leased to its own node
/// (they are in its workers' buffers), so once the database was back the session's later rows
/// were claimed and run first, and the lost ones were extended with the buffered leases until
/// the daemon stopped.
#[actix_rt::test]
async fn a_database_outage_while_a_hook_row_runs_neither_reorders_nor_strands_the_sessions_rows() {
    let dir = TestDb::postgres_own_server();
    let engine = Engine::open(&dir.config).unwrap();
    let rows: Vec<NewRow> = (0..2_000)
        .map(|i| {
            hook(
                "h",
                EventType::UserPromptSubmit,
                json!({"prompt": format!("p{i}")}),
            )
        })
        .collect();
    let hooks = engine.queue(relayq_engine::QueueName::Hooks, QueuePolicy::hooks());
    hooks.enqueue_many(&rows).unwrap();
    let count = |state: &str| {
        let sql =
            Sql::same("SELECT COUNT(*) FROM queue_rows WHERE queue = 'hooks' AND state = :state");
        let conn = engine.database().read().ok()?;
        conn.query_all(&sql, relayq_engine::params![":state" => state], |r| {
            r.get::<i64, _>(0)
        })
        .ok()?
        .pop()
    };
    let rt = start(&dir, Limits::default()).await;
    // The database goes away mid-run, three times, each for longer than a claim's retry.
    let server = dir.server().unwrap();
    for at in [200, 700, 1_200] {
        let mut waited = 0;
        while count("delivered").unwrap_or(0) < at && waited < 3_000 {
            tokio::time::sleep(Duration::from_millis(10)).await;
            waited += 1;
        }
        server.stop();
        tokio::time::sleep(Duration::from_secs(2)).await;
        server.start_again();
    }
    let mut waited = 0;
    while count("delivered") != Some(2_000) {
        assert!(
            waited < 6_000,
            "hook rows not all run a minute after the database came back: {} delivered, {:?} leased",
            count("delivered").unwrap_or(-1),
            count("leased")
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
        waited += 1;
    }
    let sql = Sql::same("SELECT id, finished_at FROM queue_rows WHERE queue = 'hooks' ORDER BY id");
    let finished: Vec<(i64, i64)> = engine
        .database()
        .read()
        .unwrap()
        .query_all(&sql, relayq_engine::params![], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .unwrap();
    for pair in finished.windows(2) {
        let ((id1, at1), (id2, at2)) = (pair[0], pair[1]);
        assert!(
            at1 <= at2,
            "row {id1} finished at {at1}, after row {id2} at {at2}"
        );
    }
    let session = engine.session("h").unwrap().unwrap();
    assert_eq!(session.last_user_input.as_deref(), Some("p1999"));
    rt.shutdown(Duration::from_secs(5)).await;
}
