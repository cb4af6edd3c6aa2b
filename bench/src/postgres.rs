//! Scenario 11: PostgreSQL. relayq with 1 and with 3 daemons (nodes, each its own actix system
//! in this process, as separate processes would be but for sharing the harness's clock) on one
//! server, S = 100 and S = 1, against a raw SQL reference loop on the same server, and a message
//! enqueued on one node and delivered by another at 100 msgs/s. The server keeps every commit
//! (`fsync`, `full_page_writes` and `synchronous_commit` on; see `TestServer::start_durable`).

use std::collections::HashMap;
use std::sync::mpsc as std_mpsc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use anyhow::{bail, Context as _, Result};
use relayq_actors::inbound::supervisor::{Enqueue, SupervisorActor};
use relayq_actors::{Answer, Channel, ChannelSpec, Delivery, Outcome, Relayq, RelayqConfig};
use relayq_engine::postgres::{Client, NoTls};
use relayq_engine::InboundMessage;

/// A delivery: its session, its number within the session, when, by which node.
pub(crate) struct Delivered {
    pub session: String,
    pub seq: u64,
    pub at: Instant,
    pub node: std::sync::Arc<str>,
}

/// Answers `Delivered` at once and reports it, as sent by its node.
#[derive(Clone)]
struct NoOp(std_mpsc::Sender<Delivered>, std::sync::Arc<str>);

impl Channel for NoOp {
    fn timeout(&self) -> Duration {
        Duration::from_secs(30)
    }

    fn deliver(&mut self, d: Delivery) -> Answer {
        let _ = self.0.send(Delivered {
            session: d.address().to_string(),
            seq: d.text().parse().unwrap_or(u64::MAX),
            at: Instant::now(),
            node: self.1.clone(),
        });
        Outcome::delivered().into()
    }
}

/// The database settings of node `name` on `url`, its node file in `dir`.
fn node_db(name: &str, url: &str, dir: &std::path::Path) -> relayq_engine::DbConfig {
    let mut db = relayq_engine::DbConfig::new(dir.join(format!("{name}.node")));
    db.url = Some(url.to_string());
    db
}

/// A node running on a thread of its own: its supervisor, and how to stop it.
struct Node {
    supervisor: Addr<SupervisorActor>,
    arbiter: actix_rt::ArbiterHandle,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// A node whose runtime is starting on its thread.
struct Starting {
    started: std_mpsc::Receiver<
        std::result::Result<(Addr<SupervisorActor>, actix_rt::ArbiterHandle), String>,
    >,
    stop: tokio::sync::oneshot::Sender<()>,
    thread: std::thread::JoinHandle<()>,
}

impl Starting {
    /// The node, once its runtime runs.
    fn ready(self) -> Result<Node> {
        let (supervisor, arbiter) = self
            .started
            .recv()
            .context("the node's thread ended")?
            .map_err(anyhow::Error::msg)?;
        Ok(Node {
            supervisor,
            arbiter,
            stop: Some(self.stop),
            thread: Some(self.thread),
        })
    }
}

impl Node {
    /// Node `name` on `url`, its node file in `dir`, delivering to `seen`.
    fn start(
        name: &str,
        url: &str,
        dir: &std::path::Path,
        seen: std_mpsc::Sender<Delivered>,
    ) -> Result<Node> {
        Node::spawn_on(node_db(name, url, dir), name, seen).ready()
    }

    /// Nodes `prefix-0` … on `url`, started side by side.
    fn start_cluster(
        prefix: &str,
        nodes: usize,
        url: &str,
        dir: &std::path::Path,
        seen: &std_mpsc::Sender<Delivered>,
    ) -> Result<Vec<Node>> {
        let starting: Vec<Starting> = (0..nodes)
            .map(|i| {
                let name = format!("{prefix}-{i}");
                Node::spawn_on(node_db(&name, url, dir), &name, seen.clone())
            })
            .collect();
        starting.into_iter().map(Starting::ready).collect()
    }

    /// Node `name` on database `db`, delivering to `seen`.
    fn start_on(
        db: relayq_engine::DbConfig,
        name: &str,
        seen: std_mpsc::Sender<Delivered>,
    ) -> Result<Node> {
        Node::spawn_on(db, name, seen).ready()
    }

