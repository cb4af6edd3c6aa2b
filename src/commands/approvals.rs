//! `relayq approvals list | allow ID | deny ID`: agents' permission questions, answered from
//! the terminal as the chat's buttons answer them (once: a second answer changes nothing and
//! says what the first was). The waiting hook reads the answer within a fraction of a second;
//! a running daemon edits the chat's question to the outcome within a second.

use clap::Subcommand;

use crate::operator::{answer_as, no_longer_open, operator};
use crate::views::approval_json;
use relayq_engine::approvals::{AnswerResult, Decision, Scope};

use crate::commands::{open_existing, open_for_writes};
use crate::invocation::{CliError, Invocation};
use crate::output::{excerpt, list_printed, relative, shown};

#[derive(Debug, Subcommand)]
pub enum ApprovalsCommand {
    /// The open questions (newest first); --all for the answered ones too
    List {
        #[arg(long)]
        all: bool,
        #[arg(long)]
        json: bool,
    },
    /// Allow the tool call approval ID asks for (--session: and the like, for the agent's session)
    Allow {
        id: String,
        #[arg(long)]
        session: bool,
        #[arg(long)]
        json: bool,
    },
    /// Deny the tool call approval ID asks for
    Deny {
        id: String,
        #[arg(long)]
        json: bool,
    },
}

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

fn list(ctx: &Invocation, all: bool, json: bool) -> Result<(), CliError> {
    let store = open_existing(ctx)?;
    let rows = store.engine.approvals(!all, 200)?;
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
    let door = open_for_writes(ctx)?;
    let who = operator(CLI_ANSWERER, "cli");
    match answer_as(&door, id, decision, &who)? {
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
