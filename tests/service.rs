//! Running relayq as a service: `--version`, `relayq stop` and the pid file, readiness for
//! systemd (`Type=notify`), JSON logs and their level, shell completions and the manual page.

use std::os::unix::net::UnixDatagram;
use std::process::Command;
use std::time::Duration;

use crate::common::{assert_usage_error, outbound_args, webhook_config, App, Endpoint, Reply};

fn pid_file(app: &App) -> std::path::PathBuf {
    app.path("relayq.db.pid")
}

#[test]
fn version_names_the_commit_relayq_was_built_from() {
    let head = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("git is installed (the tests run from a clone)");
    let head = String::from_utf8(head.stdout).unwrap();
    let app = App::new("");
    let version = app.ok(&["--version"]);
    assert!(
        version.starts_with(&format!("relayq {} (commit ", env!("CARGO_PKG_VERSION"))),
        "{version}"
    );
    assert!(version.contains(head.trim()), "{version} names {head}");
}

#[test]
fn stop_ends_the_daemon_after_its_work_and_its_pid_file_with_it() {
    let app = App::new("");
    let mut daemon = app.serve();
    // `serve` returns once the wake socket exists; the pid file follows the runtime's start.
    crate::common::wait_until("the pid file", Duration::from_secs(5), || {
        pid_file(&app).exists()
    });
    let pid: u32 = std::fs::read_to_string(pid_file(&app))
        .expect("serve writes its pid file")
        .trim()
        .parse()
        .unwrap();
    assert_eq!(pid, daemon.child.id());

    let said = app.ok(&["stop"]);
    assert!(
        said.starts_with(&format!("stopped the daemon (pid {pid})")),
        "{said}"
    );
    // `stop` answered once the database was free: the daemon is exiting (its lock goes as its
    // process ends), cleanly.
    let mut status = None;
    crate::common::wait_until("the daemon to exit", Duration::from_secs(5), || {
        status = daemon.child.try_wait().unwrap();
        status.is_some()
    });
    let status = status.unwrap();
    assert!(status.success(), "{status}: {}", daemon.log());
    assert!(daemon.log().contains("relayq stopped"), "{}", daemon.log());
    assert!(!pid_file(&app).exists());

    let again = app.ok(&["stop"]);
    assert!(again.starts_with("no daemon serves"), "{again}");
}

#[test]
fn stop_after_a_kill_9_finds_nothing_to_stop_and_removes_the_stale_pid_file() {
    let app = App::new("");
    let mut daemon = app.serve();
    // Written once the daemon is up, a moment after its wake socket.
    crate::common::wait_until("the pid file", Duration::from_secs(20), || {
        pid_file(&app).exists()
    });
    daemon.signal("KILL");
    assert!(pid_file(&app).exists(), "a killed daemon leaves it");
    let said = app.ok(&["stop"]);
    assert!(said.starts_with("no daemon serves"), "{said}");
    assert!(!pid_file(&app).exists());
    // The stale file does not keep the next daemon from starting or from being stopped.
    let _daemon = app.serve();
    // (the killed daemon's wake socket is still there: `serve` returns before it is ready)
    crate::common::wait_until("the new pid file", Duration::from_secs(20), || {
        pid_file(&app).exists()
    });
    let said = app.ok(&["stop"]);
    assert!(said.starts_with("stopped the daemon"), "{said}");
}

#[test]
fn serve_tells_a_service_manager_when_it_is_ready_reloading_and_stopping() {
    let app = App::new("");
    let socket_path = app.path("notify.sock");
    let socket = UnixDatagram::bind(&socket_path).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let next = || {
        let mut buf = [0u8; 512];
        let n = socket.recv(&mut buf).expect("a notification");
        String::from_utf8_lossy(&buf[..n]).to_string()
    };
    let mut daemon = app.serve_with_env(&[("NOTIFY_SOCKET", socket_path.to_str().unwrap())]);
    assert!(next().contains("READY=1"));
    Command::new("kill")
        .args(["-HUP", &daemon.child.id().to_string()])
        .status()
        .unwrap();
    assert!(next().contains("RELOADING=1"));
    assert!(next().contains("READY=1"), "ready again after the reload");
    let status = daemon.signal("TERM");
    assert!(status.success());
    assert!(next().contains("STOPPING=1"));
}

