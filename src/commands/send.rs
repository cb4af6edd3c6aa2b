//! `relayq send PATH… [--caption TEXT] [--session S]`: files from an agent (or any script) to
//! the chat its session talks to. Run in the agent's pane, the session is found as its hooks
//! find it; each file is checked (inside the session's directory, not on the deny list, under
//! the channel's limit), written down (path, size, SHA-256, type from its bytes) as an outbound
//! row, and sent in order with the session's other messages. A file refused is said here (exit
//! 2) and in the chat, naming why.

use std::path::PathBuf;

use relayq_actors::files::outgoing;
use relayq_engine::outbound::writes::EnqueueOutbound;

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
    let destination = outgoing::Destination {
        session: session.clone(),
        channel,
        origin,
        limit,
    };
    let mut refused = Vec::new();
    let mut caption = args.caption.unwrap_or_default();
    for path in &args.paths {
        let checked = outgoing::check(path, &cwd, &project, &ctx.config.files, limit, &node);
        let message = match checked {
            Ok(file) => destination.row(file, &std::mem::take(&mut caption)),
            Err(why) => {
                eprintln!("relayq: {why}");
                refused.push(why);
                continue;
            }
        };
        let written = write(&door, message)?;
        match args.json {
            true => println!("{}", serde_json::to_string(&written).expect("serialises")),
            false => println!("{}", written.first.id),
        }
    }
    if refused.is_empty() {
        return Ok(());
    }
    write(&door, destination.refusals(&refused))?;
    Err(CliError::Usage(format!(
        "{} of {} files not sent (the chat is told why)",
        refused.len(),
        args.paths.len()
    )))
}

/// Writes `message` and wakes a running daemon for it.
fn write(
    door: &relayq_engine::WriteDoor,
    message: relayq_engine::outbound::OutboundMessage,
) -> Result<relayq_engine::outbound::Written, CliError> {
    let key = message.destination_key();
    let written = door.apply_now(EnqueueOutbound(vec![message]))?;
    relayq_actors::wake::rows_written_beside(
        door.engine.database().path(),
        relayq_engine::QueueName::Outbound,
        &key,
    );
    Ok(written)
}
