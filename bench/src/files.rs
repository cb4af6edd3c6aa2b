//! Files both ways through `relayq serve` (issue 46's targets), on SQLite:
//!
//! - **Sending a 49 MB file** (`relayq send` to a chat of a local Bot API): the daemon's RSS
//!   sampled every 10 ms from before the send until Telegram has the whole file; the most it
//!   grew over the idle daemon's. The file is streamed from disk: the target is ≤ 16 MB.
//! - **100 photos in 10 albums**: from the push until the tenth album's prompt is delivered
//!   (a `file` channel takes it, so no agent's pace is measured), less the albums' quiet
//!   period (`album_quiet`, 1 s: a wait for a late photo, chosen, not work), against the fake
//!   Bot API's own transfer time for the same 100 files (a keep-alive client asking
//!   `getFile` and fetching each, one after another, as relayq does). Target: ≤ 2×.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use relayq_actors::sources::telegram::fake::FakeTelegram;
use serde_json::json;

const TOKEN: &str = "123456:bench-files";
const CHAT: i64 = 777;

/// A daemon serving `config` on `db`, its log beside them.
fn serve(relayq: &Path, dir: &Path) -> Result<Child> {
    let child = Command::new(relayq)
        .args(["--config", &dir.join("config.toml").display().to_string()])
        .args([
            "--db",
            &dir.join("relayq.db").display().to_string(),
            "serve",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("serve.log"))?)
        .spawn()
        .context("starting relayq serve")?;
    std::thread::sleep(Duration::from_secs(2));
    Ok(child)
}

/// `relayq ARGS` on the bench's config and database.
fn relayq_cmd(relayq: &Path, dir: &Path, args: &[&str]) -> Result<std::process::Output> {
    Ok(Command::new(relayq)
        .args(["--config", &dir.join("config.toml").display().to_string()])
        .args(["--db", &dir.join("relayq.db").display().to_string()])
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()?)
}

/// Resident set size of `pid`, in bytes.
fn rss(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb * 1024)
}

/// Runs both measurements and prints them.
pub fn run(relayq: &Path) -> Result<()> {
    send_49_mb(relayq)?;
    albums(relayq)
}

