//! An agent in a tmux session of its own, started and stopped for a chat: every value reaches
//! tmux as its own argument (the command line is an argv, run without a shell), and the
//! session is addressed by the id tmux gives it, never by a name tmux would parse.

use std::time::{Duration, Instant};

use relayq_engine::Agent;

use crate::channels::tmux::{run, session_id};

/// What starts an agent: its tmux session's name, where, with what, and its environment.
#[derive(Debug, Clone)]
pub struct Start<'a> {
    pub socket: Option<&'a str>,
    /// The session's name: its relayq session key (checked: `A-Z a-z 0-9 _ -`).
    pub name: &'a str,
    pub dir: &'a std::path::Path,
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
}

/// Starts the agent in a new tmux session, unless a session of that name runs already (a
/// start cut by a crash, tried again): true when this call started it.
pub async fn start(s: &Start<'_>) -> Result<bool, String> {
    if session_id(s.socket, s.name).await?.is_some() {
        return Ok(false);
    }
    let dir = s.dir.to_string_lossy();
    let mut args: Vec<String> = [
        "new-session",
        "-d",
        "-s",
        s.name,
        "-c",
        &dir,
        "-x",
        "200",
        "-y",
        "50",
    ]
    .map(String::from)
    .to_vec();
    for (name, value) in &s.env {
        args.push("-e".into());
        args.push(format!("{name}={value}"));
    }
    // More than one word after the options: tmux runs them as an argv, without a shell.
    args.push("--".into());
    args.extend(s.argv.iter().cloned());
    if s.argv.len() == 1 {
        // One word would be read by a shell: `exec` it as the program's own argument.
        args.truncate(args.len() - 1);
        args.extend(["/usr/bin/env".to_string(), s.argv[0].clone()]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    run(s.socket, &args, None).await?;
    Ok(true)
}

/// What the agent is told to leave by itself.
fn exit_command(agent: Agent) -> &'static str {
    match agent {
        Agent::Claude => "/exit",
        Agent::Codex | Agent::Gemini => "/quit",
    }
}

/// Ends the agent of tmux session `name`: its own exit command first, then, after `grace`,
/// SIGTERM to every process of the pane's session (the agent and what it started), then
/// SIGKILL to what is left, then the tmux session. Returns how it ended, for the log; an
/// error only when tmux cannot be asked.
pub async fn stop(
    socket: Option<&str>,
    name: &str,
    agent: Agent,
    grace: Duration,
) -> Result<String, String> {
    let Some(id) = session_id(socket, name).await? else {
        return Ok("no tmux session was left".into());
    };
    let pids = pane_pids(socket, &id).await?;
    let _ = run(
        socket,
        &["send-keys", "-t", &id, "-l", exit_command(agent)],
        None,
    )
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let _ = run(socket, &["send-keys", "-t", &id, "Enter"], None).await;
    let left = left_after(&pids, grace).await;
    if left.is_empty() {
        let _ = run(socket, &["kill-session", "-t", &id], None).await;
        return Ok("the agent exited by itself".into());
    }
    signal_sessions(&pids, libc::SIGTERM);
    let how = match left_after(&pids, grace).await {
        still if still.is_empty() => {
            format!("the agent ended on SIGTERM ({left} outlived its exit command)")
        }
        still => {
            signal_sessions(&pids, libc::SIGKILL);
            left_after(&pids, Duration::from_secs(2)).await;
            format!("the agent was killed (SIGKILL): {still} outlived SIGTERM and the grace")
        }
    };
    let _ = run(socket, &["kill-session", "-t", &id], None).await;
    Ok(how)
}

/// The pids of session `id`'s panes (each leads a process session of its own).
async fn pane_pids(socket: Option<&str>, id: &str) -> Result<Vec<i32>, String> {
    let out = run(
        socket,
        &["list-panes", "-s", "-t", id, "-F", "#{pane_pid}"],
        None,
    )
    .await?;
    Ok(out.lines().filter_map(|l| l.trim().parse().ok()).collect())
}

/// A process of a pane's session: its pid and its command's name.
#[derive(Debug, Clone)]
struct Member {
    pid: i32,
    name: String,
}

/// Every process whose session is one of `leaders`' (a pane's process and what it started),
/// but zombies: they have ended, and only wait for a parent (one that never reaps, as some
/// containers' first process, would hold a stop forever).
fn session_members(leaders: &[i32]) -> Vec<Member> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return leaders
            .iter()
            .map(|&pid| Member {
                pid,
                name: "?".into(),
            })
            .collect();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            // `pid (name) state ppid pgrp session …`; the name may hold spaces and parentheses.
            let (head, rest) = stat.rsplit_once(')')?;
            let name = head.split_once('(').map_or("?", |(_, n)| n).to_string();
            let fields: Vec<&str> = rest.split_whitespace().collect();
            let session = fields.get(3)?.parse::<i32>().ok()?;
            (leaders.contains(&session) && fields.first() != Some(&"Z"))
                .then_some(Member { pid, name })
        })
        .collect()
}

fn signal_sessions(leaders: &[i32], signal: i32) {
    for Member { pid, .. } in session_members(leaders) {
        // SAFETY: kill(2) with a pid read from /proc; a pid gone meanwhile is ESRCH.
        unsafe {
            libc::kill(pid, signal);
        }
    }
}

/// What still runs in `leaders`' sessions after waiting up to `wait` for it to end ("" when
/// nothing does): `name pid`, comma-separated.
async fn left_after(leaders: &[i32], wait: Duration) -> String {
    let until = Instant::now() + wait;
    loop {
        // A walk of /proc: on the blocking pool, not the actors' thread.
        let leaders_now = leaders.to_vec();
        let members = actix_rt::task::spawn_blocking(move || session_members(&leaders_now))
            .await
            .unwrap_or_default();
        if members.is_empty() || Instant::now() >= until {
            let named: Vec<String> = members
                .iter()
                .map(|m| format!("{} {}", m.name, m.pid))
                .collect();
            return named.join(", ");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A zombie (ended, not yet reaped) in the pane's session held every /stop for its
    /// SIGTERM and SIGKILL grace ("killed (SIGKILL)" of an agent that had exited by itself):
    /// it is not counted as running; a live process is.
    #[test]
    fn a_zombie_in_the_panes_session_is_not_counted_as_running() {
        let mut ended = std::process::Command::new("true").spawn().unwrap();
        let mut live = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        // `true` has exited and is not reaped: a zombie until `wait` below.
        std::thread::sleep(Duration::from_millis(300));
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", ended.id())).unwrap();
        assert!(stat.contains(") Z "), "a zombie: {stat}");
        // SAFETY: getsid(0) reads this process's session id; no memory is touched.
        let session = unsafe { libc::getsid(0) };
        let members = session_members(&[session]);
        let pids: Vec<u32> = members.iter().map(|m| m.pid as u32).collect();
        assert!(!pids.contains(&ended.id()), "{members:?}");
        assert!(pids.contains(&live.id()), "{members:?}");
        assert!(members.iter().any(|m| m.name == "sleep"), "{members:?}");
        let _ = live.kill();
        let _ = live.wait();
        let _ = ended.wait();
    }
}
