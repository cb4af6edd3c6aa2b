//! `relayq hook`: every agent fixture fed to the receiver, with the row it must write (or not),
//! with no daemon running; bad input; the exit codes agent CLIs depend on.

use std::path::PathBuf;

use std::time::{Duration, Instant};

use crate::common::*;
use serde_json::{json, Value};

fn fixtures(agent: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(agent)
}

/// The hook rows written so far: (session key, stored event).
fn hook_rows(app: &App) -> Vec<(String, Value)> {
    if app.database_url().is_none() && !app.db().exists() {
        return vec![];
    }
    let sql = "SELECT key, payload FROM queue_rows WHERE queue = 'hooks' ORDER BY id";
    let rows: Vec<(String, String)> = app.query(sql, |r| Ok((r.get(0)?, r.get(1)?)));
    rows.into_iter()
        .map(|(k, p)| (k, serde_json::from_str(&p).unwrap()))
        .collect()
}

const CLAUDE: &[(&str, Option<&str>)] = &[
    ("SessionStart", Some("session_start")),
    ("UserPromptSubmit", Some("user_prompt_submit")),
    ("PreToolUse", Some("tool_use")),
    ("PostToolUse", Some("tool_done")),
    ("PostToolUseFailure", Some("tool_done")),
    ("Stop", Some("agent_stop")),
    ("Notification", Some("notification")),
    ("PermissionRequest", Some("notification")),
    ("StopFailure", Some("error")),
    ("SessionEnd", Some("session_end")),
    ("Setup", None),
    ("InstructionsLoaded", None),
    ("UserPromptExpansion", None),
    ("PermissionDenied", Some("notification")),
    ("PostToolBatch", None),
    ("MessageDisplay", Some("answer_text")),
    ("SubagentStart", None),
    ("SubagentStop", None),
    ("TaskCreated", None),
    ("TaskCompleted", None),
    ("TeammateIdle", None),
    ("ConfigChange", None),
    ("CwdChanged", None),
    ("DirectoryAdded", None),
    ("FileChanged", None),
    ("WorktreeCreate", None),
    ("WorktreeRemove", None),
    ("PreCompact", None),
    ("PostCompact", None),
    ("PreModelSwitch", None),
    ("PostModelSwitch", None),
    ("Elicitation", None),
    ("ElicitationResult", None),
];

const CODEX: &[(&str, Option<&str>)] = &[
    ("notify", Some("agent_stop")),
    ("SessionStart", Some("session_start")),
    ("UserPromptSubmit", Some("user_prompt_submit")),
    ("PreToolUse", Some("tool_use")),
    ("PermissionRequest", Some("notification")),
    ("PostToolUse", Some("tool_done")),
    ("Stop", Some("agent_stop")),
    ("PreCompact", None),
];

const GEMINI: &[(&str, Option<&str>)] = &[
    ("SessionStart", Some("session_start")),
    ("BeforeAgent", Some("user_prompt_submit")),
    ("BeforeTool", Some("tool_use")),
    ("AfterTool", Some("tool_done")),
    ("AfterAgent", Some("agent_stop")),
    ("Notification", Some("notification")),
    ("SessionEnd", Some("session_end")),
    ("BeforeModel", None),
    ("AfterModel", Some("answer_text")),
    ("BeforeToolSelection", None),
    ("PreCompress", None),
];

