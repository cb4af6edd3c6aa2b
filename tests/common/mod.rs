//! Helpers for tests that run the built `relayq` binary: a fresh directory with a config file
//! and a database, and a `serve` process that is waited for and stopped.

pub mod api;
pub mod fake_model;

use std::io::Write;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use relayq_engine::storage::postgresql::test_server::{TestDatabase, TestServer};
use relayq_engine::storage::sql::{Column, Query, Row, Sql};
use relayq_engine::storage::test_db;
use relayq_engine::{DbConfig, Engine, QueuePolicy};

/// The binary under test: the one cargo built, or `$RELAYQ_TEST_BIN` (to run a regression test
/// against an older build and see it fail).
pub fn bin() -> String {
    std::env::var("RELAYQ_TEST_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_relayq").into())
}

/// Whether a test that brings its own PostgreSQL database (several nodes on one server), and so
/// does not change with the suite's backend, runs in this pass: in the SQLite pass only, as
/// `.ci/run` runs the suite once per backend; the PostgreSQL pass says it left it there.
pub fn own_database_runs_here(test: &str) -> bool {
    let here = !test_db::postgres_chosen();
    if !here {
        eprintln!("{test}: runs in the SQLite pass (it brings its own PostgreSQL database)");
    }
    here
}

/// The Telegram user the tests' bots take messages from.
pub const ALICE: i64 = 123456789;

/// A working directory with `config.toml` and `relayq.db`; with
/// `RELAYQ_TEST_DATABASE=postgresql`, a PostgreSQL database of its own that every command uses
/// instead of the file (`RELAYQ_DATABASE__URL`).
pub struct App {
    pub dir: tempfile::TempDir,
    database: Backing,
}

/// Where an app's data is, besides its directory.
enum Backing {
    /// relayq.db in the directory.
    File,
    /// A database of its own on the server the test process shares.
    Database(TestDatabase),
    /// A server of its own (for a test that stops it).
    Server(TestServer),
    /// A database another app owns (several daemons' apps on one server).
    Joined(String),
}

impl App {
    /// A directory whose config is `config` (written to config.toml).
    pub fn new(config: impl std::fmt::Display) -> App {
        match test_db::postgres_chosen() {
            true => App::on(config, Backing::Database(TestDatabase::create())),
            false => App::on(config, Backing::File),
        }
    }

