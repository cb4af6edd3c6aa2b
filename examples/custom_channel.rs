//! A custom channel in one file: an actix actor that handles `Deliver` and answers with an
//! `Outcome`, registered under a name that sessions are routed to.
//!
//! This one "delivers" by printing the message in capitals, and refuses (transiently) the first
//! attempt of any message containing "flaky", to show a retry: relayq keeps the row, waits out
//! the backoff, and tries again, still in order for its session.
//!
//! Run: `cargo run --example custom_channel`

use std::time::Duration;

use actix::prelude::*;
use relayq_actors::{ChannelSpec, Deliver, Outcome, Runtime, RuntimeConfig};
use relayq_engine::{InboundMessage, QueuePolicy};
use tokio::sync::mpsc;

/// The channel: the only code that talks to "the outside world" (here, stdout).
struct ShoutChannel {
    delivered: mpsc::UnboundedSender<String>,
}

impl Actor for ShoutChannel {
    type Context = Context<Self>;
}

impl Handler<Deliver> for ShoutChannel {
    type Result = MessageResult<Deliver>;

    fn handle(&mut self, Deliver(delivery): Deliver, _: &mut Context<Self>) -> Self::Result {
        if delivery.text().contains("flaky") && delivery.attempt == 1 {
            println!(
                "  [shout] row {} attempt 1: pretending the far end is down",
                delivery.id
            );
            return MessageResult(Outcome::retry("far end unavailable"));
        }
        println!(
            "  [shout] {} <- {}",
            delivery.address(),
            delivery.text().to_uppercase()
        );
        let _ = self.delivered.send(delivery.text().to_string());
        MessageResult(Outcome::Delivered)
    }
}

#[actix::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::temp_dir().join(format!("relayq-custom-channel-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let mut config = RuntimeConfig::new(dir.join("relayq.db"), "shout");
    config.queues.inbound = QueuePolicy {
        backoff: vec![Duration::from_millis(200)],
        ..QueuePolicy::inbound()
    };

    let (tx, mut delivered) = mpsc::unbounded_channel();
    // The factory is called again if the actor dies, so a panicking channel is restarted.
    let shout = ChannelSpec::new(Duration::from_secs(5), move || {
        ShoutChannel {
            delivered: tx.clone(),
        }
        .start()
        .recipient()
    });
    let relayq = Runtime::builder(config)
        .channel("shout", shout)
        .start()
        .await?;

    let messages = [
        ("alpha", "hello"),
        ("alpha", "a flaky one"),
        ("alpha", "in order after it"),
        ("beta", "hi beta"),
    ];
    for (session, text) in messages {
        relayq
            .enqueue(InboundMessage::text(session, "example", text))
            .await?;
    }
    for _ in 0..messages.len() {
        tokio::time::timeout(Duration::from_secs(10), delivered.recv()).await?;
    }
    relayq.shutdown(Duration::from_secs(5)).await;
    std::fs::remove_dir_all(&dir)?;
    println!("all {} messages delivered", messages.len());
    Ok(())
}