fn check_agent(agent: &str, dir: &str, table: &[(&str, Option<&str>)]) {
    // Every fixture has an expectation here, so a new fixture cannot go untested. (The
    // payloads in `captured/` are the real CLIs': the engine's agent-state tests read them.)
    let mut files: Vec<String> = std::fs::read_dir(fixtures(dir))
        .unwrap()
        .filter(|e| e.as_ref().unwrap().path().is_file())
        .map(|e| {
            e.unwrap()
                .file_name()
                .to_string_lossy()
                .trim_end_matches(".json")
                .to_string()
        })
        .collect();
    files.sort();
    let mut named: Vec<String> = table.iter().map(|(n, _)| n.to_string()).collect();
    named.sort();
    assert_eq!(files, named, "{dir}: fixtures and expectations differ");

    let app = App::new("");
    let mut expected_rows = 0;
    for (name, expected) in table {
        let text = std::fs::read_to_string(fixtures(dir).join(format!("{name}.json"))).unwrap();
        let payload: Value = serde_json::from_str(&text).unwrap();
        let out = app.hook(agent, &text, *name == "notify", &[]);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{dir}/{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            out.stdout.is_empty(),
            "{dir}/{name}: stdout must stay empty"
        );
        let rows = hook_rows(&app);
        match expected {
            None => assert_eq!(rows.len(), expected_rows, "{dir}/{name} must write no row"),
            Some(event) => {
                expected_rows += 1;
                assert_eq!(rows.len(), expected_rows, "{dir}/{name} must write one row");
                let (key, stored) = rows.last().unwrap();
                let native_id = payload
                    .get("session_id")
                    .or_else(|| payload.get("thread-id"))
                    .unwrap();
                assert_eq!(
                    key,
                    native_id.as_str().unwrap(),
                    "{dir}/{name}: keyed by the agent's session id"
                );
                assert_eq!(stored["event"], *event, "{dir}/{name}");
                assert_eq!(stored["agent"], agent);
                assert_eq!(
                    stored["data"], payload,
                    "{dir}/{name}: payload kept whole, unknown fields included"
                );
            }
        }
    }
}

#[test]
fn claude_code_fixtures_map_to_the_expected_rows() {
    check_agent("claude", "claude-code", CLAUDE);
}

#[test]
fn codex_fixtures_map_to_the_expected_rows() {
    check_agent("codex", "codex", CODEX);
}

#[test]
fn gemini_fixtures_map_to_the_expected_rows() {
    check_agent("gemini", "gemini", GEMINI);
}

#[test]
fn relayq_session_names_the_key_and_unknown_fields_are_kept() {
    let app = App::new("");
    let payload = r#"{"session_id":"native-1","hook_event_name":"Stop","last_assistant_message":"done","brand_new_field":{"x":1}}"#;
    let out = app.hook("claude", payload, false, &[("RELAYQ_SESSION", "relayq-7")]);
    assert_eq!(out.status.code(), Some(0));
    let rows = hook_rows(&app);
    assert_eq!(rows[0].0, "relayq-7");
    assert_eq!(rows[0].1["native_session_id"], "native-1");
    assert_eq!(rows[0].1["data"]["brand_new_field"]["x"], 1);
}

#[test]
fn invalid_json_is_stored_as_an_error_event_and_exits_1_with_one_line() {
    let app = App::new("");
    let garbage = format!("{{not json {}", "x".repeat(10_000));
    let out = app.hook("claude", &garbage, false, &[("RELAYQ_SESSION", "s1")]);
    assert_eq!(out.status.code(), Some(1), "non-blocking failure");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains("not valid JSON"), "{err}");
    let rows = hook_rows(&app);
    assert_eq!(rows.len(), 1);
    let (key, row) = &rows[0];
    assert_eq!((key.as_str(), row["event"].as_str()), ("s1", Some("error")));
    assert!(row["data"]["error"]
        .as_str()
        .unwrap()
        .contains("invalid JSON"));
    assert_eq!(
        row["data"]["input"].as_str().unwrap(),
        &garbage[..4096],
        "the first 4 KiB of the input"
    );
}

#[test]
fn hook_failures_exit_1_never_2() {
    let app = App::sqlite("");
    // an unknown agent: a usage error anywhere else, but exit 2 would block the agent
    let out = app.hook("copilot", "{}", false, &[]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // an unwritable database
    let out = app
        .bare()
        .args([
            "--db",
            "/nonexistent/dir/q.db",
            "hook",
            "--agent",
            "claude",
            r#"{"hook_event_name":"Stop","session_id":"s"}"#,
        ])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stderr)
            .trim_end()
            .lines()
            .count(),
        1
    );
    // (An invalid config file no longer fails the hook: the event is kept, see
    // `regression::a_broken_config_file_does_not_lose_the_agents_event`.)
}

