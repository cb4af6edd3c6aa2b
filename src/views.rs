//! What the operator's two doors show: the JSON views of rows, sessions, pauses, approvals and
//! the status that the CLI prints (`--json`) and the HTTP API answers, one definition each.

use relayq_engine::approvals::Approval;
use relayq_engine::pauses::Pause;
use relayq_engine::penalties::Penalty;
use relayq_engine::{Engine, EngineError, OldestPending, RowDetail, StateCount};
use serde_json::{json, Value};

use crate::output::with_times;

/// Stuck rows listed at most.
const STUCK_SHOWN: usize = 20;

/// Waiting session commands listed at most.
const COMMANDS_SHOWN: i64 = 20;

/// What status reports, read once, then printed as text or JSON.
pub struct Status {
    pub(crate) counts: Vec<StateCount>,
    pub(crate) oldest: Vec<OldestPending>,
    pub(crate) stuck: Vec<RowDetail>,
    pub(crate) paused: Vec<Penalty>,
    /// Queues and keys the operator paused.
    pub(crate) held: Vec<Pause>,
    /// Agent sessions no chat hears (see `sessions::unmatched`).
    pub(crate) unmatched: Vec<relayq_engine::SessionRecord>,
    /// The daemons serving the database, and what each holds.
    pub(crate) nodes: Vec<relayq_engine::nodes::NodeView>,
    /// Session commands from the chats that wait for their node or run on it.
    pub(crate) commands: Vec<relayq_engine::chat_sessions::CommandRow>,
    pub(crate) now: i64,
}

impl Status {
    pub fn read(engine: &Engine) -> Result<Status, EngineError> {
        let now = engine.now();
        Ok(Status {
            counts: engine.counts()?,
            oldest: engine.oldest_pending()?,
            stuck: engine.stuck_heads(STUCK_SHOWN)?,
            paused: engine.channel_penalties()?,
            held: engine.pauses()?,
            unmatched: engine.unmatched_sessions()?,
            nodes: engine.nodes()?,
            commands: engine.waiting_session_commands(COMMANDS_SHOWN)?,
            now,
        })
    }
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
        let unmatched: Vec<_> = self.unmatched.iter().map(session_json).collect();
        let nodes: Vec<_> = self
            .nodes
            .iter()
            .map(|n| {
                let mut node = serde_json::to_value(n).expect("serialises");
                node["seen_seconds_ago"] = json!((now - n.node.seen_at).max(0) as f64 / 1000.0);
                with_times(node, &["started_at", "seen_at", "stopped_at"])
            })
            .collect();
        let commands: Vec<_> = self
            .commands
            .iter()
            .map(|c| {
                let mut command = serde_json::to_value(c).expect("serialises");
                command["command"] = serde_json::from_str(&c.command).unwrap_or(Value::Null);
                with_times(command, &["asked_at", "updated_at"])
            })
            .collect();
        json!({"counts": self.counts, "oldest_pending": oldest, "paused_channels": paused,
               "paused": held, "stuck": stuck, "unmatched_sessions": unmatched,
               "nodes": nodes, "session_commands": commands})
    }
}

/// An operator's pause as JSON (`key` null: the whole queue).
pub fn pause_json(p: &Pause) -> Value {
    with_times(
        serde_json::to_value(p).expect("a pause serialises"),
        &["paused_at"],
    )
}

/// A row as JSON: every field, times in RFC 3339, the payload as JSON.
pub fn row_json(row: &RowDetail) -> Value {
    let payload =
        serde_json::from_str::<Value>(&row.payload).unwrap_or_else(|_| row.payload.clone().into());
    with_times(
        json!({
            "id": row.id, "queue": row.queue, "key": row.key, "state": row.state,
            "attempts": row.attempts, "created_at": row.created_at,
            "next_attempt_at": (row.state == "pending").then_some(row.next_attempt_at),
            "lease_owner": row.lease_owner, "lease_expires_at": row.lease_expires_at,
            "last_error": row.last_error, "finished_at": row.finished_at, "reason": row.reason,
            "receipt": row.receipt, "took_ms": row.took_ms, "send_started": row.send_started,
            "held_by": row.held_by, "payload": payload,
        }),
        &[
            "created_at",
            "send_started",
            "next_attempt_at",
            "lease_expires_at",
            "finished_at",
        ],
    )
}

/// A session as JSON: `relayq session list --json` and `GET /v1/sessions`.
pub fn session_json(s: &relayq_engine::SessionRecord) -> Value {
    let value = serde_json::to_value(s).expect("a session record serialises");
    with_times(
        value,
        &[
            "started_at",
            "ended_at",
            "last_activity_at",
            "agent_state_since",
        ],
    )
}

/// An approval as JSON: `relayq approvals list --json` and the API.
pub fn approval_json(a: &Approval) -> Value {
    let mut value = serde_json::to_value(a).expect("an approval serialises");
    value["outcome"] = a.outcome().into();
    with_times(
        value,
        &[
            "asked_at",
            "expires_at",
            "answered_at",
            "reached_at",
            "told_at",
        ],
    )
}
