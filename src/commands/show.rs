//! `relayq show ID [--json]`: one row's story, whatever its queue and state: where it goes,
//! where it stands, how many attempts, the last error, when it is tried next, who holds it, and
//! for a delivered row the far end's receipt (its message id, how long the send took).

use relayq_engine::RowDetail;
use serde_json::{json, Value};

use crate::cli::{CliError, Invocation};
use crate::commands::open_existing;
use crate::output::{now_ms, shown, when, with_times};

pub fn run(ctx: &Invocation, id: i64, as_json: bool) -> Result<(), CliError> {
    let store = open_existing(ctx)?;
    let Some(row) = store.engine.row(id)? else {
        return Err(CliError::Usage(format!(
            "there is no row {id} (pruned, or never written; `relayq status` shows what there is)"
        )));
    };
    if as_json {
        println!("{}", row_json(&row));
    } else {
        print!("{}", row_text(&row, now_ms()));
    }
    Ok(())
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
            "payload": payload,
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

fn row_text(row: &RowDetail, now: i64) -> String {
    let mut out = format!(
        "row {}: {} in queue {} (key {})\n",
        row.id,
        row.state,
        row.queue,
        shown(&row.key)
    );
    let mut line =
        |label: &str, value: String| out.push_str(&format!("  {label:<14}{}\n", shown(&value)));
    line("created", when(row.created_at, now));
    line("attempts", row.attempts.to_string());
    match row.state.as_str() {
        "pending" => line("next attempt", when(row.next_attempt_at, now)),
        "leased" => {
            let holder = row.lease_owner.clone().unwrap_or_default();
            let until = row
                .lease_expires_at
                .map(|t| when(t, now))
                .unwrap_or_default();
            line("leased by", format!("{holder} until {until}"));
        }
        _ => {}
    }
    if let Some(at) = row.finished_at {
        line("finished", when(at, now));
    }
    if let Some(took) = row.took_ms {
        let id = row.receipt.as_deref().unwrap_or("no message id");
        line("receipt", format!("{id} (the send took {took} ms)"));
    }
    match (row.send_started, row.state.as_str()) {
        (Some(at), "leased") => line("send started", when(at, now)),
        (Some(at), "pending") => line(
            "send started",
            format!(
                "{}, no answer: the far end may have it (outcome unknown)",
                when(at, now)
            ),
        ),
        _ => {}
    }
    if let Some(reason) = &row.reason {
        line("reason", reason.clone());
    }
    match &row.last_error {
        // Handed to an agent that confirms by itself: in flight, not failed.
        Some(note)
            if row.state == "leased" && note.starts_with(relayq_engine::queue::SUBMITTED) =>
        {
            line("in flight", note.clone())
        }
        Some(error) => line("last error", error.clone()),
        None => {}
    }
    line("payload", row.payload.clone());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(state: &str, send_started: Option<i64>) -> RowDetail {
        RowDetail {
            id: 7,
            queue: relayq_engine::QueueName::Outbound,
            key: r#"["hook","chat"]"#.into(),
            state: state.into(),
            attempts: 1,
            created_at: 0,
            next_attempt_at: 0,
            lease_owner: None,
            lease_expires_at: None,
            last_error: None,
            finished_at: None,
            reason: None,
            payload: "{}".into(),
            receipt: None,
            took_ms: None,
            send_started,
        }
    }

    #[test]
    fn a_pending_row_whose_send_got_no_answer_says_its_outcome_is_unknown() {
        let text = row_text(&row("pending", Some(1_000)), 61_000);
        assert!(
            text.contains("send started") && text.contains("outcome unknown"),
            "{text}"
        );
        let sending = row_text(&row("leased", Some(1_000)), 2_000);
        assert!(
            sending.contains("send started") && !sending.contains("unknown"),
            "{sending}"
        );
        assert!(!row_text(&row("pending", None), 2_000).contains("send started"));
        assert!(row_json(&row("pending", Some(1_000)))["send_started"].is_string());
    }
}
