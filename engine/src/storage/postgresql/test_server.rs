//! A PostgreSQL server of a test's own: `initdb` into a temporary directory, started by
//! `pg_ctl` on a Unix socket only (no TCP), stopped and deleted when dropped. As root the
//! server runs as the `postgres` user (PostgreSQL refuses to run as root).
//!
//! The binaries are looked up in `$RELAYQ_PG_BIN`, then on `PATH`, then in Debian's
//! `/usr/lib/postgresql/<version>/bin`. A missing server is an error that says what to
//! install: a test that needs PostgreSQL fails, it never skips.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A running test server. Connect with [`TestServer::url`].
pub struct TestServer {
    dir: tempfile::TempDir,
    bin: PathBuf,
    as_postgres: bool,
}

impl TestServer {
    /// Creates and starts a server for tests: nothing is synced to disk (a test's server
    /// lives as long as the test). Panics, saying why, when it cannot.
    pub fn start() -> TestServer {
        TestServer::start_with(false)
    }

    /// A server that keeps every commit as PostgreSQL does by default (`fsync`,
    /// `full_page_writes`, `synchronous_commit` on), for the benchmark.
    pub fn start_durable() -> TestServer {
        TestServer::start_with(true)
    }

    fn start_with(durable: bool) -> TestServer {
        let bin = pg_bin().unwrap_or_else(|e| panic!("{e}"));
        let as_postgres = is_root();
        let dir = tempfile::Builder::new()
            .prefix("relayq-pg-")
            .tempdir()
            .expect("a temporary directory");
        if as_postgres {
            run(Command::new("chown").arg("postgres:").arg(dir.path()));
        }
        let server = TestServer {
            dir,
            bin,
            as_postgres,
        };
        let data = server.data();
        server.run_pg(
            "initdb",
            &[
                "-D".as_ref(),
                data.as_os_str(),
                "-A".as_ref(),
                "trust".as_ref(),
                "-U".as_ref(),
                "postgres".as_ref(),
                "-E".as_ref(),
                "UTF8".as_ref(),
                "--no-sync".as_ref(),
            ],
        );
        // Settings in the file, not on `pg_ctl -o`, which goes through a shell.
        let sync = match durable {
            true => "fsync = on\nfull_page_writes = on\nsynchronous_commit = on\n",
            false => "fsync = off\nfull_page_writes = off\n",
        };
        let settings = format!(
            "listen_addresses = ''\nunix_socket_directories = '{}'\nmax_connections = 200\n{sync}",
            server.dir.path().display()
        );
        let conf = data.join("postgresql.conf");
        let mut text = std::fs::read_to_string(&conf).expect("postgresql.conf");
        text.push_str(&settings);
        std::fs::write(&conf, text).expect("postgresql.conf written");
        server.pg_ctl(&["start", "-w", "-t", "30"]);
        server
    }

    /// The connection string: the socket's directory, user `postgres`, database `postgres`.
    pub fn url(&self) -> String {
        format!(
            "postgresql://postgres@{}/postgres",
            percent_path(self.dir.path())
        )
    }

    /// The directory of the server's Unix socket (and its data).
    pub fn socket_dir(&self) -> &Path {
        self.dir.path()
    }

    /// `pg_ctl restart -m immediate`: the server crashes (no checkpoint) and comes back, as
    /// after a power cut of the database alone.
    pub fn restart_immediate(&self) {
        self.pg_ctl(&["restart", "-m", "immediate", "-w", "-t", "30"]);
    }

    /// Stops the server (`-m immediate`): clients find nothing on the socket until
    /// [`start_again`](Self::start_again).
    pub fn stop(&self) {
        self.pg_ctl(&["stop", "-m", "immediate", "-w", "-t", "30"]);
    }

    /// Starts the server [`stop`](Self::stop) stopped.
    pub fn start_again(&self) {
        self.pg_ctl(&["start", "-w", "-t", "30"]);
    }

    /// Starts a process that, once process `pid` is gone, stops this server and deletes its
    /// directory. The paths are the script's arguments, never part of its text.
    fn watch_over(&self, pid: u32) {
        const WATCH: &str = r#"while kill -0 "$1" 2>/dev/null; do sleep 1; done
if [ "$5" = yes ]; then runuser -u postgres -- "$2" -D "$3" stop -m immediate -w
else "$2" -D "$3" stop -m immediate -w; fi
rm -rf "$4""#;
        let (pg_ctl, data) = (self.bin.join("pg_ctl"), self.data());
        let as_postgres = if self.as_postgres { "yes" } else { "no" };
        let watchdog = Command::new("sh")
            .args(["-c", WATCH, "relayq-test-pg-watchdog", &pid.to_string()])
            .arg(&pg_ctl)
            .arg(&data)
            .arg(self.dir.path())
            .arg(as_postgres)
            // Not the test's output pipes: the test runner would wait for them to close.
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn();
        if let Err(e) = watchdog {
            panic!("cannot start the shared test server's watchdog (sh): {e}");
        }
    }

