//! relayq's inbound flow, in process: the real runtime (SupervisorActor, SessionActors, group
//! commit, recovery) on a real SQLite file, delivering to a no-op channel that records what
//! arrived and when. The harness checks per-session order on every run.

use std::collections::HashMap;
use std::path::Path;
use std::rc::Rc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use anyhow::{bail, ensure, Context as _, Result};
use relayq_actors::inbound::supervisor::{Enqueue, SupervisorActor};
use relayq_actors::{Answer, Channel, ChannelSpec, Delivery, Outcome, Relayq, RelayqConfig};
use relayq_engine::{DbConfig, Engine, InboundMessage, NewRow, Synchronous};
use tokio::sync::{mpsc, Semaphore};

use crate::cpu;

/// One delivered message: its session, its sequence number within the session, and when.
pub struct Delivered {
    pub session: String,
    pub seq: u64,
    pub at: Instant,
}

/// The no-op channel: answers `Delivered` at once and reports the delivery.
#[derive(Clone)]
struct NoOpChannel {
    seen: mpsc::UnboundedSender<Delivered>,
}

impl Channel for NoOpChannel {
    fn timeout(&self) -> Duration {
        Duration::from_secs(30)
    }

    fn deliver(&mut self, d: Delivery) -> Answer {
        let seq = d.text().parse().unwrap_or(u64::MAX);
        let _ = self.seen.send(Delivered {
            session: d.address().to_string(),
            seq,
            at: Instant::now(),
        });
        Outcome::delivered().into()
    }
}

/// A running relayq with the no-op channel, and the stream of its deliveries.
pub struct Flow {
    pub runtime: Relayq,
    pub delivered: mpsc::UnboundedReceiver<Delivered>,
}

impl Flow {
    pub async fn start(db: &Path, sync: Synchronous, listen_for_wakes: bool) -> Result<Flow> {
        let mut config = RelayqConfig::new(db, "noop");
        config.db.synchronous = sync;
        config.listen_for_wakes = listen_for_wakes;
        let (tx, delivered) = mpsc::unbounded_channel();
        let spec = ChannelSpec::of(NoOpChannel { seen: tx });
        let runtime = Relayq::builder(config)
            .channel("noop", spec)
            .start()
            .await?;
        Ok(Flow { runtime, delivered })
    }

    /// Waits for `n` deliveries, checking that each session's sequence numbers arrive in
    /// order (a repeat of the last one is an at-least-once redelivery, allowed and counted).
    pub async fn collect(&mut self, n: usize, mut each: impl FnMut(&Delivered)) -> Result<Order> {
        let mut last: HashMap<String, u64> = HashMap::new();
        let mut order = Order::default();
        while order.delivered < n {
            let d = tokio::time::timeout(Duration::from_secs(60), self.delivered.recv())
                .await
                .context("no delivery for 60 s")?
                .context("the channel closed")?;
            match last.get(&d.session) {
                Some(&prev) if d.seq == prev => order.repeats += 1,
                Some(&prev) if d.seq < prev => bail!(
                    "session {} got message {} after {}: FIFO broken",
                    d.session,
                    d.seq,
                    prev
                ),
                _ => {
                    order.delivered += 1;
                    last.insert(d.session.clone(), d.seq);
                    each(&d);
                }
            }
        }
        Ok(order)
    }

    pub async fn stop(self) {
        self.runtime.shutdown(Duration::from_secs(10)).await;
    }
}

/// What the order check found.
#[derive(Debug, Default, Clone, Copy)]
pub struct Order {
    pub delivered: usize,
    pub repeats: usize,
}

fn message(session: usize, seq: u64) -> InboundMessage {
    InboundMessage::text(&format!("s{session}"), "bench", &seq.to_string())
}

/// End to end: `n` messages over `sessions` sessions, each session's messages enqueued in
/// order by its own producer (see `spawn_producers`) while relayq delivers.
/// Messages per second from the first enqueue to the last delivery.
pub fn throughput(n: usize, sessions: usize, sync: Synchronous) -> Result<f64> {
    throughput_and_cpu(n, sessions, sync).map(|(rate, _)| rate)
}

