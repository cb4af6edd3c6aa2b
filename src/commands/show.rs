//! `relayq show ID [--json]`: one row's story, whatever its queue and state: where it goes,
//! where it stands, how many attempts, the last error, when it is tried next, who holds it, and
//! for a delivered row the far end's receipt (its message id, how long the send took).

use relayq_engine::RowDetail;

use crate::commands::open_existing;
use crate::invocation::{CliError, Invocation};
use crate::output::{now_ms, shown, when};

pub fn run(ctx: &Invocation, id: i64, as_json: bool) -> Result<(), CliError> {
    let store = open_existing(ctx)?;
    let Some(row) = store.engine.row(id)? else {
        return Err(CliError::Usage(format!(
            "there is no row {id} (pruned, or never written; `relayq status` shows what there is)"
        )));
    };
    if as_json {
        println!("{}", crate::views::row_json(&row));
    } else {
        print!("{}", row_text(&row, now_ms()));
    }
    Ok(())
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
            if let Some(head) = row.held_by {
                line(
                    "in a run",
                    format!("held by row {head}'s lease, sent in order after it"),
                );
            }
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
            held_by: None,
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
        assert!(crate::views::row_json(&row("pending", Some(1_000)))["send_started"].is_string());
    }
}