    /// A directory with `config`, its data where `database` says.
    fn on(config: impl std::fmt::Display, database: Backing) -> App {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("config.toml"), config.to_string()).unwrap();
        App { dir, database }
    }

    /// [`App::new`] on the PostgreSQL database at `url`, which other apps share: one daemon
    /// of several (a node).
    pub fn joining(config: impl std::fmt::Display, url: &str) -> App {
        App::on(config, Backing::Joined(url.to_string()))
    }

    /// [`App::new`] on the SQLite file, whichever backend the suite runs on: for what only a
    /// file has (where commands find it, its locks, its path in messages).
    pub fn sqlite(config: impl std::fmt::Display) -> App {
        App::on(config, Backing::File)
    }

    /// Holds the database's write lock from another connection until the answer is dropped:
    /// SQLite's `BEGIN IMMEDIATE`; on PostgreSQL, the tables rows and offsets are written to
    /// locked against writes (`LOCK TABLE ... IN EXCLUSIVE MODE`).
    pub fn hold_writes(&self) -> HeldWrites {
        match self.database_url() {
            None => {
                let conn = relayq_engine::rusqlite::Connection::open(self.db()).unwrap();
                conn.execute_batch("BEGIN IMMEDIATE").unwrap();
                HeldWrites::Sqlite(conn)
            }
            Some(url) => {
                let mut client =
                    relayq_engine::postgres::Client::connect(&url, relayq_engine::postgres::NoTls)
                        .unwrap();
                client
                    .batch_execute(
                        "BEGIN; LOCK TABLE queue_rows, source_offsets, sessions IN EXCLUSIVE MODE",
                    )
                    .unwrap();
                HeldWrites::Postgres(client)
            }
        }
    }

    /// [`App::new`] on a PostgreSQL server of its own, whichever backend the suite runs on.
    pub fn with_postgres(config: impl std::fmt::Display) -> App {
        App::on(config, Backing::Server(TestServer::start()))
    }

    /// The app's PostgreSQL server, if it has one of its own ([`App::with_postgres`]).
    pub fn postgres(&self) -> Option<&TestServer> {
        match &self.database {
            Backing::Server(server) => Some(server),
            _ => None,
        }
    }

    /// The PostgreSQL URL every command uses, when the suite runs on PostgreSQL.
    pub fn database_url(&self) -> Option<String> {
        match &self.database {
            Backing::File => None,
            Backing::Database(database) => Some(database.url()),
            Backing::Server(server) => Some(server.url()),
            Backing::Joined(url) => Some(url.clone()),
        }
    }

    /// Replaces config.toml (for a reload, or the next command).
    pub fn write_config(&self, config: impl std::fmt::Display) {
        std::fs::write(self.path("config.toml"), config.to_string()).unwrap();
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub fn db(&self) -> PathBuf {
        self.path("relayq.db")
    }

    /// `relayq` in the directory, with no arguments yet. The per-user locations (state and
    /// config) are inside the directory and `RELAYQ_DB`/`RELAYQ_CONFIG` are unset, so a test
    /// never reads or writes the user's own.
    pub fn bare(&self) -> Command {
        let mut c = Command::new(bin());
        c.current_dir(self.dir.path())
            .env("XDG_STATE_HOME", self.path("xdg-state"))
            .env("XDG_CONFIG_HOME", self.path("xdg-config"))
            .env_remove("RELAYQ_DB")
            .env_remove("RELAYQ_CONFIG")
            // A test run inside tmux must not make hooks find the tester's own pane.
            .env_remove("TMUX")
            .env_remove("TMUX_PANE");
        // Settings from the environment (RELAYQ_SECTION__KEY) would change what is tested.
        for (var, _) in
            std::env::vars().filter(|(v, _)| v.starts_with("RELAYQ_") && v.contains("__"))
        {
            c.env_remove(var);
        }
        if let Some(url) = self.database_url() {
            c.env("RELAYQ_DATABASE__URL", url);
        }
        c
    }

    /// Runs `relayq ARGS` in the directory, with `--config` and `--db` set.
    pub fn cmd(&self, args: &[&str]) -> Command {
        let mut c = self.bare();
        c.arg("--config")
            .arg(self.path("config.toml"))
            .arg("--db")
            .arg(self.db())
            .args(args);
        c
    }

    pub fn run(&self, args: &[&str]) -> Output {
        self.cmd(args).stdin(Stdio::null()).output().unwrap()
    }

    /// Runs and expects success; returns stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "relayq {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    pub fn enqueue(&self, session: &str, text: &str) -> i64 {
        self.ok(&[
            "enqueue",
            "inbound",
            "--session",
            session,
            "--origin",
            "test",
            text,
        ])
        .trim()
        .parse()
        .unwrap()
    }

    /// Starts `relayq serve` and waits until it listens for wake-ups.
    pub fn serve(&self) -> Daemon {
        self.serve_with_env(&[])
    }

    /// `serve`, with these environment variables set.
    pub fn serve_with_env(&self, env: &[(&str, &str)]) -> Daemon {
        let mut serve = self.cmd(&["serve"]);
        serve.envs(env.iter().copied());
        self.spawn_serve(serve, &self.db())
    }

    /// Runs `serve`, a command made by [`App::bare`] or [`App::cmd`], logging to serve.log, and
    /// waits until it listens for wake-ups beside `db`.
    pub fn spawn_serve(&self, mut serve: Command, db: &std::path::Path) -> Daemon {
        let log = std::fs::File::create(self.path("serve.log")).unwrap();
        let child = serve
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        let mut daemon = Daemon {
            child,
            log: self.path("serve.log"),
        };
        let socket = relayq_actors::wake::socket_path(db);
        // The wake socket comes before the HTTP API: a test that posts at once waits for both.
        let api = self.http_listen();
        wait_until("serve to start", Duration::from_secs(20), || {
            if let Ok(Some(status)) = daemon.child.try_wait() {
                panic!("serve exited early with {status}: {}", daemon.log());
            }
            socket.exists() && api.is_none_or(|at| std::net::TcpStream::connect(at).is_ok())
        });
        daemon
    }

    /// Where config.toml has the HTTP API listen, when it is on.
    fn http_listen(&self) -> Option<std::net::SocketAddr> {
        let config = std::fs::read_to_string(self.path("config.toml")).ok()?;
        let config: toml::Table = toml::from_str(&config).ok()?;
        let http = config.get("http")?.as_table()?;
        match http.get("enabled")?.as_bool()? {
            true => http.get("listen")?.as_str()?.parse().ok(),
            false => None,
        }
    }

    /// Runs `relayq hook --agent AGENT`, the payload on stdin or, when `as_arg`, as the last argument.
    pub fn hook(&self, agent: &str, payload: &str, as_arg: bool, env: &[(&str, &str)]) -> Output {
        self.spawn_hook(agent, payload, as_arg, env)
            .wait_with_output()
            .unwrap()
    }

    /// `relayq hook --agent AGENT` for this directory's config and database, as an agent's
    /// hook settings run it: the argument list.
    pub fn hook_argv(&self, agent: &str) -> Vec<String> {
        self.argv(&["hook", "--agent", agent])
    }

    /// relayq with `args`, for this directory's config and database: the argument list
    /// (through `env`, with the database's URL, when the suite runs on PostgreSQL).
    pub fn argv(&self, args: &[&str]) -> Vec<String> {
        let config = self.path("config.toml").display().to_string();
        let db = self.db().display().to_string();
        let url = self
            .database_url()
            .map(|url| format!("RELAYQ_DATABASE__URL={url}"));
        let through_env = url.map(|url| ["env".to_string(), url]);
        through_env
            .into_iter()
            .flatten()
            .chain([bin(), "--config".into(), config, "--db".into(), db])
            .chain(args.iter().map(|a| a.to_string()))
            .collect()
    }

    /// [`hook_argv`](Self::hook_argv) as one shell command line.
    pub fn hook_command(&self, agent: &str) -> String {
        let words: Vec<String> = self
            .hook_argv(agent)
            .iter()
            .map(|w| shell_word(w))
            .collect();
        words.join(" ")
    }

    /// `command` (a hook made by the test) run with `payload` on its stdin.
    pub fn run_with_stdin(mut command: Command, payload: &str) -> Output {
        let mut child = spawn_piped(&mut command);
        let _ = child.stdin.take().unwrap().write_all(payload.as_bytes());
        child.wait_with_output().unwrap()
    }

    /// `hook`, without waiting for it to finish.
    pub fn spawn_hook(
        &self,
        agent: &str,
        payload: &str,
        as_arg: bool,
        env: &[(&str, &str)],
    ) -> Child {
        let mut cmd = self.cmd(&["hook", "--agent", agent]);
        if as_arg {
            cmd.arg(payload);
        }
        cmd.env_remove("RELAYQ_SESSION").envs(env.iter().copied());
        let mut child = spawn_piped(&mut cmd);
        let mut stdin = child.stdin.take().unwrap();
        if !as_arg {
            // A receiver that refuses its arguments exits without reading: a broken pipe here.
            let _ = stdin.write_all(payload.as_bytes());
        }
        child
    }

    /// The engine on the same database, to look at rows directly.
    pub fn engine(&self) -> Engine {
        let mut config = DbConfig::new(self.db());
        config.url = self.database_url();
        Engine::open(&config).unwrap()
    }

    /// Leaves `session`'s next inbound row (`id`) as `kill -9` leaves it between its
    /// send-started mark and its paste: leased by an owner that is gone, marked, never pasted.
    pub fn cut_before_its_paste(&self, session: &str, id: i64) {
        let engine = self.engine();
        let inbound = engine.queues(&Default::default()).inbound;
        let lease = inbound
            .lease_next(session)
            .unwrap()
            .expect("the row leased");
        assert_eq!(lease.id, id, "the session's next row");
        let marked = engine.write(|tx| inbound.mark_send_started_in(tx, &lease));
        assert!(marked.unwrap(), "row {id} marked send started");
    }

    /// Every row `sql` returns (a text both dialects read alike), each read by `read`.
    pub fn query<T>(
        &self,
        sql: &str,
        read: impl FnMut(&Row<'_>) -> relayq_engine::Result<T>,
    ) -> Vec<T> {
        let sql = Sql::same(Box::leak(sql.to_string().into_boxed_str()));
        let conn = self.engine().database().read().unwrap();
        conn.query_all(&sql, relayq_engine::params![], read)
            .unwrap_or_else(|e| panic!("{}: {e}", sql.sqlite))
    }

    /// The first column of the first row `sql` returns, if any.
    pub fn query_value<T: Column>(&self, sql: &str) -> Option<T> {
        self.query(sql, |r| r.get(0)).into_iter().next()
    }

    /// Row `id` of `queue` as it is now.
    pub fn row(&self, queue: relayq_engine::QueueName, id: i64) -> relayq_engine::RowState {
        let policies = relayq_engine::QueuePolicies::default();
        let queues = self.engine().queues(&policies);
        let q = match queue {
            relayq_engine::QueueName::Inbound => queues.inbound,
            relayq_engine::QueueName::Hooks => queues.hooks,
            relayq_engine::QueueName::Outbound => queues.outbound,
        };
        q.state_of(id)
            .unwrap()
            .unwrap_or_else(|| panic!("no row {id} in {queue}"))
    }

    /// Waits (up to 20 s) until row `id` of `queue` is in `state`; returns the row.
    pub fn wait_state(
        &self,
        queue: relayq_engine::QueueName,
        id: i64,
        state: &str,
    ) -> relayq_engine::RowState {
        wait_until(
            &format!("row {id} {state}"),
            Duration::from_secs(20),
            || self.row(queue, id).state == state,
        );
        self.row(queue, id)
    }

    pub fn inbound(&self) -> relayq_engine::Queue {
        self.engine()
            .queue(relayq_engine::QueueName::Inbound, QueuePolicy::inbound())
    }

    /// JSON lines of a file (empty if the file does not exist yet).
    pub fn lines(&self, name: &str) -> Vec<serde_json::Value> {
        std::fs::read_to_string(self.path(name))
            .unwrap_or_default()
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad line {l:?}: {e}")))
            .collect()
    }

    /// Inbound rows in any state, read from the database.
    pub fn inbound_rows(&self) -> i64 {
        let counts = self.engine().counts().unwrap();
        counts
            .iter()
            .filter(|c| c.queue == "inbound")
            .map(|c| c.count)
            .sum()
    }

    /// `status --json` counts for a state of the inbound queue.
    pub fn count(&self, state: &str) -> i64 {
        let status: serde_json::Value =
            serde_json::from_str(&self.ok(&["status", "--json"])).unwrap();
        status["counts"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["queue"] == "inbound" && c["state"] == state)
            .map(|c| c["count"].as_i64().unwrap())
            .sum()
    }
}

