//! `/sessions` with 1 000 sessions in the registry, all started from one chat (the worst
//! case: every one is that chat's): how long recording the request and writing its answer
//! (the page of 10, the count, each session's agent state, the reply's outbound row) takes,
//! p50 / p99 / max over many requests, on SQLite (WAL, `synchronous = NORMAL`, relayq's
//! defaults) and on a durable PostgreSQL server (fsync on). This is the whole of what the
//! daemon does for `/sessions` between reading it and handing the answer to the sender; the
//! chat's send is paced by Telegram's budget, not by this.
//!
//! And `/new` → "ready" in the chat with relayq serving (see [`new_to_ready`]).

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
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

/// How long the fake agent takes to start: about what a real CLI takes before its first
/// hook, so the chat's per-chat pace (1 message a second) never holds the "ready" message.
const START_UP_MS: u64 = 1_500;

/// `/new` → "NAME is ready" in the chat, less the agent's own start-up, `runs` times on each
/// backend: `relayq serve` as a process, the fake Telegram (`FakeTelegram`), a private tmux
/// server, and the fake agent (`tests/agents/fake_agent.py`) as the project's agent, taking
/// [`START_UP_MS`] before its SessionStart hook. Each run is a new private chat, so no run's
/// messages share a chat's budget with another's. What is left after the agent's start-up
/// (from its first line of Python to its hook) is relayq's: reading the command, recording
/// it, starting tmux and the interpreter, the hook, and sending the answer.
pub fn new_to_ready(root: &Path, relayq: &Path, runs: usize) -> Result<()> {
    let server = relayq_engine::storage::postgresql::test_server::TestServer::start_durable();
    for (name, url) in [("SQLite", None), ("PostgreSQL", Some(server.url()))] {
        let (over, hook) = new_to_ready_on(root, relayq, url.as_deref(), runs)?;
        eprintln!(
            "/new → ready less the agent's start-up, {name}: p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms ({runs} sessions, agent start-up {START_UP_MS} ms); of it the SessionStart hook's `relayq hook` run: p50 {:.0} ms",
            percentile(&over, 50.0),
            percentile(&over, 99.0),
            percentile(&over, 100.0),
            percentile(&hook, 50.0),
        );
    }
    Ok(())
}

/// Each run's time past the agent's start-up, and how long its SessionStart hook ran (ms).
fn new_to_ready_on(
    root: &Path,
    relayq: &Path,
    url: Option<&str>,
    runs: usize,
) -> Result<(Vec<f64>, Vec<f64>)> {
    use relayq_actors::sources::telegram::fake::FakeTelegram;
    const TOKEN: &str = "123456:bench-token";
    let dir = tempfile::tempdir()?;
    let (config, db, log) = (
        dir.path().join("config.toml"),
        dir.path().join("relayq.db"),
        dir.path().join("agent.jsonl"),
    );
    let fake = FakeTelegram::start(TOKEN);
    // A server of its own per backend: a server just killed may still be exiting.
    let socket = format!(
        "relayq-bench-new-{}-{}",
        std::process::id(),
        url.map_or("sqlite", |_| "pg")
    );
    let script = root.join("tests/agents/fake_agent.py");
    let hook = crate::serve::hook_argv(relayq, &config, &db, url);
    let users: Vec<String> = (1..=runs).map(|u| u.to_string()).collect();
    std::fs::write(
        &config,
        format!(
            "[sessions]\ndefault_channel = \"pane\"\n\n\
             [channels.pane]\nkind = \"tmux\"\nsocket_name = {socket:?}\nprograms = [\"python3\"]\n\n\
             [sources.bot]\nkind = \"telegram\"\ntoken = {TOKEN:?}\napi_url = {:?}\n\
             allowed_users = [{}]\npoll_timeout = \"1s\"\nsession_template = \"tg{{chat}}\"\n\n\
             [projects.demo]\ndir = {:?}\nagents = [\"claude\"]\n\
             commands.claude = [\"python3\", {:?}]\nenv.FAKE_AGENT = \"claude\"\n\
             env.FAKE_HOOK = {:?}\nenv.FAKE_LOG = {:?}\nenv.FAKE_START_DELAY_MS = \"{START_UP_MS}\"\n",
            fake.url,
            users.join(", "),
            dir.path().display().to_string(),
            script.display().to_string(),
            serde_json::to_string(&hook)?,
            log.display().to_string(),
        ),
    )?;
    let mut serve = Command::new(relayq);
    serve
        .args(["--config", &config.display().to_string()])
        .args(["--db", &db.display().to_string(), "serve"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.path().join("serve.log"))?);
    if let Some(url) = url {
        serve.env("RELAYQ_DATABASE__URL", url);
    }
    let mut daemon = serve.spawn().context("starting relayq serve")?;
    let measured = (|| -> Result<(Vec<f64>, Vec<f64>)> {
        let (mut over, mut hooks) = (Vec::with_capacity(runs), Vec::with_capacity(runs));
        for run in 1..=runs {
            let chat = run as i64;
            let name = format!("n{run}");
            let began = Instant::now();
            fake.push_text(chat, chat, &format!("/new demo claude {name}"));
            let ready = format!("{name} is ready");
            let deadline = began + Duration::from_secs(60);
            while !fake.texts_to(chat).iter().any(|t| t.starts_with(&ready)) {
                if Instant::now() > deadline {
                    let serve_log = std::fs::read_to_string(dir.path().join("serve.log"))?;
                    bail!(
                        "{name} was not ready within 60 s: {:?}\n{serve_log}",
                        fake.texts_to(chat)
                    );
                }
                std::thread::sleep(Duration::from_millis(2));
            }
            let took = began.elapsed().as_secs_f64() * 1000.0;
            let (start_up, hook) = agent_times_ms(&log, run)?;
            over.push(took - start_up);
            hooks.push(hook);
        }
        Ok((over, hooks))
    })();
    let _ = daemon.kill();
    let _ = daemon.wait();
    let _ = Command::new("tmux")
        .args(["-L", &socket, "kill-server"])
        .status();
    measured
}

/// The `run`th fake agent's own start-up (from its `started` line to its `start_up_done`)
/// and its SessionStart hook's run (from `start_up_done` to the hook's line), in ms.
fn agent_times_ms(log: &Path, run: usize) -> Result<(f64, f64)> {
    let text = std::fs::read_to_string(log)?;
    let lines: Vec<serde_json::Value> = text
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let at = |field: &str, value: Option<&str>| {
        lines
            .iter()
            .filter(|l| l.get(field).is_some() && value.is_none_or(|v| l[field] == v))
            .nth(run - 1)
            .and_then(|l| l["at"].as_f64().or_else(|| l[field].as_f64()))
    };
    match (
        at("started", None),
        at("start_up_done", None),
        at("hook", Some("SessionStart")),
    ) {
        (Some(from), Some(done), Some(hooked)) => {
            Ok(((done - from) * 1000.0, (hooked - done) * 1000.0))
        }
        _ => bail!("the fake agent's log lacks run {run}'s start-up: {text}"),
    }
}
