//! What the source conformance suite (`tests/source_conformance.rs`, which runs `relayq serve`
//! as a user does) asks of each kind: a description of its platform's side, kept in the kind's
//! folder (`sources/<kind>/conformance.rs`, with its fake platform), and the promises that
//! apply to it. `kinds!` collects the cases of every kind marked `conformance` into
//! [`super::conformance_cases`]: a marked kind whose folder describes nothing does not compile.
//!
//! | promise | a source that reads (poll, spool) | a source the platform pushes to | a held connection |
//! |---|---|---|---|
//! | `kill -9` before the commit loses and repeats nothing | the offset moves only with the rows | no 200 before the rows are committed; the platform sends again | no acknowledgement before the commit; the platform sends again |
//! | a replay writes no duplicate | the same message read again | the same push again | the same event in a new envelope |
//! | a stranger is refused and logged | ignored, logged without its text | the same, answered 200 | the same, acknowledged |
//! | refusals back off from the same offset | 401, 409, 429: no busy loop, nothing skipped | a push that does not prove its origin: 401, nothing written | the connection refused (401, 429): no busy loop, nothing skipped |

use std::sync::Mutex;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long the suite waits for anything.
pub const WAIT: Duration = Duration::from_secs(30);
/// Alice writes from the chat that feeds session `alice`; the stranger from the same chat.
pub const ALICE: i64 = 123456789;
pub const STRANGER: i64 = 666;

/// The promises (see the module's table).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Promise {
    Kill9BeforeTheCommit,
    ReplayWritesNoDuplicate,
    StrangerRefused,
    RefusalsBackOff,
}

/// Every promise: for a source that reads people's messages from a platform.
pub const ALL: &[Promise] = &[
    Promise::Kill9BeforeTheCommit,
    Promise::ReplayWritesNoDuplicate,
    Promise::StrangerRefused,
    Promise::RefusalsBackOff,
];

/// One way a kind is run (a kind may have several: Telegram's polling and its webhook).
pub struct Case {
    /// `kind` or `kind_mode`, as failures name it.
    pub name: &'static str,
    pub make: fn() -> Box<dyn SourceUnderTest>,
    /// The promises that apply; the others are not run (a test that could only pass is not
    /// run): a spool file has no people to refuse and no platform that refuses it.
    pub promises: &'static [Promise],
}

/// What the daemon's config needs for a case: the lines of `[sources.bot]`, and whether the
/// HTTP API must listen (on that port) for the platform's pushes.
pub struct Settings {
    pub source: Vec<String>,
    pub http_port: Option<u16>,
}

/// A source kind as the suite drives it: its settings and its platform's side. Message `n`
/// is the same message each time it is handed over (its platform id comes from `n`). Its
/// messages from Alice reach session `alice`.
pub trait SourceUnderTest {
    /// `[sources.bot]`, and the HTTP API where the kind needs it.
    fn settings(&self) -> Settings;
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
    /// once they happened, what the source did; `None` when the platform cannot refuse it so
    /// (a push source refuses instead: see [`SourceUnderTest::refused_push`]).
    fn refuse(&self, _status: u16) -> Option<Box<dyn Fn() -> Refused + '_>> {
        None
    }
    /// For a push source: message `n` pushed without proof of its origin; its HTTP status.
    fn refused_push(&self, _n: u64, _text: &str) -> Option<u16> {
        None
    }
}

/// What a source did when its platform refused it twice.
pub struct Refused {
    /// The offsets the two refused reads and the read after them asked for; `None` where the
    /// platform keeps the position itself (Slack's Socket Mode sends again what was not
    /// acknowledged: "nothing skipped" is what shows it).
    pub offsets: Option<Vec<String>>,
    /// The time between the two refused reads.
    pub waited: Duration,
}

/// Waits until `done` holds, or panics naming `what` after `limit`.
pub fn wait_until(what: &str, limit: Duration, done: impl Fn() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A port free on loopback now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// A request a [`Pusher`] sends.
type Push = Box<dyn Fn(&reqwest::blocking::Client) -> reqwest::blocking::RequestBuilder + Send>;

/// A platform that pushes, one request at a time and in order (as Telegram does with
/// `max_connections = 1`): each push is sent again until it is answered 200 (a dead daemon,
/// a refused connection: try again), before the next.
pub struct Pusher {
    pub port: u16,
    queue: Mutex<Option<std::sync::mpsc::Sender<Push>>>,
    sending: Mutex<Option<JoinHandle<()>>>,
}

impl Default for Pusher {
    fn default() -> Self {
        Pusher {
            port: free_port(),
            queue: Mutex::new(None),
            sending: Mutex::new(None),
        }
    }
}

impl Pusher {
    /// Where the daemon takes source `bot`'s pushes.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/v1/ingress/bot", self.port)
    }

    pub fn push_until_taken(
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
    pub fn wait_all(&self) {
        drop(self.queue.lock().unwrap().take());
        if let Some(sending) = self.sending.lock().unwrap().take() {
            sending.join().expect("every push answered 200");
        }
    }
}