pub struct Daemon {
    pub child: Child,
    log: PathBuf,
}

impl Daemon {
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Sends `signal` (e.g. "HUP") and returns at once.
    pub fn send(&self, signal: &str) {
        let ok = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.child.id().to_string())
            .status()
            .unwrap();
        assert!(ok.success());
    }

    /// Sends `signal` (e.g. "TERM") and waits for the exit status.
    pub fn signal(&mut self, signal: &str) -> std::process::ExitStatus {
        self.send(signal);
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "serve did not exit: {}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    pub fn stop(mut self) {
        let status = self.signal("TERM");
        assert!(
            status.success(),
            "serve exited with {status}: {}",
            self.log()
        );
    }
}

/// The write lock [`App::hold_writes`] holds; rolled back when dropped.
pub enum HeldWrites {
    Sqlite(relayq_engine::rusqlite::Connection),
    Postgres(relayq_engine::postgres::Client),
}

impl Drop for HeldWrites {
    fn drop(&mut self) {
        match self {
            HeldWrites::Sqlite(conn) => conn.execute_batch("ROLLBACK").unwrap(),
            HeldWrites::Postgres(client) => client.batch_execute("ROLLBACK").unwrap(),
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            // What the daemon said, beside the failed test's own message.
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(40).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            eprintln!("--- the daemon's last log lines ---\n{}", tail.join("\n"));
        }
    }
}

