//! relayq on PostgreSQL as an operator runs it: `relayq serve` as a process (its config: the
//! database URL, the HTTP API on, every session to a webhook channel), fed by HTTP clients
//! POSTing `/v1/inbound`, delivering to a no-op far end on loopback that records what came.
//!
//! ```text
//!   load thread: 100 reqwest clients ──POST /v1/inbound──▶ relayq serve ──▶ PostgreSQL
//!   relayq serve ──webhook POST──▶ far end (a thread per connection) ──▶ order checked
//! ```

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};

use crate::http::closed_loop;
use crate::postgres::{clear, collect, Delivered};

/// `n` messages over [`crate::http::CLIENTS`] sessions into `relayq serve` on PostgreSQL at `url`, each
/// client POSTing its session's messages in order (the next after the 201); msgs/s from the
/// first request to the last delivery at the far end.
pub fn http_inbound(relayq: &Path, url: &str, n: usize) -> Result<f64> {
    let dir = tempfile::tempdir()?;
    let (seen, deliveries) = mpsc::channel();
    let far = far_end(seen)?;
    let api = free_port()?;
    let config = dir.path().join("config.toml");
    std::fs::write(
        &config,
        format!(
            "[database]\nurl = \"{url}\"\n\n[node]\nname = \"serve-bench\"\n\n\
             [http]\nenabled = true\nlisten = \"127.0.0.1:{api}\"\n\n\
             [sessions]\ndefault_channel = \"far\"\n\n\
             [channels.far]\nkind = \"webhook\"\nurl = \"http://{far}/\"\n"
        ),
    )?;
    let mut daemon = Command::new(relayq)
        .current_dir(dir.path())
        .arg("--config")
        .arg(&config)
        .arg("--db")
        .arg(dir.path().join("relayq.db"))
        .arg("serve")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()?;
    let result = (|| {
        wait_until_ready(api, &mut daemon)?;
        let inbound = format!("http://127.0.0.1:{api}/v1/inbound");
        let started = Instant::now();
        let load = closed_loop(inbound, n);
        let last = collect(&deliveries, n)?;
        load.join().expect("the load thread")?;
        Ok(n as f64 / last.duration_since(started).as_secs_f64())
    })();
    let _ = Command::new("kill").arg(daemon.id().to_string()).status();
    let _ = daemon.wait();
    clear(url)?;
    result
}

/// A free loopback port (bound, then let go).
fn free_port() -> Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// Waits for the daemon's `/readyz` to answer; its stderr when it exits first.
fn wait_until_ready(port: u16, daemon: &mut std::process::Child) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut last = String::new();
    while Instant::now() < deadline {
        if let Some(status) = daemon.try_wait()? {
            let mut err = String::new();
            if let Some(mut stderr) = daemon.stderr.take() {
                stderr.read_to_string(&mut err)?;
            }
            bail!("relayq serve exited ({status}): {err}");
        }
        if let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) {
            s.set_read_timeout(Some(Duration::from_secs(2)))?;
            let ask = format!(
                "GET /readyz HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
            );
            s.write_all(ask.as_bytes())?;
            let mut answer = String::new();
            let _ = s.read_to_string(&mut answer);
            if answer.starts_with("HTTP/1.1 200") {
                return Ok(());
            }
            last = answer;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    bail!("relayq serve was not ready within 30 s: {last}")
}

/// The far end: answers every POST 200 at once, a thread per connection, and reports each
/// delivery's session and number (the webhook's JSON body). Its address.
fn far_end(seen: mpsc::Sender<Delivered>) -> Result<String> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let address = listener.local_addr()?.to_string();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let seen = seen.clone();
            std::thread::spawn(move || {
                let _ = answer_connection(stream, &seen);
            });
        }
    });
    Ok(address)
}

fn answer_connection(stream: TcpStream, seen: &mpsc::Sender<Delivered>) -> Result<()> {
    stream.set_nodelay(true)?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut writer = stream;
    loop {
        let mut length = 0usize;
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 {
            return Ok(());
        }
        loop {
            line.clear();
            reader.read_line(&mut line)?;
            let header = line.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':') {
                if name.eq_ignore_ascii_case("content-length") {
                    length = value.trim().parse().context("content-length")?;
                }
            }
        }
        let mut json = vec![0; length];
        reader.read_exact(&mut json)?;
        let at = Instant::now();
        // Reported before it is answered: the next of its session may come on another
        // connection as soon as this one is answered.
        let v: serde_json::Value = serde_json::from_slice(&json)?;
        let text = match &v["content"] {
            serde_json::Value::String(t) => t.clone(),
            other => other["text"].as_str().unwrap_or_default().to_string(),
        };
        let _ = seen.send(Delivered {
            session: v["session"].as_str().unwrap_or_default().to_string(),
            seq: text.parse().unwrap_or(u64::MAX),
            at,
            node: "serve".into(),
        });
        writer.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")?;
    }
}

/// The command an agent's hooks run to reach relayq at `config` and `db` (and the PostgreSQL
/// server at `url`, when the daemon uses one), as argv.
pub fn hook_argv(
    relayq: &std::path::Path,
    config: &std::path::Path,
    db: &std::path::Path,
    url: Option<&str>,
) -> Vec<String> {
    let mut hook: Vec<String> = Vec::new();
    if let Some(url) = url {
        hook.extend(["env".into(), format!("RELAYQ_DATABASE__URL={url}")]);
    }
    hook.extend([
        relayq.display().to_string(),
        "--config".into(),
        config.display().to_string(),
        "--db".into(),
        db.display().to_string(),
        "hook".into(),
        "--agent".into(),
        "claude".into(),
    ]);
    hook
}
