//! `relayq enqueue inbound|outbound`: checks the message, writes the row, wakes a running daemon.
//! Everything is checked before the database is opened, so bad input writes nothing.

use std::io::Read;

use relayq_engine::{
    inbound, outbound, Enqueued, InboundMessage, OutboundMessage, QueueName, Queues,
};

use crate::cli::{CliError, InboundArgs, Invocation, OutboundArgs};
use crate::commands::open;

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
    };
    message.validate(max)?;

    let store = open(ctx)?;
    let row = message.to_row();
    let q = &store.inbound;
    let routes = ctx.config.notice_routes();
    let (enqueued, told) = store.engine.database().write(|tx| {
        let now = q.now();
        let enqueued = inbound::enqueue_in(q, tx, &message, now)?;
        // A message named its chat: that chat hears it was dropped, as from the daemon.
        let told = relayq_engine::trouble::tell_if_dropped_in(
            &store.outbound,
            tx,
            &routes,
            &message,
            &enqueued,
            now,
        )?;
        Ok((enqueued, told))
    })?;
    relayq_actors::wake::outbound_written(store.engine.database().path(), told);
    if let Some(reason) = enqueued.expired {
        eprintln!(
            "relayq: warning: row {} was expired at once ({reason}): session '{}' has ended, \
             so nothing is delivered to it until it starts again",
            enqueued.id, row.key
        );
    }
    answer(
        &store,
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
    let Some(channel) = ctx.config.channels.get(&args.channel) else {
        let known: Vec<_> = ctx.config.channels.keys().cloned().collect();
        return Err(CliError::Usage(format!(
            "channel '{}' is not configured (configured: {}); add a [channels.{}] table",
            args.channel,
            known.join(", "),
            args.channel
        )));
    };
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
    let store = open(ctx)?;
    let q = &store.outbound;
    let written = store
        .engine
        .database()
        .write(|tx| outbound::enqueue_in(q, tx, &message, limit, q.now()))?;
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
        &store,
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
        relayq_actors::wake::notify(store.engine.database().path(), queue, key);
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
