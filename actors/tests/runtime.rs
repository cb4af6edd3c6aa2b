//! The actor system end to end, in process: real SQLite files, real channel actors.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use relayq_actors::channels::file;
use relayq_actors::inbound::supervisor::RunningSessions;
use relayq_actors::{
    Answer, Channel, ChannelConfig, ChannelSpec, Delivery, Outcome, Relayq, RelayqConfig,
};
use relayq_engine::storage::test_db::TestDb;
use relayq_engine::{Engine, InboundMessage, QueuePolicy, RowState};

fn config(dir: &TestDb) -> RelayqConfig {
    let mut c = RelayqConfig::new(dir.path().join("q.db"), "out");
    c.db = dir.config.clone();
    c.queues.inbound = QueuePolicy {
        backoff: vec![Duration::from_millis(50)],
        ..QueuePolicy::inbound()
    };
    c.listen_for_wakes = false;
    c
}

fn file_channel(dir: &std::path::Path) -> ChannelSpec {
    ChannelConfig::File(file::Config {
        timeout: Duration::from_secs(5),
        ..file::Config::new(dir.join("out.jsonl"))
    })
    .spec()
    .unwrap()
}

fn lines(dir: &std::path::Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(dir.join("out.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

async fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    for _ in 0..500 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("timed out waiting for {what}");
}

async fn start(dir: &TestDb, spec: ChannelSpec) -> Relayq {
    Relayq::builder(config(dir))
        .channel("out", spec)
        .start()
        .await
        .unwrap()
}

/// Enqueues one message for session `s` and waits until it is delivered; returns its row.
async fn deliver(rt: &Relayq, text: &str) -> RowState {
    let id = rt
        .enqueue(InboundMessage::text("s", "test", text))
        .await
        .unwrap()
        .id;
    let q = rt.store().inbound.clone();
    wait_for("delivery", || {
        q.state_of(id).unwrap().unwrap().state == "delivered"
    })
    .await;
    q.state_of(id).unwrap().unwrap()
}

#[actix::test]
async fn every_session_gets_its_messages_in_order_and_idle_actors_stop() {
    let dir = TestDb::from_env();
    let rt = start(&dir, file_channel(dir.path())).await;
    for i in 0..20 {
        for s in 0..5 {
            rt.enqueue(InboundMessage::text(
                &format!("s{s}"),
                "test",
                &i.to_string(),
            ))
            .await
            .unwrap();
        }
    }
    wait_for("100 deliveries", || lines(dir.path()).len() == 100).await;
    let all = lines(dir.path());
    for s in 0..5 {
        let got: Vec<String> = all
            .iter()
            .filter(|l| l["session"] == format!("s{s}"))
            .map(|l| l["content"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(
            got,
            (0..20).map(|i| i.to_string()).collect::<Vec<_>>(),
            "session s{s} in order"
        );
    }
    let sup = rt.supervisor();
    for _ in 0..100 {
        if sup.send(RunningSessions).await.unwrap() == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        sup.send(RunningSessions).await.unwrap(),
        0,
        "actors stop when their session is drained"
    );
    rt.shutdown(Duration::from_secs(1)).await;
}

/// A channel that panics on its first call, then delivers.
#[derive(Clone)]
struct Flaky {
    calls: Arc<AtomicU32>,
}
impl Channel for Flaky {
    fn deliver(&mut self, _: Delivery) -> Answer {
        if self.calls.fetch_add(1, Ordering::SeqCst) == 0 {
            panic!("flaky channel blew up");
        }
        Outcome::delivered().into()
    }
    fn timeout(&self) -> Duration {
        Duration::from_secs(5)
    }
}

#[actix::test]
async fn a_panicking_channel_is_restarted_and_the_row_retried() {
    let dir = TestDb::from_env();
    let calls = Arc::new(AtomicU32::new(0));
    let c = calls.clone();
    let rt = start(&dir, ChannelSpec::of(Flaky { calls: c })).await;
    let row = deliver(&rt, "hello").await;
    assert_eq!(row.attempts, 2);
    assert!(row.last_error.unwrap().contains("channel out failed"));
    // the system is still up and delivering, through a restarted channel actor
    assert_eq!(deliver(&rt, "again").await.attempts, 1);
    assert_eq!(calls.load(Ordering::SeqCst), 3);
    rt.shutdown(Duration::from_secs(1)).await;
}

/// A channel that never answers its first call.
#[derive(Clone)]
struct Hangs {
    calls: Arc<AtomicU32>,
    timeout: Duration,
}
impl Channel for Hangs {
    fn deliver(&mut self, _: Delivery) -> Answer {
        let first = self.calls.fetch_add(1, Ordering::SeqCst) == 0;
        Answer::later(async move {
            if first {
                std::future::pending::<()>().await;
            }
            Outcome::delivered()
        })
    }
    fn timeout(&self) -> Duration {
        self.timeout
    }
}

#[actix::test]
async fn a_hanging_channel_times_out_and_the_row_is_retried() {
    let dir = TestDb::from_env();
    let calls = Arc::new(AtomicU32::new(0));
    let c = calls.clone();
    let rt = start(
        &dir,
        ChannelSpec::of(Hangs {
            calls: c,
            timeout: Duration::from_millis(200),
        }),
    )
    .await;
    let row = deliver(&rt, "hello").await;
    assert_eq!(row.attempts, 2);
    assert!(row.last_error.unwrap().contains("did not answer within"));
    rt.shutdown(Duration::from_secs(1)).await;
}

#[actix::test]
async fn restart_reclaims_a_previous_process_leases_and_resumes_sessions() {
    let dir = TestDb::from_env();
    let cfg = config(&dir);
    {
        // A "previous process": enqueues, leases one row, and dies without answering.
        let engine = Engine::open(&dir.config)
            .unwrap()
            .with_owner("dead-process");
        // The only daemon on a SQLite file takes back every lease at start; on a shared
        // database (PostgreSQL) no daemon takes another's before it expires: a short one.
        let mut policy = QueuePolicy::inbound();
        if dir.db.is_shared() {
            policy.lease_timeout = Duration::from_secs(1);
        }
        let q = engine.queue(relayq_engine::QueueName::Inbound, policy);
        for i in 0..3 {
            q.enqueue(&InboundMessage::text("a", "t", &i.to_string()).to_row())
                .unwrap();
            q.enqueue(&InboundMessage::text("b", "t", &i.to_string()).to_row())
                .unwrap();
        }
        assert!(q.lease_next("a").unwrap().is_some());
    }
    let rt = Relayq::builder(cfg)
        .channel("out", file_channel(dir.path()))
        .start()
        .await
        .unwrap();
    wait_for("all 6 delivered", || lines(dir.path()).len() == 6).await;
    let a: Vec<String> = lines(dir.path())
        .iter()
        .filter(|l| l["session"] == "a")
        .map(|l| l["content"].as_str().unwrap().into())
        .collect();
    assert_eq!(a, vec!["0", "1", "2"], "the reclaimed row goes first");
    rt.shutdown(Duration::from_secs(1)).await;
}

#[actix::test]
async fn a_second_daemon_on_the_same_database_is_refused() {
    let dir = TestDb::from_env();
    let rt = start(&dir, file_channel(dir.path())).await;
    let second = Relayq::builder(config(&dir))
        .channel("out", file_channel(dir.path()))
        .start()
        .await;
    let refused = second.err().unwrap().to_string();
    // On PostgreSQL the file holds the node's own lock: said as such (issue 41, item 7).
    assert!(
        refused.contains("already serving") || refused.contains("already uses the node files"),
        "{refused}"
    );
    rt.shutdown(Duration::from_secs(1)).await;
}

#[actix::test]
async fn expiring_a_session_expires_its_rows() {
    let dir = TestDb::from_env();
    let spec = ChannelSpec::of(Hangs {
        calls: Arc::new(AtomicU32::new(0)),
        timeout: Duration::from_secs(1),
    });
    let rt = Relayq::builder(config(&dir))
        .channel("out", spec)
        .start()
        .await
        .unwrap();
    let first = rt
        .enqueue(InboundMessage::text("s", "t", "stuck"))
        .await
        .unwrap()
        .id;
    let second = rt
        .enqueue(InboundMessage::text("s", "t", "waiting"))
        .await
        .unwrap()
        .id;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(rt.expire_session("s").await.unwrap(), 2);
    let q = rt.store().inbound.clone();
    assert_eq!(q.state_of(first).unwrap().unwrap().state, "expired");
    assert_eq!(q.state_of(second).unwrap().unwrap().state, "expired");
    rt.shutdown(Duration::from_millis(100)).await;
}

#[actix::test]
async fn unknown_channel_in_routing_is_refused_at_start() {
    let dir = TestDb::from_env();
    let err = Relayq::builder(config(&dir)).start().await.err().unwrap();
    assert!(
        err.to_string().contains("channel 'out' is not configured"),
        "{err}"
    );
}

/// A database call keeps running after its caller stops waiting; shutdown must wait for it.
#[actix::test]
async fn settle_waits_for_calls_whose_callers_went_away() {
    let dir = TestDb::from_env();
    let rt = start(&dir, file_channel(dir.path())).await;
    let store = rt.store().clone();
    let done = Arc::new(AtomicU32::new(0));
    let d = done.clone();
    let call = store.run(move |_| {
        std::thread::sleep(Duration::from_millis(300));
        d.store(1, Ordering::SeqCst);
        Ok(())
    });
    // start the call, then drop the caller
    let _ = tokio::time::timeout(Duration::from_millis(20), call).await;
    assert!(
        !store.settle(Duration::from_millis(10)).await,
        "still running: settle times out"
    );
    assert!(store.settle(Duration::from_secs(5)).await);
    assert_eq!(
        done.load(Ordering::SeqCst),
        1,
        "settle returned only after the call ended"
    );
    rt.shutdown(Duration::from_secs(1)).await;
}

/// Enqueues handed over one after another commit in that order, however their futures are
/// awaited: an adapter may pipeline a burst without waiting for each commit. 2 000 messages
/// overflow any bounded mailbox, which is where a later message could overtake an earlier one.
#[actix::test]
async fn pipelined_enqueues_commit_and_deliver_in_call_order() {
    let dir = TestDb::from_env();
    let rt = start(&dir, file_channel(dir.path())).await;
    let pending: Vec<_> = (0..2000)
        .map(|i| rt.enqueue(InboundMessage::text("s", "test", &i.to_string())))
        .collect();
    let mut ids = Vec::new();
    for answer in pending.into_iter().rev() {
        ids.push(answer.await.unwrap().id);
    }
    ids.reverse();
    let first_bad = ids.windows(2).position(|w| w[0] >= w[1]);
    assert_eq!(
        first_bad,
        None,
        "row ids follow call order: {:?}",
        first_bad.map(|i| &ids[i.saturating_sub(2)..(i + 3).min(ids.len())])
    );
    wait_for("all delivered", || lines(dir.path()).len() == 2000).await;
    let contents: Vec<String> = lines(dir.path())
        .iter()
        .map(|l| l["content"].as_str().unwrap().to_string())
        .collect();
    let expected: Vec<String> = (0..2000).map(|i| i.to_string()).collect();
    assert_eq!(contents, expected);
    rt.shutdown(Duration::from_secs(5)).await;
}

/// `enqueue_outbound` hands its write over when called, as `enqueue` does: outbound messages
/// enqueued one after another are written and sent in that order however their futures are
/// awaited (an adapter relaying a burst keeps several in flight).
#[actix::test]
async fn pipelined_outbound_enqueues_are_written_and_sent_in_call_order() {
    let dir = TestDb::from_env();
    let rt = start(&dir, file_channel(dir.path())).await;
    let message = |i: usize| relayq_engine::OutboundMessage::text("out", "chat-1", &i.to_string());
    let pending: Vec<_> = (0..300).map(|i| rt.enqueue_outbound(message(i))).collect();
    let mut ids = Vec::new();
    for answer in pending.into_iter().rev() {
        ids.push(answer.await.unwrap().first.id);
    }
    ids.reverse();
    assert!(
        ids.windows(2).all(|w| w[0] < w[1]),
        "row ids follow call order: {ids:?}"
    );
    wait_for("all sent", || lines(dir.path()).len() == 300).await;
    let texts: Vec<String> = lines(dir.path())
        .iter()
        .map(|l| l["text"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(texts, (0..300).map(|i| i.to_string()).collect::<Vec<_>>());
    rt.shutdown(Duration::from_secs(5)).await;
}

/// `n` rows of session "s", written before relayq starts, so its actor leases them as one run.
fn rows_before_start(dir: &TestDb, n: usize) -> Vec<i64> {
    let engine = Engine::open(&dir.config).unwrap();
    let q = engine.queue(relayq_engine::QueueName::Inbound, QueuePolicy::inbound());
    (0..n)
        .map(|i| {
            q.enqueue(&InboundMessage::text("s", "t", &i.to_string()).to_row())
                .unwrap()
                .id
        })
        .collect()
}

async fn all_delivered(q: &relayq_engine::Queue, ids: &[i64]) {
    wait_for("all delivered", || {
        ids.iter()
            .all(|&id| q.state_of(id).unwrap().unwrap().state == "delivered")
    })
    .await;
}

/// Records each call's text and attempt; fails text "3" once, and answers after `delay`.
#[derive(Clone)]
struct Recorder {
    calls: Arc<std::sync::Mutex<Vec<(String, u32)>>>,
    delay: Duration,
    /// Rows that were not yet recorded delivered when the row after them arrived.
    unrecorded_before: Arc<std::sync::Mutex<Vec<i64>>>,
    queue: relayq_engine::Queue,
}
impl Channel for Recorder {
    fn timeout(&self) -> Duration {
        Duration::from_secs(5)
    }
    fn deliver(&mut self, d: Delivery) -> Answer {
        let previous = self.queue.state_of(d.id - 1).unwrap();
        if previous.is_some_and(|p| p.state != "delivered") && d.attempt == 1 {
            self.unrecorded_before.lock().unwrap().push(d.id - 1);
        }
        let mut calls = self.calls.lock().unwrap();
        let first_try_of_3 = d.text() == "3" && !calls.iter().any(|(t, _)| t == "3");
        calls.push((d.text().to_string(), d.attempt));
        let delay = self.delay;
        Answer::later(async move {
            tokio::time::sleep(delay).await;
            if first_try_of_3 {
                Outcome::Retry {
                    error: "busy".into(),
                    after: Some(Duration::from_millis(30)),
                }
            } else {
                Outcome::delivered()
            }
        })
    }
}

/// Starts relayq on `dir` (test config, then `adjust`) with a `Recorder` answering after
/// `delay`; returns its calls and the rows it found unrecorded when the next one arrived.
async fn start_recorder(
    dir: &TestDb,
    delay: Duration,
    adjust: impl FnOnce(&mut RelayqConfig),
) -> (
    Relayq,
    Arc<std::sync::Mutex<Vec<(String, u32)>>>,
    Arc<std::sync::Mutex<Vec<i64>>>,
) {
    let calls = Arc::new(std::sync::Mutex::new(Vec::new()));
    let unrecorded = Arc::new(std::sync::Mutex::new(Vec::new()));
    let queue = Engine::open(&dir.config)
        .unwrap()
        .queue(relayq_engine::QueueName::Inbound, QueuePolicy::inbound());
    let (c, u) = (calls.clone(), unrecorded.clone());
    let spec = ChannelSpec::of(Recorder {
        calls: c,
        delay,
        unrecorded_before: u,
        queue,
    });
    let mut cfg = config(dir);
    adjust(&mut cfg);
    let rt = Relayq::builder(cfg)
        .channel("out", spec)
        .start()
        .await
        .unwrap();
    (rt, calls, unrecorded)
}

#[actix::test]
async fn a_failure_mid_run_holds_back_the_rows_after_it_until_its_retry_succeeds() {
    let dir = TestDb::from_env();
    let ids = rows_before_start(&dir, 10);
    let (rt, calls, _) = start_recorder(&dir, Duration::ZERO, |_| {}).await;
    let q = rt.store().inbound.clone();
    all_delivered(&q, &ids).await;
    let calls = calls.lock().unwrap().clone();
    let texts: Vec<&str> = calls.iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(
        texts,
        ["0", "1", "2", "3", "3", "4", "5", "6", "7", "8", "9"]
    );
    assert_eq!(calls[4], ("3".into(), 2), "the retry is the second attempt");
    for &id in &ids[4..] {
        assert_eq!(
            q.state_of(id).unwrap().unwrap().attempts,
            1,
            "rows leased with the run but held back are given back without counting an attempt"
        );
    }
    rt.shutdown(Duration::from_secs(1)).await;
}

#[actix::test]
async fn a_slow_channel_finds_each_answer_recorded_before_the_next_row_arrives() {
    let dir = TestDb::from_env();
    let ids = rows_before_start(&dir, 10);
    let (rt, calls, unrecorded) = start_recorder(&dir, Duration::from_millis(5), |_| {}).await;
    let q = rt.store().inbound.clone();
    all_delivered(&q, &ids).await;
    assert_eq!(calls.lock().unwrap().len(), 11);
    assert_eq!(
        *unrecorded.lock().unwrap(),
        Vec::<i64>::new(),
        "a crash would repeat only the delivery in progress"
    );
    rt.shutdown(Duration::from_secs(1)).await;
}

/// Rows leased with a run wait behind the one being delivered; while a slow delivery runs,
/// their leases are extended with its own, so the sweep never takes them back and nothing is
/// delivered twice.
#[actix::test]
async fn leases_waiting_in_a_run_outlive_a_slow_delivery_ahead_of_them() {
    let dir = TestDb::from_env();
    let ids = rows_before_start(&dir, 3);
    let (rt, calls, _) = start_recorder(&dir, Duration::from_millis(400), |c| {
        c.queues.inbound.lease_timeout = Duration::from_millis(300);
        c.sweep_interval = Duration::from_millis(50);
    })
    .await;
    let q = rt.store().inbound.clone();
    all_delivered(&q, &ids).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        *calls.lock().unwrap(),
        [("0".into(), 1), ("1".into(), 1), ("2".into(), 1)],
        "each row delivered once, in order"
    );
    rt.shutdown(Duration::from_secs(1)).await;
}

/// Pauses the whole channel on its first call (a global rate limit), then delivers, noting
/// when each call came.
#[derive(Clone)]
struct PausesChannel {
    calls: Arc<std::sync::Mutex<Vec<(String, std::time::Instant)>>>,
    pause: Duration,
}
impl Channel for PausesChannel {
    fn deliver(&mut self, d: Delivery) -> Answer {
        let mut calls = self.calls.lock().unwrap();
        calls.push((d.address().to_string(), std::time::Instant::now()));
        if calls.len() == 1 {
            return Outcome::Throttled {
                reason: "global rate limit".into(),
                wait: self.pause,
                channel_wide: true,
            }
            .into();
        }
        Outcome::delivered().into()
    }
    fn timeout(&self) -> Duration {
        Duration::from_secs(5)
    }
}

/// Starts relayq with `channel` as `out`, enqueues one message to `chat-1`; returns the runtime,
/// the row id, and the outbound queue read from outside.
async fn start_with_outbound(
    dir: &TestDb,
    channel: impl Channel,
) -> (Relayq, i64, relayq_engine::Queue) {
    let rt = start(dir, ChannelSpec::of(channel)).await;
    let written = rt.enqueue_outbound(outbound("chat-1")).await.unwrap();
    let queue = Engine::open(&dir.config)
        .unwrap()
        .queue(relayq_engine::QueueName::Outbound, QueuePolicy::outbound());
    (rt, written.first.id, queue)
}

fn outbound(to: &str) -> relayq_engine::OutboundMessage {
    relayq_engine::OutboundMessage::text("out", to, "hi")
}

#[actix::test]
async fn a_channel_wide_pause_holds_every_destination_and_outlives_a_restart() {
    let dir = TestDb::from_env();
    let calls = Arc::new(std::sync::Mutex::new(Vec::new()));
    let channel = PausesChannel {
        calls: calls.clone(),
        pause: Duration::from_millis(1500),
    };
    let (rt, first, outbound_queue) = start_with_outbound(&dir, channel.clone()).await;
    wait_for("the pausing answer, recorded", || {
        outbound_queue
            .state_of(first)
            .unwrap()
            .unwrap()
            .last_error
            .is_some()
    })
    .await;
    let paused_at = calls.lock().unwrap()[0].1;
    // Another destination of the same channel waits too.
    rt.enqueue_outbound(outbound("chat-2")).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        calls.lock().unwrap().len(),
        1,
        "nothing is sent while paused"
    );
    rt.shutdown(Duration::from_secs(1)).await;

    // A new daemon on the same database keeps the pause, for a message written after it too.
    let rt = start(&dir, ChannelSpec::of(channel)).await;
    rt.enqueue_outbound(outbound("chat-3")).await.unwrap();
    wait_for("every message sent", || calls.lock().unwrap().len() == 4).await;
    let calls = calls.lock().unwrap().clone();
    for (to, at) in &calls[1..] {
        assert!(
            *at >= paused_at + Duration::from_millis(1400),
            "{to} sent {:?} after a 1.5 s channel-wide pause",
            *at - paused_at
        );
    }
    rt.shutdown(Duration::from_secs(1)).await;
}

/// A channel whose far end answers its ready check only from the third time on, and records
/// each send.
#[derive(Clone)]
struct SlowToWake {
    checks: Arc<AtomicU32>,
    sends: Arc<AtomicU32>,
}

impl Channel for SlowToWake {
    fn deliver(&mut self, _: Delivery) -> Answer {
        self.sends.fetch_add(1, Ordering::SeqCst);
        Outcome::delivered().into()
    }
    fn timeout(&self) -> Duration {
        Duration::from_secs(5)
    }
    fn ready_check(&self) -> Option<relayq_actors::channels::ReadyCheck> {
        let checks = self.checks.clone();
        Some(Box::pin(async move {
            match checks.fetch_add(1, Ordering::SeqCst) {
                0 | 1 => Err("getMe: connection refused".to_string()),
                _ => Ok(()),
            }
        }))
    }
}

#[actix::test]
async fn rows_wait_uncharged_until_their_channel_answers_its_ready_check() {
    let dir = TestDb::from_env();
    let channel = SlowToWake {
        checks: Arc::default(),
        sends: Arc::default(),
    };
    let (rt, id, outbound_queue) = start_with_outbound(&dir, channel.clone()).await;
    // Two failed checks: the second comes 1 s after the first, the third 2 s after that.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(channel.checks.load(Ordering::SeqCst), 2);
    assert_eq!(
        channel.sends.load(Ordering::SeqCst),
        0,
        "nothing sent before ready"
    );
    // Read between two give-backs (the row is leased for a moment each time).
    wait_for("the row pending", || {
        outbound_queue.state_of(id).unwrap().unwrap().state == "pending"
    })
    .await;
    let row = outbound_queue.state_of(id).unwrap().unwrap();
    assert_eq!(row.attempts, 0, "no attempt charged: {row:?}");
    for _ in 0..400 {
        if outbound_queue.state_of(id).unwrap().unwrap().state == "delivered" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let row = outbound_queue.state_of(id).unwrap().unwrap();
    assert_eq!((row.state.as_str(), row.attempts), ("delivered", 1));
    assert_eq!(channel.sends.load(Ordering::SeqCst), 1);
    rt.shutdown(Duration::from_secs(1)).await;
}

/// Notes each send (the thread it ran on, its destination and text, in the order sent) and
/// answers it delivered after `delay`.
#[derive(Clone, Default)]
struct NotesSends {
    seen: Arc<std::sync::Mutex<Vec<(std::thread::ThreadId, String, String)>>>,
    delay: Duration,
}

impl NotesSends {
    fn count(&self) -> usize {
        self.seen.lock().unwrap().len()
    }
}

impl Channel for NotesSends {
    fn deliver(&mut self, delivery: Delivery) -> Answer {
        let (to, text) = (delivery.address().to_string(), delivery.text().to_string());
        let thread = std::thread::current().id();
        self.seen.lock().unwrap().push((thread, to, text));
        let delay = self.delay;
        Answer::later(async move {
            tokio::time::sleep(delay).await;
            Outcome::delivered()
        })
    }
    fn timeout(&self) -> Duration {
        Duration::from_secs(5)
    }
}

/// An outbound run's rows are leased and marked together, so the lane sends on while the write
/// of its first answers waits for the writer; only the write after it waits for that one. Before,
/// every write of answers was awaited, and a slow commit held the rows already leased: at most
/// one 5 ms window went out while the writer was held (none, in the runs checked).
#[actix::test]
async fn an_outbound_run_keeps_sending_while_the_write_of_its_answers_waits() {
    let dir = TestDb::from_env();
    let channel = NotesSends {
        delay: Duration::from_millis(2),
        ..NotesSends::default()
    };
    let sends = channel.clone();
    // Written before the start, so the rows go as one run: rows written while it was leased
    // made shorter runs, and a run that ended as the writer was held waited for the write
    // leasing the next (as it must), which is not what this test is about.
    let engine = Engine::open(&dir.config).unwrap();
    let q = engine.queue(relayq_engine::QueueName::Outbound, QueuePolicy::outbound());
    for _ in 0..60 {
        q.enqueue(&outbound("chat-1").to_row()).unwrap();
    }
    let rt = start(&dir, ChannelSpec::of(channel)).await;
    wait_for("the run under way", || sends.count() >= 5).await;

    // Hold the writer: an operation that waits until released. The sends are counted from the
    // moment it holds the writer (read on the writer's thread, not by a later poll).
    let (release, held) = std::sync::mpsc::channel::<()>();
    let (started, running) = std::sync::mpsc::channel::<usize>();
    let counted = sends.clone();
    let commit = relayq_engine::Atomicity::Savepoint;
    // The writer of chat-1's answers: a thread of its own on PostgreSQL, the one writer on
    // SQLite.
    let lane = relayq_engine::commit::CommitLine::held(&outbound("chat-1").destination_key());
    let hold = rt
        .store()
        .engine
        .database()
        .submit_ahead(lane, commit, None, move |_, _| {
            started.send(counted.count()).unwrap();
            held.recv().ok();
            Ok(())
        });
    let hold = actix_rt::spawn(hold);
    let mut before = None;
    wait_for("the writer held", || {
        before = running.try_recv().ok();
        before.is_some()
    })
    .await;
    let before = before.unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    let during = sends.count() - before;
    release.send(()).unwrap();
    hold.await.unwrap().unwrap().unwrap();
    // The lane sends on for at least one whole DESTINATION_RECORD_WITHIN (20 ms, ~7 sends of 2-3 ms);
    // a lane that waits for each write sends at most what is left of its 5 ms window (≤ 3).
    assert!(
        during >= 5,
        "only {during} sends while the writer was held: the lane waited for its write"
    );
    assert!(
        before + during < 60,
        "the test needs rows left to send when the writer is released"
    );
    wait_for("every row sent", || sends.count() >= 60).await;
    rt.shutdown(Duration::from_secs(5)).await;
}

/// A `hold` channel whose first send is answered after 200 ms (the row behind it is written by
/// then) and whose later sends never are.
#[derive(Clone)]
struct HoldsAfterFirst {
    sends: Arc<AtomicU32>,
}

impl Channel for HoldsAfterFirst {
    fn deliver(&mut self, _: Delivery) -> Answer {
        match self.sends.fetch_add(1, Ordering::SeqCst) {
            0 => Answer::later(async {
                tokio::time::sleep(Duration::from_millis(200)).await;
                Outcome::delivered()
            }),
            _ => Answer::later(std::future::pending()),
        }
    }
    fn timeout(&self) -> Duration {
        Duration::from_secs(30)
    }
    fn unknown_outcome(&self) -> relayq_actors::channels::UnknownOutcome {
        relayq_actors::channels::UnknownOutcome::Hold
    }
}

/// A `hold` channel's next row is leased with the answer before it, and marked send started by
/// the same statement: while its send is under way the row says so, so a crash then holds it
/// for an operator instead of sending it again.
#[actix::test]
async fn a_hold_channels_next_row_is_marked_send_started_before_its_send() {
    let dir = TestDb::from_env();
    let sends = Arc::new(AtomicU32::new(0));
    let channel = HoldsAfterFirst {
        sends: sends.clone(),
    };
    let rt = start(&dir, ChannelSpec::of(channel)).await;
    let first = rt
        .enqueue_outbound(outbound("chat-1"))
        .await
        .unwrap()
        .first
        .id;
    let second = rt
        .enqueue_outbound(outbound("chat-1"))
        .await
        .unwrap()
        .first
        .id;
    wait_for("the second send under way", || {
        sends.load(Ordering::SeqCst) == 2
    })
    .await;
    let engine = Engine::open(&dir.config).unwrap();
    let row = |id| engine.row(id).unwrap().unwrap();
    assert_eq!(row(first).state, "delivered");
    let second = row(second);
    assert_eq!(second.state, "leased");
    assert!(
        second.send_started.is_some(),
        "the row in flight is marked send started"
    );
    rt.shutdown(Duration::from_millis(100)).await;
}

/// Sends 8 destinations' rows with `claimer.send_threads = threads`; returns how many threads
/// delivered, having checked each destination got its rows once each, in order.
async fn threads_that_sent(threads: usize) -> usize {
    let dir = TestDb::from_env();
    let channel = NotesSends {
        delay: Duration::from_millis(1),
        ..NotesSends::default()
    };
    let mut c = config(&dir);
    c.claims.send_threads = threads;
    let rt = Relayq::builder(c)
        .channel("out", ChannelSpec::of(channel.clone()))
        .start()
        .await
        .unwrap();
    let (destinations, each) = (8, 30);
    let written: Vec<_> = (0..each)
        .flat_map(|seq| (0..destinations).map(move |d| (d, seq)))
        .map(|(d, seq)| {
            let m =
                relayq_engine::OutboundMessage::text("out", &format!("chat-{d}"), &seq.to_string());
            rt.enqueue_outbound(m)
        })
        .collect();
    for w in written {
        w.await.unwrap();
    }
    wait_for("every row sent", || channel.count() >= destinations * each).await;
    rt.shutdown(Duration::from_secs(5)).await;
    let seen = channel.seen.lock().unwrap().clone();
    for d in 0..destinations {
        let texts: Vec<String> = seen
            .iter()
            .filter(|(_, to, _)| *to == format!("chat-{d}"))
            .map(|(_, _, text)| text.clone())
            .collect();
        let expected: Vec<String> = (0..each).map(|seq| seq.to_string()).collect();
        assert_eq!(texts, expected, "chat-{d}: once each, in order");
    }
    let threads: std::collections::HashSet<_> = seen.iter().map(|(t, _, _)| *t).collect();
    threads.len()
}

/// Outbound runs go out on `claimer.send_threads` threads, each with its own channel actor,
/// every destination still in order; with one thread, everything is sent on the actix thread.
#[actix::test]
async fn outbound_runs_are_sent_on_the_configured_threads_each_destination_in_order() {
    assert_eq!(threads_that_sent(2).await, 2);
    assert_eq!(threads_that_sent(1).await, 1);
}

/// Delivers at once and logs which node delivered which message, in delivery order.
#[derive(Clone)]
struct Tally {
    node: usize,
    log: Arc<std::sync::Mutex<Vec<(usize, u64)>>>,
}

impl Channel for Tally {
    fn timeout(&self) -> Duration {
        Duration::from_secs(10)
    }

    fn deliver(&mut self, d: Delivery) -> Answer {
        let seq = d.text().parse().unwrap();
        self.log.lock().unwrap().push((self.node, seq));
        Outcome::delivered().into()
    }
}

/// Several daemons share the work: a node busy taking messages in (its writer's backlog high)
/// hands its session on between runs to an idle node, which delivers the most of it, in
/// order. Before, the node that took the messages in delivered them too, nearly all: three
/// daemons were no faster than one at S = 1.
#[actix::test]
async fn a_node_busy_taking_messages_in_leaves_their_delivery_to_an_idle_node() {
    let pg = TestDb::postgres();
    let log = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut nodes = Vec::new();
    for (i, name) in ["taking", "idle"].into_iter().enumerate() {
        let mut c = config(&pg);
        c.db.path = pg.path().join(format!("{name}.node"));
        c.node = name.to_string();
        c.listen_for_wakes = true;
        let tally = Tally {
            node: i,
            log: log.clone(),
        };
        let rt = Relayq::builder(c)
            .channel("out", ChannelSpec::of(tally))
            .start()
            .await
            .unwrap();
        nodes.push(rt);
    }
    // The first node reads the second's load within a tenth of a second.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let n = 6000;
    let mut in_flight = std::collections::VecDeque::new();
    for i in 0..n {
        if in_flight.len() == 64 {
            let sent: actix_rt::task::JoinHandle<relayq_actors::Result<_>> =
                in_flight.pop_front().unwrap();
            sent.await.unwrap().unwrap();
        }
        let m = InboundMessage::text("s", "test", &i.to_string());
        in_flight.push_back(actix_rt::spawn(nodes[0].enqueue(m)));
    }
    for sent in in_flight {
        sent.await.unwrap().unwrap();
    }
    let delivered = |log: &[(usize, u64)]| log.last().map(|&(_, seq)| seq) == Some(n - 1);
    wait_for("every message delivered", || {
        delivered(&log.lock().unwrap())
    })
    .await;
    let log = log.lock().unwrap().clone();
    let mut last = None;
    for &(_, seq) in &log {
        // A repeat (at least once) comes right after itself; nothing goes back.
        assert!(
            last.is_none_or(|l| seq == l || seq == l + 1),
            "{seq} after {last:?}"
        );
        last = Some(seq);
    }
    let by_idle = log.iter().filter(|&&(node, _)| node == 1).count();
    assert!(
        by_idle >= log.len() / 2,
        "the idle node delivered {by_idle} of {}",
        log.len()
    );
    for rt in nodes {
        rt.shutdown(Duration::from_secs(5)).await;
    }
}

/// CI fault (PostgreSQL): a session looked at its head while a lost daemon's lease still held
/// it, and waited for that lease's end; the recovery sweep then took the lease back and asked
/// only sessions without an actor to look: the row waited the whole lease (5 minutes).
#[actix::test]
async fn a_lease_the_sweep_takes_back_is_delivered_at_once_by_a_session_already_waiting_for_it() {
    let pg = TestDb::postgres();
    let mut c = config(&pg);
    c.sweep_interval = Duration::from_secs(2);
    let rt = Relayq::builder(c)
        .channel("out", file_channel(pg.path()))
        .start()
        .await
        .unwrap();
    // The sweep at start has run.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let lost = Engine::open(&pg.config)
        .unwrap()
        .with_owner("a-lost-daemon");
    let q = lost.queue(relayq_engine::QueueName::Inbound, QueuePolicy::inbound());
    q.enqueue(&InboundMessage::text("a", "t", "0").to_row())
        .unwrap();
    assert!(q.lease_next("a").unwrap().is_some());
    // The session's actor starts and finds its head under the lost daemon's lease.
    rt.enqueue(InboundMessage::text("a", "t", "1"))
        .await
        .unwrap();
    wait_for("both delivered after the next sweep", || {
        lines(pg.path()).len() == 2
    })
    .await;
    let sent: Vec<String> = lines(pg.path())
        .iter()
        .map(|l| l["content"].as_str().unwrap().into())
        .collect();
    assert_eq!(sent, ["0", "1"]);
    rt.shutdown(Duration::from_secs(1)).await;
}

/// The daemon prunes finished rows past retention on its prune interval, from its first one
/// after start, not at start: on PostgreSQL a prune reads the whole table, and at start it
/// competed with the restart's backlog on every node (issue 42).
#[actix_rt::test]
async fn finished_rows_past_retention_are_pruned_on_the_interval_not_at_start() {
    let db = TestDb::from_env();
    let engine = Engine::open(&db.config).unwrap();
    let q = engine.queue(relayq_engine::QueueName::Inbound, QueuePolicy::inbound());
    let id = q
        .enqueue(&InboundMessage::text("a", "t", "old").to_row())
        .unwrap()
        .id;
    let lease = q.lease_next("a").unwrap().unwrap();
    let receipt = relayq_engine::queue::Receipt::default();
    assert!(engine
        .write(|tx| q.delivered_in(tx, &lease, &receipt))
        .unwrap());
    // Delivered eight days ago (the retention is seven).
    let eight_days_ago = engine.now() - 8 * 24 * 3_600_000;
    engine
        .write(|tx| {
            use relayq_engine::storage::sql::{Query, Sql};
            let sql = Sql::same("UPDATE queue_rows SET finished_at = :at WHERE id = :id");
            tx.exec(
                &sql,
                relayq_engine::params![":at" => eight_days_ago, ":id" => id],
            )
        })
        .unwrap();
    drop(engine);

    let mut c = config(&db);
    c.prune_interval = Duration::from_millis(1_500);
    let rt = Relayq::builder(c)
        .channel("out", file_channel(db.path()))
        .start()
        .await
        .unwrap();
    let q = Engine::open(&db.config)
        .unwrap()
        .queue(relayq_engine::QueueName::Inbound, QueuePolicy::inbound());
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        q.state_of(id).unwrap().is_some(),
        "pruned at start, beside the restart's backlog"
    );
    wait_for("the prune on its interval", || {
        q.state_of(id).unwrap().is_none()
    })
    .await;
    rt.shutdown(Duration::from_secs(1)).await;
}