/// [`throughput`], and the CPU each message took, by thread group (see [`cpu::per_row`]).
pub fn throughput_and_cpu(
    n: usize,
    sessions: usize,
    sync: Synchronous,
) -> Result<(f64, Vec<(&'static str, f64)>)> {
    throughput_windowed(n, sessions, sync, PRODUCER_WINDOW)
}

/// [`throughput_and_cpu`] with each producer keeping at most `window` enqueues in flight
/// (1: each waits for its commit before the next, as an HTTP client on one connection does).
pub fn throughput_windowed(
    n: usize,
    sessions: usize,
    sync: Synchronous,
    window: usize,
) -> Result<(f64, Vec<(&'static str, f64)>)> {
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("relayq.db");
    actix_rt::System::new().block_on(async move {
        let mut flow = Flow::start(&db, sync, false).await?;
        let cpu_before = cpu::snapshot();
        let started = Instant::now();
        spawn_producers(flow.runtime.supervisor(), n, sessions, window);
        let order = flow.collect(n, |_| {}).await?;
        let secs = started.elapsed().as_secs_f64();
        let cpu = cpu::per_row(&cpu_before, &cpu::snapshot(), n);
        flow.stop().await;
        ensure!(order.delivered == n);
        Ok((n as f64 / secs, cpu))
    })
}

/// Enqueues a producer keeps in flight: relayq commits enqueues in the order they are sent,
/// so a producer need not wait for one commit before sending the next (an adapter relaying a
/// burst of chat messages does the same).
const PRODUCER_WINDOW: usize = 64;

/// One producer task per session, each enqueuing its session's share in order, up to
/// `window` in flight, each answered after its commit.
fn spawn_producers(supervisor: Addr<SupervisorActor>, n: usize, sessions: usize, window: usize) {
    let sessions = sessions.min(n);
    for s in 0..sessions {
        let supervisor = supervisor.clone();
        let count = n / sessions + usize::from(s < n % sessions);
        actix_rt::spawn(async move {
            let mut in_flight = std::collections::VecDeque::with_capacity(window);
            for seq in 0..count as u64 {
                if in_flight.len() == window {
                    answered(in_flight.pop_front()).await;
                }
                in_flight.push_back(supervisor.send(Enqueue(message(s, seq))));
            }
            while let Some(f) = in_flight.pop_front() {
                answered(Some(f)).await;
            }
        });
    }
}

async fn answered<F, T, E>(request: Option<F>)
where
    F: std::future::Future<Output = Result<Result<T, E>, actix::MailboxError>>,
    E: std::fmt::Debug,
{
    if let Some(request) = request {
        match request.await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => panic!("enqueue failed: {e:?}"),
            Err(e) => panic!("supervisor gone: {e}"),
        }
    }
}

/// Latencies in milliseconds.
pub struct Latencies {
    /// Open-loop in-process enqueue → delivered.
    pub in_process: Vec<f64>,
    /// `relayq enqueue inbound` started → delivered by the running relayq.
    pub cli: Vec<f64>,
}

/// Open loop: `rate` messages per second for `secs` seconds, round-robin over `sessions`,
/// each enqueue started on schedule whether or not earlier ones finished. Then `cli_runs`
/// rows enqueued one at a time by the CLI (another process), which wakes relayq.
pub fn latency(
    rate: u32,
    secs: u32,
    sessions: usize,
    cli_runs: usize,
    relayq: &Path,
) -> Result<Latencies> {
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("relayq.db");
    let relayq = relayq.to_path_buf();
    let cwd = dir.path().to_path_buf();
    actix_rt::System::new().block_on(async move {
        let mut flow = Flow::start(&db, Synchronous::Normal, true).await?;
        let total = (rate * secs) as usize;
        let starts = Rc::new(std::cell::RefCell::new(vec![None::<Instant>; total]));
        let supervisor = flow.runtime.supervisor();
        let producer_starts = starts.clone();
        let window = std::sync::Arc::new(Semaphore::new(10_000));
        actix_rt::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / f64::from(rate)));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
            for i in 0..total {
                tick.tick().await;
                let permit = window.clone().acquire_owned().await.expect("open");
                let (s, seq) = (i % sessions, (i / sessions) as u64);
                producer_starts.borrow_mut()[i] = Some(Instant::now());
                let send = supervisor.send(Enqueue(message(s, seq)));
                actix_rt::spawn(async move {
                    let _permit = permit;
                    send.await.expect("supervisor").expect("enqueue");
                });
            }
        });
        let mut in_process = Vec::with_capacity(total);
        flow.collect(total, |d| {
            let i = (d.seq as usize) * sessions + d.session[1..].parse::<usize>().unwrap_or(0);
            if let Some(start) = starts.borrow()[i] {
                in_process.push(d.at.duration_since(start).as_secs_f64() * 1e3);
            }
        })
        .await?;

        let mut cli = Vec::with_capacity(cli_runs);
        for seq in 0..cli_runs as u64 {
            let started = Instant::now();
            let status = tokio::process::Command::new(&relayq)
                .current_dir(&cwd)
                .arg("--db")
                .arg(&db)
                .args([
                    "enqueue",
                    "inbound",
                    "--session",
                    "cli",
                    "--origin",
                    "bench",
                ])
                .arg(seq.to_string())
                .stdout(std::process::Stdio::null())
                .status()
                .await?;
            ensure!(status.success(), "relayq enqueue failed: {status}");
            let d = tokio::time::timeout(Duration::from_secs(10), flow.delivered.recv())
                .await
                .context("a CLI-enqueued row was not delivered within 10 s")?
                .context("channel closed")?;
            ensure!(
                d.session == "cli" && d.seq == seq,
                "unexpected delivery {} {}",
                d.session,
                d.seq
            );
            cli.push(d.at.duration_since(started).as_secs_f64() * 1e3);
        }
        flow.stop().await;
        Ok(Latencies { in_process, cli })
    })
}

/// Recovery: `rows` pending rows over `sessions` sessions, as a killed daemon leaves them
/// (each session's head leased by the dead instance, its lease not yet expired). Returns the
/// seconds from start to all delivered.
pub fn recovery(rows: usize, sessions: usize) -> Result<f64> {
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("relayq.db");
    {
        let engine = Engine::open(&DbConfig::new(&db))?.with_owner("killed-daemon");
        let inbound = engine.queue(
            relayq_engine::inbound::QUEUE,
            relayq_engine::QueuePolicy::inbound(),
        );
        let all: Vec<NewRow> = (0..rows)
            .map(|i| message(i % sessions, (i / sessions) as u64).to_row())
            .collect();
        for chunk in all.chunks(10_000) {
            inbound.enqueue_many(chunk)?;
        }
        let leased = inbound.lease_due(sessions, &[])?;
        ensure!(
            leased.len() == sessions,
            "expected {sessions} heads leased, got {}",
            leased.len()
        );
    }
    actix_rt::System::new().block_on(async move {
        let started = Instant::now();
        let mut flow = Flow::start(&db, Synchronous::Normal, false).await?;
        let order = flow.collect(rows, |_| {}).await?;
        let secs = started.elapsed().as_secs_f64();
        flow.stop().await;
        ensure!(order.delivered == rows);
        Ok(secs)
    })
}
