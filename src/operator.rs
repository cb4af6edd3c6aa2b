//! What the operator does through either door, the CLI or the HTTP API: answer an agent's
//! question, once, as the chat's buttons do.

use relayq_engine::approvals::{self, AnswerResult, Answerer, Approval, Decision};

/// The operator, answering through `via` (`cli`, `api`) as `name`.
pub fn operator(name: &str, via: &str) -> Answerer {
    Answerer {
        name: name.into(),
        id: std::env::var("USER").ok().filter(|_| via == "cli"),
        via: via.into(),
        chat: None,
    }
}

/// Records the operator's answer (the CLI's, the API's): once, as the chat's buttons do.
pub fn answer_as(
    engine: &relayq_engine::Engine,
    id: &str,
    decision: Decision,
    who: &Answerer,
) -> Result<AnswerResult, relayq_engine::EngineError> {
    engine.write(|tx| approvals::answer_in(tx, id, decision, who))
}

/// What a second answer is told.
pub fn no_longer_open(a: &Approval) -> String {
    format!(
        "approval {} is no longer open: {}; nothing was changed",
        a.id,
        a.outcome()
    )
}