/// `relayq enqueue inbound --session SESSION --origin ORIGIN`, then `rest`.
pub fn inbound_args<'a>(session: &'a str, origin: &'a str, rest: &[&'a str]) -> Vec<&'a str> {
    let head = [
        "enqueue",
        "inbound",
        "--session",
        session,
        "--origin",
        origin,
    ];
    [&head[..], rest].concat()
}

/// `relayq enqueue outbound --channel CHANNEL --to TO`, then `rest`.
pub fn outbound_args<'a>(channel: &'a str, to: &'a str, rest: &[&'a str]) -> Vec<&'a str> {
    let head = ["enqueue", "outbound", "--channel", channel, "--to", to];
    [&head[..], rest].concat()
}

/// `command` started with its three streams piped.
pub fn spawn_piped(command: &mut Command) -> Child {
    command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

pub fn wait_until(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(
            start.elapsed() < limit,
            "timed out after {limit:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Exit 2, and `needle` in stderr, which is one line when it is relayq's own error: how every
/// refusal of bad input looks. Returns stderr.
pub fn assert_usage_error(out: &Output, needle: &str) -> String {
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(2), "exit code for: {err}");
    assert!(err.contains(needle), "expected {needle:?} in: {err}");
    if err.starts_with("relayq: error:") {
        assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    }
    err
}

/// A `config.toml` for a test, built table by table. `set` puts a `key = value` line in a
/// table, replacing the line of the same key, so a test states only what it changes:
/// `file_config().set("queues.inbound", "max_age = \"1s\"")`.
#[derive(Debug, Clone, Default)]
pub struct Config {
    tables: Vec<(String, Vec<String>)>,
}

impl Config {
    pub fn set(mut self, table: &str, line: &str) -> Self {
        let key = |l: &str| l.split('=').next().unwrap_or_default().trim().to_string();
        let lines = match self.tables.iter_mut().find(|(t, _)| t == table) {
            Some((_, lines)) => lines,
            None => {
                self.tables.push((table.to_string(), Vec::new()));
                &mut self.tables.last_mut().unwrap().1
            }
        };
        lines.retain(|l| key(l) != key(line));
        lines.push(line.to_string());
        self
    }

    /// `[sources.bot]` for Alice (`ALICE`) alone, her chat feeding session `alice`, the bot's
    /// token read from `$BOT_TOKEN`, the Bot API at `api_url`.
    pub fn alice_bot(self, api_url: &str) -> Self {
        let token = "token_env = \"BOT_TOKEN\"";
        self.telegram_source(api_url, token, &[ALICE], &[(ALICE, "alice")], &[])
    }

    /// No sweeps: what happens must happen by wake-up or on the delivery path, not by polling.
    /// `[sources.bot]`: a Telegram source polling the Bot API at `api_url` every second with
    /// `token_line` (`token = ...` or `token_env = ...`), taking the messages of `users`, each
    /// chat of `chats` feeding its session; `more` lines after.
    pub fn telegram_source(
        self,
        api_url: &str,
        token_line: &str,
        users: &[i64],
        chats: &[(i64, &str)],
        more: &[&str],
    ) -> Self {
        let users: Vec<String> = users.iter().map(i64::to_string).collect();
        let chats: Vec<String> = chats
            .iter()
            .map(|(c, s)| format!("\"{c}\" = \"{s}\""))
            .collect();
        let lines = [
            "kind = \"telegram\"".to_string(),
            token_line.to_string(),
            format!("api_url = {api_url:?}"),
            format!("allowed_users = [{}]", users.join(", ")),
            format!("chats = {{ {} }}", chats.join(", ")),
            "poll_timeout = \"1s\"".to_string(),
        ];
        let lines: Vec<&str> = lines
            .iter()
            .map(String::as_str)
            .chain(more.iter().copied())
            .collect();
        self.table("sources.bot", &lines)
    }

    /// The HTTP API on, at 127.0.0.1:`port`.
    pub fn http_on(self, port: u16) -> Self {
        self.set("http", "enabled = true")
            .set("http", &format!("listen = \"127.0.0.1:{port}\""))
    }

    pub fn no_sweep(self) -> Self {
        self.set("daemon", "sweep_interval = \"1h\"")
    }

    /// `lines` in `table`.
    pub fn table(mut self, table: &str, lines: &[impl AsRef<str>]) -> Self {
        for line in lines {
            self = self.set(table, line.as_ref());
        }
        self
    }

    /// A channel `name` of `kind`, with `lines` for its table.
    pub fn channel(mut self, name: &str, kind: &str, lines: &[&str]) -> Self {
        let table = format!("channels.{name}");
        self = self.set(&table, &format!("kind = {kind:?}"));
        for line in lines {
            self = self.set(&table, line);
        }
        self
    }

    /// Sessions go to channel `name`.
    pub fn default_channel(self, name: &str) -> Self {
        self.set("sessions", &format!("default_channel = {name:?}"))
    }
}

impl std::fmt::Display for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (table, lines) in &self.tables {
            writeln!(f, "[{table}]")?;
            for line in lines {
                writeln!(f, "{line}")?;
            }
            writeln!(f)?;
        }
        Ok(())
    }
}

