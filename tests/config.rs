//! The effective configuration: the file, `RELAYQ_<SECTION>__<KEY>` environment variables over
//! it, and `relayq config check | show`.

use std::process::Output;

use crate::common::{assert_usage_error, App, Config};

/// `relayq ARGS` with `env` added to its environment.
fn run_with(app: &App, args: &[&str], env: &[(&str, &str)]) -> Output {
    app.cmd(args).envs(env.iter().copied()).output().unwrap()
}

/// stdout of a run that must succeed.
fn stdout_of(out: Output) -> String {
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn settings_from_the_environment_override_the_file_and_errors_name_the_variable() {
    let app = App::new("[daemon]\nsweep_interval = \"1h\"\n[queues.inbound]\nmax_attempts = 9\n");
    let env = [
        ("RELAYQ_DAEMON__SWEEP_INTERVAL", "2s"),
        ("RELAYQ_QUEUES__INBOUND__MAX_ATTEMPTS", "3"),
    ];
    let shown = stdout_of(run_with(&app, &["config", "show"], &env));
    assert!(shown.contains("sweep_interval = \"2s\""), "{shown}");
    assert!(shown.contains("max_attempts = 3"), "{shown}");
    assert!(
        shown.contains("RELAYQ_DAEMON__SWEEP_INTERVAL"),
        "the header says where it came from"
    );
    let file_only = app.ok(&["config", "show"]);
    assert!(file_only.contains("sweep_interval = \"1h\""), "{file_only}");

    let bad = [("RELAYQ_DAEMON__SWEEP_INTERVAL", "0s")];
    assert_usage_error(
        &run_with(&app, &["status"], &bad),
        "$RELAYQ_DAEMON__SWEEP_INTERVAL: daemon.sweep_interval: 0s is out of range",
    );
    let misspelt = [("RELAYQ_DAEMON__SWEEP_INTREVAL", "1s")];
    let err = assert_usage_error(&run_with(&app, &["status"], &misspelt), "unknown field");
    assert!(err.contains("$RELAYQ_DAEMON__SWEEP_INTREVAL"), "{err}");
}

#[test]
fn config_check_builds_every_channel_and_show_masks_secrets() {
    let app = App::new(
        r#"
[channels.team]
kind = "webhook"
url_env = "TEAM_HOOK_URL"
headers = { Authorization = "Bearer t0k3n-s3cr3t" }
"#,
    );
    assert_usage_error(
        &run_with(&app, &["config", "check"], &[]),
        "channels.team.url_env: names $TEAM_HOOK_URL, which is not set",
    );
    let url = [(
        "TEAM_HOOK_URL",
        "https://hooks.example.com/services/T0/B0/abcdefghijklmnop",
    )];
    let checked = stdout_of(run_with(&app, &["config", "check"], &url));
    assert!(
        checked.contains("configuration ok") && checked.contains("team"),
        "{checked}"
    );
    let shown = app.ok(&["config", "show"]);
    assert!(
        shown.contains("[channels.team]") && shown.contains("url_env = \"TEAM_HOOK_URL\""),
        "{shown}"
    );
    assert!(!shown.contains("t0k3n-s3cr3t"), "{shown}");
    assert!(shown.contains("********"), "{shown}");
}

#[test]
fn a_source_the_platform_pushes_to_needs_the_http_api_on() {
    let pushed = Config::default().table(
        "sources.team",
        &[
            "kind = \"slack\"",
            "signing_secret = \"s\"",
            "allowed_users = [\"U1\"]",
            "channels = { C1 = \"agent\" }",
        ],
    );
    let app = App::new(pushed.clone());
    assert_usage_error(
        &app.run(&["config", "check"]),
        "sources.team.mode: takes pushes from its platform at the HTTP API",
    );
    let app = App::new(pushed.set("http", "enabled = true"));
    let out = app.run(&["config", "check"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Telegram's webhook mode needs its secret.
    let app = App::new(Config::default().set("http", "enabled = true").table(
        "sources.bot",
        &[
            "kind = \"telegram\"",
            "token = \"1:x\"",
            "allowed_users = [1]",
            "chats = { \"1\" = \"a\" }",
            "mode = \"webhook\"",
        ],
    ));
    assert_usage_error(&app.run(&["config", "check"]), "webhook_secret");
}
