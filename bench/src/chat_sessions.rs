//! `/sessions` with 1 000 sessions in the registry, all started from one chat (the worst
//! case: every one is that chat's): how long recording the request and writing its answer
//! (the page of 10, the count, each session's agent state, the reply's outbound row) takes,
//! p50 / p99 / max over many requests, on SQLite (WAL, `synchronous = NORMAL`, relayq's
//! defaults) and on a durable PostgreSQL server (fsync on). This is the whole of what the
//! daemon does for `/sessions` between reading it and handing the answer to the sender; the
//! chat's send is paced by Telegram's budget, not by this.

use std::sync::Arc;
use std::time::Instant;

use anyhow::Result;
use relayq_engine::chat_sessions::{
    command_of, Asked, ProjectEntry, PublishProjects, RecordRequests, SessionRequest,
};
use relayq_engine::storage::sessions::{record_activity, Activity};
use relayq_engine::storage::test_db::TestDb;
use relayq_engine::{Agent, Engine, NoticeRoutes, SystemClock, WriteDoor};

use crate::stats::percentile;

const ORIGIN: &str = "telegram:bench";
const SESSIONS: usize = 1_000;

fn request(message: usize, text: &str) -> SessionRequest {
    SessionRequest {
        origin: ORIGIN.into(),
        chat: "42".into(),
        thread: None,
        message_id: Some(message.to_string()),
        user_id: Some("1".into()),
        user_name: "bench".into(),
        may: true,
        known: true,
        topics: false,
        max_sessions: u32::MAX,
        asked: Asked::Typed(command_of(text).expect("a command")),
    }
}

/// Prints `/sessions`' latency on both backends, `runs` requests each.
pub fn run(runs: usize) -> Result<()> {
    for (name, db) in [
        ("SQLite", TestDb::sqlite()),
        ("PostgreSQL", TestDb::postgres_durable()),
    ] {
        let engine = Engine::with_clock(db.db.clone(), Arc::new(SystemClock));
        let mut routes = NoticeRoutes::none();
        routes.replies.insert(ORIGIN.into(), "bench".into());
        let door = WriteDoor::new(engine.queues(&Default::default()), routes);
        let node = engine.node().to_string();
        let demo = ProjectEntry {
            name: "demo".into(),
            node: node.clone(),
            agents: vec!["claude".into()],
        };
        door.apply_now(PublishProjects {
            node,
            projects: vec![demo],
        })?;
        // 1 000 sessions started from the chat, each in the registry as its hooks make it.
        for n in 0..SESSIONS {
            let name = format!("s{n}");
            door.apply_now(RecordRequests(vec![request(
                n,
                &format!("/new demo claude {name}"),
            )]))?;
            db.db.write(|tx| {
                let activity = Activity {
                    key: &name,
                    agent: Agent::Claude,
                    native_session_id: None,
                    cwd: None,
                    transcript_path: None,
                    pane: None,
                    node: None,
                    permission_mode: None,
                };
                record_activity(tx, &activity, true)
            })?;
        }
        let mut took = Vec::with_capacity(runs);
        for n in 0..runs {
            let page = 1 + n % 100;
            let asked = request(SESSIONS + n, &format!("/sessions {page}"));
            let began = Instant::now();
            door.apply_now(RecordRequests(vec![asked]))?;
            took.push(began.elapsed().as_secs_f64() * 1000.0);
        }
        eprintln!(
            "/sessions with {SESSIONS} sessions, {name}: p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms ({runs} requests)",
            percentile(&took, 50.0),
            percentile(&took, 99.0),
            percentile(&took, 100.0),
        );
    }
    Ok(())
}