/// One file channel `out` writing `out.jsonl` for every session, a 100 ms backoff, and no
/// sweep (so rows from other processes must arrive by wake-up, not by polling).
pub fn file_config() -> Config {
    Config::default()
        .no_sweep()
        .set("daemon", "shutdown_grace = \"5s\"")
        .set("queues.inbound", "backoff = [\"100ms\"]")
        .default_channel("out")
        .channel("out", "file", &["path = \"out.jsonl\""])
}

/// A shell script for an exec channel that appends the delivery as one line to `out.jsonl`
/// (one write, so a kill never tears it).
pub const APPEND_LINE: &str = r#"line=$(cat); printf '%s\n' "$line" >> out.jsonl"#;

/// Every session to the exec channel `bridge` running `sh -c SCRIPT`, with a 100 ms backoff.
pub fn exec_config(script: &str) -> Config {
    Config::default()
        .set("queues.inbound", "backoff = [\"100ms\"]")
        .default_channel("bridge")
        .channel(
            "bridge",
            "exec",
            &[&format!("command = [\"sh\", \"-c\", {script:?}]")],
        )
}

/// The webhook channel `hook` to `url`, quick outbound retries, and no sweep.
pub fn webhook_config(url: &str) -> Config {
    Config::default()
        .no_sweep()
        .set("queues.outbound", "backoff = [\"200ms\"]")
        .channel(
            "hook",
            "webhook",
            &[&format!("url = {url:?}"), "timeout = \"5s\""],
        )
}

