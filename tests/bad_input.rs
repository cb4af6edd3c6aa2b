//! Bad input: a one-line error saying what to fix, exit code 2, and nothing written.

use crate::common::*;

#[test]
fn invalid_config_names_file_and_key_and_serve_exits_before_touching_the_database() {
    let app = App::new("[database]\nsynchronous = \"sometimes\"\n");
    let out = app.run(&["serve"]);
    assert_usage_error(&out, "config.toml: database.synchronous: unknown variant `sometimes`, expected `normal` or `full`");
    assert!(!app.db().exists(), "the database was not created");
}

#[test]
fn unknown_channel_in_config_is_refused_before_touching_the_database() {
    let app = App::new("[sessions]\ndefault_channel = \"telegram\"\n");
    let out = app.run(&["serve"]);
    assert_usage_error(&out, "sessions.default_channel: names channel 'telegram', which has no [channels.telegram] table");
    assert!(!app.db().exists());
    let app = App::new("[sessions.channels]\nalpha = \"nope\"\n");
    assert_usage_error(
        &app.run(&["serve"]),
        "sessions.channels.alpha: names channel 'nope'",
    );
}

#[test]
fn a_missing_explicit_config_file_is_an_error() {
    let app = App::new("");
    let out = app
        .bare()
        .args(["--config", "/nonexistent/relayq.toml", "status"])
        .output()
        .unwrap();
    assert_usage_error(&out, "/nonexistent/relayq.toml: (file): cannot read it");
}

#[test]
fn unwritable_database_path_is_a_one_line_error() {
    let app = App::sqlite("");
    std::fs::write(app.path("a-file"), "").unwrap();
    let db = app.path("a-file/relayq.db");
    for args in [inbound_args("s", "o", &["hi"]), vec!["serve"]] {
        assert_usage_error(
            &with_db(&app, &db, &args),
            "does not exist; create it first",
        );
    }
    assert_usage_error(&with_db(&app, &db, &["status"]), "no database at");
    assert_usage_error(
        &with_db(&app, app.dir.path(), &["status"]),
        "it is a directory",
    );
}

/// `relayq --db DB ARGS`, with no config file.
fn with_db(app: &App, db: &std::path::Path, args: &[&str]) -> std::process::Output {
    app.bare().arg("--db").arg(db).args(args).output().unwrap()
}

fn enqueue_refused(app: &App, args: &[&str], needle: &str) {
    let mut full = vec!["enqueue", "inbound"];
    full.extend_from_slice(args);
    assert_usage_error(&app.run(&full), needle);
    assert!(!app.db().exists(), "nothing written for {args:?}");
}

#[test]
fn bad_enqueue_arguments_write_nothing() {
    let app = App::new("[daemon]\nmax_body_bytes = 10\n");
    enqueue_refused(
        &app,
        &["--session", "", "--origin", "o", "hi"],
        "the session id is empty",
    );
    enqueue_refused(
        &app,
        &["--session", "  ", "--origin", "o", "hi"],
        "the session id is empty",
    );
    enqueue_refused(
        &app,
        &["--session", "s", "--origin", "", "hi"],
        "the origin is empty",
    );
    enqueue_refused(
        &app,
        &["--session", "s", "--origin", "o", "--type", "video", "hi"],
        "unknown message type 'video': use text, voice or file",
    );
    enqueue_refused(
        &app,
        &["--session", "s", "--origin", "o", "this is longer than ten"],
        "over the 10 byte limit",
    );
    enqueue_refused(
        &app,
        &[
            "--session",
            "s",
            "--origin",
            "o",
            "--payload",
            "{nope",
            "hi",
        ],
        "--payload is not valid JSON",
    );
    enqueue_refused(
        &app,
        &["--session", "s", "--origin", "o", "--source-id", "", "hi"],
        "source message id is empty",
    );
    enqueue_refused(&app, &["--origin", "o", "hi"], "--session");
}

#[test]
fn an_oversized_body_on_stdin_writes_nothing() {
    let app = App::new("[daemon]\nmax_body_bytes = 10\n");
    let mut child = app
        .cmd(&inbound_args("s", "o", &["-"]))
        .stdin(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    let _ = child.stdin.take().unwrap().write_all(&[b'x'; 100_000]);
    let out = child.wait_with_output().unwrap();
    assert_usage_error(&out, "over the 10 byte limit");
    assert!(!app.db().exists());
}

#[test]
fn a_second_serve_on_the_same_database_is_refused() {
    let app = App::new(file_config());
    let daemon = app.serve();
    let out = app.run(&["serve"]);
    // On PostgreSQL the file is the node's own (issue 41, item 7), and said so.
    let said = match app.database_url() {
        None => "another relayq daemon is already serving",
        Some(_) => "another relayq node on this host already uses the node files",
    };
    assert_usage_error(&out, said);
    daemon.stop();
}

#[test]
fn unknown_commands_and_flags_are_usage_errors() {
    let app = App::new("");
    assert_eq!(app.run(&["frobnicate"]).status.code(), Some(2));
    assert_eq!(app.run(&["status", "--yaml"]).status.code(), Some(2));
    assert_eq!(
        app.run(&["prune", "--older-than", "soon"]).status.code(),
        Some(2)
    );
}

/// `serve --db` in a directory that does not exist said only "cannot read directory": it now
/// says what to do, and still makes no directory (a mistyped path must not become a stray
/// database).
#[test]
fn serve_with_a_database_in_a_missing_directory_says_how_to_make_it() {
    let app = App::new("");
    let missing = app.path("no-such-dir/relayq.db");
    let out = app
        .bare()
        .arg("--db")
        .arg(&missing)
        .arg("serve")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("does not exist: create it (mkdir -m 700"),
        "{err}"
    );
    assert!(!app.path("no-such-dir").exists(), "no directory made");
}