    /// What the server logged so far (errors with their statements: a deadlock names both).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn pg_ctl(&self, args: &[&str]) {
        let data = self.data();
        let log = self.dir.path().join("server.log");
        let mut all: Vec<&std::ffi::OsStr> = vec![
            "-D".as_ref(),
            data.as_os_str(),
            "-l".as_ref(),
            log.as_os_str(),
        ];
        all.extend(args.iter().map(|a| std::ffi::OsStr::new(*a)));
        self.run_pg("pg_ctl", &all);
    }

    fn run_pg(&self, program: &str, args: &[&std::ffi::OsStr]) {
        let path = self.bin.join(program);
        let mut command = if self.as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(&path);
            c
        } else {
            Command::new(&path)
        };
        command.args(args).current_dir(self.dir.path());
        run(&mut command);
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        let data = self.data();
        let mut command = if self.as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"])
                .arg(self.bin.join("pg_ctl"));
            c
        } else {
            Command::new(self.bin.join("pg_ctl"))
        };
        let _ = command
            .arg("-D")
            .arg(&data)
            .args(["stop", "-m", "immediate", "-w"])
            .output();
    }
}

/// A database of a test's own on a server the test process shares (created with the first
/// one), dropped with its connections when the test ends. A server of one's own costs
/// `initdb` and a start, about 1.9 s here, a database 0.2 s: the PostgreSQL pass of the suites
/// made about 300 of them. A test that stops or restarts the server takes a [`TestServer`].
pub struct TestDatabase {
    name: String,
    url: String,
}

impl TestDatabase {
    /// Creates an empty database on the shared server. Panics, saying why, when it cannot.
    pub fn create() -> TestDatabase {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let server = shared_server();
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let name = format!("test_{n}");
        // FILE_COPY: a copy of template1's files, twice as quick as WAL_LOG without fsync.
        let create = format!("CREATE DATABASE {name} STRATEGY = FILE_COPY");
        if let Err(e) = on_the_server(create.clone()) {
            panic!("{create}: {e}");
        }
        let url = format!(
            "postgresql://postgres@{}/{name}",
            percent_path(server.socket_dir())
        );
        TestDatabase { name, url }
    }

    /// The connection string: the shared server's socket, user `postgres`, this database.
    pub fn url(&self) -> String {
        self.url.clone()
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        // FORCE: what the test left connected (a daemon killed mid-test) is cut off.
        let drop = format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name);
        if let Err(e) = on_the_server(drop) {
            eprintln!("test database {} not dropped: {e}", self.name);
        }
    }
}

/// Runs `sql` on the shared server's `postgres` database, on a thread of its own: the
/// blocking client refuses to run inside an async test's runtime.
fn on_the_server(sql: String) -> Result<(), postgres::Error> {
    let url = shared_server().url();
    std::thread::spawn(move || {
        postgres::Client::connect(&url, postgres::NoTls)?.batch_execute(&sql)
    })
    .join()
    .expect("the admin thread does not panic")
}

/// The server this test process shares, started with the first [`TestDatabase`]. Statics
/// are never dropped, so a watchdog process stops it and deletes its directory once the test
/// process is gone (also when it was killed).
fn shared_server() -> &'static TestServer {
    static SHARED: std::sync::OnceLock<TestServer> = std::sync::OnceLock::new();
    SHARED.get_or_init(|| {
        let server = TestServer::start_with(false);
        server.watch_over(std::process::id());
        server
    })
}

/// Where `initdb` and `pg_ctl` are.
fn pg_bin() -> Result<PathBuf, String> {
    if let Some(dir) = std::env::var_os("RELAYQ_PG_BIN") {
        return Ok(PathBuf::from(dir));
    }
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            if dir.join("initdb").is_file() && dir.join("pg_ctl").is_file() {
                return Ok(dir);
            }
        }
    }
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("bin"))
        .filter(|bin| bin.join("initdb").is_file())
        .collect();
    versions.sort();
    versions.pop().ok_or_else(|| {
        "PostgreSQL's server binaries (initdb, pg_ctl) are not installed: \
         `apt-get install -y postgresql`, or set RELAYQ_PG_BIN to their directory"
            .to_string()
    })
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.trim_ascii() == b"0")
}

fn run(command: &mut Command) {
    let out = command
        .output()
        .unwrap_or_else(|e| panic!("{command:?}: {e}"));
    assert!(
        out.status.success(),
        "{command:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A socket directory as the host of a URL (`/` and other reserved bytes escaped).
fn percent_path(path: &Path) -> String {
    let mut out = String::new();
    for b in path.as_os_str().as_encoded_bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(*b as char)
            }
            other => out.push_str(&format!("%{other:02X}")),
        }
    }
    out
}