#[test]
fn log_format_json_writes_one_object_per_line_at_the_level_relayq_log_says() {
    let app = App::new("");
    let serve = |level: &str| {
        let mut serve = app.cmd(&["--log-format", "json", "serve"]);
        serve.env("RELAYQ_LOG", level).env_remove("RUST_LOG");
        app.spawn_serve(serve, &app.db()).stop();
        std::fs::read_to_string(app.path("serve.log")).unwrap()
    };
    let info = serve("info");
    let lines: Vec<serde_json::Value> = info
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    let serving = lines
        .iter()
        .find(|l| l["message"] == "relayq serving")
        .unwrap_or_else(|| panic!("the start is logged: {info}"));
    assert_eq!(serving["level"], "INFO");
    // The file, or on PostgreSQL the URL with the node's files beside the file (issue 41).
    let db = serving["db"].as_str().unwrap();
    match app.database_url() {
        None => assert!(db.ends_with("relayq.db"), "{db}"),
        Some(_) => assert!(
            db.starts_with("postgresql://") && db.contains("relayq.db"),
            "{db}"
        ),
    }
    assert!(lines.iter().all(|l| l["timestamp"].is_string()));

    let warn = serve("warn");
    assert!(
        !warn.contains("relayq serving"),
        "RELAYQ_LOG=warn leaves out info lines: {warn}"
    );
}

#[test]
fn completions_and_the_manual_page_come_from_the_command_line_definition() {
    let app = App::new("");
    for shell in ["bash", "zsh", "fish"] {
        let script = app.ok(&["completions", shell]);
        for command in ["enqueue", "stop", "dead", "completions"] {
            assert!(script.contains(command), "{shell} completes {command}");
        }
    }
    let man = app.ok(&["man"]);
    assert!(man.contains(".TH relayq 1"), "{man}");
    assert!(man.contains("stop"), "the page lists the commands");
    // Issue 27, item 24: it pointed at relayq-serve(1) and the like, pages that do not exist.
    assert!(
        !man.contains("relayq\\-serve(1)"),
        "no links to missing pages: {man}"
    );
    for command in [
        "relayq serve",
        "relayq dead retry",
        "relayq enqueue outbound",
    ] {
        assert!(
            man.contains(&format!(".SS \"{}\"", command.replace('-', "\\-"))),
            "{command}: {man}"
        );
    }
    assert!(
        man.contains("\\-\\-reply\\-to"),
        "each command's options: {man}"
    );
    assert_usage_error(&app.run(&["completions", "cmd.exe"]), "invalid value");
}

/// On the delivery path, log lines carry the row's span: queue, row, attempt, channel and
/// where the row goes.
#[test]
fn a_delivery_logs_in_a_span_naming_its_row_channel_and_attempt() {
    let hook = Endpoint::start(|_| Reply::status(200));
    let app = App::new(webhook_config(&hook.url));
    let mut serve = app.cmd(&["--log-format", "json", "serve"]);
    serve.env("RELAYQ_LOG", "info,relayq_actors::delivery=debug");
    let daemon = app.spawn_serve(serve, &app.db());
    let args = outbound_args("hook", "chat-7", &["hi"]);
    let id: i64 = app.ok(&args).trim().parse().unwrap();
    app.wait_state(relayq_engine::QueueName::Outbound, id, "delivered");
    daemon.stop();
    let log = std::fs::read_to_string(app.path("serve.log")).unwrap();
    let answered = log
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|l| l["message"] == "answered")
        .unwrap_or_else(|| panic!("the answer is logged at debug: {log}"));
    let span = &answered["span"];
    assert_eq!(span["name"], "delivery", "{answered}");
    assert_eq!(span["row"], id, "{answered}");
    assert_eq!(span["queue"], "outbound");
    assert_eq!(span["channel"], "hook");
    assert_eq!(span["attempt"], 1);
    assert_eq!(span["to"], "chat-7");
}

/// The signal handlers were installed after the runtime started (the database opened, the
/// wake socket bound, the pid file written): a SIGTERM in that window killed the daemon
/// outright (exit by signal 15, in-flight deliveries cut), as CI once saw. A TERM that arrives
/// as soon as the database file exists must stop it gracefully.
#[test]
fn a_sigterm_while_serve_is_starting_stops_it_gracefully() {
    for _ in 0..5 {
        let app = App::new(crate::common::file_config());
        let mut child = app
            .cmd(&["serve"])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let started = std::time::Instant::now();
        while !app.db().exists() {
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "no database made"
            );
            std::thread::sleep(Duration::from_micros(200));
        }
        let sent = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap();
        assert!(sent.success());
        let status = child.wait().unwrap();
        assert!(
            status.success(),
            "serve exited with {status}, not gracefully"
        );
    }
}
