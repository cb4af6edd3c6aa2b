//! relayq's benchmark harness: `cargo run --release -p relayq-bench -- all` runs every scenario
//! against the references (raw SQLite, effectum) in one process tree and writes BENCHMARKS.md
//! with plots under bench/report/. Benchmarks are never tests: `cargo test` does not run this.

mod chat_sessions;
mod cpu;
mod discord;
mod effectum;
mod files;
mod flow;
mod graphile;
mod history;
mod http;
mod lease_shapes;
mod outbound;
mod postgres;
mod process;
mod progress;
mod raw;
mod reference;
mod report;
mod serve;
mod stats;

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result};
use clap::{Parser, ValueEnum};
use relayq_actors::channels::UnknownOutcome;
use relayq_engine::Synchronous;

use report::{Check, Figure, Report, Section};
use stats::percentile;

#[derive(Debug, Parser)]
#[command(about = "relayq against the SQLite ceiling and effectum, in one run")]
struct Args {
    /// Scenarios to run
    #[arg(value_enum, default_value = "all")]
    scenarios: Vec<Scenario>,
    /// Runs of each measurement (min / median / max are reported)
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Smaller sizes, for trying the harness out (the report says so)
    #[arg(long)]
    quick: bool,
    /// Where BENCHMARKS.md (and bench/report/*.png) are written
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Scenario {
    All,
    /// 1: inbound end to end, S = 100, vs raw SQLite and effectum
    Throughput,
    /// 2: S = 1 and S = 10 000
    Sessions,
    /// 3: synchronous = FULL
    Full,
    /// 4: open-loop latency, in process and from the CLI
    Latency,
    /// 5: hook receiver wall time
    Hook,
    /// 6: lease + complete cost vs retained history
    History,
    /// 7: idle daemon memory
    Memory,
    /// 8: recovery after a kill vs steady state
    Recovery,
    /// 9: outbound through the webhook channel to a no-op HTTP server, and the send-started
    /// write's cost
    Outbound,
    /// 10: the HTTP API: enqueue over HTTP from 100 keep-alive clients against in process, and
    /// open-loop latency at 1 000 requests/s
    Http,
    /// 11: PostgreSQL: 1 and 3 daemons on one server, S = 100 and S = 1, against a raw SQL
    /// loop on the same server; a message enqueued on one node and delivered by another
    Postgres,
    /// Not in `all`: relayq's throughput flows (S = 1, 100, 10 000, FULL) and the raw batched
    /// ceiling, printed and not written to the report, for measuring an engine change quickly
    Tune,
    /// Not in `all`: the outbound flow at 100 destinations beside inbound S = 100, printed, for
    /// measuring an outbound change quickly
    TuneOutbound,
    /// Not in `all`: scenario 11's outbound drain (one SQLite daemon, 1 and 3 PostgreSQL
    /// nodes, 5 and 100 destinations), printed
    TuneOutboundPg,
    /// Not in `all`: PostgreSQL inbound as a Rust user embeds relayq (one producer, 1 000
    /// enqueues in flight, defaults), S = 100 and S = 1, beside the raw batched loop, printed
    TunePg,
    /// Not in `all`: a run's lease as relayq writes it (each row) against one lease per key,
    /// the statements alone on a durable PostgreSQL server, printed
    TuneLeaseShapes,
    /// Not in `all`: `/sessions` answered with 1 000 sessions in the registry, on SQLite and a
    /// durable PostgreSQL server, p50 / p99 / max, printed
    ChatSessions,
    /// Not in `all`: files both ways: a 49 MB file sent (the daemon's RSS growth) and 100
    /// photos in 10 albums fetched and delivered (against the fake's own transfer time), printed
    Files,
    /// Not in `all`: Discord buttons: how long after a click reaches relayq its
    /// acknowledgement goes out (`BENCH_DISCORD_CLICKS`, 200 questions), p50 / p99 / max, printed
    DiscordClicks,
    /// Not in `all`: progress on the phone, five chats taking turns with fake agents for
    /// `BENCH_PROGRESS_SECS` (1 800) against a Bot API enforcing Telegram's limits, on SQLite
    /// (and on a durable PostgreSQL server with `BENCH_PROGRESS_PG=1`), printed
    Progress,
}

/// Problem sizes.
struct Sizes {
    n: usize,
    effectum_default_n: usize,
    raw_unbatched_full_n: usize,
    many_sessions: usize,
    latency_secs: u32,
    cli_runs: usize,
    hook_runs: usize,
    history_small: usize,
    history_big: usize,
    history_ops: usize,
    memory_sessions: usize,
    recovery_rows: usize,
    recovery_sessions: usize,
    outbound_n: usize,
    pg_n: usize,
    pg_out_n: usize,
    pg_raw_one_n: usize,
    pg_peer_n: usize,
    pg_embedded_n: usize,
}

impl Sizes {
    fn new(quick: bool) -> Sizes {
        if quick {
            Sizes {
                n: 5_000,
                effectum_default_n: 500,
                raw_unbatched_full_n: 300,
                many_sessions: 1_000,
                latency_secs: 2,
                cli_runs: 20,
                hook_runs: 100,
                history_small: 10_000,
                history_big: 100_000,
                history_ops: 1_000,
                memory_sessions: 1_000,
                recovery_rows: 10_000,
                recovery_sessions: 100,
                outbound_n: 5_000,
                pg_n: 2_000,
                pg_out_n: 1_000,
                pg_raw_one_n: 300,
                pg_peer_n: 500,
                pg_embedded_n: 2_000,
            }
        } else {
            Sizes {
                n: 50_000,
                // effectum's default (one worker slot, one enqueue per job) runs ~500 jobs/s here.
                effectum_default_n: 5_000,
                // one fsync per operation: a rate, measured on fewer messages
                raw_unbatched_full_n: 2_000,
                many_sessions: 10_000,
                latency_secs: 10,
                cli_runs: 200,
                hook_runs: 1_000,
                history_small: 10_000,
                history_big: 1_000_000,
                history_ops: 5_000,
                memory_sessions: 10_000,
                recovery_rows: 100_000,
                recovery_sessions: 1_000,
                outbound_n: 20_000,
                pg_n: 10_000,
                pg_out_n: 100_000,
                pg_raw_one_n: 2_000,
                pg_peer_n: 3_000,
                pg_embedded_n: 20_000,
            }
        }
    }
}

fn main() -> Result<()> {
    let args = Args::parse();
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .context("bench/ has a parent")?
        .to_path_buf();
    let out = args.out.clone().unwrap_or_else(|| root.clone());
    let all = args.scenarios.contains(&Scenario::All);
    let wants = |s: Scenario| all || args.scenarios.contains(&s);
    let sizes = Sizes::new(args.quick);
    let runs = args.runs.max(1);

    if args.scenarios.contains(&Scenario::Tune) {
        return tune(&sizes, runs);
    }
    if args.scenarios.contains(&Scenario::ChatSessions) {
        chat_sessions::run(200 * runs)?;
        return chat_sessions::new_to_ready(&root, &build_relayq(&root)?, 20 * runs);
    }
    if args.scenarios.contains(&Scenario::DiscordClicks) {
        let rounds = std::env::var("BENCH_DISCORD_CLICKS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(200);
        return discord::clicks(&root, &build_relayq(&root)?, rounds);
    }
    if args.scenarios.contains(&Scenario::Files) {
        return files::run(&build_relayq(&root)?);
    }
    if args.scenarios.contains(&Scenario::Progress) {
        let secs = std::env::var("BENCH_PROGRESS_SECS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(1800);
        let relayq = build_relayq(&root)?;
        progress::run(&root, &relayq, None, secs)?;
        if std::env::var_os("BENCH_PROGRESS_PG").is_some() {
            let server =
                relayq_engine::storage::postgresql::test_server::TestServer::start_durable();
            progress::run(&root, &relayq, Some(&server.url()), secs)?;
        }
        return Ok(());
    }
    if args.scenarios.contains(&Scenario::TuneOutbound) {
        return tune_outbound(&sizes, runs);
    }
    if args.scenarios.contains(&Scenario::TuneLeaseShapes) {
        let server = relayq_engine::storage::postgresql::test_server::TestServer::start_durable();
        let url = std::env::var("BENCH_PG_URL").unwrap_or(server.url());
        return lease_shapes::run(&url, runs);
    }
    if args.scenarios.contains(&Scenario::TuneOutboundPg) {
        let server = relayq_engine::storage::postgresql::test_server::TestServer::start_durable();
        // `BENCH_PG_URL`, `BENCH_STATEMENTS=1`: as for `tune-pg`.
        let url = std::env::var("BENCH_PG_URL").unwrap_or(server.url());
        for figure in outbound_drains(&url, &sizes, runs)? {
            eprintln!(
                "{}: median {:.0} {}",
                figure.label,
                median(&figure.runs),
                figure.unit
            );
        }
        return Ok(());
    }
    if args.scenarios.contains(&Scenario::TunePg) {
        let relayq = build_relayq(&root)?;
        let server = relayq_engine::storage::postgresql::test_server::TestServer::start_durable();
        // `BENCH_PG_URL`: a server of one's own instead (to profile it: pg_stat_statements,
        // auto_explain); `BENCH_STATEMENTS=1` prints where its time went after each run.
        let url = std::env::var("BENCH_PG_URL").unwrap_or(server.url());
        let statements = std::env::var_os("BENCH_STATEMENTS").is_some();
        let n = sizes.pg_embedded_n;
        for run in 1..=runs {
            for s in [100, 1] {
                let ours = postgres::embedded(&url, n, s, 1_000)?;
                if statements {
                    eprintln!("{}", postgres::statements(&url, n)?);
                }
                let producers = postgres::throughput(&url, 1, n, s)?;
                let served = match s {
                    100 => format!(
                        ", relayq serve over HTTP {:.0} msgs/s",
                        serve::http_inbound(&relayq, &url, n)?
                    ),
                    _ => String::new(),
                };
                let raw = postgres::raw(&url, n, s, 100)?;
                eprintln!(
                    "run {run}, S = {s}: embedded {ours:.0} msgs/s, a producer per session \
                     {producers:.0} msgs/s{served}, raw 100/tx {raw:.0} msgs/s"
                );
            }
        }
        return Ok(());
    }
    let relayq = build_relayq(&root)?;
    let mut report = Report {
        machine: machine_facts(runs, args.quick),
        ..Report::default()
    };
    let mut relayq_s100 = None;

    if wants(Scenario::Throughput) {
        let raw_one = repeat(runs, "raw SQLite, one commit per operation", || {
            raw::ceiling(sizes.n, 100, Synchronous::Normal, 1)
        })?;
        let raw_batched = repeat(runs, "raw SQLite, 100 per transaction", || {
            raw::ceiling(sizes.n, 100, Synchronous::Normal, 100)
        })?;
        eprintln!("building the effectum reference (bench/effectum-ref)...");
        let eff_bin = effectum::build(&root)?;
        let eff_default = repeat(runs, "effectum default", || {
            effectum::run(&eff_bin, "default", sizes.effectum_default_n)
        })?;
        let eff_best = repeat(runs, "effectum best (WAL)", || {
            effectum::run(&eff_bin, "best", sizes.n)
        })?;
        let eff_shipped = repeat(runs, "effectum best as shipped", || {
            effectum::run(&eff_bin, "best-as-shipped", sizes.n)
        })?;
        let ours = repeat(runs, "relayq S=100", || {
            flow::throughput(sizes.n, 100, Synchronous::Normal)
        })?;
        let (r, rb, eb) = (median(&ours), median(&raw_batched), median(&eff_best));
        report.sections.push(Section {
            title: "1. Inbound throughput, S = 100".into(),
            how: format!(
                "{} messages over 100 sessions, synchronous = NORMAL. relayq: each session's producer \
                 enqueues in order through the SupervisorActor (each enqueue answered after its commit) \
                 while SessionActors lease, deliver to a no-op channel and complete; from the first \
                 enqueue to the last delivery, per-session order checked on every delivery. Raw \
                 SQLite: a single-threaded rusqlite loop on the same table and indexes doing insert, \
                 claim oldest per session, mark done. effectum 0.7: no-op jobs enqueued while its \
                 worker runs them; best = batches of 100, worker concurrency 100 and the database \
                 in WAL mode (effectum asks for WAL with a pragma SQLite ignores, so as shipped it \
                 runs in rollback-journal mode: `best as shipped` is that figure); default = one \
                 enqueue per job and default worker, as shipped ({} jobs).",
                sizes.n, sizes.effectum_default_n
            ),
            checks: vec![
                Check::at_least("≥ 70 % of raw batched", r / rb, 0.70, format!("{:.0} %", 100.0 * r / rb)),
                Check::at_least("≥ 1.0× effectum best (WAL)", r / eb, 1.0, format!("{:.2}×", r / eb)),
            ],
            figures: vec![
                Figure::new("relayq, S = 100", "msgs/s", ours.clone()),
                Figure::new("raw SQLite, one commit per operation", "msgs/s", raw_one.clone()),
                Figure::new("raw SQLite, 100 per transaction", "msgs/s", raw_batched.clone()),
                Figure::new("effectum best (WAL)", "jobs/s", eff_best.clone()),
                Figure::new("effectum best, as shipped (rollback journal)", "jobs/s", eff_shipped.clone()),
                Figure::new("effectum default", "jobs/s", eff_default.clone()),
            ],
        });
        report.bars.push(("raw 1/tx".into(), raw_one));
        report.bars.push(("raw 100/tx".into(), raw_batched));
        report.bars.push(("effectum default".into(), eff_default));
        report
            .bars
            .push(("effectum as shipped".into(), eff_shipped));
        report.bars.push(("effectum best (WAL)".into(), eff_best));
        report.bars.push(("relayq S=100".into(), ours.clone()));
        relayq_s100 = Some(ours);
    }

    if wants(Scenario::Sessions) {
        let one = repeat(runs, "relayq S=1", || {
            flow::throughput(sizes.n, 1, Synchronous::Normal)
        })?;
        let many = repeat(runs, "relayq S=many", || {
            flow::throughput(sizes.n, sizes.many_sessions, Synchronous::Normal)
        })?;
        let s100 = match relayq_s100.clone() {
            Some(v) => v,
            None => repeat(runs, "relayq S=100", || {
                flow::throughput(sizes.n, 100, Synchronous::Normal)
            })?,
        };
        let ratio = median(&many) / median(&s100);
        report.sections.push(Section {
            title: "2. Sessions: S = 1 and S = many".into(),
            how: format!(
                "As scenario 1 with {} messages over 1 session, and over {} sessions.",
                sizes.n, sizes.many_sessions
            ),
            checks: vec![
                Check::at_least(
                    "S = 1: ≥ 10 000 msgs/s",
                    median(&one),
                    10_000.0,
                    format!("{:.0} msgs/s", median(&one)),
                ),
                Check::at_least(
                    &format!("S = {}: ≥ 0.8× S = 100", sizes.many_sessions),
                    ratio,
                    0.8,
                    format!("{ratio:.2}×"),
                ),
            ],
            figures: vec![
                Figure::new("relayq, S = 1", "msgs/s", one.clone()),
                Figure::new(
                    format!("relayq, S = {}", sizes.many_sessions),
                    "msgs/s",
                    many.clone(),
                ),
                Figure::new("relayq, S = 100", "msgs/s", s100),
            ],
        });
        report.bars.push(("relayq S=1".into(), one));
        report
            .bars
            .push((format!("relayq S={}", sizes.many_sessions), many));
    }

    if wants(Scenario::Full) {
        let raw_one = repeat(runs, "raw FULL one commit", || {
            raw::ceiling(sizes.raw_unbatched_full_n, 100, Synchronous::Full, 1)
        })?;
        let raw_batched = repeat(runs, "raw FULL batched", || {
            raw::ceiling(sizes.n, 100, Synchronous::Full, 100)
        })?;
        let ours = repeat(runs, "relayq FULL", || {
            flow::throughput(sizes.n, 100, Synchronous::Full)
        })?;
        let ratio = median(&ours) / median(&raw_batched);
        report.sections.push(Section {
            title: "3. synchronous = FULL, S = 100".into(),
            how: format!(
                "As scenario 1 with every connection at synchronous = FULL (an fsync per commit). \
                 The one-commit-per-operation reference runs {} messages: it is a rate.",
                sizes.raw_unbatched_full_n
            ),
            checks: vec![Check::at_least(
                "≥ 50 % of raw batched (FULL)",
                ratio,
                0.5,
                format!("{:.0} %", 100.0 * ratio),
            )],
            figures: vec![
                Figure::new("relayq, FULL", "msgs/s", ours.clone()),
                Figure::new(
                    "raw SQLite FULL, one commit per operation",
                    "msgs/s",
                    raw_one,
                ),
                Figure::new(
                    "raw SQLite FULL, 100 per transaction",
                    "msgs/s",
                    raw_batched.clone(),
                ),
            ],
        });
        report.bars.push(("raw 100/tx FULL".into(), raw_batched));
        report.bars.push(("relayq FULL".into(), ours));
    }

    if wants(Scenario::Latency) {
        let mut p50 = Vec::new();
        let mut p99 = Vec::new();
        let mut cli_p50 = Vec::new();
        let mut cli_p99 = Vec::new();
        let mut last = None;
        for run in 1..=runs {
            let l = flow::latency(1000, sizes.latency_secs, 100, sizes.cli_runs, &relayq)?;
            eprintln!(
                "latency run {run}: p50 {:.3} ms p99 {:.3} ms; CLI p50 {:.2} ms p99 {:.2} ms",
                percentile(&l.in_process, 50.0),
                percentile(&l.in_process, 99.0),
                percentile(&l.cli, 50.0),
                percentile(&l.cli, 99.0)
            );
            p50.push(percentile(&l.in_process, 50.0));
            p99.push(percentile(&l.in_process, 99.0));
            cli_p50.push(percentile(&l.cli, 50.0));
            cli_p99.push(percentile(&l.cli, 99.0));
            last = Some(l);
        }
        let (mp50, mp99, mcli) = (median(&p50), median(&p99), median(&cli_p99));
        report.sections.push(Section {
            title: "4. Latency, open loop".into(),
            how: format!(
                "1 000 msgs/s offered for {} s over 100 sessions, each enqueue started on schedule \
                 (open loop); enqueue call → delivered to the channel. Then {} rows enqueued one at \
                 a time by `relayq enqueue inbound` (another process, which wakes the daemon over \
                 its socket): from spawning the CLI to delivery, so process start-up is included.",
                sizes.latency_secs, sizes.cli_runs
            ),
            checks: vec![
                Check::at_most("p50 ≤ 1 ms", mp50, 1.0, format!("{mp50:.3} ms")),
                Check::at_most("p99 ≤ 10 ms", mp99, 10.0, format!("{mp99:.3} ms")),
                Check::at_most("CLI-enqueued p99 ≤ 100 ms", mcli, 100.0, format!("{mcli:.2} ms")),
            ],
            figures: vec![
                Figure::new("in process, p50", "ms", p50),
                Figure::new("in process, p99", "ms", p99),
                Figure::new("CLI → delivered, p50", "ms", cli_p50),
                Figure::new("CLI → delivered, p99", "ms", cli_p99),
            ],
        });
        if let Some(l) = last {
            report
                .latencies
                .push(("in process: enqueue → delivered".into(), l.in_process));
            report
                .latencies
                .push(("CLI spawned → delivered".into(), l.cli));
        }
    }

    if wants(Scenario::Hook) {
        let payload = include_bytes!("../../tests/fixtures/claude-code/PostToolUse.json");
        let mut p50 = Vec::new();
        let mut p99 = Vec::new();
        let mut last = Vec::new();
        for run in 1..=runs {
            let t = process::hook_wall_times(&relayq, sizes.hook_runs, payload)?;
            eprintln!(
                "hook run {run}: p50 {:.2} ms p99 {:.2} ms",
                percentile(&t, 50.0),
                percentile(&t, 99.0)
            );
            p50.push(percentile(&t, 50.0));
            p99.push(percentile(&t, 99.0));
            last = t;
        }
        let (m50, m99) = (median(&p50), median(&p99));
        report.sections.push(Section {
            title: "5. Hook receiver".into(),
            how: format!(
                "{} runs of `relayq hook --agent claude` with Claude Code's PostToolUse payload on \
                 stdin, daemon down; whole-process wall time from spawn to exit. Every run's row \
                 is checked to be in the database afterwards.",
                sizes.hook_runs
            ),
            checks: vec![
                Check::at_most("p50 ≤ 5 ms", m50, 5.0, format!("{m50:.2} ms")),
                Check::at_most("p99 ≤ 20 ms", m99, 20.0, format!("{m99:.2} ms")),
            ],
            figures: vec![Figure::new("p50", "ms", p50), Figure::new("p99", "ms", p99)],
        });
        report
            .latencies
            .push(("relayq hook: process wall time".into(), last));
    }

    if wants(Scenario::History) {
        let small = repeat(runs, "history small", || {
            history::lease_complete_micros(sizes.history_small, sizes.history_ops)
                .map(|v| percentile(&v, 50.0))
        })?;
        let big = repeat(runs, "history big", || {
            history::lease_complete_micros(sizes.history_big, sizes.history_ops)
                .map(|v| percentile(&v, 50.0))
        })?;
        let ratio = median(&big) / median(&small);
        report.sections.push(Section {
            title: "6. Cost vs history".into(),
            how: format!(
                "Engine level: {} times, enqueue a row (not timed), then lease and complete it (timed, \
                 two transactions), with {} and with {} delivered rows retained. p50 per run.",
                sizes.history_ops, sizes.history_small, sizes.history_big
            ),
            checks: vec![Check::at_most(
                &format!("{} / {} retained ≤ 1.3", sizes.history_big, sizes.history_small),
                ratio,
                1.3,
                format!("{ratio:.2}"),
            )],
            figures: vec![
                Figure::new(format!("lease + complete, {} retained, p50", sizes.history_small), "µs", small),
                Figure::new(format!("lease + complete, {} retained, p50", sizes.history_big), "µs", big),
            ],
        });
    }

    if wants(Scenario::Memory) {
        let mut rss = Vec::new();
        let mut peak = Vec::new();
        for run in 1..=runs {
            let m = process::idle_daemon(&relayq, sizes.memory_sessions)?;
            eprintln!(
                "memory run {run}: RSS {:.1} MB, peak {:.1} MB",
                m.rss_mb, m.peak_mb
            );
            rss.push(m.rss_mb);
            peak.push(m.peak_mb);
        }
        let m = median(&rss);
        report.sections.push(Section {
            title: "7. Idle daemon memory".into(),
            how: format!(
                "`relayq serve` (default config) started on {} sessions with one pending message \
                 each; once all are delivered and 3 s have passed, VmRSS (and the peak, VmHWM) from \
                 /proc.",
                sizes.memory_sessions
            ),
            checks: vec![Check::at_most("≤ 64 MB RSS", m, 64.0, format!("{m:.1} MB"))],
            figures: vec![Figure::new("RSS, idle", "MB", rss), Figure::new("peak RSS", "MB", peak)],
        });
    }

    if wants(Scenario::Recovery) {
        let recovery = repeat(runs, "recovery", || {
            flow::recovery(sizes.recovery_rows, sizes.recovery_sessions)
        })?;
        let steady = repeat(runs, "steady", || {
            flow::throughput(
                sizes.recovery_rows,
                sizes.recovery_sessions,
                Synchronous::Normal,
            )
            .map(|per_sec| sizes.recovery_rows as f64 / per_sec)
        })?;
        let ratio = median(&recovery) / median(&steady);
        report.sections.push(Section {
            title: "8. Recovery after a kill".into(),
            how: format!(
                "{} pending rows over {} sessions as a killed daemon leaves them (each session's head \
                 leased by the dead instance, lease unexpired); from start to all delivered. Steady \
                 state: the same rows enqueued and delivered by a running relayq (scenario 1's method).",
                sizes.recovery_rows, sizes.recovery_sessions
            ),
            checks: vec![Check::at_most("≤ 1.5× steady state", ratio, 1.5, format!("{ratio:.2}×"))],
            figures: vec![
                Figure::new("recovery: start → all delivered", "s", recovery),
                Figure::new("steady state, same work", "s", steady),
            ],
        });
    }

    if wants(Scenario::Outbound) {
        let n = sizes.outbound_n;
        let ceiling = repeat(
            runs,
            "HTTP ceiling: the channels' client alone, 32 in flight",
            || outbound::http_ceiling(n, 32),
        )?;
        let paired = outbound_beside_inbound(&sizes, runs)?;
        // The mark's cost at 1000 destinations, for each way of marking.
        let at_1000 = |what: &str, on: bool, unknown_outcome: UnknownOutcome| {
            let marks = outbound::Marks {
                on,
                unknown_outcome,
            };
            repeat(
                runs,
                &format!("outbound, 1000 destinations, {what}"),
                || outbound::run(n, 1000, marks).map(|r| r.throughput),
            )
        };
        let marked = at_1000("runs marked", true, UnknownOutcome::Resend)?;
        let unmarked = at_1000("runs, no mark", false, UnknownOutcome::Resend)?;
        let marked_each = at_1000("each send marked (hold)", true, UnknownOutcome::Hold)?;
        let unmarked_each = at_1000("one by one, no mark (hold)", false, UnknownOutcome::Hold)?;
        let ratio = median(&paired.ratios);
        let overhead = 1.0 - median(&marked) / median(&unmarked);
        let overhead_each = 1.0 - median(&marked_each) / median(&unmarked_each);
        report.sections.push(Section {
            title: "9. Outbound through HTTP".into(),
            how: format!(
                "{n} outbound rows over 100 destinations, each destination's rows written in order \
                 by its own producer with `Relayq::enqueue_outbound` while the OutboundSender \
                 leases them (32 sends in flight, the default) in runs marked send started, sent \
                 on two threads (`claimer.send_threads = 2`, the default), POSTs \
                 each with the real webhook channel (the channels' HTTP client, hyper) to a keep-alive no-op HTTP/1.1 server \
                 on loopback and records the answers; pacing off, synchronous = NORMAL; from the \
                 first enqueue to the last row recorded delivered; per-destination order checked \
                 at the server. Latency: enqueue call → request at the server, under that full \
                 load. Against the inbound flow (scenario 1's, S = 100, in-process no-op \
                 channel), run just before each outbound run: the target is checked on the median \
                 of the runs' ratios, as the VM's speed drifts between runs. The \
                 send-started mark's cost: the same run over 1000 destinations with the mark on \
                 and off (`RelayqConfig::mark_send_started`), for the default webhook (runs, \
                 marked by the statement that leases them) and for `unknown_outcome = \"hold\"` \
                 (rows one by one, each marked alone just before its send, or in the write that \
                 records the row before it). The HTTP ceiling: the same POSTs \
                 from that client alone, 32 in flight on one thread, to the same server, no \
                 database: what loopback HTTP alone allows on this machine. CPU per row: each \
                 thread's time on a CPU (`/proc/self/task/*/schedstat`) over the run, divided by \
                 the rows: the writer (relayq's commit thread), the actix thread (actors, \
                 channels, the HTTP client, the producers), the far end (the no-op server's \
                 thread; the inbound flow has none), the send threads (the second thread's \
                 runs, with their channel actors and HTTP connections) and the rest \
                 (checkpointer, claims). \
                 Outbound: {}. Inbound: {}.",
                paired.outbound_cpu.summary(),
                paired.inbound_cpu.summary()
            ),
            checks: vec![
                Check::at_least(
                    "≥ 50 % of inbound throughput",
                    ratio,
                    0.5,
                    format!("{:.0} %", 100.0 * ratio),
                ),
                Check::at_most(
                    "send-started write ≤ 15 % at 1000 destinations (runs, the default)",
                    overhead,
                    0.15,
                    format!("{:.1} %", 100.0 * overhead),
                ),
                Check::at_most(
                    "send-started write ≤ 15 % at 1000 destinations (one per send, hold)",
                    overhead_each,
                    0.15,
                    format!("{:.1} %", 100.0 * overhead_each),
                ),
            ],
            figures: vec![
                Figure::new("outbound, 100 destinations", "rows/s", paired.outbound.clone()),
                Figure::new("outbound latency p99, 100 destinations", "ms", paired.p99),
                Figure::new("inbound, S = 100, run beside", "msgs/s", paired.inbound),
                Figure::new(
                    "outbound / inbound, run by run",
                    "%",
                    paired.ratios.iter().map(|r| 100.0 * r).collect(),
                ),
                Figure::new(
                    "HTTP ceiling: the channels' client alone, 32 in flight",
                    "req/s",
                    ceiling,
                ),
                Figure::new("outbound, 1000 destinations, runs marked", "rows/s", marked),
                Figure::new("outbound, 1000 destinations, runs, no mark", "rows/s", unmarked),
                Figure::new(
                    "outbound, 1000 destinations, each send marked (hold)",
                    "rows/s",
                    marked_each,
                ),
                Figure::new(
                    "outbound, 1000 destinations, one by one, no mark (hold)",
                    "rows/s",
                    unmarked_each,
                ),
            ]
            .into_iter()
            .chain(paired.outbound_cpu.figures("outbound D = 100"))
            .chain(paired.inbound_cpu.figures("inbound S = 100"))
            .collect(),
        });
        report.bars.push(("outbound D=100".into(), paired.outbound));
        report.latencies.push((
            "outbound: enqueue → far end, full load".into(),
            paired.last_latencies,
        ));
    }

    if wants(Scenario::Http) {
        let n = sizes.outbound_n;
        let mut over_http = Vec::new();
        let mut in_process = Vec::new();
        let mut one_at_a_time = Vec::new();
        let mut ratios = Vec::new();
        for run in 1..=runs {
            // In process first, then over HTTP: a pair measured minutes apart would compare
            // the VM's drift as much as the API.
            let direct = flow::throughput(n, http::CLIENTS, Synchronous::Normal)?;
            let waiting = flow::throughput_windowed(n, http::CLIENTS, Synchronous::Normal, 1)?.0;
            let api = http::throughput(n)?;
            eprintln!(
                "http run {run}: over HTTP {api:.0} msgs/s, in process {direct:.0} msgs/s ({:.0} %), in process one at a time {waiting:.0} msgs/s",
                100.0 * api / direct
            );
            over_http.push(api);
            in_process.push(direct);
            one_at_a_time.push(waiting);
            ratios.push(api / direct);
        }
        let mut p50 = Vec::new();
        let mut p99 = Vec::new();
        let mut last = Vec::new();
        for run in 1..=runs {
            let l = http::latency(1000, sizes.latency_secs)?;
            let (a, b) = (percentile(&l, 50.0), percentile(&l, 99.0));
            eprintln!("http latency run {run}: p50 {a:.2} ms p99 {b:.2} ms");
            p50.push(a);
            p99.push(b);
            last = l;
        }
        let (ratio, mp99) = (median(&ratios), median(&p99));
        report.sections.push(Section {
            title: "10. The HTTP API".into(),
            how: format!(
                "{n} inbound messages enqueued with `POST /v1/inbound` by a load generator on \
                 its own thread (tokio, reqwest): {clients} clients, each its own keep-alive \
                 HTTP/1.1 connection and its own session, sending its session's messages in \
                 order, the next after the 201; the API on actix-web's default 2 workers in \
                 front of the inbound flow of scenario 1 (no-op channel, synchronous = NORMAL); \
                 from the first request to the last delivery. Against that flow in process (S = \
                 {clients}, producers calling the SupervisorActor), run just before each HTTP \
                 run; the target is checked on the median of the runs' ratios. Beside them, the \
                 same flow \
                 in process with each producer waiting for each enqueue's commit before the \
                 next, as a client on one connection must: what the HTTP clients' pattern \
                 costs without HTTP. Latency: {rate} requests/s offered for {secs} s \
                 round-robin over the {clients} clients, each started on schedule (open loop); \
                 request start → delivered to the channel. The load generator shares the \
                 machine's 2 cores with relayq.",
                clients = http::CLIENTS,
                rate = 1000,
                secs = sizes.latency_secs,
            ),
            checks: vec![
                Check::at_least(
                    "≥ 30 % of in-process throughput",
                    ratio,
                    0.3,
                    format!("{:.0} %", 100.0 * ratio),
                ),
                Check::at_most(
                    "p99 ≤ 20 ms at 1 000 requests/s",
                    mp99,
                    20.0,
                    format!("{mp99:.2} ms"),
                ),
            ],
            figures: vec![
                Figure::new("over HTTP, 100 clients", "msgs/s", over_http.clone()),
                Figure::new("in process, S = 100, run beside", "msgs/s", in_process),
                Figure::new(
                    "in process, one enqueue in flight per session",
                    "msgs/s",
                    one_at_a_time,
                ),
                Figure::new(
                    "HTTP / in process, run by run",
                    "%",
                    ratios.iter().map(|r| 100.0 * r).collect(),
                ),
                Figure::new("HTTP request → delivered, p50", "ms", p50),
                Figure::new("HTTP request → delivered, p99", "ms", p99),
            ],
        });
        report
            .bars
            .push(("HTTP API, 100 clients".into(), over_http));
        report
            .latencies
            .push(("HTTP request → delivered, 1 000/s".into(), last));
    }

    if wants(Scenario::Postgres) {
        report
            .sections
            .push(postgres_section(&root, &relayq, &sizes, runs)?);
    }

    let command = format!(
        "cargo run --release -p relayq-bench -- {}{}",
        if all {
            "all".to_string()
        } else {
            format!("{:?}", args.scenarios).to_lowercase()
        },
        if args.quick { " --quick" } else { "" }
    );
    report.plot(&out.join("bench/report"))?;
    let path = out.join("BENCHMARKS.md");
    std::fs::write(&path, report.markdown(&command))?;
    eprintln!("wrote {}", path.display());
    Ok(())
}

/// Scenario 11 (see `postgres`): one durable server for every figure, each reference run in
/// the same process right beside relayq's.
fn postgres_section(root: &Path, relayq: &Path, sizes: &Sizes, runs: usize) -> Result<Section> {
    let server = relayq_engine::storage::postgresql::test_server::TestServer::start_durable();
    // `BENCH_PG_URL`, `BENCH_STATEMENTS=1`: as for `tune-pg` (the outbound drains print theirs).
    let url = std::env::var("BENCH_PG_URL").unwrap_or(server.url());
    // The schema, once: the nodes then find it.
    relayq_engine::Database::open(&{
        let mut c = relayq_engine::DbConfig::new("/dev/null");
        c.url = Some(url.clone());
        c
    })?;
    let (n, embedded_n, peer_n) = (sizes.pg_n, sizes.pg_embedded_n, sizes.pg_peer_n);
    eprintln!("building the graphile_worker reference (bench/graphile-rs-ref)...");
    let graphile_bin = graphile::build(root)?;
    let modules = postgres::install_peer(root)?;
    let socket = server.socket_dir().to_path_buf();
    let best = &graphile::BEST;
    let scenarios: Vec<Measured> = vec![
        (
            "relayq embedded, S = 100",
            "msgs/s",
            Box::new(|| postgres::embedded(&url, embedded_n, 100, 1_000)),
        ),
        (
            "relayq embedded, S = 1",
            "msgs/s",
            Box::new(|| postgres::embedded(&url, embedded_n, 1, 1_000)),
        ),
        (
            "relayq serve, HTTP producers, S = 100",
            "msgs/s",
            Box::new(|| serve::http_inbound(relayq, &url, embedded_n)),
        ),
        (
            "relayq, 1 daemon, S = 100",
            "msgs/s",
            Box::new(|| postgres::throughput(&url, 1, n, 100)),
        ),
        (
            "relayq, 3 daemons, S = 100",
            "msgs/s",
            Box::new(|| postgres::throughput(&url, 3, n, 100)),
        ),
        (
            "relayq, 1 daemon, S = 1",
            "msgs/s",
            Box::new(|| postgres::throughput(&url, 1, n, 1)),
        ),
        (
            "relayq, 3 daemons, S = 1",
            "msgs/s",
            Box::new(|| postgres::throughput(&url, 3, n, 1)),
        ),
        (
            "raw SQL, one transaction per operation, S = 100",
            "msgs/s",
            Box::new(|| postgres::raw(&url, sizes.pg_raw_one_n, 100, 1)),
        ),
        (
            "raw SQL, 100 per transaction, S = 100",
            "msgs/s",
            Box::new(|| postgres::raw(&url, n, 100, 100)),
        ),
        (
            "raw SQL, 100 per transaction, S = 1",
            "msgs/s",
            Box::new(|| postgres::raw(&url, n, 1, 100)),
        ),
        (
            "graphile_worker 0.14.1 (Rust), 100 named queues",
            "jobs/s",
            Box::new(|| graphile::run(&graphile_bin, &url, embedded_n, 100, best)),
        ),
        (
            "graphile_worker 0.14.1 (Rust), 1 named queue",
            "jobs/s",
            Box::new(|| graphile::run(&graphile_bin, &url, peer_n, 1, best)),
        ),
        (
            "graphile-worker 0.16.6 (npm), 100 named queues, concurrency 100",
            "jobs/s",
            Box::new(|| postgres::peer(root, &modules, &socket, peer_n, 100, 100)),
        ),
        (
            "graphile-worker 0.16.6 (npm), 1 named queue, concurrency 1",
            "jobs/s",
            Box::new(|| postgres::peer(root, &modules, &socket, peer_n, 1, 1)),
        ),
    ];
    let figures: [Figure; 14] = interleaved(runs, scenarios)?
        .try_into()
        .map_err(|_| anyhow::anyhow!("fourteen scenarios"))?;
    let [embedded_100, embedded_1, served_100, one_100, three_100, one_1, three_1, raw_one_100, raw_100, raw_1, crate_100, crate_1, npm_100, npm_1] =
        figures;
    let across = postgres::across_nodes(&url, 100, sizes.latency_secs)?;
    let p99 = percentile(&across, 99.0);
    let m = |f: &Figure| median(&f.runs);
    let ratio = |a: &Figure, b: &Figure| m(a) / m(b);
    // The best peer at each S, by its median.
    let peer_100 = if m(&crate_100) >= m(&npm_100) {
        &crate_100
    } else {
        &npm_100
    };
    let peer_1 = if m(&crate_1) >= m(&npm_1) {
        &crate_1
    } else {
        &npm_1
    };
    // Outbound: [SQLite, 1 node, 3 nodes] at 5 destinations, then at 100.
    let drains = outbound_drains(&url, sizes, runs.max(DRAIN_ROUNDS))?;
    let mut drain_checks = Vec::new();
    for (at, d) in [(0, 5), (3, 100)] {
        let (sqlite, one, three) = (&drains[at], &drains[at + 1], &drains[at + 2]);
        // The CPU figures follow the six drains, in their order.
        let (one_cpu, three_cpu) = (&drains[at + 7], &drains[at + 8]);
        drain_checks.push(Check::at_least(
            &format!(
                "outbound, {d} destinations: 3 nodes' CPU a row ≤ 1 node's (relayq and server)"
            ),
            ratio(one_cpu, three_cpu),
            1.0,
            format!(
                "{:.1} against {:.1} µs",
                median(&three_cpu.runs),
                median(&one_cpu.runs)
            ),
        ));
        let share = ratio(one, sqlite).min(ratio(three, sqlite));
        drain_checks.push(Check::at_least(
            &format!("outbound, {d} destinations: 3 nodes ≥ 1 node"),
            ratio(three, one),
            1.0,
            format!("{:.2}×", ratio(three, one)),
        ));
        drain_checks.push(Check::at_least(
            &format!("outbound, {d} destinations: 1 and 3 nodes ≥ 50 % of one SQLite daemon"),
            share,
            0.5,
            format!("{:.0} %", 100.0 * share),
        ));
    }
    Ok(Section {
        title: "11. PostgreSQL: one daemon and three, against raw SQL on the same server".into(),
        how: format!(
            "PostgreSQL {} started for the run ({}): `fsync`, `full_page_writes` and \
             `synchronous_commit` on (PostgreSQL's defaults; a commit is on disk before it is \
             answered), `shared_buffers` 128 MB, one Unix socket. {n} messages each. relayq: the \
             in-process flow of scenario 1 on each daemon (a node: its own actix system and \
             connections, as a process would have), each session's producer on node `session % \
             daemons`, a no-op channel on every node, the clock started half a second after the \
             nodes (they read each other's load ten times a second); per-session order checked \
             across nodes on every delivery. Raw SQL: one client on the same server, relayq's table shape, insert → \
             claim the oldest row of a key whose older rows are done (`FOR UPDATE SKIP LOCKED`) → \
             mark done, prepared statements; S = 1 can claim one row per transaction. Across \
             nodes: 100 msgs/s for {} s over 10 sessions whose agents run on the other node, \
             enqueue → delivered. relayq embedded: the path a Rust user takes, `Relayq::builder` \
             with `RelayqConfig::new` defaults and `[database] url`, a no-op channel, one producer \
             keeping 1 000 `Relayq::enqueue` calls in flight, message `i` to session `i % S`, {} \
             messages. relayq serve: the daemon as an operator runs it (`relayq serve`, the same \
             server), fed over the HTTP API by 100 keep-alive clients, one per session, each \
             POSTing its next message after the 201, delivered through the webhook channel to a \
             far end on loopback that answers at once, {} messages. The job-queue peers, on the \
             same server, each key a named queue (which they run one job at a time, in order), \
             order checked per queue: graphile_worker 0.14.1 (the Rust crate, `bench/graphile-rs-ref`) \
             at its best here, concurrency 100, a local queue of 100 and completions batched over \
             2 ms (tried: concurrency 10-100, local queue 0-1 000, batches 0-10 ms; without a \
             local queue its worker fetches one job per notification and stalls), jobs added 100 \
             per `add_jobs` call while the worker runs, each with its own `run_at` a microsecond \
             after the one before (a queue runs by `run_at`, and one call's jobs share `now()`: \
             they ran out of order), {} jobs at S = 100 and {} at S = 1; graphile-worker 0.16.6 \
             (npm; the newest that runs on Node.js 20), {} jobs, added with its `add_job` SQL \
             function 100 per transaction while the worker runs, LISTEN/NOTIFY on (`pollInterval` \
             1 s, for retries only), concurrency 100 at S = 100 and 1 at S = 1 (its worker \
             fetches its next job as soon as one is done, which the crate's does not), its logging \
             off; a run that broke its order is void and run again. The targets compare with the \
             better peer at each S. Outbound drain: {} rows over 5 and over 100 destinations \
             written before the daemons start (a backlog, as once producers stopped or after a \
             restart), then sent through a channel that answers at once by 1 and by 3 PostgreSQL \
             nodes on this server, and by one SQLite daemon (WAL, synchronous = NORMAL, its \
             defaults) as the reference; rows/s from when every node runs (started side by side) to the last send, each \
             destination's order checked; a checkpoint before each drain; {} rounds at least (a \
             drain lasts about 2 s, and one node's ranged ±15 % from round to round); CPU a row: \
             this process's (every node's and the far end's) and the server's processes', from \
             /proc, over the same window. Runs are \
             interleaved: round r runs every scenario once before round r + 1.",
            server_version(&url).unwrap_or_else(|_| "15".into()),
            "initdb --no-sync, then started with those settings",
            sizes.latency_secs,
            embedded_n,
            embedded_n,
            embedded_n,
            peer_n,
            peer_n,
            sizes.pg_out_n,
            DRAIN_ROUNDS
        ),
        checks: vec![
            Check::at_least("1 daemon ≥ 50 % of raw batched, S = 100", ratio(&one_100, &raw_100), 0.5, format!("{:.0} %", 100.0 * ratio(&one_100, &raw_100))),
            Check::at_least("1 daemon ≥ 50 % of raw batched, S = 1", ratio(&one_1, &raw_1), 0.5, format!("{:.0} %", 100.0 * ratio(&one_1, &raw_1))),
            Check::at_least("3 daemons ≥ 1 daemon, S = 100", ratio(&three_100, &one_100), 1.0, format!("{:.2}×", ratio(&three_100, &one_100))),
            Check::at_least("3 daemons ≥ 1 daemon, S = 1", ratio(&three_1, &one_1), 1.0, format!("{:.2}×", ratio(&three_1, &one_1))),
            Check::at_least("embedded ≥ 1.5× the best peer, S = 100", ratio(&embedded_100, peer_100), 1.5, format!("{:.2}× ({})", ratio(&embedded_100, peer_100), peer_100.label)),
            Check::at_least("embedded ≥ 5× the best peer, S = 1", ratio(&embedded_1, peer_1), 5.0, format!("{:.2}× ({})", ratio(&embedded_1, peer_1), peer_1.label)),
            Check::at_least("embedded ≥ 50 % of raw batched, S = 1", ratio(&embedded_1, &raw_1), 0.5, format!("{:.0} %", 100.0 * ratio(&embedded_1, &raw_1))),
            Check::at_least("1 daemon ≥ 1.5× the best peer, S = 100", ratio(&one_100, peer_100), 1.5, format!("{:.2}×", ratio(&one_100, peer_100))),
            Check::at_least("1 daemon ≥ 5× the best peer, S = 1", ratio(&one_1, peer_1), 5.0, format!("{:.2}×", ratio(&one_1, peer_1))),
            Check::at_least("enqueued on one node, delivered by another: p99 ≤ 50 ms at 100 msgs/s", 50.0 / p99.max(0.001), 1.0, format!("p99 {p99:.1} ms (p50 {:.1} ms)", percentile(&across, 50.0))),
        ].into_iter().chain(drain_checks).collect(),
        figures: vec![embedded_100, embedded_1, served_100, one_100, three_100, one_1, three_1, raw_one_100, raw_100, raw_1, crate_100, crate_1, npm_100, npm_1]
            .into_iter()
            .chain(drains)
            .collect(),
    })
}

fn server_version(url: &str) -> Result<String> {
    let mut client = relayq_engine::postgres::Client::connect(url, relayq_engine::postgres::NoTls)?;
    Ok(client.query_one("SHOW server_version", &[])?.get(0))
}

/// The `tune` scenario: relayq's own throughput figures and the raw batched ceiling, medians
/// printed, nothing written.
fn tune(sizes: &Sizes, runs: usize) -> Result<()> {
    let flows = [
        ("relayq S=1", 1, Synchronous::Normal),
        ("relayq S=100", 100, Synchronous::Normal),
        ("relayq S=10000", 10_000, Synchronous::Normal),
        ("relayq FULL S=100", 100, Synchronous::Full),
    ];
    for (what, sessions, sync) in flows {
        let v = repeat(runs, what, || flow::throughput(sizes.n, sessions, sync))?;
        eprintln!("{what}: median {:.0} msgs/s", median(&v));
    }
    let v = repeat(runs, "raw 100/tx", || {
        raw::ceiling(sizes.n, 100, Synchronous::Normal, 100)
    })?;
    eprintln!("raw 100/tx: median {:.0} msgs/s", median(&v));
    Ok(())
}

/// Rounds of the outbound drains in the `postgres` scenario, at least: each lasts about 2 s,
/// and one node's figure ranged from 39 000 to 59 000 rows/s from one round to the next.
const DRAIN_ROUNDS: usize = 5;

/// The outbound drain (see `postgres::outbound_drain`) of one SQLite daemon, and of 1 and 3
/// PostgreSQL nodes on `url`, at 5 and 100 destinations: figures in that order. Interleaved
/// (round r drains each once): run one after another, the first drains after the inbound
/// scenarios found the server still busy with what those left (one node at 5 destinations
/// ran at 8 700-9 000 rows/s three times in a row, 23 000-26 000 on a fresh server). Then the
/// CPU a row of each drain (relayq's and the server's), in the same order.
fn outbound_drains(url: &str, sizes: &Sizes, runs: usize) -> Result<Vec<Figure>> {
    // `BENCH_OUT_N=ROWS`: another backlog size (a longer drain to profile).
    let n = std::env::var("BENCH_OUT_N")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(sizes.pg_out_n);
    let mut drains: Vec<(String, Option<&str>, usize, usize)> = Vec::new();
    for destinations in [5, 100] {
        for (label, url, nodes) in [
            ("1 SQLite daemon", None, 1),
            ("1 PostgreSQL node", Some(url), 1),
            ("3 PostgreSQL nodes", Some(url), 3),
        ] {
            let label = format!("outbound drain, {label}, {destinations} destinations");
            // `BENCH_ONLY=TEXT`: only the drains whose label holds TEXT (to tune one of them).
            if std::env::var("BENCH_ONLY").is_ok_and(|only| !label.contains(&only)) {
                continue;
            }
            drains.push((label, url, nodes, destinations));
        }
    }
    let cpu: Vec<std::cell::RefCell<Vec<f64>>> =
        drains.iter().map(|_| Default::default()).collect();
    let scenarios: Vec<Measured> = drains
        .iter()
        .zip(&cpu)
        .map(|((label, url, nodes, destinations), cpu)| {
            let (url, nodes, destinations) = (*url, *nodes, *destinations);
            let run = move || {
                let drained = postgres::outbound_drain(url, nodes, n, destinations)?;
                if let (Some(url), Some(_)) = (url, std::env::var_os("BENCH_STATEMENTS")) {
                    eprintln!("{}", postgres::statements(url, n)?);
                }
                cpu.borrow_mut().push(drained.cpu_per_row);
                Ok(drained.rate)
            };
            (
                label.as_str(),
                "rows/s",
                Box::new(run) as Box<dyn FnMut() -> Result<f64> + '_>,
            )
        })
        .collect();
    let mut figures = interleaved(runs, scenarios)?;
    let cpu_figures: Vec<Figure> = drains
        .iter()
        .zip(cpu)
        .map(|((label, ..), cpu)| {
            let label = label.replacen("outbound drain", "outbound drain, CPU a row", 1);
            Figure::new(label, "µs/row", cpu.into_inner())
        })
        .collect();
    figures.extend(cpu_figures);
    Ok(figures)
}

fn tune_outbound(sizes: &Sizes, runs: usize) -> Result<()> {
    let paired = outbound_beside_inbound(sizes, runs)?;
    eprintln!(
        "outbound D=100: median {:.0} rows/s, {:.0} % of inbound S=100 ({:.0} msgs/s; median of \
         the runs' ratios)",
        median(&paired.outbound),
        100.0 * median(&paired.ratios),
        median(&paired.inbound)
    );
    eprintln!("CPU per row, outbound: {}", paired.outbound_cpu.summary());
    eprintln!("CPU per row, inbound:  {}", paired.inbound_cpu.summary());
    Ok(())
}

/// Outbound D = 100 and, just before each of its runs, inbound S = 100: their ratio is taken
/// run by run, since the VM's speed drifts more between scenarios than within a pair.
struct Paired {
    outbound: Vec<f64>,
    inbound: Vec<f64>,
    ratios: Vec<f64>,
    p99: Vec<f64>,
    last_latencies: Vec<f64>,
    outbound_cpu: cpu::Runs,
    inbound_cpu: cpu::Runs,
}

fn outbound_beside_inbound(sizes: &Sizes, runs: usize) -> Result<Paired> {
    let mut p = Paired {
        outbound: Vec::new(),
        inbound: Vec::new(),
        ratios: Vec::new(),
        p99: Vec::new(),
        last_latencies: Vec::new(),
        outbound_cpu: cpu::Runs::default(),
        inbound_cpu: cpu::Runs::default(),
    };
    for run in 1..=runs {
        let (rate, cpu) = flow::throughput_and_cpu(sizes.n, 100, Synchronous::Normal)
            .with_context(|| format!("inbound S=100, run {run}"))?;
        let out = outbound::run(sizes.outbound_n, 100, outbound::Marks::DEFAULT)
            .with_context(|| format!("outbound D=100, run {run}"))?;
        eprintln!(
            "run {run}: inbound S=100 {rate:.0} msgs/s, outbound D=100 {:.0} rows/s ({:.0} %)",
            out.throughput,
            100.0 * out.throughput / rate
        );
        p.inbound_cpu.push(&cpu);
        p.outbound_cpu.push(&out.cpu);
        p.ratios.push(out.throughput / rate);
        p.inbound.push(rate);
        p.outbound.push(out.throughput);
        p.p99.push(percentile(&out.latencies, 99.0));
        p.last_latencies = out.latencies;
    }
    Ok(p)
}

fn median(v: &[f64]) -> f64 {
    percentile(v, 50.0)
}

/// Runs `f` `runs` times, printing each result.
fn repeat(runs: usize, what: &str, mut f: impl FnMut() -> Result<f64>) -> Result<Vec<f64>> {
    (1..=runs)
        .map(|run| {
            let v = f().with_context(|| format!("{what}, run {run}"))?;
            eprintln!("{what} run {run}: {v:.1}");
            Ok(v)
        })
        .collect()
}

/// A scenario of a section: its label, its unit, and one run of it.
type Measured<'a> = (&'a str, &'static str, Box<dyn FnMut() -> Result<f64> + 'a>);

/// Runs each scenario once per round, `runs` rounds, so a drift of the machine's speed falls on
/// every scenario alike; a figure per scenario, in their order.
fn interleaved(runs: usize, mut scenarios: Vec<Measured>) -> Result<Vec<Figure>> {
    let mut values = vec![Vec::with_capacity(runs); scenarios.len()];
    for run in 1..=runs {
        for ((what, _, f), values) in scenarios.iter_mut().zip(&mut values) {
            let v = f().with_context(|| format!("{what}, run {run}"))?;
            eprintln!("{what} run {run}: {v:.1}");
            values.push(v);
        }
    }
    Ok(scenarios
        .into_iter()
        .zip(values)
        .map(|((what, unit, _), values)| Figure::new(what.to_string(), unit, values))
        .collect())
}

/// Builds the relayq binary (release) for the scenarios that run it as a process.
fn build_relayq(root: &Path) -> Result<PathBuf> {
    let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .current_dir(root)
        .args([
            "build",
            "--release",
            "--quiet",
            "-p",
            "relayq",
            "--bin",
            "relayq",
        ])
        .status()
        .context("running cargo to build relayq")?;
    anyhow::ensure!(status.success(), "building relayq failed");
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    Ok(target.join("release/relayq"))
}

fn machine_facts(runs: usize, quick: bool) -> Vec<(String, String)> {
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    let cpu = read("/proc/cpuinfo")
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split(':').nth(1))
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|| "unknown".into());
    let mem = read("/proc/meminfo")
        .lines()
        .find(|l| l.starts_with("MemTotal"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<f64>().ok())
        .map(|kb| format!("{:.1} GiB", kb / 1024.0 / 1024.0))
        .unwrap_or_else(|| "unknown".into());
    let rustc = Command::new("rustc")
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    vec![
        (
            "Date".into(),
            humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
        ),
        ("Cores".into(), cores.to_string()),
        ("CPU".into(), cpu),
        ("Memory".into(), mem),
        (
            "Kernel".into(),
            read("/proc/sys/kernel/osrelease").trim().to_string(),
        ),
        (
            "SQLite (relayq, raw reference)".into(),
            rusqlite::version().to_string(),
        ),
        (
            "SQLite (effectum 0.7)".into(),
            "bundled by libsqlite3-sys 0.28 (3.45)".into(),
        ),
        (
            "Journal / synchronous".into(),
            "WAL / NORMAL (scenario 3: FULL)".into(),
        ),
        ("Compiler".into(), rustc),
        ("Runs per figure".into(), runs.to_string()),
        (
            "Sizes".into(),
            if quick {
                "--quick (reduced; not the targets' sizes)".into()
            } else {
                "as the targets state".into()
            },
        ),
    ]
}
