//! Progress on the phone under load: `relayq serve` bridging five Telegram chats (three private,
//! two groups) to five fake agents in tmux (`tests/agents/fake_agent.py`), each chat's person
//! taking turns for `BENCH_PROGRESS_SECS` (1 800 by default): a message asking for 1 to 5 tool
//! steps (500 ms each) and a 9 000-character answer (in parts), the whole answer awaited,
//! then a pause to read it (4 s, 8 s in a group). The local Bot API enforces Telegram's
//! documented limits (`FakeTelegram::enforce_limits`: a call a second per chat with edits and
//! reactions counted, 20 a minute per group, 30 a second per bot; 429 past them).
//!
//! Printed: turns, calls by kind, calls refused (relayq past a limit), cosmetic calls made while
//! a chat's answer waited to be sent, the closest two cosmetic calls to one chat, the first
//! visible progress (the message's first reaction) after the agent's prompt-submit event, and
//! the answer's delivery (the agent's turn end to the answer's first part, and to its last
//! part in private chats and in groups), p50 / p99 / max.

use std::collections::HashMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use relayq_actors::sources::telegram::fake::FakeTelegram;
use serde_json::Value;

use crate::stats::percentile;

const TOKEN: &str = "123456:bench-progress";
/// The chats: three private (their user's id), two groups (Alice writes there).
const CHATS: [i64; 5] = [501, 502, 503, -1001504, -1001505];
const ALICE: i64 = 501;

/// "(N/N)", the last part's mark, from a first part's "(1/N)".
fn last_part_mark(first: &str) -> Option<String> {
    let (_, rest) = first.split_once("(1/")?;
    let (of, _) = rest.split_once(')')?;
    Some(format!("({of}/{of})"))
}

/// Runs the scenario for `secs` on SQLite, or on PostgreSQL at `url`.
pub fn run(root: &Path, relayq: &Path, url: Option<&str>, secs: u64) -> Result<()> {
    let dir = tempfile::tempdir()?;
    let (config, db) = (dir.path().join("config.toml"), dir.path().join("relayq.db"));
    let fake = FakeTelegram::start(TOKEN);
    fake.enforce_limits();
    let socket = format!("relayq-bench-progress-{}", std::process::id());
    let script = root.join("tests/agents/fake_agent.py");
    let hook = crate::serve::hook_argv(relayq, &config, &db, url);
    let chats: Vec<String> = CHATS
        .iter()
        .map(|c| format!("\"{c}\" = \"s{c}\""))
        .collect();
    let groups: Vec<String> = CHATS
        .iter()
        .filter(|c| **c < 0)
        .map(i64::to_string)
        .collect();
    let users: Vec<String> = CHATS
        .iter()
        .filter(|c| **c > 0)
        .map(i64::to_string)
        .collect();
    std::fs::write(
        &config,
        format!(
            "[sessions]\ndefault_channel = \"pane\"\n\n\
             [channels.pane]\nkind = \"tmux\"\nsocket_name = {socket:?}\nprograms = [\"python3\"]\n\
             confirm_within = \"1s\"\nsubmit_delay = \"50ms\"\n\n\
             [sources.bot]\nkind = \"telegram\"\ntoken = {TOKEN:?}\napi_url = {:?}\n\
             allowed_users = [{}]\nallowed_chats = [{}]\npoll_timeout = \"1s\"\nchats = {{ {} }}\n",
            fake.url,
            users.join(", "),
            groups.join(", "),
            chats.join(", "),
        ),
    )?;
    let logs: Vec<_> = CHATS
        .iter()
        .map(|c| dir.path().join(format!("agent{c}.jsonl")))
        .collect();
    for (chat, log) in CHATS.iter().zip(&logs) {
        let session = format!("s{chat}");
        let started = Command::new("tmux")
            .args([
                "-L",
                &socket,
                "new-session",
                "-d",
                "-s",
                &session,
                "-x",
                "200",
                "-y",
                "50",
            ])
            .args(["-c", &dir.path().display().to_string()])
            .args(["-e", &format!("RELAYQ_SESSION={session}")])
            .args(["-e", "FAKE_AGENT=claude", "-e", "FAKE_STEP_MS=500"])
            .args([
                "-e",
                &format!("FAKE_HOOK={}", serde_json::to_string(&hook)?),
            ])
            .args(["-e", &format!("FAKE_LOG={}", log.display())])
            .args(["python3", &script.display().to_string()])
            .status()?;
        if !started.success() {
            bail!("tmux could not start the fake agent {session}");
        }
    }
    let mut serve = Command::new(relayq);
    serve
        .args(["--config", &config.display().to_string()])
        .args(["--db", &db.display().to_string(), "serve"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.path().join("serve.log"))?);
    if let Some(url) = url {
        serve.env("RELAYQ_DATABASE__URL", url);
    }
    let mut daemon = serve.spawn().context("starting relayq serve")?;
    std::thread::sleep(Duration::from_secs(2));
    let measured = drive(&fake, &logs, secs);
    let _ = daemon.kill();
    let _ = daemon.wait();
    let _ = Command::new("tmux")
        .args(["-L", &socket, "kill-server"])
        .status();
    let serve_log = dir.path().join("serve.log");
    measured.with_context(|| std::fs::read_to_string(serve_log).unwrap_or_default())
}