/// The contents of each session's deliveries, in the order they were written.
pub fn by_session(lines: &[serde_json::Value]) -> std::collections::BTreeMap<String, Vec<String>> {
    let mut map = std::collections::BTreeMap::<String, Vec<String>>::new();
    for l in lines {
        map.entry(l["session"].as_str().unwrap().to_string())
            .or_default()
            .push(l["content"].as_str().unwrap().to_string());
    }
    map
}

/// One request a test endpoint received.
#[derive(Debug, Clone)]
pub struct Call {
    pub at: Instant,
    pub method: String,
    /// Path and query, as requested.
    pub url: String,
    pub idempotency_key: Option<String>,
    pub body: serde_json::Value,
}

/// How the endpoint answers one call: status, extra headers, body, and a delay before answering.
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(&'static str, String)>,
    pub body: String,
    pub delay: Duration,
}

impl Reply {
    pub fn status(status: u16) -> Reply {
        Reply {
            status,
            headers: vec![],
            body: String::new(),
            delay: Duration::ZERO,
        }
    }
}

/// An HTTP server on loopback answering each call (numbered from 0) by a script, as a webhook
/// receiver or a platform API would. Each call is answered on its own thread, so a slow answer
/// does not hold up the next call.
pub struct Endpoint {
    pub url: String,
    calls: std::sync::Arc<std::sync::Mutex<Vec<Call>>>,
    /// Stops serving when the endpoint is dropped.
    _server: relayq_actors::testing::loopback::Loopback,
}

impl Endpoint {
    pub fn start(script: impl Fn(usize) -> Reply + Send + Sync + 'static) -> Endpoint {
        Endpoint::start_on(0, script)
    }

    /// `start` on a given port of 127.0.0.1 (0: any free one).
    pub fn start_on(
        port: u16,
        script: impl Fn(usize) -> Reply + Send + Sync + 'static,
    ) -> Endpoint {
        Endpoint::start_with(port, move |calls| script(calls.len() - 1))
    }

    /// An endpoint whose script sees every call so far, the one to answer last: a platform
    /// that answers by what it was sent (a message looked up, a nonce seen before).
    pub fn start_with(
        port: u16,
        script: impl Fn(&[Call]) -> Reply + Send + Sync + 'static,
    ) -> Endpoint {
        use relayq_actors::testing::loopback::{Answer, Loopback};
        use std::sync::{Arc, Mutex};
        let calls: Arc<Mutex<Vec<Call>>> = Arc::default();
        let log = calls.clone();
        let server = Loopback::start(port, move |asked| {
            let reply = {
                let mut calls = log.lock().unwrap();
                calls.push(Call {
                    at: Instant::now(),
                    method: asked.method.clone(),
                    url: asked.url.clone(),
                    idempotency_key: asked.header("Idempotency-Key").map(str::to_string),
                    body: serde_json::from_slice(&asked.body).unwrap_or(serde_json::Value::Null),
                });
                script(&calls)
            };
            // Each call is answered on a thread of its own: a slow answer holds up no call.
            std::thread::sleep(reply.delay);
            let mut answer = Answer::new(reply.status, reply.body);
            for (name, value) in reply.headers {
                answer = answer.header(name, &value);
            }
            answer
        });
        Endpoint {
            url: format!("{}/hook", server.url()),
            calls,
            _server: server,
        }
    }

