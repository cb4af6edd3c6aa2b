//! What the operator does through either door, the CLI or the HTTP API: answer an agent's
//! question, once, as the chat's buttons do.

use relayq_engine::approvals::writes::AnswerApproval;
use relayq_engine::approvals::{AnswerResult, Answerer, Approval, Decision};

/// The operator, answering through `via` (`cli`, `api`) as `name`.
pub fn operator(name: &str, via: &str) -> Answerer {
    Answerer {
        name: name.into(),
        id: std::env::var("USER").ok().filter(|_| via == "cli"),
        via: via.into(),
        chat: None,
    }
}

/// Records the operator's answer from the CLI: once, as the chat's buttons do (the API
/// submits the same write to the daemon's group commit).
pub fn answer_as(
    door: &relayq_engine::WriteDoor,
    id: &str,
    decision: Decision,
    who: &Answerer,
) -> Result<AnswerResult, relayq_engine::EngineError> {
    door.apply_now(AnswerApproval {
        id: id.to_string(),
        decision,
        who: who.clone(),
    })
}

/// What a second answer is told.
pub fn no_longer_open(a: &Approval) -> String {
    format!(
        "approval {} is no longer open: {}; nothing was changed",
        a.id,
        a.outcome()
    )
}
