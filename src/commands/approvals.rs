//! `relayq approvals list | allow ID | deny ID`: agents' permission questions, answered from
//! the terminal as the chat's buttons answer them (once: a second answer changes nothing and
//! says what the first was). The waiting hook reads the answer within a fraction of a second;
//! a running daemon edits the chat's question to the outcome within a second.

use relayq_engine::approvals::{self, AnswerResult, Answerer, Approval, Decision, Scope};

use crate::cli::{ApprovalsCommand, CliError, Invocation};
use crate::commands::{open, open_existing};
use crate::output::{excerpt, list_printed, relative, shown, with_times};

/// The name an answer from this command is recorded under.
pub const CLI_ANSWERER: &str = "relayq approvals";

pub fn run(ctx: &Invocation, command: ApprovalsCommand) -> Result<(), CliError> {
    match command {
        ApprovalsCommand::List { all, json } => list(ctx, all, json),
        ApprovalsCommand::Allow { id, session, json } => {
            let scope = if session { Scope::Session } else { Scope::Once };
            answer(ctx, &id, Decision::Allow(scope), json)
        }
        ApprovalsCommand::Deny { id, json } => answer(ctx, &id, Decision::Deny, json),
    }
}

/// An approval as JSON: `relayq approvals list --json` and the API.
pub fn approval_json(a: &Approval) -> serde_json::Value {
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

fn list(ctx: &Invocation, all: bool, json: bool) -> Result<(), CliError> {
    let store = open_existing(ctx)?;
    let rows = approvals::list(&*store.engine.database().read()?, !all, 200)?;
    let empty = if all {
        "no approvals yet (an agent's permission question opens one when its chat can answer it)"
    } else {
        "no open approvals (--all shows the answered ones)"
    };
    if list_printed(&rows, json, approval_json, empty) {
        return Ok(());
    }
    let now = store.engine.now();
    println!(
        "{:<7} {:<24} {:<7} {:<10} {:<14} ACTION / OUTCOME",
        "ID", "SESSION", "AGENT", "STATE", "EXPIRES"
    );
    for a in rows {
        println!(
            "{:<7} {:<24} {:<7} {:<10} {:<14} {}: {}\n{:<66}{}",
            a.id,
            shown(&a.session),
            a.agent.as_str(),
            a.state.as_str(),
            relative(a.expires_at, now),
            a.tool.as_deref().unwrap_or("tool"),
            excerpt(&a.action, 80),
            "",
            a.outcome()
        );
    }
    Ok(())
}

fn answer(ctx: &Invocation, id: &str, decision: Decision, json: bool) -> Result<(), CliError> {
    let store = open(ctx)?;
    let who = operator(CLI_ANSWERER, "cli");
    match answer_as(&store.engine, id, decision, &who)? {
        AnswerResult::Recorded(a) => {
            match json {
                true => println!("{}", approval_json(&a)),
                false => println!("approval {}: {}", a.id, a.outcome()),
            }
            Ok(())
        }
        AnswerResult::AlreadyEnded(a) => Err(CliError::Usage(no_longer_open(&a))),
        AnswerResult::NotFound => Err(CliError::Usage(format!(
            "no approval {id:?}: `relayq approvals list --all` shows them"
        ))),
        // The operator answers from no chat, and is always allowed: not met here.
        other @ (AnswerResult::NotHere(_) | AnswerResult::NotAllowed) => {
            Err(CliError::Failed(other.reply()))
        }
    }
}

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
    let now = engine.now();
    engine
        .database()
        .write(|tx| approvals::answer_in(tx, id, decision, who, now))
}

/// What a second answer is told.
pub fn no_longer_open(a: &Approval) -> String {
    format!(
        "approval {} is no longer open: {}; nothing was changed",
        a.id,
        a.outcome()
    )
}
