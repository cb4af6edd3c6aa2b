//! relayq's outbound flow, in process: rows written with `Relayq::enqueue_outbound`, leased by
//! the OutboundSender, POSTed by the real webhook channel (the channels' HTTP client, the production code path)
//! to a no-op HTTP/1.1 server on loopback, and recorded delivered. Pacing is off (the webhook
//! has no budgets unless configured). The server checks each destination's order.

use std::collections::HashMap;
use std::path::Path;
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Result};

use crate::cpu;
use relayq_actors::channels::{webhook, ChannelConfig, UnknownOutcome};
use relayq_actors::kit::http::HttpClient;
use relayq_actors::{Relayq, RelayqConfig};
// (the producers share the runtime on the actix thread)
use relayq_engine::{Engine, OutboundMessage, Synchronous};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// One run's figures.
pub struct Run {
    /// Rows per second, from the first enqueue to the last row recorded delivered.
    pub throughput: f64,
    /// Enqueue call → the request at the far end, in ms, one per row.
    pub latencies: Vec<f64>,
    /// CPU µs per row, by thread group (see [`cpu::per_row`]).
    pub cpu: Vec<(&'static str, f64)>,
}

/// How the webhook marks sends started.
#[derive(Debug, Clone, Copy)]
pub struct Marks {
    /// The send-started write on or off (`RelayqConfig::mark_send_started`).
    pub on: bool,
    /// The webhook's `unknown_outcome`: `resend` (the default) sends a destination's rows in
    /// runs, marked by the statement that leases them; `hold` marks each send alone, just
    /// before it.
    pub unknown_outcome: UnknownOutcome,
}

impl Marks {
    /// The default webhook: runs, marked as they are leased.
    pub const DEFAULT: Marks = Marks {
        on: true,
        unknown_outcome: UnknownOutcome::Resend,
    };
}

/// `n` rows over `destinations` destinations, each destination's rows written in order by
/// its own producer, while relayq sends them.
pub fn run(n: usize, destinations: usize, marks: Marks) -> Result<Run> {
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("relayq.db");
    actix_rt::System::new().block_on(async move { measure(&db, n, destinations, marks).await })
}

async fn measure(db: &Path, n: usize, destinations: usize, marks: Marks) -> Result<Run> {
    let far_end = noop_server().await?;
    let mut config = RelayqConfig::new(db, "hook");
    config.db.synchronous = Synchronous::Normal;
    config.listen_for_wakes = false;
    config.mark_send_started = marks.on;
    let hook = webhook::Config {
        unknown_outcome: marks.unknown_outcome,
        ..webhook::Config::new(&far_end.url)
    };
    let spec = ChannelConfig::Webhook(hook)
        .spec()
        .map_err(|e| anyhow::anyhow!("webhook: {e}"))?;
    let runtime = Rc::new(
        Relayq::builder(config)
            .channel("hook", spec)
            .start()
            .await?,
    );

    let sent: Enqueued = Arc::default();
    let cpu_before = cpu::snapshot();
    let started = Instant::now();
    let destinations = destinations.min(n);
    for d in 0..destinations {
        let (runtime, sent) = (runtime.clone(), sent.clone());
        let count = n / destinations + usize::from(d < n % destinations);
        actix_rt::spawn(async move {
            // Up to PRODUCER_WINDOW enqueues in flight, as the inbound flow's producers.
            let mut in_flight = std::collections::VecDeque::with_capacity(PRODUCER_WINDOW);
            let record = |(seq, at, id): (u64, Instant, i64)| {
                sent.lock().unwrap().insert(id, (d, seq, at));
            };
            for seq in 0..count as u64 {
                if in_flight.len() == PRODUCER_WINDOW {
                    let (seq, at, write) = in_flight.pop_front().expect("a full window");
                    record((seq, at, written(write).await));
                }
                in_flight.push_back((
                    seq,
                    Instant::now(),
                    runtime.enqueue_outbound(message(d, seq)),
                ));
            }
            while let Some((seq, at, write)) = in_flight.pop_front() {
                record((seq, at, written(write).await));
            }
        });
    }

    // Every request, checked for order per destination; then every row recorded delivered.
    let mut last: HashMap<usize, u64> = HashMap::new();
    let mut latencies = Vec::with_capacity(n);
    let mut seen = 0;
    while seen < n {
        for (id, at) in far_end.arrived().await? {
            // The request can beat the enqueue's answer to the producer: wait for the entry.
            let entry = loop {
                if let Some(e) = sent.lock().unwrap().get(&id).copied() {
                    break e;
                }
                tokio::time::sleep(Duration::from_micros(50)).await;
            };
            let (d, seq, enqueued) = entry;
            match last.get(&d) {
                Some(&prev) if seq == prev => continue, // an at-least-once repeat
                Some(&prev) if seq < prev => bail!("destination {d} got {seq} after {prev}"),
                _ => {}
            }
            last.insert(d, seq);
            latencies.push(at.duration_since(enqueued).as_secs_f64() * 1000.0);
            seen += 1;
        }
    }
    // Counted on a blocking thread: a count scans the table, and on this thread it would stall
    // the actors it measures.
    let engine = Engine::open(&relayq_engine::DbConfig::new(db))?;
    loop {
        let e = engine.clone();
        let counts = actix_rt::task::spawn_blocking(move || e.counts()).await??;
        let delivered: i64 = counts
            .iter()
            .filter(|c| c.state == "delivered")
            .map(|c| c.count)
            .sum();
        if delivered as usize >= n {
            break;
        }
        ensure!(
            started.elapsed() < Duration::from_secs(600),
            "rows not recorded"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let secs = started.elapsed().as_secs_f64();
    let cpu = cpu::per_row(&cpu_before, &cpu::snapshot(), n);
    let runtime = Rc::try_unwrap(runtime).map_err(|_| anyhow::anyhow!("a producer still runs"))?;
    runtime.shutdown(Duration::from_secs(10)).await;
    Ok(Run {
        throughput: n as f64 / secs,
        latencies,
        cpu,
    })
}

/// Row id → (destination, sequence number, when its enqueue was called).
type Enqueued = Arc<Mutex<HashMap<i64, (usize, u64, Instant)>>>;

/// Enqueues each producer keeps in flight, as scenario 1's producers do.
const PRODUCER_WINDOW: usize = 64;

/// The first row id of an enqueue, once committed.
async fn written(
    write: impl std::future::Future<Output = relayq_actors::Result<relayq_engine::outbound::Written>>,
) -> i64 {
    write.await.expect("enqueue").first.id
}

fn message(destination: usize, seq: u64) -> OutboundMessage {
    OutboundMessage::text("hook", &format!("chat-{destination}"), &seq.to_string())
}

/// What reached the far end, in order: each request's row id and when it came.
type Arrivals = Arc<Mutex<Vec<(i64, Instant)>>>;

/// The no-op server's address and what reached it.
struct FarEnd {
    url: String,
    arrivals: Arrivals,
}

impl FarEnd {
    /// The requests that came since the last call, waiting (polling every millisecond, so the
    /// server never has to wake this thread) until there is one; an error after 60 s of none.
    async fn arrived(&self) -> Result<Vec<(i64, Instant)>> {
        let waited = Instant::now();
        loop {
            let came = std::mem::take(&mut *self.arrivals.lock().unwrap());
            if !came.is_empty() {
                return Ok(came);
            }
            ensure!(
                waited.elapsed() < Duration::from_secs(60),
                "no request for 60 s"
            );
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
}

/// A keep-alive HTTP/1.1 server on loopback that answers every request `200` with no body and
/// notes the row id from its `Idempotency-Key` (`relayq-outbound-<id>`) and when it came. It
/// runs on a thread of its own, as a far end runs in a process of its own, and does as little
/// as a server can (a reference at its best): one read for the requests that came, parsed in
/// place, and one write for their answers.
async fn noop_server() -> Result<FarEnd> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    listener.set_nonblocking(true)?;
    let url = format!("http://{}/hook", listener.local_addr()?);
    let arrivals = Arrivals::default();
    let noted = arrivals.clone();
    let server = std::thread::Builder::new().name(cpu::FAR_END.into());
    server.spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime for the server");
        rt.block_on(async move {
            let listener = TcpListener::from_std(listener).expect("the listener");
            while let Ok((socket, _)) = listener.accept().await {
                let noted = noted.clone();
                tokio::spawn(async move {
                    let _ = serve_connection(socket, noted).await;
                });
            }
        });
    })?;
    Ok(FarEnd { url, arrivals })
}

async fn serve_connection(mut socket: tokio::net::TcpStream, noted: Arrivals) -> Result<()> {
    const OK: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n";
    let mut buf = Vec::with_capacity(64 * 1024);
    let (mut ids, mut answers) = (Vec::new(), Vec::new());
    loop {
        if socket.read_buf(&mut buf).await? == 0 {
            return Ok(());
        }
        let mut at = 0;
        while let Some((length, id)) = parse_request(&buf[at..])? {
            at += length;
            ids.extend(id);
            answers.extend_from_slice(OK);
        }
        buf.drain(..at);
        if !ids.is_empty() {
            let now = Instant::now();
            noted
                .lock()
                .unwrap()
                .extend(ids.drain(..).map(|id| (id, now)));
        }
        socket.write_all(&answers).await?;
        answers.clear();
    }
}

/// The first request in `buf`, when all of it is there: its length with its body, and the row
/// id of its `Idempotency-Key`.
fn parse_request(buf: &[u8]) -> Result<Option<(usize, Option<i64>)>> {
    let mut headers = [httparse::EMPTY_HEADER; 16];
    let mut request = httparse::Request::new(&mut headers);
    let httparse::Status::Complete(head) = request.parse(buf)? else {
        return Ok(None);
    };
    let (mut length, mut id) = (0usize, None);
    for h in request.headers.iter() {
        let value = std::str::from_utf8(h.value).unwrap_or("");
        if h.name.eq_ignore_ascii_case("content-length") {
            length = value.parse()?;
        } else if h.name.eq_ignore_ascii_case("idempotency-key") {
            id = value
                .strip_prefix("relayq-outbound-")
                .and_then(|v| v.parse().ok());
        }
    }
    Ok((buf.len() >= head + length).then_some((head + length, id)))
}

/// The HTTP ceiling: `n` POSTs of a webhook-sized body from the channels' HTTP client alone
/// (relayq's `HttpClient`), `concurrency` at a time, on one current-thread runtime (as relayq's
/// actix thread), to the same no-op server.
/// No database: what loopback HTTP costs this machine, for reading scenario 9.
pub fn http_ceiling(n: usize, concurrency: usize) -> Result<f64> {
    actix_rt::System::new().block_on(async move {
        let far_end = noop_server().await?;
        let url = reqwest::Url::parse(&far_end.url)?;
        let client = HttpClient::new(Duration::from_secs(30), Default::default(), Vec::new());
        let started = Instant::now();
        let next = Rc::new(std::cell::Cell::new(0usize));
        for _ in 0..concurrency {
            let (client, url, next) = (client.clone(), url.clone(), next.clone());
            actix_rt::spawn(async move {
                loop {
                    let id = next.get();
                    if id >= n {
                        break;
                    }
                    next.set(id + 1);
                    let body = format!(
                        r#"{{"id":{id},"channel":"hook","to":"chat-{}","kind":"final","text":"{id}"}}"#,
                        id % 100
                    );
                    let request = client
                        .post(url.clone())
                        .header("idempotency-key", &format!("relayq-outbound-{id}"))
                        .json(body);
                    let _ = client.send(request).await;
                }
            });
        }
        let mut seen = 0;
        while seen < n {
            seen += far_end.arrived().await?.len();
        }
        Ok(n as f64 / started.elapsed().as_secs_f64())
    })
}
