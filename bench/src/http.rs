//! relayq's HTTP API under load: the inbound flow of [`crate::flow`] (the real runtime, a
//! real SQLite file, the no-op channel), enqueued through `POST /v1/inbound` by a load
//! generator on its own thread: 100 clients, each its own keep-alive connection.
//!
//! ```text
//!   load thread (tokio): 100 reqwest clients ──HTTP/1.1 keep-alive──▶ actix-web workers
//!        ──RelayqHandle──▶ SupervisorActor ──▶ commit ──▶ SessionActor ──▶ no-op channel
//!                                                                  (records when)
//! ```

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{ensure, Context as _, Result};
use relayq::http::{HttpConfig, Server};
use relayq_engine::Synchronous;

use crate::flow::Flow;

/// Concurrent clients, one keep-alive connection each.
pub const CLIENTS: usize = 100;

/// relayq's inbound flow on `db` with the HTTP API on a free loopback port in front of it, and
/// the URL clients POST messages to.
async fn start_api(db: &std::path::Path) -> Result<(Flow, Server, String)> {
    let flow = Flow::start(db, Synchronous::Normal, false).await?;
    let config = HttpConfig {
        enabled: true,
        listen: "127.0.0.1:0".into(),
        ..HttpConfig::default()
    };
    let server =
        Server::start(&config, flow.runtime.handle().clone()).map_err(anyhow::Error::msg)?;
    let url = format!("http://{}/v1/inbound", server.address);
    Ok((flow, server, url))
}

fn body(session: usize, seq: u64) -> String {
    format!(r#"{{"session":"s{session}","origin":"bench","content":"{seq}"}}"#)
}

/// One POST, expecting 201.
async fn post(client: &reqwest::Client, url: &str, body: String) -> Result<()> {
    let answer = client
        .post(url)
        .header("Content-Type", "application/json")
        .body(body)
        .send()
        .await?;
    ensure!(
        answer.status() == 201,
        "POST /v1/inbound answered {}",
        answer.status()
    );
    Ok(())
}

fn clients() -> Result<Vec<reqwest::Client>> {
    (0..CLIENTS)
        .map(|_| {
            reqwest::Client::builder()
                .pool_max_idle_per_host(1)
                .build()
                .context("an HTTP client")
        })
        .collect()
}

/// The closed-loop load on a thread of its own: `n` messages over [`CLIENTS`] sessions, each
/// client POSTing its session's messages to `url` in order, the next after the 201.
pub(crate) fn closed_loop(url: String, n: usize) -> std::thread::JoinHandle<Result<()>> {
    on_load_thread(move || async move {
        let mut tasks = Vec::new();
        for (s, client) in clients()?.into_iter().enumerate() {
            let url = url.clone();
            let count = n / CLIENTS + usize::from(s < n % CLIENTS);
            tasks.push(tokio::spawn(async move {
                for seq in 0..count as u64 {
                    post(&client, &url, body(s, seq)).await?;
                }
                Ok::<_, anyhow::Error>(())
            }));
        }
        for t in tasks {
            t.await??;
        }
        Ok(())
    })
}

/// Runs `load` on a thread of its own with its own runtime, as a separate load generator is.
fn on_load_thread<F, Fut>(load: F) -> std::thread::JoinHandle<Result<()>>
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Result<()>>,
{
    std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
            .block_on(load())
    })
}

/// Closed loop: `n` messages over [`CLIENTS`] sessions, each client sending its session's
/// messages in order, one request at a time (the next after the 201). Messages per second from
/// the first request to the last delivery.
pub fn throughput(n: usize) -> Result<f64> {
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("relayq.db");
    actix_rt::System::new().block_on(async move {
        let (mut flow, server, url) = start_api(&db).await?;
        let cpu_before = crate::cpu::snapshot();
        let started = Instant::now();
        let load = closed_loop(url, n);
        let order = flow.collect(n, |_| {}).await?;
        let secs = started.elapsed().as_secs_f64();
        load.join().expect("the load thread")?;
        if std::env::var_os("RELAYQ_BENCH_THREADS").is_some() {
            crate::cpu::print_threads(&cpu_before, &crate::cpu::snapshot(), n);
        }
        server.stop().await;
        flow.stop().await;
        ensure!(order.delivered == n);
        Ok(n as f64 / secs)
    })
}

/// Open loop: `rate` requests per second for `secs` seconds, round-robin over the
/// [`CLIENTS`] sessions, each request started on schedule whether or not earlier ones were
/// answered. Milliseconds from each request's start to its message's delivery.
pub fn latency(rate: u32, secs: u32) -> Result<Vec<f64>> {
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("relayq.db");
    actix_rt::System::new().block_on(async move {
        let (mut flow, server, url) = start_api(&db).await?;
        let total = (rate * secs) as usize;
        let starts = Arc::new(Mutex::new(vec![None::<Instant>; total]));
        let load_starts = starts.clone();
        let load = on_load_thread(move || async move {
            let clients = clients()?;
            let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / f64::from(rate)));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
            let mut tasks = Vec::with_capacity(total);
            for i in 0..total {
                tick.tick().await;
                let (s, seq) = (i % CLIENTS, (i / CLIENTS) as u64);
                let (client, url) = (clients[s].clone(), url.clone());
                load_starts.lock().unwrap()[i] = Some(Instant::now());
                tasks.push(tokio::spawn(async move {
                    post(&client, &url, body(s, seq)).await
                }));
            }
            for t in tasks {
                t.await??;
            }
            Ok(())
        });
        let mut latencies = Vec::with_capacity(total);
        flow.collect(total, |d| {
            let i = (d.seq as usize) * CLIENTS + d.session[1..].parse::<usize>().unwrap_or(0);
            if let Some(start) = starts.lock().unwrap()[i] {
                latencies.push(d.at.duration_since(start).as_secs_f64() * 1e3);
            }
        })
        .await?;
        load.join().expect("the load thread")?;
        server.stop().await;
        flow.stop().await;
        Ok(latencies)
    })
}
