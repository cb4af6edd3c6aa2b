//! `relayq send PATH… [--caption TEXT] [--session S]`: files from an agent (or any script) to
//! the chat its session talks to. Run in the agent's pane, the session is found as its hooks
//! find it; each file is checked (inside the session's directory, not on the deny list, under
//! the channel's limit), written down (path, size, SHA-256, type from its bytes) as an outbound
//! row, and sent in order with the session's other messages. A file refused is said here (exit
//! 2) and in the chat, naming why.

use std::path::{Path, PathBuf};

use relayq_actors::files::outgoing::{self, Refused};
use relayq_engine::outbound::writes::EnqueueOutbound;
use relayq_engine::outbound::OutboundMessage;
use relayq_engine::sessions::Origin;

use crate::invocation::{CliError, Invocation};

#[derive(Debug, clap::Args)]
pub struct SendArgs {
    /// The files, sent in this order
    #[arg(required = true, value_name = "PATH")]
    pub paths: Vec<PathBuf>,
    /// A text shown with the first file (at most 1024 characters)
    #[arg(long)]
    pub caption: Option<String>,
    /// The session whose chat gets them [default: `RELAYQ_SESSION`, or the session of the
    /// tmux pane this runs in]
    #[arg(long)]
    pub session: Option<String>,
    /// Print each file's row as {"id":N,"duplicate":bool}
    #[arg(long)]
    pub json: bool,
}

/// Telegram's limit for a caption, the strictest of the platforms.
const MAX_CAPTION_CHARS: usize = 1024;

pub fn run(ctx: &Invocation, args: SendArgs) -> Result<(), CliError> {
    let pane = std::env::var("TMUX_PANE").ok();
    let session = args
        .session
        .or_else(|| std::env::var("RELAYQ_SESSION").ok())
        .filter(|s| !s.trim().is_empty())
        .or_else(|| super::hook::session_of_pane(&ctx.config, pane.as_deref()?))
        .ok_or_else(|| {
            CliError::Usage(
                "which session's chat? give --session NAME, or run this in the agent's tmux pane"
                    .into(),
            )
        })?;
    if let Some(caption) = &args.caption {
        if caption.chars().count() > MAX_CAPTION_CHARS {
            return Err(CliError::Usage(format!(
                "--caption is {} characters, over {MAX_CAPTION_CHARS}: send a long text as a \
                 message of its own",
                caption.chars().count()
            )));
        }
    }
    let door = super::open_for_writes(ctx)?;
    let record = door.engine.session(&session)?.ok_or_else(|| {
        CliError::Usage(format!(
            "relayq knows no session {session:?}: its agent has sent no event yet"
        ))
    })?;
    let Some(origin) = record.origin.clone() else {
        return Err(CliError::Usage(format!(
            "session {session} has no chat to send to: no message from a chat reached it yet"
        )));
    };
    let routes = ctx.config.notice_routes();
    let Some(channel) = routes.replies.get(&origin.origin).cloned() else {
        return Err(CliError::Usage(format!(
            "no channel answers {} (the chat of session {session}): check its source's reply_channel",
            origin.origin
        )));
    };
    let limit = ctx
        .config
        .channel(&channel)
        .map_err(CliError::Usage)?
        .file_limit()
        .ok_or_else(|| CliError::Usage(format!("channel {channel} does not send files")))?;
    // Where the agent works: its hooks say; a session started from a chat has its project's.
    let project = record
        .cwd
        .clone()
        .map(PathBuf::from)
        .or_else(|| {
            let name = record.project.as_ref()?;
            Some(ctx.config.projects.get(name)?.dir.clone())
        })
        .ok_or_else(|| {
            CliError::Usage(format!(
                "relayq does not know session {session}'s directory yet: its agent has sent no event"
            ))
        })?;
    let cwd = std::env::current_dir()
        .map_err(|e| CliError::Failed(format!("cannot read this directory: {e}")))?;
    let node = ctx.config.node.name();
    let mut refused = Vec::new();
    let mut caption = args.caption.unwrap_or_default();
    for path in &args.paths {
        let checked = outgoing::check(path, &cwd, &project, &ctx.config.files, limit, &node);
        let message = match checked {
            Ok(file) => OutboundMessage {
                file: Some(file),
                session: Some(session.clone()),
                event: Some("file".into()),
                thread: origin.thread.clone(),
                ..OutboundMessage::text(&channel, &origin.chat, &std::mem::take(&mut caption))
            },
            Err(why) => {
                eprintln!("relayq: {why}");
                refused.push(why);
                continue;
            }
        };
        let written = door.apply_now(EnqueueOutbound(vec![message.clone()]))?;
        relayq_actors::wake::rows_written_beside(
            door.engine.database().path(),
            relayq_engine::QueueName::Outbound,
            &message.destination_key(),
        );
        match args.json {
            true => println!("{}", serde_json::to_string(&written).expect("serialises")),
            false => println!("{}", written.first.id),
        }
    }
    if refused.is_empty() {
        return Ok(());
    }
    tell_the_chat(&door, &channel, &origin, &session, &refused)?;
    Err(CliError::Usage(format!(
        "{} of {} files not sent (the chat is told why)",
        refused.len(),
        args.paths.len()
    )))
}

/// The chat hears which files the agent tried to send were refused, and why: never a file
/// that silently does not come.
fn tell_the_chat(
    door: &relayq_engine::WriteDoor,
    channel: &str,
    origin: &Origin,
    session: &str,
    refused: &[Refused],
) -> Result<(), CliError> {
    let lines: Vec<String> = refused.iter().map(|r| format!("• {}", shown(r))).collect();
    let text = format!(
        "{session} tried to send files relayq did not send:\n{}",
        lines.join("\n")
    );
    let message = OutboundMessage {
        session: Some(session.into()),
        event: Some("file".into()),
        thread: origin.thread.clone(),
        ..OutboundMessage::text(channel, &origin.chat, &text)
    };
    door.apply_now(EnqueueOutbound(vec![message.clone()]))?;
    relayq_actors::wake::rows_written_beside(
        door.engine.database().path(),
        relayq_engine::QueueName::Outbound,
        &message.destination_key(),
    );
    Ok(())
}

/// A refusal as the chat reads it: the file's name, not where it is on the machine.
fn shown(refused: &Refused) -> String {
    let name = |p: &str| {
        Path::new(p)
            .file_name()
            .map_or(p.to_string(), |n| n.to_string_lossy().into_owned())
    };
    match refused {
        Refused::Unreadable(p, _) => format!("{}: cannot be read", name(p)),
        Refused::NotAFile(p) => format!("{}: not a file", name(p)),
        Refused::Outside(p, _) => format!("{}: outside the session's directory", name(p)),
        Refused::Denied(p, pattern) => format!("{}: on the deny list ({pattern})", name(p)),
        Refused::TooLarge { path, size, limit } => {
            format!("{} ({size}): over {limit}", name(path))
        }
    }
}
