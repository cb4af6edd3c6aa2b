//! The source conformance suite: what every inbound source promises, run against each kind as
//! a user runs it (`relayq serve`, a real SQLite file, the platform's side on loopback). The
//! promises, and what each kind's folder describes, are in `relayq_actors::sources::conformance`;
//! `kinds!` collects every kind's cases ([`conformance_cases`]), and each test here runs its
//! promise on every case it applies to, naming the case when it fails. A kind added with its
//! `conformance` mark and its folder's description is run here without a line in this file.

use std::time::{Duration, Instant};

use relayq_actors::sources::conformance::{Promise, Refused, SourceUnderTest, WAIT};
use relayq_actors::sources::conformance_cases;

use crate::common::{by_session, file_config, App, Config};

fn base() -> Config {
    file_config().set("database", "busy_timeout = \"30s\"")
}

/// The daemon's config for `source`: its `[sources.bot]`, and the HTTP API where it needs it.
fn config_of(source: &dyn SourceUnderTest) -> Config {
    let settings = source.settings();
    let lines: Vec<&str> = settings.source.iter().map(String::as_str).collect();
    let config = base().table("sources.bot", &lines);
    match settings.http_port {
        Some(port) => config.http_on(port),
        None => config,
    }
}

fn serve(app: &App, source: &dyn SourceUnderTest) -> crate::common::Daemon {
    let env = source.env();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    app.serve_with_env(&env)
}

fn delivered(app: &App) -> Vec<String> {
    by_session(&app.lines("out.jsonl"))
        .remove("alice")
        .unwrap_or_default()
}

fn wait_delivered(app: &App, n: usize, daemon: &crate::common::Daemon) {
    let start = Instant::now();
    while delivered(app).len() < n {
        assert!(
            start.elapsed() < WAIT,
            "{n} not delivered: {:?}\n{}",
            delivered(app),
            daemon.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // Anything more (a duplicate) would show by now.
    std::thread::sleep(Duration::from_millis(300));
}

/// A daemon reading `source`, which has handed over message 1, "one", delivered.
fn one_delivered(source: &dyn SourceUnderTest) -> (App, crate::common::Daemon) {
    let app = App::new(config_of(source));
    let daemon = serve(&app, source);
    source.send(1, "one", false);
    source.handed_over();
    wait_delivered(&app, 1, &daemon);
    (app, daemon)
}

/// `kill -9` while the source has read (or been pushed) messages it cannot commit: after the
/// restart each message is there once, in order. The write lock held from outside keeps the
/// commit from happening, so the kill always falls in that window.
fn kill_9_before_the_commit_loses_and_repeats_nothing(source: &dyn SourceUnderTest) {
    let (app, mut daemon) = one_delivered(source);

    let blocker = app.hold_writes();
    source.send(2, "two", false);
    source.send(3, "three", false);
    std::thread::sleep(Duration::from_millis(1500));
    daemon.signal("KILL");
    drop(blocker);

    let daemon = serve(&app, source);
    source.handed_over();
    wait_delivered(&app, 3, &daemon);
    assert_eq!(delivered(&app), ["one", "two", "three"], "{}", daemon.log());
    assert_eq!(app.inbound_rows(), 3);
    daemon.stop();
}

/// The platform hands over a message it handed over before: no second row.
fn a_replay_writes_no_duplicate(source: &dyn SourceUnderTest) {
    let (app, daemon) = one_delivered(source);
    source.replay(1, "one");
    source.send(2, "two", false);
    source.handed_over();
    wait_delivered(&app, 2, &daemon);
    assert_eq!(delivered(&app), ["one", "two"], "{}", daemon.log());
    assert_eq!(app.inbound_rows(), 2, "the replay wrote no row");
    daemon.stop();
}

/// Someone not allowed writes: no row, a log line that says what to change, not their text.
fn a_stranger_is_refused_and_logged(source: &dyn SourceUnderTest) {
    let app = App::new(config_of(source));
    let daemon = serve(&app, source);
    source.send(1, "let me in", true);
    source.send(2, "from alice", false);
    source.handed_over();
    wait_delivered(&app, 1, &daemon);
    assert_eq!(delivered(&app), ["from alice"]);
    assert_eq!(app.inbound_rows(), 1, "the stranger's message wrote no row");
    let log = daemon.log();
    assert!(
        log.contains("not allowed") && log.contains("allowed_users"),
        "the refusal is logged with what to change: {log}"
    );
    assert!(
        !log.contains("let me in"),
        "a stranger's text is not logged"
    );
    daemon.stop();
}

/// The platform refuses the source (401, 409, 429) or a push does not prove its origin: the
/// source waits and asks again from the same offset; nothing is skipped or written twice.
fn refusals_back_off_from_the_same_offset(source: &dyn SourceUnderTest) {
    let (app, daemon) = one_delivered(source);
    let mut expected = vec!["one".to_string()];
    let mut applies = false;
    for (n, status) in (2..).zip([401, 409, 429]) {
        if let Some(answered) = source.refused_push(n, "forged") {
            applies = true;
            assert_eq!(answered, 401, "a push without proof is refused");
            assert_eq!(
                app.inbound_rows(),
                expected.len() as i64,
                "and writes nothing"
            );
        }
        let Some(refused) = source.refuse(status) else {
            continue;
        };
        applies = true;
        let text = format!("after {status}");
        source.send(n, &text, false);
        source.handed_over();
        expected.push(text);
        wait_delivered(&app, expected.len(), &daemon);
        let Refused { offsets, waited } = refused();
        if let Some(offsets) = offsets {
            assert!(
                offsets.len() == 3 && offsets.iter().all(|o| *o == offsets[0]),
                "after {status}, each read starts from the same offset: {offsets:?}"
            );
        }
        assert!(
            waited >= Duration::from_millis(400),
            "after {status}, it waited before asking again, not a busy loop: {waited:?}"
        );
    }
    assert!(
        applies,
        "the platform refused nothing: a kind that cannot be refused does not list this promise"
    );
    assert_eq!(delivered(&app), expected, "nothing skipped, nothing twice");
    let log = daemon.log();
    for (name, secret) in source.env() {
        assert!(!log.contains(&secret), "${name} is never logged");
    }
    daemon.stop();
}

/// Runs `promise` (by `check`) on every case it applies to; at least one must apply.
fn on_every_case(promise: Promise, check: fn(&dyn SourceUnderTest)) {
    let cases: Vec<_> = conformance_cases()
        .into_iter()
        .filter(|case| case.promises.contains(&promise))
        .collect();
    assert!(
        !cases.is_empty(),
        "no source kind makes the promise {promise:?}"
    );
    for case in cases {
        eprintln!("source_conformance: {promise:?} on {}", case.name);
        let source = (case.make)();
        let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check(&*source)));
        if let Err(panic) = run {
            eprintln!("source_conformance: {promise:?} failed on {}", case.name);
            std::panic::resume_unwind(panic);
        }
    }
}

#[test]
fn kill_9_before_the_commit() {
    on_every_case(
        Promise::Kill9BeforeTheCommit,
        kill_9_before_the_commit_loses_and_repeats_nothing,
    );
}

#[test]
fn replay() {
    on_every_case(
        Promise::ReplayWritesNoDuplicate,
        a_replay_writes_no_duplicate,
    );
}

#[test]
fn stranger() {
    on_every_case(Promise::StrangerRefused, a_stranger_is_refused_and_logged);
}

#[test]
fn refusals() {
    on_every_case(
        Promise::RefusalsBackOff,
        refusals_back_off_from_the_same_offset,
    );
}