/// Each chat's person taking turns until `secs` are over; then the figures.
fn drive(fake: &FakeTelegram, logs: &[std::path::PathBuf], secs: u64) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(secs);
    // Per turn: (chat, prompt, its message id).
    let turns: Vec<(i64, String, i64)> = std::thread::scope(|scope| {
        let drivers: Vec<_> = CHATS
            .iter()
            .map(|&chat| {
                scope.spawn(move || -> Result<Vec<(i64, String, i64)>> {
                    let mut turns = Vec::new();
                    let mut n = 0;
                    while Instant::now() < deadline {
                        n += 1;
                        let prompt =
                            format!("turn {n} in {chat}: please run steps {} lengthy", 1 + n % 5);
                        let user = if chat > 0 { chat } else { ALICE };
                        let message = fake.user_says(chat, user, &prompt);
                        let waited = Instant::now();
                        loop {
                            let texts = fake.texts_to(chat);
                            let first = texts.iter().find(|t| t.contains(&prompt));
                            let whole = first.is_some_and(|first| match last_part_mark(first) {
                                None => true,
                                Some(mark) => {
                                    texts.iter().filter(|t| t.contains(&mark)).count() >= n
                                }
                            });
                            if whole {
                                break;
                            }
                            if waited.elapsed() > Duration::from_secs(180) {
                                bail!("no whole answer to {prompt:?} within 180 s");
                            }
                            std::thread::sleep(Duration::from_millis(50));
                        }
                        turns.push((chat, prompt, message));
                        std::thread::sleep(Duration::from_secs(if chat < 0 { 8 } else { 4 }));
                    }
                    Ok(turns)
                })
            })
            .collect();
        drivers
            .into_iter()
            .map(|d| d.join().expect("a driver"))
            .collect::<Result<Vec<_>>>()
            .map(|all| all.into_iter().flatten().collect())
    })?;
    std::thread::sleep(Duration::from_secs(10));

    let calls = fake.chat_calls();
    let refused = calls.iter().filter(|c| c.refused).count();
    let cosmetic = |c: &relayq_actors::sources::telegram::fake::ChatCall| {
        c.method != "sendMessage" || c.body["disable_notification"] == Value::Bool(true)
    };
    let (mut behind, mut closest_private, mut closest_group) = (0, i64::MAX, i64::MAX);
    let (mut first_private, mut first_group) = (Vec::new(), Vec::new());
    // The turn's end to the answer's first and last parts, private chats and groups.
    let (mut first_part, mut delivery_private, mut delivery_group) =
        (Vec::new(), Vec::new(), Vec::new());
    for (i, &chat) in CHATS.iter().enumerate() {
        let mine: Vec<_> = calls
            .iter()
            .filter(|c| c.chat == chat && !c.refused)
            .collect();
        let shown: Vec<i64> = mine
            .iter()
            .filter(|c| cosmetic(c))
            .map(|c| c.unix_ms)
            .collect();
        let closest = shown
            .windows(2)
            .map(|w| w[1] - w[0])
            .min()
            .unwrap_or(i64::MAX);
        match chat < 0 {
            true => closest_group = closest_group.min(closest),
            false => closest_private = closest_private.min(closest),
        }
        let (submitted, stopped) = hook_times(&logs[i])?;
        for (_, prompt, message) in turns.iter().filter(|t| t.0 == chat) {
            let text = |c: &&&relayq_actors::sources::telegram::fake::ChatCall| {
                c.body["text"].as_str().unwrap_or_default().to_string()
            };
            let Some(first) = mine
                .iter()
                .find(|c| !cosmetic(c) && text(c).contains(prompt))
            else {
                continue;
            };
            let last = match last_part_mark(&text(&first)) {
                None => first.unix_ms,
                Some(mark) => mine
                    .iter()
                    .find(|c| !cosmetic(c) && c.unix_ms >= first.unix_ms && text(c).contains(&mark))
                    .map_or(first.unix_ms, |c| c.unix_ms),
            };
            if let Some(stop) = stopped.get(prompt) {
                behind += mine
                    .iter()
                    .filter(|c| cosmetic(c) && c.unix_ms > stop + 200 && c.unix_ms < last)
                    .count();
                first_part.push((first.unix_ms - stop) as f64);
                match chat < 0 {
                    true => delivery_group.push((last - stop) as f64),
                    false => delivery_private.push((last - stop) as f64),
                }
            }
            let reacted = mine.iter().find(|c| {
                c.method == "setMessageReaction" && c.body["message_id"].as_i64() == Some(*message)
            });
            if let (Some(r), Some(s)) = (reacted, submitted.get(prompt)) {
                match chat < 0 {
                    true => first_group.push((r.unix_ms - s) as f64),
                    false => first_private.push((r.unix_ms - s) as f64),
                }
            }
        }
    }
    let spread = |v: &[f64]| {
        format!(
            "p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms",
            percentile(v, 50.0),
            percentile(v, 99.0),
            percentile(v, 100.0)
        )
    };
    let kinds: HashMap<&str, usize> = calls.iter().fold(HashMap::new(), |mut m, c| {
        *m.entry(c.method.as_str()).or_default() += 1;
        m
    });
    eprintln!(
        "progress, {secs} s, five chats (three private, two groups), {} turns: calls {kinds:?}; \
         refused {refused}; cosmetic calls while an answer waited {behind}; closest cosmetic \
         calls to a chat {closest_private} ms (private), {closest_group} ms (groups)",
        turns.len()
    );
    eprintln!(
        "  first visible progress after the agent took the message: private chats {}; groups {}",
        spread(&first_private),
        spread(&first_group)
    );
    eprintln!(
        "  the turn's end to the answer's first part: {}",
        spread(&first_part)
    );
    eprintln!(
        "  the turn's end to the answer's last part: private chats {}; groups {}",
        spread(&delivery_private),
        spread(&delivery_group)
    );
    if refused > 0 || behind > 0 {
        bail!("relayq went past a limit ({refused} refused) or ahead of an answer ({behind})");
    }
    Ok(())
}

/// When the agent's prompt-submit and turn-end hooks ran for each prompt (unix ms).
fn hook_times(log: &Path) -> Result<(HashMap<String, i64>, HashMap<String, i64>)> {
    let text = std::fs::read_to_string(log)?;
    let (mut submitted, mut stopped) = (HashMap::new(), HashMap::new());
    let mut current: Option<String> = None;
    for line in text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
    {
        if let Some(p) = line["turn_start"].as_str() {
            current = Some(p.to_string());
        }
        let at = (line["at"].as_f64().unwrap_or_default() * 1000.0) as i64;
        match (line["hook"].as_str(), &current) {
            (Some("UserPromptSubmit"), Some(p)) => {
                submitted.entry(p.clone()).or_insert(at);
            }
            (Some("Stop"), Some(p)) => {
                stopped.entry(p.clone()).or_insert(at);
            }
            _ => {}
        }
    }
    Ok((submitted, stopped))
}
