//! `relayq users list | approve CODE | remove SOURCE USER`: the people pairing added to a chat
//! source beyond its config.toml (`allowed_users`, `approvers`). A stranger types `/pair` in
//! the chat and gets a code; an approver there sends `/approve CODE`, or the operator runs
//! `relayq users approve CODE` here. Added people are rows every node shares.

use clap::Subcommand;
use serde_json::json;

use relayq_engine::access::writes::{ApprovePairing, RemoveChatUser};
use relayq_engine::access::{ChatUser, Role};

use crate::commands::{open_existing, open_for_writes};
use crate::invocation::{CliError, Invocation};
use crate::output::{list_printed, shown};

#[derive(Debug, Subcommand)]
pub enum UsersCommand {
    /// The people pairing added, by source
    List {
        #[arg(long)]
        json: bool,
    },
    /// Add the person who was given pairing code CODE (--role approver: they approve too)
    Approve {
        code: String,
        #[arg(long, default_value = "writer", value_parser = ["writer", "approver"])]
        role: String,
    },
    /// Remove USER (their platform id) from source SOURCE (its name, [sources.SOURCE])
    Remove { source: String, user: String },
}

pub fn run(ctx: &Invocation, command: UsersCommand) -> Result<(), CliError> {
    match command {
        UsersCommand::List { json } => list(ctx, json),
        UsersCommand::Approve { code, role } => approve(ctx, &code, &role),
        UsersCommand::Remove { source, user } => remove(ctx, &source, &user),
    }
}

fn user_json(u: &ChatUser) -> serde_json::Value {
    json!(u)
}

fn list(ctx: &Invocation, json: bool) -> Result<(), CliError> {
    let store = open_existing(ctx)?;
    let users = store.engine.chat_users()?;
    let empty = "nobody added by pairing (a stranger's /pair gives a code; `relayq users approve CODE` adds them)";
    if list_printed(&users, json, user_json, empty) {
        return Ok(());
    }
    println!(
        "{:<24} {:<22} {:<20} {:<9} ADDED BY",
        "SOURCE", "USER", "NAME", "ROLE"
    );
    for u in users {
        println!(
            "{:<24} {:<22} {:<20} {:<9} {}",
            shown(&u.origin),
            shown(&u.user_id),
            shown(&u.user_name),
            u.role,
            shown(&u.added_by)
        );
    }
    Ok(())
}

fn approve(ctx: &Invocation, code: &str, role: &str) -> Result<(), CliError> {
    let role = Role::parse(role).expect("clap checks the role");
    let door = open_for_writes(ctx)?;
    let by = std::env::var("USER").unwrap_or_else(|_| "the operator".into());
    let approved = door.apply_now(ApprovePairing {
        code: code.to_string(),
        role,
        by,
    })?;
    // The person's chat is told by a running daemon.
    for key in &approved.told {
        relayq_actors::wake::rows_written_beside(
            door.engine.database().path(),
            relayq_engine::QueueName::Outbound,
            key,
        );
    }
    match approved.added {
        Some(u) => {
            println!(
                "{} ({}) added to {} as {}",
                shown(&u.user_name),
                shown(&u.user_id),
                shown(&u.origin),
                u.role
            );
            Ok(())
        }
        None => Err(CliError::Usage(format!(
            "{} (`relayq users list` shows who was added)",
            approved.line
        ))),
    }
}

fn remove(ctx: &Invocation, source: &str, user: &str) -> Result<(), CliError> {
    let door = open_for_writes(ctx)?;
    let origin = origin_of(ctx, source)?;
    match door.apply_now(RemoveChatUser {
        origin: origin.clone(),
        user_id: user.to_string(),
    })? {
        true => {
            println!("{} removed from {}", shown(user), shown(&origin));
            Ok(())
        }
        false => Err(CliError::Usage(format!(
            "nobody {} was added to {}: `relayq users list` shows who was",
            shown(user),
            shown(&origin)
        ))),
    }
}

/// The origin of source `name` (`discord:NAME`); a name config.toml does not have is refused.
fn origin_of(ctx: &Invocation, name: &str) -> Result<String, CliError> {
    if name.contains(':') {
        return Ok(name.to_string()); // an origin, as `relayq users list` shows it
    }
    match ctx.config.sources.get(name).and_then(|s| s.replies(name)) {
        Some(replies) => Ok(replies.origin),
        None => Err(CliError::Usage(format!(
            "no chat source {} in {}: give a [sources.NAME] name, or the SOURCE column of \
             `relayq users list`",
            shown(name),
            ctx.config_file
                .as_ref()
                .map_or("config.toml".into(), |p| p.display().to_string())
        ))),
    }
}
