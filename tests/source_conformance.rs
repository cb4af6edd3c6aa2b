//! The source conformance suite: what every inbound source promises, run against each kind as
//! a user runs it (`relayq serve`, a real SQLite file, the platform's side on loopback). A new
//! source kind implements [`SourceUnderTest`] and adds its line to `every_source!` below, with
//! the promises that apply to it.
//!
//! | promise | a source that reads (poll, spool) | a source the platform pushes to | a held connection |
//! |---|---|---|---|
//! | `kill -9` before the commit loses and repeats nothing | the offset moves only with the rows | no 200 before the rows are committed; the platform sends again | no acknowledgement before the commit; the platform sends again |
//! | a replay writes no duplicate | the same message read again | the same push again | the same event in a new envelope |
//! | a stranger is refused and logged | ignored, logged without its text | the same, answered 200 | the same, acknowledged |
//! | refusals back off from the same offset | 401, 409, 429: no busy loop, nothing skipped | a push that does not prove its origin: 401, nothing written | the connection refused (401, 429): no busy loop, nothing skipped |
//!
//! A spool file has no people and no platform to refuse it: those two rows do not apply to it,
//! and `every_source!` generates neither for it (a test that could only pass is not run).

use std::io::Write;
use std::sync::Mutex;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use relayq_actors::testing::fake_slack_socket::FakeSlackSocket;
use relayq_actors::testing::fake_telegram::FakeTelegram;
use serde_json::{json, Value};

use crate::common::{api::free_port, by_session, file_config, wait_until, App, Config};

const WAIT: Duration = Duration::from_secs(30);
/// Alice writes from the chat that feeds session `alice`; the stranger from the same chat.
const ALICE: i64 = 123456789;
const STRANGER: i64 = 666;
const TOKEN: &str = "123456:conformance-token";
const SLACK_SECRET: &str = "slack-signing-secret";
const HOOK_SECRET: &str = "s3cret_hook-1";

/// A source kind as the suite drives it: its settings and its platform's side. Message `n`
/// is the same message each time it is handed over (its platform id comes from `n`).
trait SourceUnderTest {
    /// `[sources.bot]` and what else the kind needs, added to `base`.
    fn config(&self, base: Config) -> Config;
    /// The daemon's environment (secrets).
    fn env(&self) -> Vec<(&'static str, String)> {
        Vec::new()
    }
    /// The platform hands over message `n` with `text`, from Alice (or the stranger). A push
    /// is sent again until it is answered 200, as platforms do.
    fn send(&self, n: u64, text: &str, stranger: bool);
    /// Waits until what was sent is handed over: read by the source, or pushes answered.
    fn handed_over(&self);
    /// Hands over message `n` (first sent with `text`) again: the platform sends it anew.
    fn replay(&self, n: u64, text: &str) {
        self.send(n, text, false);
        self.handed_over();
    }
    /// Has the platform refuse the source's next two reads with `status`. Returns how to learn,
    /// once they happened, what the source did; `None` when the platform cannot refuse it (a
    /// spool file; a push source, which refuses instead: see
    /// [`SourceUnderTest::refused_push`]).
    fn refuse(&self, _status: u16) -> Option<Box<dyn Fn() -> Refused + '_>> {
        None
    }
    /// For a push source: message `n` pushed without proof of its origin; its HTTP status.
    fn refused_push(&self, _n: u64, _text: &str) -> Option<u16> {
        None
    }
}

/// What a source did when its platform refused it twice.
struct Refused {
    /// The offsets the two refused reads and the read after them asked for; `None` where the
    /// platform keeps the position itself (Slack's Socket Mode sends again what was not
    /// acknowledged: "nothing skipped" is what shows it).
    offsets: Option<Vec<String>>,
    /// The time between the two refused reads.
    waited: Duration,
}

fn base() -> Config {
    file_config().set("database", "busy_timeout = \"30s\"")
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
    let app = App::new(source.config(base()));
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
    let app = App::new(source.config(base()));
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
    assert!(!daemon.log().contains(TOKEN), "the token is never logged");
    daemon.stop();
}

// ---- the sources -------------------------------------------------------------------------

/// `kind = "jsonl"`: a spool file another program appends to.
struct Spool {
    app_dir: Mutex<Option<std::path::PathBuf>>,
}

impl Spool {
    fn new() -> Spool {
        Spool {
            app_dir: Mutex::new(None),
        }
    }

    fn line(n: u64, text: &str) -> String {
        json!({"session": "alice", "origin": "spool", "content": text, "source_message_id": format!("m{n}")})
            .to_string()
            + "\n"
    }

    fn path(&self) -> std::path::PathBuf {
        self.app_dir.lock().unwrap().clone().expect("configured")
    }
}