fn send_49_mb(relayq: &Path) -> Result<()> {
    let dir = tempfile::tempdir()?;
    let fake = FakeTelegram::start(TOKEN);
    std::fs::write(
        dir.path().join("config.toml"),
        format!(
            "[sessions]\ndefault_channel = \"deliveries\"\n\n\
             [sources.bot]\nkind = \"telegram\"\ntoken = {TOKEN:?}\napi_url = {:?}\n\
             allowed_users = [{CHAT}]\npoll_timeout = \"1s\"\nchats = {{ \"{CHAT}\" = \"s\" }}\n",
            fake.url
        ),
    )?;
    let mut daemon = serve(relayq, dir.path())?;
    // The session's directory (its hooks say it) and its chat (a message from it).
    let start = json!({"hook_event_name": "SessionStart", "session_id": "native-s",
                       "cwd": dir.path(), "source": "startup"});
    let mut hook = Command::new(relayq)
        .args([
            "--config",
            &dir.path().join("config.toml").display().to_string(),
        ])
        .args(["--db", &dir.path().join("relayq.db").display().to_string()])
        .args(["hook", "--agent", "claude"])
        .env("RELAYQ_SESSION", "s")
        .stdin(Stdio::piped())
        .spawn()?;
    use std::io::Write as _;
    hook.stdin
        .take()
        .unwrap()
        .write_all(start.to_string().as_bytes())?;
    hook.wait()?;
    fake.push_text(CHAT, CHAT, "send me the data");
    std::thread::sleep(Duration::from_secs(3));
    let size = 49 * 1024 * 1024;
    let data: Vec<u8> = (0..size).map(|i| (i % 251) as u8).collect();
    std::fs::write(dir.path().join("data.bin"), &data)?;
    drop(data);
    std::thread::sleep(Duration::from_secs(1));
    let idle = rss(daemon.id()).context("the daemon's RSS")?;
    let sent = relayq_cmd(relayq, dir.path(), &["send", "--session", "s", "data.bin"])?;
    if !sent.status.success() {
        bail!("relayq send: {}", String::from_utf8_lossy(&sent.stderr));
    }
    let began = Instant::now();
    let mut peak = idle;
    while fake.files_sent().is_empty() {
        peak = peak.max(rss(daemon.id()).unwrap_or(0));
        if began.elapsed() > Duration::from_secs(120) {
            bail!(
                "the file was not sent within 120 s: {}",
                std::fs::read_to_string(dir.path().join("serve.log")).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let took = began.elapsed();
    let got = &fake.files_sent()[0];
    let _ = daemon.kill();
    let _ = daemon.wait();
    let mb = |b: u64| b as f64 / (1024.0 * 1024.0);
    println!(
        "files: sending a 49 MB file ({} as {}, {} bytes): daemon RSS {:.1} MB idle, {:.1} MB at \
         most while sending: +{:.1} MB (target ≤ 16 MB); {:.2} s from relayq send to Telegram \
         having it",
        got.filename,
        got.method,
        got.size,
        mb(idle),
        mb(peak),
        mb(peak.saturating_sub(idle)),
        took.as_secs_f64()
    );
    Ok(())
}

fn albums(relayq: &Path) -> Result<()> {
    const ALBUMS: usize = 10;
    const PHOTOS: usize = 10;
    const PHOTO_BYTES: usize = 300 * 1024;
    let dir = tempfile::tempdir()?;
    let fake = FakeTelegram::start(TOKEN);
    let out = dir.path().join("delivered.jsonl");
    std::fs::write(
        dir.path().join("config.toml"),
        format!(
            "[sessions]\ndefault_channel = \"delivered\"\n\n\
             [channels.delivered]\nkind = \"file\"\npath = {:?}\n\n\
             [sources.bot]\nkind = \"telegram\"\ntoken = {TOKEN:?}\napi_url = {:?}\n\
             allowed_users = [{CHAT}]\npoll_timeout = \"1s\"\nalbum_quiet = \"1s\"\n\
             chats = {{ \"{CHAT}\" = \"s\" }}\n",
            out.display(),
            fake.url
        ),
    )?;
    let mut paths = Vec::new();
    for n in 0..ALBUMS * PHOTOS {
        let bytes: Vec<u8> = [
            &[0xFF, 0xD8, 0xFF, 0xE0][..],
            &vec![n as u8; PHOTO_BYTES - 4],
        ]
        .concat();
        let path = format!("photos/file_{n}.jpg");
        fake.add_file(&format!("p{n}"), &path, &bytes);
        paths.push(path);
    }
    // The fake's own transfer time: the 100 files, one after another, on one connection.
    let client = reqwest::blocking::Client::new();
    let base = fake.url.trim_end_matches('/').to_string();
    let began = Instant::now();
    for (n, path) in paths.iter().enumerate() {
        let found: serde_json::Value = client
            .post(format!("{base}/bot{TOKEN}/getFile"))
            .json(&json!({"file_id": format!("p{n}")}))
            .send()?
            .json()?;
        assert_eq!(found["result"]["file_path"], json!(path));
        let bytes = client
            .get(format!(
                "{}/file/bot{TOKEN}/{path}",
                fake.url.trim_end_matches('/')
            ))
            .send()?
            .bytes()?;
        assert_eq!(bytes.len(), PHOTO_BYTES);
    }
    let transfer = began.elapsed();

    let mut daemon = serve(relayq, dir.path())?;
    let began = Instant::now();
    for album in 0..ALBUMS {
        for photo in 0..PHOTOS {
            let n = album * PHOTOS + photo;
            fake.push_media(
                CHAT,
                json!({"photo": [{"file_id": format!("p{n}"), "file_unique_id": format!("u{n}"),
                                  "width": 1280, "height": 960, "file_size": PHOTO_BYTES}],
                       "media_group_id": format!("album-{album}")}),
            );
        }
    }
    let quiet = Duration::from_secs(1);
    let delivered = loop {
        let text = std::fs::read_to_string(&out).unwrap_or_default();
        let saved: usize = text
            .lines()
            .map(|l| l.matches("\"outcome\":\"saved\"").count())
            .sum();
        if saved >= ALBUMS * PHOTOS {
            break began.elapsed().saturating_sub(quiet);
        }
        if began.elapsed() > Duration::from_secs(120) {
            bail!(
                "{saved} of {} photos delivered within 120 s: {}",
                ALBUMS * PHOTOS,
                std::fs::read_to_string(dir.path().join("serve.log")).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let _ = daemon.kill();
    let _ = daemon.wait();
    let text = std::fs::read_to_string(&out)?;
    let files: usize = text
        .lines()
        .map(|l| l.matches("\"outcome\":\"saved\"").count())
        .sum();
    println!(
        "files: {ALBUMS} albums of {PHOTOS} photos ({} KB each, {files} paths in {} prompts): \
         {:.0} ms from the push to the last album delivered, less the 1 s quiet period, against \
         {:.0} ms for the fake's own transfer of the same files: {:.2}× (target ≤ 2×)",
        PHOTO_BYTES / 1024,
        text.lines().count(),
        delivered.as_secs_f64() * 1e3,
        transfer.as_secs_f64() * 1e3,
        delivered.as_secs_f64() / transfer.as_secs_f64()
    );
    Ok(())
}
