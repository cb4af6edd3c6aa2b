//! A chat adapter embedded in the same process as relayq: the way a Rust bridge uses it.
//!
//! The adapter is an actor that receives chat updates (simulated here) and hands each one to
//! relayq's SupervisorActor as a typed `Enqueue` message. It gets an answer as soon as the message
//! is committed to SQLite, and returns; relayq delivers it to the session's channel in order.
//! A platform that redelivers an update (same origin and message id) is answered `duplicate`.
//!
//! Run: `cargo run --example chat_adapter`

use std::time::Duration;

use actix::prelude::*;
use relayq_actors::channels::file;
use relayq_actors::inbound::supervisor::Enqueue;
use relayq_actors::{ChannelConfig, Relayq, RelayqConfig};
use relayq_engine::{Enqueued, InboundMessage};

/// An update as a chat platform would send it.
struct ChatUpdate {
    update_id: u64,
    chat: &'static str,
    from: &'static str,
    text: &'static str,
}

/// The adapter: knows the platform, not delivery. Holds relayq as a `Recipient<Enqueue>`.
struct TelegramAdapter {
    relayq: Recipient<Enqueue>,
}

impl Actor for TelegramAdapter {
    type Context = Context<Self>;
}

#[derive(actix::Message)]
#[rtype(result = "Result<Enqueued, relayq_actors::ActorError>")]
struct Incoming(ChatUpdate);

impl Handler<Incoming> for TelegramAdapter {
    type Result = ResponseFuture<Result<Enqueued, relayq_actors::ActorError>>;

    fn handle(&mut self, Incoming(update): Incoming, _: &mut Context<Self>) -> Self::Result {
        let mut message =
            InboundMessage::text(&format!("agent-{}", update.chat), "telegram", update.text);
        message.source_message_id = Some(update.update_id.to_string());
        message.source_channel_id = Some(update.chat.to_string());
        message.actor_name = Some(update.from.to_string());
        let relayq = self.relayq.clone();
        // Returns once the row is durable; a real adapter would now show "typing...".
        Box::pin(async move { relayq.send(Enqueue(message)).await? })
    }
}

#[actix::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::temp_dir().join(format!("relayq-chat-adapter-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let out = dir.join("deliveries.jsonl");
    let config = RelayqConfig::new(dir.join("relayq.db"), "agent-inbox");
    let inbox = ChannelConfig::File(file::Config {
        timeout: Duration::from_secs(5),
        ..file::Config::new(out.clone())
    });
    let relayq = Relayq::builder(config)
        .channel("agent-inbox", inbox.spec()?)
        .start()
        .await?;

    let adapter = TelegramAdapter {
        relayq: relayq.supervisor().recipient(),
    }
    .start();
    let updates = [
        ChatUpdate {
            update_id: 1001,
            chat: "42",
            from: "ann",
            text: "run the tests",
        },
        ChatUpdate {
            update_id: 1002,
            chat: "7",
            from: "bob",
            text: "what changed today?",
        },
        ChatUpdate {
            update_id: 1003,
            chat: "42",
            from: "ann",
            text: "then open a PR",
        },
        // Telegram retried its webhook: same update id, not enqueued twice.
        ChatUpdate {
            update_id: 1001,
            chat: "42",
            from: "ann",
            text: "run the tests",
        },
    ];
    for update in updates {
        let (id, text) = (update.update_id, update.text);
        let answer = adapter.send(Incoming(update)).await??;
        println!(
            "update {id} {text:?} -> row {} duplicate={}",
            answer.id, answer.duplicate
        );
    }

    for _ in 0..200 {
        if std::fs::read_to_string(&out)
            .unwrap_or_default()
            .lines()
            .count()
            == 3
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    println!("delivered ({}):", out.display());
    print!("{}", std::fs::read_to_string(&out)?);
    relayq.shutdown(Duration::from_secs(5)).await;
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
