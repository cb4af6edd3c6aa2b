//! Several daemons on one PostgreSQL database (issue 31): three nodes under inbound, hook and
//! outbound load, with nodes killed (`kill -9`) at random and restarted, and PostgreSQL itself
//! crashed (`pg_ctl restart -m immediate`) mid-run. Nothing may be lost or reordered per key,
//! no key may be leased by two daemons at once, one node at a time polls Telegram, and no
//! chat gets more than Telegram's budget.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use relayq_actors::sources::telegram::fake::FakeTelegram;
use relayq_engine::storage::postgresql::test_server::{TestDatabase, TestServer};
use serde_json::{json, Value};

use crate::common::{
    file_config, inbound_args, own_database_runs_here, wait_until, App, Config, Daemon, ALICE,
};

const TOKEN: &str = "123456:nodes-test-token";
const NODES: usize = 3;
const WAIT: Duration = Duration::from_secs(120);

/// The sink every node delivers sessions to: a command that appends, once it is done, when it
/// began and ended (ns), its repeat mark and the delivery to the node's own `out.jsonl`. A run
/// killed with its node writes nothing.
const SINK: &str = r#"line=$(cat); began=$(date +%s%N); sleep 0.01; ended=$(date +%s%N); printf '%s %s %s %s\n' "$began" "$ended" "$RELAYQ_POSSIBLE_REPEAT" "$line" >> out.jsonl"#;

/// Node `name`: sessions to `SINK`, the Telegram source (read by one node at a time) and
/// channel `tg` on the local Bot API, quick retries, a sweep every second.
fn node_config(fake: &FakeTelegram, name: &str) -> Config {
    file_config()
        .channel(
            "sink",
            "exec",
            &[&format!("command = [\"sh\", \"-c\", {SINK:?}]")],
        )
        .default_channel("sink")
        .set("node", &format!("name = {name:?}"))
        .set("daemon", "sweep_interval = \"1s\"")
        .set("queues.hooks", "backoff = [\"200ms\"]")
        .set("queues.outbound", "backoff = [\"200ms\"]")
        .alice_bot(&fake.url)
        .channel(
            "tg",
            "telegram",
            &[
                "token_env = \"BOT_TOKEN\"",
                &format!("api_url = {:?}", fake.url),
            ],
        )
}

/// The bot's token, as the nodes read it from their environment.
const BOT_ENV: [(&str, &str); 1] = [("BOT_TOKEN", TOKEN)];

/// Two nodes on a database of their own, `first` and `other` ([`node_config`]), and the Bot
/// API they share.
fn two_nodes(first: &str) -> (TestDatabase, FakeTelegram, [App; 2]) {
    let database = TestDatabase::create();
    let url = database.url();
    let fake = FakeTelegram::start(TOKEN);
    let apps = [
        App::joining(node_config(&fake, first), &url),
        App::joining(node_config(&fake, "other"), &url),
    ];
    (database, fake, apps)
}

/// A small random source (xorshift), seeded from the clock; the seed is printed.
struct Dice(u64);