impl SourceUnderTest for Spool {
    fn config(&self, base: Config) -> Config {
        let dir = tempfile::tempdir().unwrap().keep();
        let path = dir.join("spool.jsonl");
        *self.app_dir.lock().unwrap() = Some(path.clone());
        base.table(
            "sources.bot",
            &[
                "kind = \"jsonl\"",
                &format!("path = {:?}", path.display().to_string()),
                "poll_interval = \"20ms\"",
            ],
        )
    }

    fn send(&self, n: u64, text: &str, _stranger: bool) {
        let mut spool = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.path())
            .unwrap();
        spool.write_all(Spool::line(n, text).as_bytes()).unwrap();
    }

    fn handed_over(&self) {}

    fn replay(&self, n: u64, text: &str) {
        // The file replaced by a shorter one: it is read again from the start.
        std::fs::write(self.path(), Spool::line(n, text)).unwrap();
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// `kind = "telegram"`, polling a local Bot API.
struct TelegramPoll {
    fake: FakeTelegram,
}

impl TelegramPoll {
    fn new() -> TelegramPoll {
        TelegramPoll {
            fake: FakeTelegram::start(TOKEN),
        }
    }
}

/// The Telegram message `n` is, from Alice or the stranger, in Alice's chat.
fn telegram_message(n: u64, text: &str, stranger: bool) -> Value {
    let from = if stranger { STRANGER } else { ALICE };
    json!({
        "message_id": 1000 + n, "date": 1767225600, "text": text,
        "from": {"id": from, "is_bot": false, "first_name": "A"},
        "chat": {"id": ALICE, "type": "private"},
    })
}

/// The Telegram source of both modes: Alice's chat feeds session `alice`.
fn telegram_source(base: Config, fake: &FakeTelegram) -> Config {
    let token = "token_env = \"BOT_TOKEN\"";
    let chats = [(ALICE, "alice")];
    base.telegram_source(&fake.url, token, &[ALICE], &chats, &["typing = false"])
}

impl SourceUnderTest for TelegramPoll {
    fn config(&self, base: Config) -> Config {
        telegram_source(base, &self.fake)
    }

    fn env(&self) -> Vec<(&'static str, String)> {
        vec![("BOT_TOKEN", TOKEN.into())]
    }

    fn send(&self, n: u64, text: &str, stranger: bool) {
        self.fake.push_message(telegram_message(n, text, stranger));
    }

    fn handed_over(&self) {
        // An empty update marks the end: once a poll served it, everything before it was read.
        let last = self.fake.push_update(json!({}));
        wait_until("a poll that read everything", WAIT, || {
            self.fake.served() >= last
        });
    }

    fn replay(&self, n: u64, text: &str) {
        self.fake.push_message(telegram_message(n, text, false));
    }

    fn refuse(&self, status: u16) -> Option<Box<dyn Fn() -> Refused + '_>> {
        let body = match status {
            401 => json!({"ok": false, "error_code": 401, "description": "Unauthorized"}),
            409 => {
                json!({"ok": false, "error_code": 409, "description": "Conflict: terminated by other getUpdates request; make sure that only one bot instance is running"})
            }
            _ => {
                json!({"ok": false, "error_code": 429, "description": "Too Many Requests: retry after 1", "parameters": {"retry_after": 1}})
            }
        };
        let before = self.fake.refused_polls().len();
        self.fake.fail_polls(status, body, 2);
        Some(Box::new(move || {
            wait_until("two refused polls and one after", WAIT, || {
                let refused = self.fake.refused_polls();
                refused.len() >= before + 2 && self.fake.polls().len() > refused[before + 1].0 + 1
            });
            let (refused, polls) = (self.fake.refused_polls(), self.fake.polls());
            let ((first, at), (second, then)) = (refused[before], refused[before + 1]);
            Refused {
                offsets: Some(
                    [polls[first], polls[second], polls[second + 1]]
                        .iter()
                        .map(i64::to_string)
                        .collect(),
                ),
                waited: then - at,
            }
        }))
    }
}

/// A request a [`Pusher`] sends.
type Push = Box<dyn Fn(&reqwest::blocking::Client) -> reqwest::blocking::RequestBuilder + Send>;

/// A platform that pushes, one request at a time and in order (as Telegram does with
/// `max_connections = 1`): each push is sent again until it is answered 200 (a dead daemon,
/// a refused connection: try again), before the next.
struct Pusher {
    port: u16,
    queue: Mutex<Option<std::sync::mpsc::Sender<Push>>>,
    sending: Mutex<Option<JoinHandle<()>>>,
}

