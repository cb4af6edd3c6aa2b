//! Buttons under a message, as Discord's message components: action rows (type 1) of buttons
//! (type 2) whose `custom_id` comes back in the click's `INTERACTION_CREATE`.

use relayq_engine::approvals::{button_data, Decision, Scope};
use relayq_engine::outbound::notice::ApprovalAsked;
use relayq_engine::outbound::Button;
use serde_json::{json, Value};

/// Discord's limits: 5 rows of 5 buttons, a label of 80 characters, a `custom_id` of 100.
const MAX_ROWS: usize = 5;
const MAX_IN_ROW: usize = 5;
const MAX_LABEL: usize = 80;
const MAX_CUSTOM_ID: usize = 100;

/// Button styles.
const SECONDARY: u64 = 2;
const SUCCESS: u64 = 3;
const DANGER: u64 = 4;

fn button(label: &str, custom_id: &str, style: u64) -> Value {
    json!({"type": 2, "style": style, "label": crate::kit::cut_chars(label, MAX_LABEL),
           "custom_id": crate::kit::cut_chars(custom_id, MAX_CUSTOM_ID)})
}

/// An approval's buttons: Allow, Deny, and "Allow for this session" where the agent has it.
pub fn approval(approval: &ApprovalAsked) -> Value {
    let answer = |label: &str, decision: Decision, style: u64| {
        button(label, &button_data(&approval.id, decision), style)
    };
    let mut buttons = vec![
        answer("Allow", Decision::Allow(Scope::Once), SUCCESS),
        answer("Deny", Decision::Deny, DANGER),
    ];
    if approval.for_session {
        buttons.push(answer("Allow for this session", Decision::Allow(Scope::Session), SECONDARY));
    }
    json!([{"type": 1, "components": buttons}])
}

/// A message's own buttons, row by row, within Discord's limits.
pub fn rows(rows: &[Vec<Button>]) -> Value {
    let rows: Vec<Value> = rows
        .iter()
        .take(MAX_ROWS)
        .map(|row| {
            let buttons: Vec<Value> = row
                .iter()
                .take(MAX_IN_ROW)
                .map(|b| button(&b.label, &b.data, SECONDARY))
                .collect();
            json!({"type": 1, "components": buttons})
        })
        .collect();
    Value::Array(rows)
}