/// The agent waits on its hook: a locked database holds it for the wait (`RELAYQ_HOOK_WAIT`)
/// and no longer; the event is then spooled, never half-written, and the hook exits 0.
#[test]
fn a_locked_database_holds_the_hook_for_its_wait_then_the_event_is_spooled() {
    let app = App::new("");
    let payload = r#"{"hook_event_name":"Stop","session_id":"s"}"#;
    assert_eq!(
        app.hook("claude", payload, false, &[]).status.code(),
        Some(0)
    );
    let tx = app.hold_writes();
    let start = Instant::now();
    let out = app.hook("claude", payload, false, &[("RELAYQ_HOOK_WAIT", "1s")]);
    let took = start.elapsed();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        took >= Duration::from_millis(900),
        "waited for the lock first ({took:?})"
    );
    assert!(
        took < Duration::from_secs(5),
        "gave up waiting instead of holding the agent ({took:?})"
    );
    drop(tx);
    assert_eq!(hook_rows(&app).len(), 1, "nothing half-written");
    let spool = std::fs::read_dir(app.path("relayq.db.hook-spool")).unwrap();
    let kept = spool.filter(|e| {
        e.as_ref()
            .unwrap()
            .path()
            .extension()
            .is_some_and(|x| x == "json")
    });
    assert_eq!(kept.count(), 1, "the event is kept");
}

/// On PostgreSQL, a hook that cannot reach the server keeps its event in the spool within its
/// wait, and exits 0 (the agent is not held); the first hook that reaches the server again
/// records the kept events, oldest first, before its own.
#[test]
fn with_postgresql_unreachable_hooks_spool_their_events_and_the_next_records_them_in_order() {
    let app = App::with_postgres("");
    let server = app.postgres().unwrap();
    let prompt = |text: &str| {
        let payload =
            json!({"hook_event_name": "UserPromptSubmit", "session_id": "s", "prompt": text});
        let start = Instant::now();
        let out = app.hook(
            "claude",
            &payload.to_string(),
            false,
            &[("RELAYQ_HOOK_WAIT", "1s")],
        );
        let stderr = String::from_utf8_lossy(&out.stderr).to_string();
        assert_eq!(out.status.code(), Some(0), "{text}: {stderr}");
        (start.elapsed(), stderr)
    };
    prompt("one");
    server.stop();
    for text in ["two", "three"] {
        let (took, said) = prompt(text);
        assert!(
            took < Duration::from_secs(5),
            "{text} held the agent {took:?}"
        );
        assert!(said.contains("kept in"), "{text}: {said}");
    }
    server.start_again();
    prompt("four");
    let prompts: Vec<String> = hook_rows(&app)
        .iter()
        .map(|(_, event)| {
            event["data"]["prompt"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect();
    assert_eq!(prompts, ["one", "two", "three", "four"]);
}

/// A config file that is not valid still names its PostgreSQL database: the agent's event is
/// recorded there, not in a SQLite file no daemon reads; a URL that cannot be read (its
/// variable unset) keeps the event in the spool.
#[test]
fn a_broken_config_naming_postgresql_records_the_agents_event_there() {
    let database = relayq_engine::storage::postgresql::test_server::TestDatabase::create();
    let broken = format!(
        "[database]\nurl = {:?}\n\n[daemon]\nshutdown_grace = \"5s\n",
        database.url()
    );
    let app = App::sqlite(broken);
    let payload = r#"{"hook_event_name":"Stop","session_id":"s"}"#;
    let out = app.hook("claude", payload, false, &[]);
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{said}");
    assert!(said.contains("PostgreSQL database it names"), "{said}");
    let mut client =
        relayq_engine::postgres::Client::connect(&database.url(), relayq_engine::postgres::NoTls)
            .unwrap();
    let rows: i64 = client
        .query_one("SELECT COUNT(*) FROM queue_rows WHERE queue = 'hooks'", &[])
        .unwrap()
        .get(0);
    assert_eq!(rows, 1);
    assert!(!app.db().exists(), "no SQLite file was made");

    app.write_config("[database]\nurl_env = \"RELAYQ_TEST_UNSET_URL\"\n");
    let out = app.hook("claude", payload, false, &[]);
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{said}");
    assert!(
        said.contains("kept in") && said.contains("hook-spool"),
        "{said}"
    );
}
