//! `relayq enqueue inbound|outbound`: checks the message, writes the row, wakes a running daemon.
//! Everything is checked before the database is opened, so bad input writes nothing.

use clap::Subcommand;
use relayq_actors::wake::Waking;
use relayq_engine::outbound::Kind;
use relayq_engine::MessageType;
use std::io::Read;

use relayq_engine::inbound::writes::EnqueueInbound;
use relayq_engine::outbound::writes::EnqueueOutbound;
use relayq_engine::{
    inbound, outbound, Enqueued, InboundMessage, OutboundMessage, QueueName, Queues,
};

use crate::commands::open_for_writes;
use crate::invocation::{CliError, Invocation};

#[derive(Debug, Subcommand)]
pub enum EnqueueCommand {
    /// A chat message for an agent session
    Inbound(InboundArgs),
    /// A message for a chat platform or webhook, sent through a configured channel
    Outbound(OutboundArgs),
}

#[derive(Debug, clap::Args)]
pub struct OutboundArgs {
    /// The configured channel that sends it ([channels.NAME])
    #[arg(long)]
    pub channel: String,
    /// Where on the channel: a chat id (a Telegram group's is negative: --to -100123), a
    /// user, a channel
    #[arg(long, allow_hyphen_values = true)]
    pub to: String,
    /// Post in this thread of the destination (a Telegram forum topic id, a Slack thread_ts)
    #[arg(long)]
    pub thread: Option<String>,
    /// Answer this message of the destination (its platform id, e.g. a Telegram message_id)
    #[arg(long)]
    pub reply_to: Option<String>,
    #[arg(long, default_value = "final")]
    pub kind: Kind,
    /// Sent to the far end; a second enqueue with the same key on the channel is not written
    #[arg(long)]
    pub idempotency_key: Option<String>,
    /// Print {"id":N,"duplicate":bool}
    #[arg(long)]
    pub json: bool,
    /// The message text, or - to read it from stdin
    pub text: String,
}

#[derive(Debug, clap::Args)]
pub struct InboundArgs {
    /// The agent session to deliver to
    #[arg(long, allow_hyphen_values = true)]
    pub session: String,
    /// Where the message came from (telegram, discord, terminal, ...)
    #[arg(long)]
    pub origin: String,
    /// The platform's message id: a second enqueue with the same origin, chat and id is not
    /// written (Telegram: message_id; Discord: the message id; Slack: the message ts)
    #[arg(long, allow_hyphen_values = true)]
    pub source_id: Option<String>,
    /// The chat the message came from, part of the dedup key: Telegram message ids and Slack
    /// ts are unique per chat only (Telegram: chat.id; Discord: channel_id; Slack: channel)
    #[arg(long, allow_hyphen_values = true)]
    pub source_channel_id: Option<String>,
    /// The thread in that chat (Telegram: message_thread_id; Slack: thread_ts); with the chat,
    /// it becomes the session's origin, where `to = "origin"` notices go
    #[arg(long, allow_hyphen_values = true)]
    pub source_thread_id: Option<String>,
    #[arg(long = "type", default_value = "text")]
    pub message_type: MessageType,
    #[arg(long)]
    pub actor_id: Option<String>,
    #[arg(long)]
    pub actor_name: Option<String>,
    /// Extra JSON handed to the channel with the message
    #[arg(long, value_name = "JSON")]
    pub payload: Option<String>,
    /// Print {"id":N,"duplicate":bool}
    #[arg(long)]
    pub json: bool,
    /// The message text, or - to read it from stdin
    pub text: String,
}