impl Pusher {
    fn new() -> Pusher {
        Pusher {
            port: free_port(),
            queue: Mutex::new(None),
            sending: Mutex::new(None),
        }
    }

    fn http(&self, base: Config) -> Config {
        base.http_on(self.port)
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/v1/ingress/bot", self.port)
    }

    fn push_until_taken(
        &self,
        make: impl Fn(&reqwest::blocking::Client) -> reqwest::blocking::RequestBuilder + Send + 'static,
    ) {
        let mut queue = self.queue.lock().unwrap();
        if queue.is_none() {
            let (sender, pushes) = std::sync::mpsc::channel::<Push>();
            *queue = Some(sender);
            *self.sending.lock().unwrap() = Some(std::thread::spawn(move || {
                let client = reqwest::blocking::Client::builder()
                    .timeout(Duration::from_secs(60))
                    .build()
                    .unwrap();
                for push in pushes {
                    let start = Instant::now();
                    while !push(&client).send().is_ok_and(|r| r.status() == 200) {
                        assert!(start.elapsed() < WAIT * 2, "a push never answered 200");
                        std::thread::sleep(Duration::from_millis(200));
                    }
                }
            }));
        }
        queue.as_ref().unwrap().send(Box::new(make)).unwrap();
    }

    /// Waits until every push so far is answered 200.
    fn wait_all(&self) {
        drop(self.queue.lock().unwrap().take());
        if let Some(sending) = self.sending.lock().unwrap().take() {
            sending.join().expect("every push answered 200");
        }
    }
}

/// `kind = "telegram"`, `mode = "webhook"`: Telegram posts each update.
struct TelegramWebhook {
    fake: FakeTelegram,
    pusher: Pusher,
}

impl TelegramWebhook {
    fn update(n: u64, text: &str, stranger: bool) -> Value {
        json!({"update_id": 800_000_000 + n, "message": telegram_message(n, text, stranger)})
    }

    fn push(&self, update: Value, secret: &'static str) {
        let url = self.pusher.url();
        self.pusher.push_until_taken(move |client| {
            client
                .post(&url)
                .header("X-Telegram-Bot-Api-Secret-Token", secret)
                .json(&update)
        });
    }
}

impl SourceUnderTest for TelegramWebhook {
    fn config(&self, base: Config) -> Config {
        telegram_source(self.pusher.http(base), &self.fake)
            .set("sources.bot", "mode = \"webhook\"")
            .set("sources.bot", "webhook_secret_env = \"HOOK_SECRET\"")
    }

    fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("BOT_TOKEN", TOKEN.into()),
            ("HOOK_SECRET", HOOK_SECRET.into()),
        ]
    }

    fn send(&self, n: u64, text: &str, stranger: bool) {
        self.push(TelegramWebhook::update(n, text, stranger), HOOK_SECRET);
    }

    fn handed_over(&self) {
        self.pusher.wait_all();
    }

    fn refused_push(&self, n: u64, text: &str) -> Option<u16> {
        let response = reqwest::blocking::Client::new()
            .post(self.pusher.url())
            .header("X-Telegram-Bot-Api-Secret-Token", "guess")
            .json(&TelegramWebhook::update(n, text, false))
            .send()
            .unwrap();
        Some(response.status().as_u16())
    }
}

/// `kind = "slack"`: Slack's Events API, signed.
struct SlackEvents {
    pusher: Pusher,
}

impl SlackEvents {
    fn event(n: u64, text: &str, stranger: bool) -> Value {
        let user = if stranger { "U0STRANGER" } else { "U0ALICE" };
        json!({
            "token": "x", "team_id": "T0TEAM", "api_app_id": "A0APP", "type": "event_callback",
            "event_id": format!("Ev{n}"), "event_time": 1767225600,
            "event": {"type": "message", "channel": "C0DEV", "user": user, "text": text,
                      "ts": format!("1767225600.{n:06}"), "channel_type": "channel"},
        })
    }

    fn signed(
        client: &reqwest::blocking::Client,
        url: &str,
        body: &str,
        secret: &str,
    ) -> reqwest::blocking::RequestBuilder {
        let ts = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64;
        client
            .post(url)
            .header("Content-Type", "application/json")
            .header("X-Slack-Request-Timestamp", ts.to_string())
            .header(
                "X-Slack-Signature",
                relayq_actors::sources::slack::sign(secret, ts, body.as_bytes()),
            )
            .body(body.to_string())
    }
}

impl SourceUnderTest for SlackEvents {
    fn config(&self, base: Config) -> Config {
        self.pusher.http(base).table(
            "sources.bot",
            &[
                "kind = \"slack\"",
                "signing_secret_env = \"SLACK_SIGNING_SECRET\"",
                "allowed_users = [\"U0ALICE\"]",
                "chats = { C0DEV = \"alice\" }",
            ],
        )
    }

