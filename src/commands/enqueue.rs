//! `relayq enqueue inbound`: checks the message, writes the row, wakes a running daemon.
//! Everything is checked before the database is opened, so bad input writes nothing.

use std::io::Read;

use relayq_engine::{inbound, InboundMessage};

use crate::cli::{CliError, Context, InboundArgs};
use crate::commands::open_inbound;

pub fn inbound(ctx: &Context, args: InboundArgs) -> Result<(), CliError> {
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
                "--payload is not valid JSON ({e}); pass a JSON value such as '{{\"k\":1}}'"
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
        actor_id: args.actor_id,
        actor_name: args.actor_name,
        actor_avatar_url: None,
        payload,
    };
    message.validate(max)?;

    let (engine, queue) = open_inbound(ctx)?;
    let enqueued = queue.enqueue(&message.to_row())?;
    if !enqueued.duplicate {
        relayq_actors::wake::notify(engine.database().path(), inbound::QUEUE, &message.session);
    }
    if args.json {
        println!("{}", serde_json::to_string(&enqueued).expect("serialises"));
    } else {
        println!("{}", enqueued.id);
    }
    Ok(())
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