    /// Starts node `name` on database `db` on a thread of its own, without waiting for it (see
    /// [`Starting::ready`]): nodes of a cluster start side by side, as their daemons would.
    fn spawn_on(
        db: relayq_engine::DbConfig,
        name: &str,
        seen: std_mpsc::Sender<Delivered>,
    ) -> Starting {
        let mut config = RelayqConfig::new(db.path.clone(), "noop");
        config.db = db;
        config.node = name.to_string();
        config.listen_for_wakes = true;
        let (ready, started) = std_mpsc::channel();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let node = std::sync::Arc::from(name);
        let thread = std::thread::spawn(move || {
            actix_rt::System::new().block_on(async move {
                let runtime = Relayq::builder(config)
                    .channel("noop", ChannelSpec::of(NoOp(seen, node)))
                    .start()
                    .await;
                match runtime {
                    Ok(runtime) => {
                        let _ =
                            ready.send(Ok((runtime.supervisor(), actix_rt::Arbiter::current())));
                        let _ = stopped.await;
                        runtime.shutdown(Duration::from_secs(10)).await;
                    }
                    Err(e) => {
                        let _ = ready.send(Err(e.to_string()));
                    }
                }
            })
        });
        Starting {
            started,
            stop,
            thread,
        }
    }

    /// Enqueues `messages` in order on this node (each answered after its commit), at most
    /// `window` in flight, from a task on the node's own system.
    fn produce(&self, messages: Vec<InboundMessage>, window: usize) {
        let supervisor = self.supervisor.clone();
        self.arbiter.spawn(async move {
            let mut in_flight: std::collections::VecDeque<Request<SupervisorActor, Enqueue>> =
                std::collections::VecDeque::with_capacity(window);
            for m in messages {
                if in_flight.len() == window {
                    if let Some(a) = in_flight.pop_front() {
                        a.await.expect("supervisor").expect("enqueue");
                    }
                }
                in_flight.push_back(supervisor.send(Enqueue(m)));
            }
            for a in in_flight {
                a.await.expect("supervisor").expect("enqueue");
            }
        });
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Waits for `n` deliveries, checking each session's order; when the `n`-th came.
pub(crate) fn collect(seen: &std_mpsc::Receiver<Delivered>, n: usize) -> Result<Instant> {
    Ok(collect_since(seen, n, Instant::now())?.last)
}

/// [`collect`], also counting the deliveries that came before `since`.
fn collect_since(seen: &std_mpsc::Receiver<Delivered>, n: usize, since: Instant) -> Result<Sent> {
    let mut last: HashMap<String, u64> = HashMap::new();
    let mut by_node: std::collections::BTreeMap<std::sync::Arc<str>, usize> = Default::default();
    let mut delivered = 0;
    let mut before = 0;
    let mut at = Instant::now();
    while delivered < n {
        let d = seen
            .recv_timeout(Duration::from_secs(60))
            .context("no delivery for 60 s")?;
        match last.get(&d.session) {
            Some(&prev) if d.seq == prev => {} // an at-least-once repeat
            Some(&prev) if d.seq < prev => {
                bail!(
                    "session {} got {} after {prev}: FIFO broken",
                    d.session,
                    d.seq
                )
            }
            _ => {
                delivered += 1;
                *by_node.entry(d.node).or_default() += 1;
                before += usize::from(d.at < since);
                last.insert(d.session, d.seq);
                at = d.at;
            }
        }
    }
    Ok(Sent {
        last: at,
        early: before,
        by_node,
    })
}

/// What `collect_since` saw: when the last delivery came, how many came before `since`, and
/// how many each node sent (a repeat counted once, by the node that sent it first).
struct Sent {
    last: Instant,
    early: usize,
    by_node: std::collections::BTreeMap<std::sync::Arc<str>, usize>,
}

/// relayq on `nodes` daemons: `n` messages over `sessions` sessions, each session's in order
/// from its own producer on node `session % nodes`; msgs/s from the first enqueue to the last
/// delivery (any node delivers any session).
pub fn throughput(url: &str, nodes: usize, n: usize, sessions: usize) -> Result<f64> {
    let dir = tempfile::tempdir()?;
    let (seen, deliveries) = std_mpsc::channel();
    let running = Node::start_cluster("bench", nodes, url, dir.path(), &seen)?;
    // Started as a cluster is before its traffic: the nodes have read each other's load (see
    // `Engine::busier_than_others`; they do ten times a second).
    std::thread::sleep(Duration::from_millis(500));
    let started = Instant::now();
    for s in 0..sessions {
        let count = n / sessions + usize::from(s < n % sessions);
        let messages = (0..count as u64)
            .map(|seq| InboundMessage::text(&format!("s{s}"), "bench", &seq.to_string()))
            .collect();
        running[s % nodes].produce(messages, 64);
    }
    let last = collect(&deliveries, n)?;
    let rate = n as f64 / last.duration_since(started).as_secs_f64();
    drop(running);
    clear(url)?;
    Ok(rate)
}

/// Outbound drain: `n` rows over `destinations` destinations written before the daemons start
/// (a backlog, as after an outage or once producers stopped), then sent by `nodes` daemons on
/// PostgreSQL at `url` (`None`: one daemon on a SQLite file, the reference) through a channel
/// that answers at once; rows/s from when every node runs to the last send, each destination's order
/// checked; and the CPU a row took meanwhile, relayq's and the server's (see [`Drained`]).
/// `BENCH_COMMITS=1` prints the PostgreSQL commits per row.
pub fn outbound_drain(
    url: Option<&str>,
    nodes: usize,
    n: usize,
    destinations: usize,
) -> Result<Drained> {
    let dir = tempfile::tempdir()?;
    let mut db = relayq_engine::DbConfig::new(dir.path().join("relayq.db"));
    db.url = url.map(str::to_string);
    db.synchronous = relayq_engine::Synchronous::Normal;
    {
        let engine = relayq_engine::Engine::open(&db)?;
        let queue = &engine.queues(&Default::default()).outbound;
        for chunk in (0..n).collect::<Vec<_>>().chunks(1_000) {
            engine.write(|tx| {
                for i in chunk {
                    let (to, seq) = (i % destinations, i / destinations);
                    let message = relayq_engine::OutboundMessage::text(
                        "noop",
                        &format!("d{to}"),
                        &seq.to_string(),
                    );
                    relayq_engine::outbound::enqueue_in(queue, tx, &message, None)?;
                }
                Ok(())
            })?;
        }
    }
    if let Some(url) = url {
        // Every drain starts from a checkpoint: one the backlog's writing asked for (`max_wal_size`)
        // would otherwise land inside some drains and not others.
        Client::connect(url, NoTls)?.batch_execute("CHECKPOINT")?;
    }
    let (seen, deliveries) = std_mpsc::channel();
    let commits = |url: Option<&str>| -> i64 {
        url.and_then(|u| Client::connect(u, NoTls).ok())
            .and_then(|mut c| {
                c.query_one(
                    "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()",
                    &[],
                )
                .ok()
            })
            .map_or(0, |r| r.get(0))
    };
    let before = commits(url);
    let started = Instant::now();
    let running: Vec<Node> = match url {
        Some(url) => Node::start_cluster("out", nodes, url, dir.path(), &seen)?,
        None => vec![Node::start_on(db.clone(), "sqlite", seen.clone())?],
    };
    // Timed from when every node runs: a daemon's start (its pools, its node row, the first
    // claim's statements prepared: 15-300 ms here) is not part of the drain, and three nodes
    // started side by side still slow each other's start. The rows sent before the last node
    // was up are left out.
    if let (Some(url), Some(_)) = (url, std::env::var_os("BENCH_STATEMENTS")) {
        // The statements reported are the drain's, not the backlog's writing or the starts.
        let mut client = Client::connect(url, NoTls)?;
        client.batch_execute("SELECT pg_stat_statements_reset()")?;
    }
    let up = Instant::now();
    let cpu_at_up = (
        crate::cpu::process_ticks("self"),
        crate::cpu::server_ticks(),
    );
    let Sent {
        last,
        early,
        by_node,
    } = collect_since(&deliveries, n, up)?;
    let rate = (n - early) as f64 / last.duration_since(up).as_secs_f64();
    let (relayq, server) = (
        crate::cpu::process_ticks("self") - cpu_at_up.0,
        crate::cpu::server_ticks() - cpu_at_up.1,
    );
    // Clock ticks (10 ms) over the rows sent since the nodes were up, in µs a row.
    let per_row = |ticks: u64| ticks as f64 * 10_000.0 / (n - early).max(1) as f64;
    if std::env::var_os("BENCH_COMMITS").is_some() {
        eprintln!(
            "nodes up after {:?}, {early} rows sent by then, drained {:?} later",
            up.duration_since(started),
            last.duration_since(up)
        );
        eprintln!("rows sent by each node: {by_node:?}");
        eprintln!(
            "CPU a row: relayq {:.1} µs, PostgreSQL server {:.1} µs",
            per_row(relayq),
            per_row(server)
        );
        if let Some(mut c) = url.and_then(|u| Client::connect(u, NoTls).ok()) {
            let r = c.query_one(
                "SELECT autovacuum_count, autoanalyze_count, analyze_count,
                        COALESCE(EXTRACT(EPOCH FROM now() - last_autovacuum)::float8, -1),
                        COALESCE(EXTRACT(EPOCH FROM now() - last_autoanalyze)::float8, -1)
                   FROM pg_stat_user_tables WHERE relname = 'queue_rows'",
                &[],
            )?;
            let (v, a, m, lv, la): (i64, i64, i64, f64, f64) =
                (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4));
            eprintln!("autovacuums {v} (last {lv:.1}s ago), autoanalyzes {a} (last {la:.1}s ago), analyzes {m}; drain took {:.1}s", last.duration_since(up).as_secs_f64());
        }
        eprintln!(
            "commits per row: {:.2}",
            (commits(url) - before) as f64 / n as f64
        );
    }
    drop(running);
    if let Some(url) = url {
        clear(url)?;
    }
    Ok(Drained {
        rate,
        cpu_per_row: per_row(relayq + server),
    })
}

/// What an outbound drain measured.
pub struct Drained {
    /// Rows a second.
    pub rate: f64,
    /// CPU a row, in µs: this process's (every node's, and the far end's) and every
    /// `postgres` process's on the machine. On a VM whose speed drifts by a quarter from one
    /// drain to the next (the same drain took 27 to 41 µs here), it tells what three nodes
    /// cost beside one better than their rows a second, which share the machine's two cores
    /// with the server.
    pub cpu_per_row: f64,
}

/// Enqueued on one node, delivered by another: `rate` messages a second for `secs` seconds,
/// over 10 sessions whose agents run on the second node; each message's latency (ms).
pub fn across_nodes(url: &str, rate: u32, secs: u32) -> Result<Vec<f64>> {
    let dir = tempfile::tempdir()?;
    let (seen, deliveries) = std_mpsc::channel();
    let sessions = 10;
    {
        let mut client = Client::connect(url, NoTls)?;
        // Registered by the second node's hooks, as an agent running there would be.
        for s in 0..sessions {
            client.execute(
                "INSERT INTO sessions (key, agent, started_at, last_activity_at, node)
                 VALUES ($1, 'claude', 0, 0, 'far')",
                &[&format!("x{s}")],
            )?;
        }
    }
    let near = Node::start("near", url, dir.path(), std_mpsc::channel().0)?;
    let far = Node::start("far", url, dir.path(), seen)?;
    let n = (rate * secs) as usize;
    let mut sent: HashMap<(String, u64), Instant> = HashMap::new();
    let every = Duration::from_secs(1) / rate;
    let start = Instant::now();
    for i in 0..n {
        let due = start + every * i as u32;
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        let (session, seq) = (format!("x{}", i % sessions), (i / sessions) as u64);
        sent.insert((session.clone(), seq), Instant::now());
        let m = InboundMessage::text(&session, "bench", &seq.to_string());
        near.supervisor.do_send(Enqueue(m));
    }
    let mut latencies = Vec::with_capacity(n);
    while latencies.len() < n {
        let d = deliveries
            .recv_timeout(Duration::from_secs(30))
            .context("no delivery across nodes for 30 s")?;
        if let Some(at) = sent.remove(&(d.session, d.seq)) {
            latencies.push(d.at.duration_since(at).as_secs_f64() * 1000.0);
        }
    }
    drop((near, far));
    clear(url)?;
    Ok(latencies)
}

/// The raw reference on the same server: one client, a table with relayq's shape, doing
/// insert → claim the oldest row of a key whose older rows are done (`FOR UPDATE SKIP
/// LOCKED`) → mark done; one transaction per operation (`batch` 1) or per `batch` rows.
pub fn raw(url: &str, n: usize, keys: usize, batch: usize) -> Result<f64> {
    let mut client = Client::connect(url, NoTls)?;
    client.batch_execute(
        "DROP TABLE IF EXISTS raw_jobs;
         CREATE TABLE raw_jobs (id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
             key TEXT NOT NULL, payload TEXT NOT NULL, state TEXT NOT NULL DEFAULT 'pending');
         CREATE INDEX raw_jobs_active ON raw_jobs (key, id) WHERE state <> 'done';
         CREATE INDEX raw_jobs_pending ON raw_jobs (id) WHERE state = 'pending';",
    )?;
    let insert = client.prepare("INSERT INTO raw_jobs (key, payload) VALUES ($1, $2)")?;
    let claim = client.prepare(
        "SELECT id FROM raw_jobs j WHERE state = 'pending'
           AND NOT EXISTS (SELECT 1 FROM raw_jobs o WHERE o.key = j.key AND o.id < j.id
                           AND o.state <> 'done')
         ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED",
    )?;
    let done = client.prepare("UPDATE raw_jobs SET state = 'done' WHERE id = ANY($1)")?;
    let started = Instant::now();
    let mut written = 0;
    while written < n {
        let count = batch.min(n - written);
        let mut tx = client.transaction()?;
        for i in written..written + count {
            tx.execute(&insert, &[&format!("k{}", i % keys), &"{}"])?;
        }
        tx.commit()?;
        written += count;
        let mut claimed = 0;
        while claimed < count {
            let mut tx = client.transaction()?;
            let want = (count - claimed) as i64;
            let ids: Vec<i64> = tx
                .query(&claim, &[&want])?
                .iter()
                .map(|r| r.get(0))
                .collect();
            if ids.is_empty() {
                bail!("nothing to claim");
            }
            tx.commit()?;
            let mut tx = client.transaction()?;
            tx.execute(&done, &[&ids])?;
            tx.commit()?;
            claimed += ids.len();
        }
    }
    let rate = n as f64 / started.elapsed().as_secs_f64();
    client.batch_execute("DROP TABLE raw_jobs")?;
    Ok(rate)
}

/// Empties relayq's tables between runs.
pub(crate) fn clear(url: &str) -> Result<()> {
    let mut client = Client::connect(url, NoTls)?;
    client.batch_execute(
        "TRUNCATE queue_rows, sessions, session_origins, nodes, source_leases, budgets",
    )?;
    Ok(())
}

/// Installs the job-queue peer (`bench/graphile-ref/install.sh`); where its modules are.
pub fn install_peer(root: &std::path::Path) -> Result<std::path::PathBuf> {
    let out = std::process::Command::new("bash")
        .arg(root.join("bench/graphile-ref/install.sh"))
        .output()?;
    if !out.status.success() {
        bail!(
            "installing graphile-worker: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let modules = String::from_utf8_lossy(&out.stdout)
        .trim()
        .lines()
        .last()
        .unwrap_or_default()
        .to_string();
    Ok(modules.into())
}

/// The peer: graphile-worker on the server whose socket is in `socket_dir`, `n` jobs over `keys`
/// named queues (per-key order), `concurrency` jobs at once; jobs/s (see `run.cjs`). A run in
/// which a queue's jobs ran out of order is void: it is said, and run again (at most twice).
pub fn peer(
    root: &std::path::Path,
    modules: &std::path::Path,
    socket_dir: &std::path::Path,
    n: usize,
    keys: usize,
    concurrency: usize,
) -> Result<f64> {
    let once = || -> Result<f64> {
        let out = std::process::Command::new("node")
            .arg(root.join("bench/graphile-ref/run.cjs"))
            .arg(socket_dir)
            .args([n.to_string(), keys.to_string(), concurrency.to_string()])
            .env("NODE_PATH", modules)
            .output()?;
        if !out.status.success() {
            bail!("graphile-worker: {}", String::from_utf8_lossy(&out.stderr));
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().parse()?)
    };
    let mut tries = 0;
    loop {
        match once() {
            Err(e) if tries < 2 && e.to_string().contains("FIFO broken") => {
                eprintln!("graphile-worker run void ({e}); again");
                tries += 1;
            }
            other => return other,
        }
    }
}

/// The path a Rust user takes: `Relayq::builder` with `RelayqConfig::new` defaults and
/// `[database] url`, a no-op channel, and one producer keeping `window` calls of
/// `Relayq::enqueue` in flight, message `i` to session `i % sessions`; msgs/s from the first
/// enqueue to the last delivery, each session's order checked.
pub fn embedded(url: &str, n: usize, sessions: usize, window: usize) -> Result<f64> {
    let dir = tempfile::tempdir()?;
    let mut config = RelayqConfig::new(dir.path().join("relayq.db"), "noop");
    config.db.url = Some(url.to_string());
    let (seen, deliveries) = std_mpsc::channel();
    let rate = actix_rt::System::new().block_on(async move {
        let relayq = Relayq::builder(config)
            .channel("noop", ChannelSpec::of(NoOp(seen, "embedded".into())))
            .start()
            .await?;
        let started = Instant::now();
        let mut in_flight = std::collections::VecDeque::with_capacity(window);
        for i in 0..n {
            if in_flight.len() == window {
                if let Some(f) = in_flight.pop_front() {
                    f.await?;
                }
            }
            let (s, seq) = (i % sessions, i / sessions);
            let m = InboundMessage::text(&format!("s{s}"), "bench", &seq.to_string());
            in_flight.push_back(relayq.enqueue(m));
        }
        for f in in_flight {
            f.await?;
        }
        // The deliveries are read on a thread of their own: this one runs the actors.
        let collector = std::thread::spawn(move || collect(&deliveries, n));
        let last = loop {
            if collector.is_finished() {
                break collector.join().expect("collector")?;
            }
            actix_rt::time::sleep(Duration::from_millis(5)).await;
        };
        let rate = n as f64 / last.duration_since(started).as_secs_f64();
        relayq.shutdown(Duration::from_secs(10)).await;
        Ok::<_, anyhow::Error>(rate)
    })?;
    clear(url)?;
    Ok(rate)
}

/// The statements that took the server's time since the last call, per message of `n`, and
/// resets the counts (the server must load `pg_stat_statements`).
pub fn statements(url: &str, n: usize) -> Result<String> {
    let mut client = Client::connect(url, NoTls)?;
    client.batch_execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")?;
    let rows = client.query(
        "SELECT calls, total_exec_time, rows, shared_blks_hit,
                regexp_replace(left(query, 160), '\\s+', ' ', 'g')
           FROM pg_stat_statements ORDER BY total_exec_time DESC LIMIT 15",
        &[],
    )?;
    let mut out = String::from("   calls  µs/msg  rows/call  blocks/call  statement\n");
    for r in rows {
        let (calls, ms, rows, blocks): (i64, f64, i64, i64) =
            (r.get(0), r.get(1), r.get(2), r.get(3));
        out.push_str(&format!(
            "{:8} {:7.1} {:10.1} {:12.1}  {}\n",
            calls,
            ms * 1000.0 / n as f64,
            rows as f64 / calls.max(1) as f64,
            blocks as f64 / calls.max(1) as f64,
            r.get::<_, String>(4)
        ));
    }
    client.batch_execute("SELECT pg_stat_statements_reset()")?;
    Ok(out)
}
