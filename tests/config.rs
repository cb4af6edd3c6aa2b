//! The effective configuration: the file, `RELAYQ_<SECTION>__<KEY>` environment variables over
//! it, and `relayq config check | show`.

use crate::common::App;

fn output(app: &App, args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String, String) {
    let out = app.cmd(args).envs(env.iter().copied()).output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

#[test]
fn settings_from_the_environment_override_the_file_and_errors_name_the_variable() {
    let app = App::new("[daemon]\nsweep_interval = \"1h\"\n[queues.inbound]\nmax_attempts = 9\n");
    let (code, shown, err) = output(
        &app,
        &["config", "show"],
        &[
            ("RELAYQ_DAEMON__SWEEP_INTERVAL", "2s"),
            ("RELAYQ_QUEUES__INBOUND__MAX_ATTEMPTS", "3"),
        ],
    );
    assert_eq!(code, Some(0), "{err}");
    assert!(shown.contains("sweep_interval = \"2s\""), "{shown}");
    assert!(shown.contains("max_attempts = 3"), "{shown}");
    assert!(
        shown.contains("RELAYQ_DAEMON__SWEEP_INTERVAL"),
        "the header says where it came from"
    );
    let file_only = app.ok(&["config", "show"]);
    assert!(file_only.contains("sweep_interval = \"1h\""), "{file_only}");

    let (code, _, err) = output(
        &app,
        &["status"],
        &[("RELAYQ_DAEMON__SWEEP_INTERVAL", "0s")],
    );
    assert_eq!(code, Some(2));
    assert!(
        err.contains("$RELAYQ_DAEMON__SWEEP_INTERVAL: daemon.sweep_interval: 0s is out of range"),
        "{err}"
    );
    let (code, _, err) = output(
        &app,
        &["status"],
        &[("RELAYQ_DAEMON__SWEEP_INTREVAL", "1s")],
    );
    assert_eq!(code, Some(2));
    assert!(
        err.contains("$RELAYQ_DAEMON__SWEEP_INTREVAL") && err.contains("unknown field"),
        "{err}"
    );
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
    let (code, _, err) = output(&app, &["config", "check"], &[]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("channels.team.url_env: names $TEAM_HOOK_URL, which is not set"),
        "{err}"
    );
    let url = "https://hooks.example.com/services/T0/B0/abcdefghijklmnop";
    let (code, checked, err) = output(&app, &["config", "check"], &[("TEAM_HOOK_URL", url)]);
    assert_eq!(code, Some(0), "{err}");
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
