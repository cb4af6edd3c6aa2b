//! `relayq status`: counts per queue and state, how old the oldest unfinished row is, the
//! channels a far end paused, and the stuck rows (failed, holding up their key) with their
//! last error.

use relayq_engine::pauses::Pause;
use relayq_engine::penalties::Penalty;
use relayq_engine::{Engine, EngineError, OldestPending, RowDetail, StateCount};
use serde_json::{json, Value};

use crate::cli::{CliError, Invocation};
use crate::commands::open_existing;
use crate::commands::show::row_json;
use crate::output::{excerpt, relative, shown, with_times};

/// Stuck rows listed at most.
const STUCK_SHOWN: usize = 20;

/// What status reports, read once, then printed as text or JSON.
pub struct Status {
    counts: Vec<StateCount>,
    oldest: Vec<OldestPending>,
    stuck: Vec<RowDetail>,
    paused: Vec<Penalty>,
    /// Queues and keys the operator paused.
    held: Vec<Pause>,
    /// Agent sessions no chat hears (see `sessions::unmatched`).
    unmatched: Vec<relayq_engine::SessionRecord>,
    now: i64,
}

impl Status {
    pub fn read(engine: &Engine) -> Result<Status, EngineError> {
        let now = engine.now();
        Ok(Status {
            counts: engine.counts()?,
            oldest: engine.oldest_pending()?,
            stuck: engine.stuck_heads(STUCK_SHOWN)?,
            paused: relayq_engine::penalties::running(&*engine.database().read()?, now)?,
            held: engine.pauses()?,
            unmatched: relayq_engine::sessions::unmatched(&*engine.database().read()?)?,
            now,
        })
    }
}

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
    if counts.is_empty() {
        println!("no rows in {}", engine.database().path().display());
        return Ok(());
    }
    println!(
        "{:<10} {:<10} {:<20} {:>10}",
        "QUEUE", "STATE", "REASON", "COUNT"
    );
    for c in &counts {
        println!(
            "{:<10} {:<10} {:<20} {:>10}",
            c.queue,
            c.state,
            c.reason.as_deref().unwrap_or("-"),
            c.count
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

/// An operator's pause as JSON (`key` null: the whole queue).
pub fn pause_json(p: &Pause) -> Value {
    with_times(
        serde_json::to_value(p).expect("a pause serialises"),
        &["paused_at"],
    )
}

impl Status {
    /// What `status --json` prints and `GET /v1/status` answers: counts per queue, state and
    /// reason; the oldest pending row of each queue; channels a far end paused; stuck rows.
    pub fn json(&self) -> Value {
        let now = self.now;
        let oldest: Vec<_> = self
            .oldest
            .iter()
            .map(|o| {
                with_times(
                    json!({"queue": o.queue, "id": o.id, "created_at": o.created_at,
                           "age_seconds": (now - o.created_at).max(0) as f64 / 1000.0}),
                    &["created_at"],
                )
            })
            .collect();
        let stuck: Vec<_> = self.stuck.iter().map(row_json).collect();
        let paused: Vec<_> = self
            .paused
            .iter()
            .map(|p| {
                with_times(
                    json!({"channel": p.channel, "until": p.until, "reason": p.reason}),
                    &["until"],
                )
            })
            .collect();
        let held: Vec<_> = self.held.iter().map(pause_json).collect();
        let unmatched: Vec<_> = self
            .unmatched
            .iter()
            .map(crate::commands::session::record_json)
            .collect();
        json!({"counts": self.counts, "oldest_pending": oldest, "paused_channels": paused,
               "paused": held, "stuck": stuck, "unmatched_sessions": unmatched})
    }
}