    pub fn calls(&self) -> Vec<Call> {
        self.calls.lock().unwrap().clone()
    }

    /// The `text` of each call's JSON body, after the first `skip` calls.
    pub fn texts(&self, skip: usize) -> Vec<serde_json::Value> {
        let calls = self.calls();
        calls
            .iter()
            .skip(skip)
            .map(|c| c.body["text"].clone())
            .collect()
    }
}

/// A webhook receiver that refuses every call (404, a permanent failure) until opened: rows
/// sent while it is shut die, rows sent while it is open are delivered.
pub struct Gate {
    pub hook: Endpoint,
    open: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Gate {
    pub fn shut() -> Gate {
        let open = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let seen = open.clone();
        let hook = Endpoint::start(
            move |_| match seen.load(std::sync::atomic::Ordering::SeqCst) {
                true => Reply::status(200),
                false => Reply::status(404),
            },
        );
        Gate { hook, open }
    }

    pub fn set_open(&self, open: bool) {
        self.open.store(open, std::sync::atomic::Ordering::SeqCst);
    }

    /// Waits for `ids` of the outbound queue to be delivered and checks that the receiver got
    /// `texts` in that order, after its first `skip` calls.
    pub fn assert_delivered_in_order(&self, app: &App, ids: &[i64], skip: usize, texts: &[&str]) {
        for id in ids {
            app.wait_state(relayq_engine::QueueName::Outbound, *id, "delivered");
        }
        assert_eq!(
            self.hook.texts(skip),
            texts,
            "replayed in their original order"
        );
    }

    /// Makes a dead row that a later row to its destination overtook: `early` dies while the
    /// gate is shut, `late` is delivered once it is open. Returns `early`'s id; the gate is
    /// left open.
    pub fn overtaken_dead_row(&self, app: &App, send: impl Fn(&str) -> i64) -> i64 {
        self.set_open(false);
        let early = send("early");
        app.wait_state(relayq_engine::QueueName::Outbound, early, "dead");
        self.set_open(true);
        let late = send("late");
        app.wait_state(relayq_engine::QueueName::Outbound, late, "delivered");
        early
    }
}

/// `s` as one shell word (single-quoted).
pub fn shell_word(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// A private tmux server for one test, killed when dropped.
pub struct Tmux {
    pub socket: String,
}

impl Tmux {
    pub fn new(name: &str) -> Tmux {
        Tmux {
            socket: format!("relayq-{name}-{}", std::process::id()),
        }
    }

    pub fn run(&self, args: &[&str]) -> Output {
        Command::new("tmux")
            .args(["-L", &self.socket])
            .args(args)
            .output()
            .expect("tmux is installed")
    }

    /// Starts session `name` running `sh -c script`, 200 columns wide.
    pub fn start(&self, name: &str, script: &str) {
        let out = self.run(&[
            "new-session",
            "-d",
            "-s",
            name,
            "-x",
            "200",
            "-y",
            "20",
            "sh",
            "-c",
            script,
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// What session `name`'s pane shows.
    pub fn screen(&self, name: &str) -> String {
        let target = format!("={name}:");
        String::from_utf8_lossy(&self.run(&["capture-pane", "-p", "-t", &target]).stdout)
            .to_string()
    }

    /// Every session to the tmux channel `pane` on this server, with `lines` for its table,
    /// and a 100 ms backoff.
    /// A config delivering every session to its pane of this server, for a plain program
    /// (`confirm = "paste"`: delivered on paste), with `lines` added to the channel.
    pub fn config(&self, lines: &[&str]) -> Config {
        self.agent_config(&[&["confirm = \"paste\""], lines].concat())
    }

    /// [`config`](Self::config) for agents: delivered when the agent says it took it.
    pub fn agent_config(&self, lines: &[&str]) -> Config {
        let socket = format!("socket_name = {:?}", self.socket);
        Config::default()
            .set("queues.inbound", "backoff = [\"100ms\"]")
            .default_channel("pane")
            .channel("pane", "tmux", &[&socket])
            .table("channels.pane", lines)
    }
}

impl Drop for Tmux {
    /// Ends the panes' programs, then the server. A pane's program leads its own process
    /// group; Gemini CLI's `node` (and the child it relaunches itself as) outlives a killed
    /// server otherwise, one pair left behind per run.
    fn drop(&mut self) {
        let panes = self.run(&["list-panes", "-a", "-F", "#{pane_pid}"]);
        for pid in String::from_utf8_lossy(&panes.stdout)
            .lines()
            .filter_map(|l| l.trim().parse::<libc::pid_t>().ok())
            .filter(|pid| *pid > 1)
        {
            // SAFETY: a signal to a process group this test started; no memory is touched.
            unsafe { libc::kill(-pid, libc::SIGKILL) };
        }
        let _ = self.run(&["kill-server"]);
        // tmux leaves its socket file behind: one per test, per run, in /tmp/tmux-UID.
        let _ = std::fs::remove_file(self.socket_path());
    }
}

impl Tmux {
    /// Where tmux keeps this server's socket (`-L NAME`: in `$TMUX_TMPDIR` or /tmp, under
    /// tmux-UID).
    pub fn socket_path(&self) -> PathBuf {
        let dir = std::env::var_os("TMUX_TMPDIR").unwrap_or_else(|| "/tmp".into());
        // SAFETY: getuid cannot fail and touches no memory.
        let uid = unsafe { libc::getuid() };
        PathBuf::from(dir)
            .join(format!("tmux-{uid}"))
            .join(&self.socket)
    }
}

/// A pane program that asks for bracketed paste, as agent CLIs do, then shows what it gets.
pub const CAT_PANE: &str = r"printf '\033[?2004h'; exec cat -v";

/// Tmux server `name` with session `session` running [`CAT_PANE`], and an app whose
/// default channel pastes into it (50 ms before Enter), `lines` added to that channel.
pub fn cat_pane(name: &str, session: &str, lines: &[&str]) -> (Tmux, App) {
    let tmux = Tmux::new(name);
    tmux.start(session, CAT_PANE);
    let base = ["programs = [\"cat\"]", "submit_delay = \"50ms\""];
    let lines: Vec<&str> = base.iter().chain(lines).copied().collect();
    let app = App::new(tmux.config(&lines));
    (tmux, app)
}

/// The built-in notices file of an [`App`], in its state directory (whatever config is read).
pub const NOTICES: &str = "xdg-state/relayq/relayq-notices.jsonl";

/// Posts `body` to a Slack source's URL as Slack does: signed with `secret` for now
/// (`X-Slack-Request-Timestamp`, `X-Slack-Signature`); the answer.
pub fn slack_post(
    url: &str,
    secret: &str,
    body: String,
    content_type: &str,
) -> reqwest::blocking::Response {
    let ts = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    reqwest::blocking::Client::new()
        .post(url)
        .header("Content-Type", content_type)
        .header("X-Slack-Request-Timestamp", ts.to_string())
        .header(
            "X-Slack-Signature",
            relayq_actors::sources::slack::sign(secret, ts, body.as_bytes()),
        )
        .body(body)
        .send()
        .unwrap()
}

/// An interaction as Slack posts it: `payload=<the JSON, form-encoded>`.
pub fn slack_form(payload: &serde_json::Value) -> String {
    let encoded: String = payload
        .to_string()
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            b => format!("%{b:02X}"),
        })
        .collect();
    format!("payload={encoded}")
}

/// Writes `page` (HTML) as a PNG of `width` × `height` to the path `RELAYQ_SCREENSHOT` names,
/// with headless Chromium: the README's pictures, drawn from what a fake platform recorded.
/// Without `RELAYQ_SCREENSHOT` nothing is drawn (the caller checked the page).
pub fn screenshot(page: &str, width: u32, height: u32) {
    let Ok(png) = std::env::var("RELAYQ_SCREENSHOT") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let html = dir.path().join("page.html");
    std::fs::write(&html, page).unwrap();
    let made = std::process::Command::new("chromium")
        .args(["--headless", "--no-sandbox", "--hide-scrollbars"])
        .arg(format!("--window-size={width},{height}"))
        .arg(format!("--screenshot={png}"))
        .arg(format!("file://{}", html.display()))
        .status()
        .unwrap();
    assert!(made.success(), "chromium made no screenshot");
}