pub fn inbound(ctx: &Invocation, args: InboundArgs) -> Result<(), CliError> {
    let max = ctx.config.daemon.max_body_bytes;
    let content = if args.text == "-" {
        read_stdin(max)?
    } else {
        args.text
    };
    let payload = match args.payload {
        None => None,
        Some(text) => Some(serde_json::from_str(&text).map_err(|e| {
            CliError::Usage(format!(
                "--payload is not valid JSON ({e}); pass a JSON object such as '{{\"k\":1}}'"
            ))
        })?),
    };
    let message = InboundMessage {
        session: args.session,
        origin: args.origin,
        message_type: args.message_type,
        content,
        source_message_id: args.source_id,
        source_channel_id: args.source_channel_id,
        source_thread_id: args.source_thread_id,
        actor_id: args.actor_id,
        actor_name: args.actor_name,
        actor_avatar_url: None,
        payload,
        // Files come from chat sources, which describe them; a caller gives text.
        attachments: Vec::new(),
        album: None,
        album_quiet: std::time::Duration::ZERO,
        prompt: None,
        route_by_chat: false,
        unlisted: false,
    };
    message.validate(max)?;
    // A session its channel can never reach (a tmux session id with ':') is refused here.
    let channel = ctx.config.sessions.channel_for(&message.session);
    if let Some(why) = ctx
        .config
        .channel(channel)
        .ok()
        .and_then(|c| c.refuses_address(&message.session))
    {
        return Err(CliError::Usage(relayq_actors::channels::session_refused(
            &message.session,
            channel,
            &why,
        )));
    }

    let door = open_for_writes(ctx)?;
    let row = message.to_row();
    // A message that names its chat: that chat hears it was dropped, as from the daemon.
    let taken = door.apply_now(EnqueueInbound(message))?;
    let (enqueued, told) = (taken.row, taken.told);
    let store = &door.queues;
    let waking = relayq_actors::wake::SocketWaking::beside(store.engine.database().path());
    waking.outbound_written(told.into_iter().collect());
    if let Some(reason) = enqueued.expired {
        eprintln!(
            "relayq: warning: row {} was expired at once ({reason}): session '{}' has ended, \
             so nothing is delivered to it until it starts again",
            enqueued.id, row.key
        );
    }
    answer(
        store,
        inbound::QUEUE,
        &row.key,
        &enqueued,
        &enqueued,
        args.json,
    );
    Ok(())
}

pub fn outbound(ctx: &Invocation, args: OutboundArgs) -> Result<(), CliError> {
    let max = ctx.config.daemon.max_body_bytes;
    let channel = ctx.config.channel(&args.channel).map_err(CliError::Usage)?;
    let limit = channel.text_limit();
    let text = if args.text == "-" {
        read_stdin(max)?
    } else {
        args.text
    };
    let message = OutboundMessage {
        kind: args.kind,
        idempotency_key: args.idempotency_key,
        thread: args.thread,
        reply_to: args.reply_to,
        ..OutboundMessage::text(&args.channel, &args.to, &text)
    };
    message.validate(max)?;
    if let Some(why) = channel.refuses_address(&message.to) {
        return Err(CliError::Usage(format!("--to: {why}")));
    }
    let door = open_for_writes(ctx)?;
    let written = door.apply_now(EnqueueOutbound(message.parts(limit)))?;
    let store = &door.queues;
    if written.parts > 1 {
        eprintln!(
            "relayq: the text is over channel '{}''s limit of {} characters: written as {} \
             parts, rows {} to {}",
            message.channel,
            limit.map_or(0, |l| l.max),
            written.parts,
            written.first.id,
            written.first.id + i64::from(written.parts) - 1
        );
    }
    let key = message.destination_key();
    answer(
        store,
        outbound::QUEUE,
        &key,
        &written.first,
        &written,
        args.json,
    );
    Ok(())
}

/// Wakes a running daemon for a new row, and prints the id (or, with `--json`, `written`:
/// `{"id":N,"duplicate":bool}`, with `"parts":N` for a split text).
fn answer(
    store: &Queues,
    queue: QueueName,
    key: &str,
    enqueued: &Enqueued,
    written: &impl serde::Serialize,
    json: bool,
) {
    if !enqueued.duplicate && enqueued.expired.is_none() {
        relayq_actors::wake::rows_written_beside(store.engine.database().path(), queue, key);
    }
    if json {
        println!("{}", serde_json::to_string(written).expect("serialises"));
    } else {
        println!("{}", enqueued.id);
    }
}

/// Reads the body from stdin, refusing more than `max` bytes without reading it all.
fn read_stdin(max: usize) -> Result<String, CliError> {
    let mut bytes = Vec::new();
    std::io::stdin()
        .take(max as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| CliError::Failed(format!("cannot read the message from stdin: {e}")))?;
    if bytes.len() > max {
        return Err(CliError::Usage(format!(
            "the message body is over the {max} byte limit (daemon.max_body_bytes)"
        )));
    }
    String::from_utf8(bytes)
        .map_err(|_| CliError::Usage("the message on stdin is not valid UTF-8".into()))
}
