//! `relayq status`: counts per queue and state, how old the oldest unfinished row is, the
//! channels a far end paused, and the stuck rows (failed, holding up their key) with their
//! last error.

use relayq_engine::chat_sessions::ChatCommand;
use relayq_engine::chat_sessions::CommandState;

use crate::commands::open_existing;
use crate::invocation::{CliError, Invocation};
use crate::output::{excerpt, relative, shown};
use crate::views::Status;

pub fn run(ctx: &Invocation, as_json: bool) -> Result<(), CliError> {
    let engine = open_existing(ctx)?.engine.clone();
    let status = Status::read(&engine)?;
    if as_json {
        println!("{}", status.json());
        return Ok(());
    }
    let Status {
        counts,
        oldest,
        stuck,
        paused,
        held,
        unmatched,
        nodes,
        commands,
        now,
    } = status;
    let age_secs = |created: i64| (now - created).max(0) as f64 / 1000.0;
    for s in &unmatched {
        println!(
            "agent session {} ({}{}) matches no relayq session: no chat hears it. Start the agent \
             with RELAYQ_SESSION=<session>, or in the tmux session relayq delivers to",
            shown(&s.key),
            s.agent,
            s.pane
                .as_deref()
                .map(|p| format!(", pane {p}"))
                .unwrap_or_default()
        );
    }
    if nodes.len() > 1 || engine.database().is_shared() {
        println!(
            "{:<16} {:<8} {:<14} {:>8} {:>7}  SOURCES",
            "NODE", "STATE", "SEEN", "SESSIONS", "LEASES"
        );
        for n in &nodes {
            let state = match (n.alive, n.node.stopped_at) {
                (true, _) => "alive",
                (false, Some(_)) => "stopped",
                (false, None) => "lost",
            };
            println!(
                "{:<16} {:<8} {:<14} {:>8} {:>7}  {}",
                shown(&n.node.name),
                state,
                relative(n.node.seen_at, now),
                n.sessions,
                n.leases,
                match n.sources.is_empty() {
                    true => "-".to_string(),
                    false => n.sources.join(", "),
                }
            );
        }
    }
    // What cannot work now (a refused token), as each live node last said it.
    let several = nodes.len() > 1;
    for n in nodes.iter().filter(|n| n.alive) {
        for why in &n.unready {
            match several {
                true => println!("node {}: {}", shown(&n.node.name), excerpt(why, 300)),
                false => println!("{}", excerpt(why, 300)),
            }
        }
    }
    // Session commands from the chats not yet carried out, and why they wait.
    for c in &commands {
        let command = serde_json::from_str::<ChatCommand>(&c.command)
            .map_or("a command", |typed| typed.word());
        let node = c.node.as_deref().unwrap_or("?");
        let away = !nodes.iter().any(|n| n.alive && n.node.name == node);
        println!(
            "session command {} (/{command}{}) from {} chat {}, asked {}: {} on node {}{}",
            c.id,
            c.session
                .as_deref()
                .map(|s| format!(" {}", shown(s)))
                .unwrap_or_default(),
            c.origin,
            shown(&c.chat),
            relative(c.asked_at, now),
            match c.state {
                CommandState::Running => "being carried out",
                _ => "waiting",
            },
            shown(node),
            match away {
                true => ", which is not running: it is carried out when that node is back",
                false => "",
            }
        );
    }
    if counts.is_empty() {
        println!("no rows in {}", engine.database().describe());
        return Ok(());
    }
    // A reason is cut to its column (`relayq show ID` has it whole); the count stays in place.
    println!("{:<10} {:<10} {:>8}  REASON", "QUEUE", "STATE", "COUNT");
    for c in &counts {
        println!(
            "{:<10} {:<10} {:>8}  {}",
            c.queue,
            c.state,
            c.count,
            c.reason.as_deref().map_or("-".into(), |r| excerpt(r, 50)),
        );
    }
    for o in &oldest {
        println!(
            "oldest pending in {}: row {}, {:.1}s old",
            o.queue,
            o.id,
            age_secs(o.created_at)
        );
    }
    for p in &paused {
        println!(
            "channel {} paused until {}: {}",
            p.channel,
            relative(p.until, now),
            excerpt(&p.reason, 200)
        );
    }
    for p in &held {
        let what = p.key.as_deref().map_or("every key".into(), shown);
        println!(
            "{} {what} paused by the operator {} (resume: POST /v1/resume)",
            p.queue,
            relative(p.paused_at, now)
        );
    }
    if !stuck.is_empty() {
        println!("stuck (failed, holding up their key; `relayq show ID` for the story):");
        for row in &stuck {
            let error = row.last_error.as_deref().unwrap_or_default();
            println!(
                "  row {} {} {} attempt {}, next {}: {}",
                row.id,
                row.queue,
                shown(&row.key),
                row.attempts,
                relative(row.next_attempt_at, now),
                excerpt(error, 100)
            );
        }
    }
    Ok(())
}
