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