impl Dice {
    fn new() -> Dice {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64
            | 1;
        eprintln!("nodes: dice seed {seed}");
        Dice(seed)
    }

    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

/// Runs `relayq ARGS` on `app` until it succeeds (the database may be restarting); the writes
/// retried carry a source id, so a retry whose first try committed writes nothing twice.
fn until_ok(app: &App, args: &[&str]) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let out = app.run(args);
        if out.status.success() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "relayq {args:?} kept failing: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A Claude Code prompt for `session`, as its hook sends it.
fn prompt(session: &str, text: &str) -> String {
    json!({"hook_event_name": "UserPromptSubmit", "session_id": session, "prompt": text})
        .to_string()
}

/// Every (key, owner) pair leased at once by two owners, sampled until `stop`.
fn watch_leases(url: String, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<Vec<String>> {
    std::thread::spawn(move || {
        let mut seen = Vec::new();
        let mut samples = 0;
        while !stop.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(50));
            let Ok(mut client) =
                relayq_engine::postgres::Client::connect(&url, relayq_engine::postgres::NoTls)
            else {
                continue;
            };
            while !stop.load(Ordering::SeqCst) {
                let rows = client.query(
                    "SELECT queue, key, string_agg(DISTINCT lease_owner, ' ') FROM queue_rows
                     WHERE state = 'leased' GROUP BY queue, key
                     HAVING COUNT(DISTINCT lease_owner) > 1",
                    &[],
                );
                let Ok(rows) = rows else { break };
                samples += 1;
                for row in rows {
                    let (queue, key, owners): (String, String, String) =
                        (row.get(0), row.get(1), row.get(2));
                    seen.push(format!("{queue} {key}: {owners}"));
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        eprintln!("nodes: {samples} samples of the leases");
        seen
    })
}

/// One run of the sink: on which node, when (ns), marked as a possible repeat or not.
struct Run {
    node: usize,
    began: u64,
    ended: u64,
    repeat: bool,
    delivery: Value,
}

/// What node `n`'s sink recorded.
fn runs_of(app: &App, node: usize) -> Vec<Run> {
    let text = std::fs::read_to_string(app.dir.path().join("out.jsonl")).unwrap_or_default();
    text.lines()
        .map(|line| {
            let mut parts = line.splitn(4, ' ');
            let mut next = || {
                parts
                    .next()
                    .unwrap_or_else(|| panic!("a sink line: {line}"))
            };
            Run {
                node,
                began: next().parse().unwrap(),
                ended: next().parse().unwrap(),
                repeat: next() == "1",
                delivery: serde_json::from_str(next()).unwrap(),
            }
        })
        .collect()
}

/// Issue 41, item 9: at no moment two runs of one session in flight, on any nodes; and every
/// run of a row after its first carries the repeat mark.
fn assert_one_run_at_a_time(runs: &[Run]) {
    let mut by_session: BTreeMap<&str, Vec<&Run>> = BTreeMap::new();
    for run in runs {
        let session = run.delivery["session"].as_str().unwrap();
        by_session.entry(session).or_default().push(run);
    }
    let mut overlaps = Vec::new();
    for (session, mut runs) in by_session {
        runs.sort_by_key(|r| r.began);
        for pair in runs.windows(2) {
            let (a, b) = (pair[0], pair[1]);
            if b.began < a.ended {
                overlaps.push(format!(
                    "{session}: row {} on n{} and row {} on n{} in flight together",
                    a.delivery["id"], a.node, b.delivery["id"], b.node
                ));
            }
        }
    }
    assert!(overlaps.is_empty(), "{overlaps:#?}");
    let mut seen = std::collections::BTreeSet::new();
    let mut sorted: Vec<&Run> = runs.iter().collect();
    sorted.sort_by_key(|r| r.began);
    let unmarked: Vec<String> = sorted
        .into_iter()
        .filter(|r| !seen.insert(r.delivery["id"].as_i64().unwrap()) && !r.repeat)
        .map(|r| format!("row {} again on n{}, unmarked", r.delivery["id"], r.node))
        .collect();
    assert!(unmarked.is_empty(), "{unmarked:#?}");
}

/// The numbers in `texts` ("… 7"), with a repeat right after its first kept once (a send cut
/// by a crash is sent again, flagged).
fn numbers(texts: impl IntoIterator<Item = String>) -> Vec<u32> {
    let mut out: Vec<u32> = Vec::new();
    for text in texts {
        let n: u32 = text
            .rsplit(' ')
            .next()
            .and_then(|n| {
                n.trim_end_matches(|c: char| !c.is_ascii_digit())
                    .parse()
                    .ok()
            })
            .unwrap_or_else(|| panic!("no number in {text:?}"));
        if out.last() != Some(&n) {
            out.push(n);
        }
    }
    out
}

/// The three-node chaos runs take turns: each keeps two cores busy with three daemons, its
/// producers and its kills, and two at once starve both.
static CHAOS: Mutex<()> = Mutex::new(());

#[test]
fn three_nodes_under_load_with_kill_9_and_a_database_crash_lose_and_reorder_nothing() {
    if !own_database_runs_here(
        "three_nodes_under_load_with_kill_9_and_a_database_crash_lose_and_reorder_nothing",
    ) {
        return;
    }
    let _one_at_a_time = CHAOS.lock().unwrap_or_else(|e| e.into_inner());
    let started = Instant::now();
    let server = TestServer::start();
    let url = server.url();
    let fake = FakeTelegram::start(TOKEN);
    let env = [("BOT_TOKEN", TOKEN)];
    let apps: Vec<App> = (0..NODES)
        .map(|n| App::joining(node_config(&fake, &format!("n{n}")), &url))
        .collect();
    let daemons: Vec<Mutex<Option<Daemon>>> = apps
        .iter()
        .map(|app| Mutex::new(Some(app.serve_with_env(&env))))
        .collect();
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = watch_leases(url.clone(), stop.clone());
    let kills = Mutex::new(Vec::<Instant>::new());

    // `RELAYQ_NODES_SCALE=4`: four times the messages, producers and kills (about 3 min; the
    // deadlocks of issue 41, item 12a, showed there and not at 1).
    let scale: usize = std::env::var("RELAYQ_NODES_SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1)
        .max(1);
    let (sessions, per_session) = (8 * scale, 25 * scale);
    let (hook_sessions, prompts) = (3, 15 * scale);
    let (chats, per_chat) = (4 * scale, 6 * scale);
    let (owned_rows, alice_messages) = (5, 12);
    std::thread::scope(|scope| {
        // Inbound, from any node's CLI: `scale` producers, each with its share of sessions.
        for producer in 0..scale {
            let apps = &apps;
            scope.spawn(move || {
                let mut dice = Dice::new();
                for i in 0..per_session {
                    for s in (producer..sessions).step_by(scale) {
                        let (session, id, text) =
                            (format!("s{s}"), format!("{s}-{i}"), format!("message {i}"));
                        let args = inbound_args(&session, "load", &["--source-id", &id, &text]);
                        until_ok(&apps[dice.below(NODES)], &args);
                    }
                }
            });
        }
        // Hook events: session hK's agent runs on node K, whose hooks say so.
        scope.spawn(|| {
            for p in 0..prompts {
                for (h, app) in apps.iter().enumerate().take(hook_sessions) {
                    let out = app.hook(
                        "claude",
                        &prompt(&format!("h{h}"), &format!("prompt {p}")),
                        false,
                        &[],
                    );
                    assert!(
                        out.status.success(),
                        "{}",
                        String::from_utf8_lossy(&out.stderr)
                    );
                }
            }
            // Then messages for those sessions: only their agent's node delivers them.
            for i in 0..owned_rows {
                for h in 0..hook_sessions {
                    let (session, id, text) =
                        (format!("h{h}"), format!("h{h}-{i}"), format!("owned {i}"));
                    let args = inbound_args(&session, "load", &["--source-id", &id, &text]);
                    until_ok(&apps[(h + 1) % NODES], &args);
                }
            }
        });
        // Outbound to four chats, from any node's CLI.
        scope.spawn(|| {
            let mut dice = Dice::new();
            for i in 0..per_chat {
                for c in 0..chats {
                    let to = format!("{}", 1000 + c);
                    let args = [
                        "enqueue",
                        "outbound",
                        "--channel",
                        "tg",
                        "--to",
                        &to,
                        &format!("note {i}"),
                    ];
                    until_ok(&apps[dice.below(NODES)], &args);
                }
            }
        });
        // Telegram: Alice writes; one node at a time reads.
        scope.spawn(|| {
            for i in 0..alice_messages {
                fake.push_text(ALICE, ALICE, &format!("from alice {i}"));
                std::thread::sleep(Duration::from_millis(700));
            }
        });
        // Chaos: a node killed and restarted every 2.5 s; PostgreSQL crashed once.
        scope.spawn(|| {
            let mut dice = Dice::new();
            let mut crashed = false;
            for round in 0..8 * scale {
                std::thread::sleep(Duration::from_millis(2_500));
                if round == 2 && !crashed {
                    eprintln!(
                        "nodes: pg_ctl restart -m immediate at {:?}",
                        started.elapsed()
                    );
                    server.restart_immediate();
                    crashed = true;
                    continue;
                }
                let n = dice.below(NODES);
                eprintln!("nodes: kill -9 n{n} at {:?}", started.elapsed());
                let mut daemon = daemons[n].lock().unwrap();
                if let Some(mut running) = daemon.take() {
                    running.signal("KILL");
                    kills.lock().unwrap().push(Instant::now());
                }
                std::thread::sleep(Duration::from_millis(300));
                *daemon = Some(apps[n].serve_with_env(&env));
            }
        });
    });

    // Everything written is finished, and every row is delivered.
    let unfinished = || {
        apps[0].query_value::<i64>(
            "SELECT COUNT(*) FROM queue_rows WHERE state IN ('pending', 'leased')",
        )
    };
    wait_until("every row finished", WAIT, || {
        unfinished() == Some(0) && fake.sent().len() >= chats * per_chat
    });
    wait_until("alice's messages read", WAIT, || {
        apps[0].query_value::<i64>(
            "SELECT COUNT(*) FROM queue_rows WHERE key = 'alice' AND state = 'delivered'",
        ) == Some(alice_messages as i64)
    });
    stop.store(true, Ordering::SeqCst);
    let doubly_leased = watcher.join().unwrap();
    eprintln!("nodes: done in {:?}", started.elapsed());
    // Issue 41, item 12a: no write waited for another in a cycle (a deadlock, PostgreSQL's
    // 1 s stall then a failed write) or past the lock timeout.
    let log = server.log();
    let stalls: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("deadlock detected") || l.contains("lock timeout"))
        .collect();
    assert!(stalls.is_empty(), "{stalls:#?}\n{log}");
    let log = server.log();
    let deadlocks: Vec<&str> = log
        .lines()
        .filter(|l| {
            l.contains("deadlock")
                || l.contains("lock timeout")
                || l.contains("canceling statement")
        })
        .collect();
    eprintln!("nodes: {} deadlock lines", deadlocks.len());
    if !deadlocks.is_empty() {
        eprintln!("{log}");
    }

    let states: Vec<(String, String, i64)> = apps[0].query(
        "SELECT queue, state, COUNT(*) FROM queue_rows GROUP BY queue, state ORDER BY 1, 2",
        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
    );
    for (queue, state, count) in &states {
        assert_eq!(
            state, "delivered",
            "{count} {queue} rows {state}: {states:?}"
        );
    }

    // Per key, rows finished in the order they were written, whichever node delivered them.
    let finished: Vec<(String, String, i64, i64)> = apps[0].query(
        "SELECT queue, key, id, finished_at FROM queue_rows ORDER BY queue, key, id",
        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
    );
    for pair in finished.windows(2) {
        let ((q1, k1, id1, at1), (q2, k2, id2, at2)) = (&pair[0], &pair[1]);
        if (q1, k1) == (q2, k2) {
            assert!(
                at1 <= at2,
                "{q1} {k1}: row {id1} finished at {at1}, after row {id2} at {at2}"
            );
        }
    }
    let per_key = |queue: &str, key: &str| {
        finished
            .iter()
            .filter(|(q, k, _, _)| q == queue && k == key)
            .count()
    };
    for s in 0..sessions {
        assert_eq!(
            per_key("inbound", &format!("s{s}")),
            per_session,
            "s{s}: one row per message"
        );
    }

    // What each node's sink ran: one run of a session at a time, whichever nodes; every
    // message; each session's in order within a node, and only on its agent's node if any.
    let runs: Vec<Run> = (0..NODES).flat_map(|n| runs_of(&apps[n], n)).collect();
    eprintln!("nodes: {} runs of the sink", runs.len());
    assert_one_run_at_a_time(&runs);
    let mut delivered: BTreeMap<String, Vec<u32>> = BTreeMap::new();
    for n in 0..NODES {
        let mut by_session: BTreeMap<String, Vec<(u64, String)>> = BTreeMap::new();
        for run in runs.iter().filter(|r| r.node == n) {
            let session = run.delivery["session"].as_str().unwrap().to_string();
            let content = run.delivery["content"].as_str().unwrap().to_string();
            by_session
                .entry(session)
                .or_default()
                .push((run.began, content));
        }
        for (session, mut texts) in by_session {
            texts.sort_by_key(|(began, _)| *began);
            let got = numbers(texts.into_iter().map(|(_, text)| text));
            assert!(
                got.windows(2).all(|w| w[0] < w[1]),
                "n{n}, {session}: {got:?}"
            );
            if let Some(h) = session.strip_prefix('h') {
                assert_eq!(
                    h.parse::<usize>().unwrap(),
                    n,
                    "{session} delivered by n{n}, not its agent's node"
                );
            }
            delivered.entry(session).or_default().extend(got);
        }
    }
    for (session, mut got) in delivered {
        got.sort_unstable();
        got.dedup();
        let want = match session.as_str() {
            s if s.starts_with('s') => per_session,
            s if s.starts_with('h') => owned_rows,
            _ => alice_messages,
        };
        assert_eq!(
            got,
            (0..want as u32).collect::<Vec<_>>(),
            "{session}: every message delivered"
        );
    }

    // Hooks: every prompt processed, the last one last.
    for h in 0..hook_sessions {
        let last: Option<String> = apps[0].query_value(&format!(
            "SELECT last_user_input FROM sessions WHERE key = 'h{h}'"
        ));
        assert_eq!(
            last.as_deref(),
            Some(format!("prompt {}", prompts - 1).as_str()),
            "h{h}"
        );
        assert_eq!(
            per_key("hooks", &format!("h{h}")),
            prompts,
            "h{h}: one row per event"
        );
    }

    // Outbound: each chat got its notes once each (a cut send flagged and sent again, right
    // after itself), in order, never faster than Telegram's budget.
    let sent = fake.sent();
    for c in 0..chats {
        let chat = json!(1000 + c);
        let texts = sent
            .iter()
            .filter(|m| m["chat_id"] == chat || m["chat_id"] == Value::String(chat.to_string()));
        let got = numbers(texts.map(|m| m["text"].as_str().unwrap().to_string()));
        assert_eq!(got, (0..per_chat as u32).collect::<Vec<_>>(), "chat {chat}");
    }
    let (per_chat_most, bot_most) = fake.most_sends_within(Duration::from_millis(900));
    assert!(
        per_chat_most <= 1,
        "a chat got {per_chat_most} messages within 0.9 s"
    );
    assert!(
        bot_most <= 30,
        "the bot sent {bot_most} messages within 0.9 s"
    );

    // A poll still waiting at Telegram for a process just killed is ended by the next
    // reader's, as on Telegram; two live readers would end each other's polls over and over.
    let kills = kills.into_inner().unwrap();
    for conflict in fake.conflicts() {
        let after_a_kill = kills
            .iter()
            .any(|k| *k <= conflict && conflict.duration_since(*k) < Duration::from_secs(3));
        assert!(
            after_a_kill,
            "two nodes polled Telegram at once ({:?} into the run)",
            conflict.duration_since(started)
        );
    }
    assert!(
        doubly_leased.is_empty(),
        "keys leased by two daemons at once: {doubly_leased:?}"
    );
    // The operator sees the three nodes, alive, and the one that reads Telegram.
    let status: Value = serde_json::from_str(&apps[0].ok(&["status", "--json"])).unwrap();
    let nodes = status["nodes"].as_array().unwrap();
    let alive: Vec<&str> = nodes
        .iter()
        .filter(|n| n["alive"] == true)
        .map(|n| n["name"].as_str().unwrap())
        .collect();
    assert_eq!(alive, ["n0", "n1", "n2"], "{status:#}");
    let readers: Vec<&Value> = nodes
        .iter()
        .filter(|n| n["sources"] == json!(["bot"]))
        .collect();
    assert_eq!(readers.len(), 1, "one node reads Telegram: {nodes:#?}");
    let table = apps[1].ok(&["status"]);
    assert!(
        table.contains("NODE") && table.contains("n2") && table.contains("bot"),
        "{table}"
    );
    for daemon in daemons {
        if let Some(daemon) = daemon.into_inner().unwrap() {
            daemon.stop();
        }
    }
    let after: Value = serde_json::from_str(&apps[0].ok(&["status", "--json"])).unwrap();
    let states: Vec<bool> = after["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["stopped_at_ms"].is_number())
        .collect();
    assert_eq!(
        states,
        [true, true, true],
        "each node said it stopped: {after:#}"
    );
}

/// A node whose host clock runs an hour ahead finds every other node's lease run out by its own
/// clock; the times it writes and compares are the database's, so it takes none of them: each
/// message is delivered once, by whichever node leased it.
#[test]
fn a_node_whose_clock_runs_an_hour_ahead_steals_no_lease() {
    if !own_database_runs_here("a_node_whose_clock_runs_an_hour_ahead_steals_no_lease") {
        return;
    }
    let database = TestDatabase::create();
    let url = database.url();
    // Slow deliveries: a lease is held for a while, for the skewed node to covet.
    let config = crate::common::exec_config(&format!("sleep 0.3; {}", crate::common::APPEND_LINE))
        .set("daemon", "sweep_interval = \"200ms\"");
    let apps: Vec<App> = ["right", "ahead"]
        .iter()
        .map(|name| {
            App::joining(
                config.clone().set("node", &format!("name = {name:?}")),
                &url,
            )
        })
        .collect();
    let right = apps[0].serve();
    let ahead = apps[1].serve_with_env(&[("RELAYQ_CLOCK_OFFSET", "1h")]);
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = watch_leases(url.clone(), stop.clone());
    let (sessions, each) = (6, 8);
    for i in 0..each {
        for s in 0..sessions {
            let (session, text) = (format!("s{s}"), format!("message {i}"));
            until_ok(
                &apps[(s + i) % 2],
                &inbound_args(&session, "skew", &[&text]),
            );
        }
    }
    let delivered = || {
        apps.iter()
            .map(|a| a.lines("out.jsonl").len())
            .sum::<usize>()
    };
    wait_until("every message delivered", WAIT, || {
        delivered() >= sessions * each
    });
    std::thread::sleep(Duration::from_secs(1)); // a stolen lease would deliver again by now
    stop.store(true, Ordering::SeqCst);
    let doubly_leased = watcher.join().unwrap();
    assert_eq!(
        delivered(),
        sessions * each,
        "a message was delivered twice"
    );
    assert!(doubly_leased.is_empty(), "{doubly_leased:?}");
    let by_node: Vec<usize> = apps.iter().map(|a| a.lines("out.jsonl").len()).collect();
    eprintln!("nodes: delivered by the right clock's node and the one ahead: {by_node:?}");
    let attempts: Option<i64> = apps[0].query_value("SELECT MAX(attempts) FROM queue_rows");
    assert_eq!(attempts, Some(1), "a row was leased again");
    right.stop();
    ahead.stop();
}

/// Row counts of every table `relayq migrate` copies, read through `query`.
fn table_counts(query: impl Fn(&str) -> Option<i64>) -> Vec<(&'static str, i64)> {
    relayq_engine::storage::migrate::TABLES
        .iter()
        .map(|t| {
            (
                *t,
                query(&format!("SELECT COUNT(*) FROM {t}")).unwrap_or(-1),
            )
        })
        .collect()
}

/// `relayq migrate --to`: a single-node SQLite deployment moves to PostgreSQL whole (rows with
/// their states and attempts, sessions, offsets, pauses, penalties); it is refused while a
/// daemon serves the file; a second run keeps what is there; a node on PostgreSQL then
/// delivers the rows that were waiting, in order, and pauses still hold.
#[test]
fn a_sqlite_deployment_moves_to_postgresql_whole_and_a_second_move_keeps_what_is_there() {
    if !own_database_runs_here(
        "a_sqlite_deployment_moves_to_postgresql_whole_and_a_second_move_keeps_what_is_there",
    ) {
        return;
    }
    use relayq_engine::QueueName::Inbound;
    let database = TestDatabase::create();
    let url = database.url();
    let app = App::sqlite(file_config());
    let daemon = app.serve();
    let delivered = app.enqueue("s", "delivered before the move");
    app.wait_state(Inbound, delivered, "delivered");
    let out = app.hook("claude", &prompt("agent-1", "hello"), false, &[]);
    assert!(out.status.success());
    wait_until("the hook processed", WAIT, || {
        app.query_value::<i64>("SELECT COUNT(*) FROM sessions WHERE key = 'agent-1'") == Some(1)
    });
    let refused = app.run(&["migrate", "--to", &url]);
    assert_eq!(refused.status.code(), Some(1));
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(said.contains("stop it first"), "{said}");
    daemon.stop();
    let waiting: Vec<i64> = (0..3)
        .map(|i| app.enqueue("s", &format!("waiting {i}")))
        .collect();
    let conn = relayq_engine::rusqlite::Connection::open(app.db()).unwrap();
    conn.execute_batch(
        "INSERT INTO pauses (queue, key, paused_at) VALUES ('inbound', 'held', 1);
         INSERT INTO source_offsets (source, \"offset\", updated_at) VALUES ('bot', '42', 1);
         INSERT INTO channel_penalties (channel, until, reason) VALUES ('out', 1, 'long ago');
         INSERT INTO session_commands (id, origin, chat, message_id, user_name, command, state,
                                       node, session, asked_at, updated_at)
              VALUES (7, 'telegram:bot', '42', '9', 'Alice', '{}', 'done', 'n1', 'demo-1', 1, 1);
         INSERT INTO chat_sessions (session, origin, chat, thread, project, agent, node, command,
                                    state, created_at)
              VALUES ('demo-1', 'telegram:bot', '42', '1001', 'demo', 'claude', 'n1', 7,
                      'running', 1);
         INSERT INTO chat_current (origin, chat, session, set_at)
              VALUES ('telegram:bot', '43', 'demo-1', 1);
         INSERT INTO chat_settings (origin, chat, progress, set_at)
              VALUES ('telegram:bot', '43', 'off', 1);
         INSERT INTO reactions (row_id, session, origin, chat, message, wanted, tried, shown,
                                updated_at)
              VALUES (1, 'demo-1', 'telegram:bot', '42', '9', 'done', 'taken', 'taken', 1);",
    )
    .unwrap();
    drop(conn);
    app.enqueue("held", "paused before the move");

    let moved = app.ok(&["migrate", "--to", &url]);
    assert!(
        moved.contains("queue_rows") && !moved.contains("there already"),
        "{moved}"
    );
    let node = App::joining(file_config(), &url);
    let sqlite_counts = table_counts(|sql| app.query_value(sql));
    assert_eq!(table_counts(|sql| node.query_value(sql)), sqlite_counts);
    let again = app.ok(&["migrate", "--to", &url]);
    assert!(again.contains("there already and kept"), "{again}");
    assert_eq!(
        table_counts(|sql| node.query_value(sql)),
        sqlite_counts,
        "nothing twice"
    );
    let topic: Option<String> = node.query_value(
        "SELECT session FROM chat_sessions WHERE origin = 'telegram:bot' AND chat = '42' AND thread = '1001'",
    );
    assert_eq!(
        topic.as_deref(),
        Some("demo-1"),
        "a topic's binding moves with it"
    );
    let attempts: Option<i64> = node.query_value(&format!(
        "SELECT attempts FROM queue_rows WHERE id = {delivered}"
    ));
    assert_eq!(attempts, Some(1), "a row keeps its attempts");

    let daemon = node.serve();
    wait_until("the waiting rows delivered on PostgreSQL", WAIT, || {
        node.lines("out.jsonl").len() >= waiting.len()
    });
    let texts: Vec<String> = node
        .lines("out.jsonl")
        .iter()
        .map(|l| l["content"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        texts,
        ["waiting 0", "waiting 1", "waiting 2"],
        "in order, the paused one held"
    );
    let next = node.enqueue("s", "after the move");
    assert!(
        next > *waiting.last().unwrap(),
        "ids go on after the moved ones: {next}"
    );
    daemon.stop();
}

/// Issue 41, item 1: an operator's pause set through one node's API was kept in that node's
/// memory: `GET /v1/pauses` on another node listed it, and that node went on delivering.
#[test]
fn a_pause_set_on_one_node_holds_on_every_node_until_resumed_there() {
    if !own_database_runs_here("a_pause_set_on_one_node_holds_on_every_node_until_resumed_there") {
        return;
    }
    let database = TestDatabase::create();
    let url = database.url();
    let port = crate::common::api::free_port();
    let node = |name: &str| file_config().set("node", &format!("name = {name:?}"));
    let a = App::joining(node("a").http_on(port), &url);
    let b = App::joining(node("b"), &url);
    let (on_a, on_b) = (a.serve(), b.serve());
    let client = reqwest::blocking::Client::new();
    let api = |path: &str| format!("http://127.0.0.1:{port}{path}");
    wait_until("node a's API", Duration::from_secs(10), || {
        client.get(api("/healthz")).send().is_ok()
    });
    let inbound = json!({"queue": "inbound"});
    let paused = client.post(api("/v1/pause")).json(&inbound).send().unwrap();
    assert_eq!(paused.status(), 200);
    // Both nodes hear of it within a read of the table (every 250 ms).
    std::thread::sleep(Duration::from_secs(1));
    let ids: Vec<i64> = (0..3)
        .map(|i| b.enqueue(&format!("s{i}"), "held by a pause set on node a"))
        .collect();
    std::thread::sleep(Duration::from_secs(2));
    for id in &ids {
        let row = b.row(relayq_engine::QueueName::Inbound, *id);
        assert_eq!(row.state, "pending", "row {id} went while paused: {row:?}");
    }
    let resumed = client
        .post(api("/v1/resume"))
        .json(&inbound)
        .send()
        .unwrap();
    assert_eq!(resumed.status(), 200);
    for id in &ids {
        b.wait_state(relayq_engine::QueueName::Inbound, *id, "delivered");
    }
    on_a.stop();
    on_b.stop();
}

/// Issue 41, item 2: with a typo anywhere in the agent host's config, `relayq hook` took the
/// database from the broken file but not `[node] name`: it recorded the agent's node as the
/// host name, which no daemon has, and the session's messages were never attempted.
#[test]
fn a_hook_under_a_broken_config_records_the_node_the_file_names() {
    if !own_database_runs_here("a_hook_under_a_broken_config_records_the_node_the_file_names") {
        return;
    }
    let database = TestDatabase::create();
    let config = format!(
        "[database]\nurl = {:?}\n\n[node]\nname = \"agent-host\"\n\n[sessions]\ndefualt_channel = \"out\"\n",
        database.url()
    );
    let app = App::joining(&config, &database.url());
    let daemon = App::joining(
        file_config().set("node", "name = \"agent-host\""),
        &database.url(),
    );
    let serving = daemon.serve();
    let mut hook = app.bare();
    hook.args(["--config", "config.toml", "hook", "--agent", "claude"])
        .env_remove("RELAYQ_SESSION")
        .env_remove("RELAYQ_NODE__NAME");
    let out = App::run_with_stdin(hook, include_str!("fixtures/claude-code/Stop.json"));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{said}");
    assert!(said.contains("config is not valid"), "{said}");
    let nodes = || -> Vec<Option<String>> { app.query("SELECT node FROM sessions", |r| r.get(0)) };
    wait_until("the event processed", WAIT, || !nodes().is_empty());
    serving.stop();
    assert_eq!(nodes(), [Some("agent-host".to_string())], "{said}");
}

/// Issue 41, item 9: a node held up after a delivery (here stopped with SIGSTOP; in the field,
/// its record waiting on a row lock) lost its run's leases to another node, and then went on
/// delivering the rest of its run beside that node: every row twice, the repeats unmarked,
/// newer rows before older ones. A node delivers only on a lease with time left and drops a
/// run whose lease it lost; the node that takes over starts at the first unrecorded row,
/// marked as a possible repeat. Checked at the sink: the deliveries, not only the rows.
#[test]
fn a_node_held_up_past_its_lease_does_not_deliver_beside_the_node_that_took_over() {
    if !own_database_runs_here(
        "a_node_held_up_past_its_lease_does_not_deliver_beside_the_node_that_took_over",
    ) {
        return;
    }
    let database = TestDatabase::create();
    let url = database.url();
    let shared = tempfile::tempdir().unwrap();
    let seen = shared.path().join("seen");
    let script = format!(
        r#"echo "$RELAYQ_ROW_ID $RELAYQ_POSSIBLE_REPEAT $NODE" >> {seen:?}
if [ "$(wc -l < {seen:?})" = 1 ]; then sleep 1; fi"#
    );
    let node = |name: &str| {
        crate::common::exec_config(&script)
            .set("node", &format!("name = {name:?}"))
            .set("queues.inbound", "lease_timeout = \"1s\"")
            .set("daemon", "sweep_interval = \"200ms\"")
            .set("channels.bridge", &format!("env = {{ NODE = {name:?} }}"))
    };
    let apps = [
        App::joining(node("n1"), &url),
        App::joining(node("n2"), &url),
    ];
    let ids: Vec<i64> = (0..6)
        .map(|i| apps[0].enqueue("s", &format!("m{i}")))
        .collect();
    let daemons = [apps[0].serve(), apps[1].serve()];
    let lines = || -> Vec<(i64, bool, String)> {
        let text = std::fs::read_to_string(&seen).unwrap_or_default();
        text.lines()
            .map(|l| {
                let mut words = l.split(' ');
                let id = words.next().unwrap().parse().unwrap();
                let repeat = words.next() == Some("1");
                (id, repeat, words.next().unwrap_or_default().to_string())
            })
            .collect()
    };
    wait_until("the first delivery", WAIT, || !lines().is_empty());
    let first = lines()[0].2.clone();
    let held = &daemons[usize::from(first == "n2")];
    held.send("STOP");
    std::thread::sleep(Duration::from_secs(3)); // its leases run out; the other node takes over
    held.send("CONT");
    for id in &ids {
        apps[0].wait_state(relayq_engine::QueueName::Inbound, *id, "delivered");
    }
    std::thread::sleep(Duration::from_secs(2)); // a node delivering on lost leases shows by now
    let [a, b] = daemons;
    a.stop();
    b.stop();
    let seen = lines();
    eprintln!("nodes: deliveries (row, possible repeat, node): {seen:?}");
    let order: Vec<i64> = seen.iter().map(|(id, _, _)| *id).collect();
    assert!(
        order.windows(2).all(|w| w[0] <= w[1]),
        "a newer row went before an older one was finished: {seen:?}"
    );
    for (i, (id, repeat, _)) in seen.iter().enumerate() {
        let before = seen[..i].iter().any(|(earlier, _, _)| earlier == id);
        assert!(
            !before || *repeat,
            "row {id} delivered again unmarked: {seen:?}"
        );
    }
    assert!(
        seen.iter().any(|(_, _, node)| *node != first),
        "the other node took over: {seen:?}"
    );
}

/// Issue 41, item 12b: SIGTERM hung on a node while other nodes wrote: the notification
/// listener looked at its stop flag only after 200 ms without a notification, and shutdown
/// waited for it.
#[test]
fn a_node_stops_at_sigterm_while_another_node_keeps_writing() {
    if !own_database_runs_here("a_node_stops_at_sigterm_while_another_node_keeps_writing") {
        return;
    }
    let database = TestDatabase::create();
    let url = database.url();
    let node = |name: &str| file_config().set("node", &format!("name = {name:?}"));
    let (a, b) = (App::joining(node("a"), &url), App::joining(node("b"), &url));
    let mut on_a = a.serve();
    let on_b = b.serve();
    let writing = Arc::new(AtomicBool::new(true));
    let writer = {
        let (writing, url) = (writing.clone(), url.clone());
        std::thread::spawn(move || {
            let mut client =
                relayq_engine::postgres::Client::connect(&url, relayq_engine::postgres::NoTls)
                    .unwrap();
            // Announcements as the trigger sends them, many a second, as busy nodes write.
            while writing.load(Ordering::SeqCst) {
                client
                    .batch_execute("NOTIFY relayq_rows, 'outbound nobody'")
                    .unwrap();
                std::thread::sleep(Duration::from_millis(5));
            }
        })
    };
    std::thread::sleep(Duration::from_secs(1));
    let asked = Instant::now();
    on_a.send("TERM");
    let mut exited = None;
    while asked.elapsed() < Duration::from_secs(15) && exited.is_none() {
        exited = on_a.child.try_wait().unwrap();
        std::thread::sleep(Duration::from_millis(50));
    }
    writing.store(false, Ordering::SeqCst);
    writer.join().unwrap();
    on_b.stop();
    let status = exited.unwrap_or_else(|| panic!("node a still running 15 s after SIGTERM"));
    assert!(status.success(), "{status}: {}", on_a.log());
    eprintln!("nodes: node a stopped {:?} after SIGTERM", asked.elapsed());
}

/// Issue 41, item 6: with `url_env = "RELAYQ_PG"`, an agent whose environment lacks the
/// variable spooled every event; the daemon then logged "recorded hook events spooled while
/// the database was locked", and the real reason was only on the hook's stderr, which the agent
/// does not show. The spool keeps why, and the daemon logs it.
#[test]
fn the_daemon_says_why_hook_events_were_spooled() {
    if !own_database_runs_here("the_daemon_says_why_hook_events_were_spooled") {
        return;
    }
    let database = TestDatabase::create();
    let config = file_config()
        .set("database", "url_env = \"RELAYQ_PG\"")
        .set("daemon", "sweep_interval = \"200ms\"");
    let app = App::sqlite(config);
    let out = app.hook(
        "claude",
        include_str!("fixtures/claude-code/Stop.json"),
        false,
        &[],
    );
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{said}");
    assert!(said.contains("RELAYQ_PG"), "the hook says why: {said}");
    let daemon = app.serve_with_env(&[("RELAYQ_PG", &database.url())]);
    wait_until(
        "the spooled event recorded and its reason logged",
        WAIT,
        || daemon.log().contains("could not record itself"),
    );
    let log = daemon.log();
    daemon.stop();
    let line = log
        .lines()
        .find(|l| l.contains("could not record itself"))
        .unwrap();
    assert!(
        line.contains("RELAYQ_PG"),
        "the log names the reason: {line}"
    );
}

/// Issue 41, item 5: after `kill -9` of the node that hosts a session's agent, a message for it
/// got "typing…" and silence; `relayq show ID` said pending with no reason and `status` did not
/// list it. The other nodes say it waits for that node, since when, in `show`, `status` and
/// (once) to the chat.
#[test]
fn a_message_for_an_agent_on_a_lost_node_tells_its_chat_why_it_waits() {
    if !own_database_runs_here("a_message_for_an_agent_on_a_lost_node_tells_its_chat_why_it_waits")
    {
        return;
    }
    let (_database, fake, apps) = two_nodes("agent-node");
    let mut agent_node = apps[0].serve_with_env(&BOT_ENV);
    let other = apps[1].serve_with_env(&BOT_ENV);
    // Alice's session's agent runs on the first node: its hook says so.
    let start = include_str!("fixtures/claude-code/SessionStart.json");
    let out = apps[0].hook("claude", start, false, &[("RELAYQ_SESSION", "alice")]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_until("the session known on its node", WAIT, || {
        apps[1].ok(&["session", "list"]).contains("agent-node")
    });
    agent_node.signal("KILL");
    fake.push_text(ALICE, ALICE, "are you there?");
    let mut told = None;
    wait_until("Alice told why her message waits", WAIT, || {
        told = fake.bot_messages().into_iter().find(|m| {
            m["text"]
                .as_str()
                .unwrap_or_default()
                .contains("waits for node agent-node")
        });
        told.is_some()
    });
    let id: i64 = apps[1]
        .query_value("SELECT MAX(id) FROM queue_rows WHERE queue = 'inbound'")
        .unwrap();
    let shown = apps[1].ok(&["show", &id.to_string()]);
    assert!(
        shown.contains("waits for node agent-node (lost since"),
        "{shown}"
    );
    let status = apps[1].ok(&["status"]);
    assert!(status.contains("waits for node agent-node"), "{status}");
    // Once: the next sweeps say nothing more.
    std::thread::sleep(Duration::from_secs(3));
    let notices = fake
        .bot_messages()
        .into_iter()
        .filter(|m| {
            m["text"]
                .as_str()
                .unwrap_or_default()
                .contains("waits for node")
        })
        .count();
    assert_eq!(notices, 1);
    other.stop();
}

/// Issue 41, item 12b: `serve` exited 1 when PostgreSQL was restarting during its start-up.
/// It waits for the database (up to a minute), as callers of the other commands retry them.
#[test]
fn serve_waits_for_a_database_that_is_restarting_at_its_start() {
    if !own_database_runs_here("serve_waits_for_a_database_that_is_restarting_at_its_start") {
        return;
    }
    let server = TestServer::start();
    let app = App::joining(
        file_config().set("node", "name = \"patient\""),
        &server.url(),
    );
    server.stop();
    let restart = std::thread::spawn({
        let server = std::sync::Arc::new(server);
        let again = server.clone();
        move || {
            std::thread::sleep(Duration::from_secs(2));
            again.start_again();
            server
        }
    });
    let daemon = app.serve();
    let _server = restart.join().unwrap();
    let id = app.enqueue("s", "after the restart");
    app.wait_state(relayq_engine::QueueName::Inbound, id, "delivered");
    assert!(
        daemon.log().contains("the database cannot be used yet"),
        "{}",
        daemon.log()
    );
    daemon.stop();
}

/// Issue 42: outbound runs held by their first row (webhook destinations: runs of up to 256
/// rows, only the row a run is at leased), on three nodes, nodes killed (`kill -9`) at random
/// and restarted while backlogs drain and new rows are written. At each destination's far end:
/// one node at a time (no send arrives while another is unanswered), every message arrives,
/// the first copies in order, and every later copy flagged `possible_repeat` with the same
/// `Idempotency-Key`; in the database, no key leased by two nodes at once.
#[test]
fn three_nodes_sending_held_runs_under_kill_9_send_each_destination_in_order_one_node_at_a_time() {
    if !own_database_runs_here("three_nodes_sending_held_runs_under_kill_9_send_each_destination_in_order_one_node_at_a_time") {
        return;
    }
    use crate::common::{Endpoint, Reply};
    const DESTINATIONS: usize = 3;
    const BACKLOG: usize = 1_000;
    const LATER: usize = 500;
    // Each send is answered after this: a send arriving sooner after another was sent beside it.
    const ANSWER: Duration = Duration::from_millis(4);
    let _one_at_a_time = CHAOS.lock().unwrap_or_else(|e| e.into_inner());
    let database = TestDatabase::create();
    let url = database.url();
    let hooks: Vec<Endpoint> = (0..DESTINATIONS)
        .map(|_| {
            Endpoint::start(|_| Reply {
                delay: ANSWER,
                ..Reply::status(200)
            })
        })
        .collect();
    let node = |name: &str| {
        let mut config = file_config()
            .set("node", &format!("name = {name:?}"))
            .set("daemon", "sweep_interval = \"500ms\"")
            .set("queues.outbound", "backoff = [\"200ms\"]")
            .set("queues.outbound", "lease_timeout = \"2s\"");
        for (d, hook) in hooks.iter().enumerate() {
            let url = format!("url = {:?}", hook.url);
            config = config.channel(&format!("w{d}"), "webhook", &[&url, "timeout = \"5s\""]);
        }
        config
    };
    let apps: Vec<App> = (0..NODES)
        .map(|n| App::joining(node(&format!("n{n}")), &url))
        .collect();
    let engine = apps[0].engine();
    let outbound = engine.queues(&Default::default()).outbound;
    let write = |from: usize, to: usize| {
        engine
            .write(|tx| {
                for i in from..to {
                    for d in 0..DESTINATIONS {
                        let text = format!("d{d} {i}");
                        let message =
                            relayq_engine::OutboundMessage::text(&format!("w{d}"), "far", &text);
                        outbound.enqueue_in(tx, &message.to_row())?;
                    }
                }
                Ok(())
            })
            .unwrap()
    };
    write(0, BACKLOG);
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = watch_leases(url.clone(), stop.clone());
    let daemons: Vec<Mutex<Option<Daemon>>> = apps
        .iter()
        .map(|app| Mutex::new(Some(app.serve())))
        .collect();
    std::thread::scope(|scope| {
        scope.spawn(|| {
            for from in (BACKLOG..BACKLOG + LATER).step_by(50) {
                std::thread::sleep(Duration::from_millis(150));
                write(from, from + 50);
            }
        });
        scope.spawn(|| {
            let mut dice = Dice::new();
            for _ in 0..8 {
                std::thread::sleep(Duration::from_millis(1_200));
                let n = dice.below(NODES);
                let mut slot = daemons[n].lock().unwrap();
                if let Some(mut daemon) = slot.take() {
                    daemon.signal("KILL");
                }
                *slot = Some(apps[n].serve());
            }
        });
    });
    let unfinished = || {
        let conn = relayq_engine::postgres::Client::connect(&url, relayq_engine::postgres::NoTls);
        let mut conn = conn.unwrap();
        let row = conn
            .query_one(
                "SELECT COUNT(*) FROM queue_rows WHERE queue = 'outbound' AND state <> 'delivered'",
                &[],
            )
            .unwrap();
        row.get::<_, i64>(0)
    };
    wait_until("every row delivered", WAIT, || unfinished() == 0);
    stop.store(true, Ordering::SeqCst);
    let two_owners = watcher.join().unwrap();
    for slot in &daemons {
        if let Some(daemon) = slot.lock().unwrap().take() {
            daemon.stop();
        }
    }
    assert!(
        two_owners.is_empty(),
        "keys leased by two nodes: {two_owners:?}"
    );
    let mut client =
        relayq_engine::postgres::Client::connect(&url, relayq_engine::postgres::NoTls).unwrap();
    let held: i64 = client
        .query_one(
            "SELECT COUNT(*) FROM queue_rows WHERE queue = 'outbound' AND run_through IS NOT NULL",
            &[],
        )
        .unwrap()
        .get(0);
    assert!(held > 0, "no run was held: the test did not test held runs");
    let mut repeats = 0;
    for (d, hook) in hooks.iter().enumerate() {
        let calls = hook.calls();
        for pair in calls.windows(2) {
            let gap = pair[1].at.duration_since(pair[0].at);
            assert!(
                gap >= ANSWER,
                "destination {d}: {:?} sent {gap:?} after {:?}, before it was answered",
                pair[1].body["text"],
                pair[0].body["text"]
            );
        }
        let mut keys = std::collections::HashSet::new();
        let mut first_copies = Vec::new();
        for call in &calls {
            let key = call.idempotency_key.clone().expect("every send has a key");
            let text = call.body["text"].as_str().unwrap_or_default().to_string();
            if keys.insert(key) {
                first_copies.push(text);
            } else {
                repeats += 1;
                assert_eq!(
                    call.body["possible_repeat"], true,
                    "destination {d}: {text} sent again unflagged"
                );
            }
        }
        let want: Vec<String> = (0..BACKLOG + LATER).map(|i| format!("d{d} {i}")).collect();
        assert!(
            first_copies == want,
            "destination {d}: the first copies are not every message in order (first difference at {:?})",
            first_copies.iter().zip(&want).position(|(a, b)| a != b)
        );
    }
    eprintln!("nodes: {held} rows held a run as it went (one per write of its answers), {repeats} flagged repeats");
}

/// A file `relayq send` wrote down on one node is on that node's disk: only that node sends it,
/// once; while that node is down the file waits for it (and `status` says so), never sent by
/// another node that cannot read it.
#[test]
fn a_file_to_send_is_sent_once_by_the_node_whose_disk_holds_it() {
    if !own_database_runs_here("a_file_to_send_is_sent_once_by_the_node_whose_disk_holds_it") {
        return;
    }
    let (_database, fake, apps) = two_nodes("files-node");
    let env = BOT_ENV;
    let mut files_node = apps[0].serve_with_env(&env);
    let other = apps[1].serve_with_env(&env);
    // Alice's session works in the first node's directory, and talks to her chat.
    let dir = apps[0].dir.path().display().to_string();
    let start = json!({"hook_event_name": "SessionStart", "session_id": "native-alice",
                       "cwd": dir, "source": "startup"});
    let out = apps[0].hook(
        "claude",
        &start.to_string(),
        false,
        &[("RELAYQ_SESSION", "alice")],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    fake.push_text(ALICE, ALICE, "send me the logs");
    wait_until("Alice's session has her chat", WAIT, || {
        apps[1]
            .ok(&["session", "list", "--json"])
            .contains("\"chat\":\"123456789\"")
    });
    std::fs::write(apps[0].path("one.log"), "the first log\n").unwrap();
    std::fs::write(apps[0].path("two.log"), "the second log\n").unwrap();
    apps[0].ok(&["send", "--session", "alice", "one.log"]);
    wait_until("the first file sent", WAIT, || fake.files_sent().len() == 1);
    // And its send recorded: a kill before the record would leave that row, not the next, to
    // wait for the killed node.
    wait_until("the first file's send recorded", WAIT, || {
        apps[1].query_value::<i64>(
            "SELECT COUNT(*) FROM queue_rows WHERE queue = 'outbound' AND state IN ('pending', 'leased')",
        ) == Some(0)
    });

    // Its node down, a file written down there waits for it: the other node does not send it.
    files_node.signal("KILL");
    let id = apps[0].ok(&["send", "--session", "alice", "two.log"]);
    // Once the killed node's leases lapse, the other node takes the row and leaves it.
    let error = format!(
        "SELECT COALESCE(last_error, '') FROM queue_rows WHERE id = {}",
        id.trim()
    );
    wait_until("the other node leaves the file to its node", WAIT, || {
        apps[1]
            .query_value::<String>(&error)
            .is_some_and(|e| e.contains("the file is on node files-node, which sends it"))
    });
    assert_eq!(
        fake.files_sent().len(),
        1,
        "not sent by a node without the file"
    );
    files_node = apps[0].serve_with_env(&env);
    wait_until("the second file sent by its node", WAIT, || {
        fake.files_sent().len() == 2
    });
    std::thread::sleep(Duration::from_secs(2));
    let names: Vec<String> = fake.files_sent().into_iter().map(|f| f.filename).collect();
    assert_eq!(names, ["one.log", "two.log"], "each once, in order");

    // Its node stopped: the file's row ends, saying why, and the chat's later messages are
    // not held behind it.
    files_node.stop();
    std::fs::write(apps[0].path("three.log"), "the third log\n").unwrap();
    let id = apps[0].ok(&["send", "--session", "alice", "three.log"]);
    let error = format!(
        "SELECT COALESCE(last_error, '') FROM queue_rows WHERE id = {}",
        id.trim()
    );
    wait_until("the file's row ended", WAIT, || {
        apps[1]
            .query_value::<String>(&error)
            .is_some_and(|e| e.contains("which is not running: not sent"))
    });
    let shown = apps[1].ok(&["show", id.trim()]);
    assert!(shown.contains("dead"), "{shown}");
    let alice = ALICE.to_string();
    apps[1].ok(&[
        "enqueue",
        "outbound",
        "--channel",
        "bot",
        "--to",
        &alice,
        "after the file",
    ]);
    wait_until("a later message not held behind it", WAIT, || {
        fake.texts_to(ALICE).iter().any(|t| t == "after the file")
    });
    assert_eq!(fake.files_sent().len(), 2);
    other.stop();
}

/// On PostgreSQL one node holds Discord's gateway, as one polls Telegram: two nodes, one
/// connection. A person paired on one node's database is taken by whichever node reads. The
/// holder killed (`kill -9`), the other takes the source over and resumes the stored gateway
/// session (no second IDENTIFY): the messages keep coming, each once.
#[test]
fn one_node_holds_the_discord_gateway_and_the_other_resumes_it_when_it_dies() {
    use relayq_actors::sources::discord::fake::FakeDiscord;
    if !own_database_runs_here(
        "one_node_holds_the_discord_gateway_and_the_other_resumes_it_when_it_dies",
    ) {
        return;
    }
    const DISCORD_TOKEN: &str = "MTMwMDAwMDAwMDAwMDAwMDk5OQ.GfakeE.nodes-discord";
    const CHANNEL: &str = "1300000000000000100";
    const ALICE_ID: &str = "1300000000000000001";
    const BOB_ID: &str = "1300000000000000002";
    let database = TestDatabase::create();
    let url = database.url();
    let fake = FakeDiscord::start(DISCORD_TOKEN);
    let config = |name: &str| {
        file_config()
            .set("node", &format!("name = {name:?}"))
            .table(
                "sources.discord",
                &[
                    "kind = \"discord\"".to_string(),
                    format!("token = {DISCORD_TOKEN:?}"),
                    format!("api_url = {:?}", fake.api_url),
                    format!("allowed_users = [\"{ALICE_ID}\"]"),
                    "session_template = \"d{channel}\"".to_string(),
                    format!("chats = {{ \"{CHANNEL}\" = \"alice\" }}"),
                ],
            )
    };
    let apps = [
        App::joining(config("gw-a"), &url),
        App::joining(config("gw-b"), &url),
    ];
    let mut daemons = [apps[0].serve(), apps[1].serve()];
    let delivered = || -> Vec<String> {
        let mut lines = Vec::new();
        for app in &apps {
            lines.extend(app.lines("out.jsonl"));
        }
        crate::common::by_session(&lines)
            .remove("alice")
            .unwrap_or_default()
    };
    let mut n = 0u64;
    let mut say = |user: &str, text: &str| {
        n += 1;
        let id = (1_350_000_000_000_000_000 + n).to_string();
        fake.push_message(CHANNEL, user, &id, text);
    };
    wait_until("a gateway session", WAIT, || fake.connected());
    for i in 1..=3 {
        say(ALICE_ID, &format!("m{i}"));
    }
    wait_until("three delivered", WAIT, || delivered().len() >= 3);
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(fake.open_connections(), 1, "one node holds the gateway");
    assert_eq!(fake.identifies(), 1);

    // Bob pairs; the operator approves on the other node's config: the row is everyone's.
    say(BOB_ID, "/pair");
    let mut code = None;
    wait_until("Bob's code", WAIT, || {
        code = fake.bot_messages().iter().find_map(|m| {
            let text = m["content"].as_str()?;
            let at = text.find("pairing code: ")? + "pairing code: ".len();
            Some(text.get(at..at + 6)?.to_string())
        });
        code.is_some()
    });
    let code = code.unwrap();
    apps[1].ok(&["users", "approve", &code]);
    assert!(
        apps[0].ok(&["users", "list"]).contains(BOB_ID),
        "shared by the nodes"
    );
    say(BOB_ID, "from bob");
    wait_until("Bob's message delivered", WAIT, || {
        let mut lines = Vec::new();
        for app in &apps {
            lines.extend(app.lines("out.jsonl"));
        }
        lines.iter().any(|l| l.to_string().contains("from bob"))
    });

    // The holder dies: the other node takes the source over, and resumes.
    let holder = daemons
        .iter()
        .position(|d| d.log().contains("Discord gateway connected"))
        .expect("a node connected");
    daemons[holder].signal("KILL");
    for i in 4..=6 {
        say(ALICE_ID, &format!("m{i}"));
    }
    wait_until("six delivered", WAIT, || delivered().len() >= 6);
    std::thread::sleep(Duration::from_secs(1));
    let got = delivered();
    for i in 1..=6 {
        let count = got.iter().filter(|t| **t == format!("m{i}")).count();
        assert!(count >= 1, "m{i} delivered: {got:?}");
    }
    assert_eq!(
        apps[0].inbound_rows(),
        7,
        "each message one row (Bob's included)"
    );
    assert_eq!(fake.identifies(), 1, "the other node resumed the session");
    assert!(fake.resumes() >= 1);
    let other = 1 - holder;
    assert!(
        daemons[other].log().contains("Discord gateway connected"),
        "{}",
        daemons[other].log()
    );
    let [first, second] = daemons;
    match other {
        0 => first.stop(),
        _ => second.stop(),
    }
}