    fn env(&self) -> Vec<(&'static str, String)> {
        vec![("SLACK_SIGNING_SECRET", SLACK_SECRET.into())]
    }

    fn send(&self, n: u64, text: &str, stranger: bool) {
        let (url, body) = (
            self.pusher.url(),
            SlackEvents::event(n, text, stranger).to_string(),
        );
        self.pusher
            .push_until_taken(move |client| SlackEvents::signed(client, &url, &body, SLACK_SECRET));
    }

    fn handed_over(&self) {
        self.pusher.wait_all();
    }

    fn refused_push(&self, n: u64, text: &str) -> Option<u16> {
        let body = SlackEvents::event(n, text, false).to_string();
        let client = reqwest::blocking::Client::new();
        let response = SlackEvents::signed(&client, &self.pusher.url(), &body, "not-the-secret")
            .send()
            .unwrap();
        Some(response.status().as_u16())
    }
}

/// `kind = "slack"`, `mode = "socket"`: a Socket Mode connection held open.
struct SlackSocket {
    fake: FakeSlackSocket,
}

const APP_TOKEN: &str = "xapp-1-A0APP-conformance";

impl SourceUnderTest for SlackSocket {
    fn config(&self, base: Config) -> Config {
        base.table(
            "sources.bot",
            &[
                "kind = \"slack\"",
                "mode = \"socket\"",
                "app_token_env = \"SLACK_APP_TOKEN\"",
                &format!("api_url = {:?}", self.fake.api_url),
                "allowed_users = [\"U0ALICE\"]",
                "chats = { C0DEV = \"alice\" }",
            ],
        )
    }

    fn env(&self) -> Vec<(&'static str, String)> {
        vec![("SLACK_APP_TOKEN", APP_TOKEN.into())]
    }

    fn send(&self, n: u64, text: &str, stranger: bool) {
        self.fake.push_event(SlackEvents::event(n, text, stranger));
    }

    fn handed_over(&self) {
        wait_until("every envelope acknowledged", WAIT, || {
            self.fake.all_acknowledged()
        });
    }

    fn refuse(&self, status: u16) -> Option<Box<dyn Fn() -> Refused + '_>> {
        let (code, body) = match status {
            401 => (200, json!({"ok": false, "error": "invalid_auth"})),
            429 => (429, json!({"ok": false, "error": "ratelimited"})),
            // Slack documents no 409 for apps.connections.open.
            _ => return None,
        };
        let before = self.fake.refused_opens().len();
        self.fake.fail_opens(code, body, 2);
        // The refusals come when the source opens its next connection.
        self.fake.disconnect();
        Some(Box::new(move || {
            wait_until("two refused opens", WAIT, || {
                self.fake.refused_opens().len() >= before + 2
            });
            let refused = self.fake.refused_opens();
            Refused {
                offsets: None,
                waited: refused[before + 1] - refused[before],
            }
        }))
    }
}

/// Each promise that applies, for each source kind: `source_conformance::<kind>::<promise>`.
/// A spool file has no people to refuse and no platform that refuses it: it lists neither.
macro_rules! every_source {
    ($($kind:ident => $make:expr; $($promise:ident),+;)*) => {$(
        mod $kind {
            use super::*;

            $(
                #[test]
                fn $promise() {
                    super::$promise(&$make);
                }
            )+
        }
    )*};
}

every_source! {
    jsonl => Spool::new();
        kill_9_before_the_commit_loses_and_repeats_nothing, a_replay_writes_no_duplicate;
    telegram_poll => TelegramPoll::new();
        kill_9_before_the_commit_loses_and_repeats_nothing, a_replay_writes_no_duplicate,
        a_stranger_is_refused_and_logged, refusals_back_off_from_the_same_offset;
    telegram_webhook => TelegramWebhook { fake: FakeTelegram::start(TOKEN), pusher: Pusher::new() };
        kill_9_before_the_commit_loses_and_repeats_nothing, a_replay_writes_no_duplicate,
        a_stranger_is_refused_and_logged, refusals_back_off_from_the_same_offset;
    slack => SlackEvents { pusher: Pusher::new() };
        kill_9_before_the_commit_loses_and_repeats_nothing, a_replay_writes_no_duplicate,
        a_stranger_is_refused_and_logged, refusals_back_off_from_the_same_offset;
    slack_socket => SlackSocket { fake: FakeSlackSocket::start(APP_TOKEN) };
        kill_9_before_the_commit_loses_and_repeats_nothing, a_replay_writes_no_duplicate,
        a_stranger_is_refused_and_logged, refusals_back_off_from_the_same_offset;
}
