//! Discord buttons (issue 47's target): how long after a click reaches relayq its
//! acknowledgement is sent, through `relayq serve` holding the local Discord's gateway, on
//! SQLite. Each round: an agent's permission question (`relayq hook --agent claude` with
//! Claude Code's captured `PermissionRequest`, the hook waiting for its answer, as the agent's
//! does), posted to the channel with its buttons; a click on Allow dispatched on the gateway;
//! the time from that dispatch until the fake's `POST /interactions/{id}/{token}/callback`
//! (the answer recorded in the database first, then the deferred update). Target: p99 ≤ 500 ms.

use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use relayq_actors::sources::discord::fake::FakeDiscord;

const TOKEN: &str = "MTMwMDAwMDAwMDAwMDAwMDk5OQ.GfakeE.bench-discord";
const CHANNEL: &str = "1300000000000000100";
const ALICE: &str = "1300000000000000001";

/// Waits up to 30 s for `done`.
fn wait(what: &str, done: impl Fn() -> bool) -> Result<()> {
    let start = Instant::now();
    while !done() {
        if start.elapsed() > Duration::from_secs(30) {
            bail!("timed out waiting for {what}");
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    Ok(())
}

/// `rounds` questions clicked one after another; prints p50 / p99 / max.
pub fn clicks(root: &Path, relayq: &Path, rounds: usize) -> Result<()> {
    let dir = tempfile::tempdir()?;
    let fake = FakeDiscord::start(TOKEN);
    let config = dir.path().join("config.toml");
    std::fs::write(
        &config,
        format!(
            "[sessions]\ndefault_channel = \"deliveries\"\n\n\
             [channels.deliveries]\nkind = \"file\"\npath = \"out.jsonl\"\n\n\
             [sources.discord]\nkind = \"discord\"\ntoken = {TOKEN:?}\napi_url = {:?}\n\
             allowed_users = [\"{ALICE}\"]\nchats = {{ \"{CHANNEL}\" = \"s1\" }}\n",
            fake.api_url
        ),
    )?;
    let db = dir.path().join("relayq.db");
    let relayq_cmd = |args: &[&str]| {
        let mut cmd = Command::new(relayq);
        cmd.args(["--config", &config.display().to_string()])
            .args(["--db", &db.display().to_string()])
            .args(args)
            .current_dir(dir.path());
        cmd
    };
    let mut daemon = relayq_cmd(&["serve"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.path().join("serve.log"))?)
        .spawn()
        .context("starting relayq serve")?;
    wait("a gateway session", || fake.connected())?;
    // The session's chat: where its questions go.
    fake.push_message(CHANNEL, ALICE, "1350000000000000001", "hello");
    wait("the message delivered", || {
        std::fs::read_to_string(dir.path().join("out.jsonl")).is_ok_and(|t| !t.is_empty())
    })?;
    let fixture = std::fs::read_to_string(
        root.join("tests/fixtures/claude-code/captured/PermissionRequest.json"),
    )?;
    let mut took = Vec::with_capacity(rounds);
    for round in 0..rounds {
        let probe = format!("probe-bench-{round}.txt");
        let payload = fixture.replace("probe-p512802.txt", &probe);
        let mut hook = relayq_cmd(&["hook", "--agent", "claude"])
            .env("RELAYQ_SESSION", "s1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()?;
        hook.stdin
            .take()
            .context("stdin")?
            .write_all(payload.as_bytes())?;
        let find = || {
            fake.bot_messages().into_iter().find(|m| {
                m["components"].is_array()
                    && m["content"].as_str().unwrap_or_default().contains(&probe)
            })
        };
        wait("the question", || find().is_some())?;
        let q = find().context("the question")?;
        let allow = q["components"][0]["components"][0]["custom_id"]
            .as_str()
            .context("an Allow button")?
            .to_string();
        let clicked = fake.click(CHANNEL, q["id"].as_str().unwrap_or_default(), ALICE, &allow);
        wait("the click acknowledged", || {
            fake.callbacks().iter().any(|(id, _, _)| *id == clicked)
        })?;
        let (_, body, after) = fake
            .callbacks()
            .into_iter()
            .find(|(id, _, _)| *id == clicked)
            .context("the callback")?;
        if body["type"] != 6 {
            bail!("round {round}: the click was answered {body}, not a deferred update");
        }
        took.push(after);
        let out = hook.wait_with_output()?;
        if !String::from_utf8_lossy(&out.stdout).contains("allow") {
            bail!("round {round}: the hook printed no allow");
        }
    }
    let _ = daemon.kill();
    took.sort();
    let at = |q: f64| took[((took.len() - 1) as f64 * q).round() as usize];
    println!(
        "discord clicks: {} questions, the acknowledgement after the click arrived: p50 {:?}, p99 {:?}, max {:?} (target p99 <= 500 ms)",
        took.len(),
        at(0.5),
        at(0.99),
        took[took.len() - 1]
    );
    Ok(())
}
