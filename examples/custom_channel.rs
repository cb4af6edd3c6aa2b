//! A custom channel in one file: a type implementing relayq's `Channel` trait, registered under
//! a name that sessions are routed to. relayq runs it in its own channel actor, restarts it (from
//! a clone) if it panics, and records what it answers.
//!
//! This one "delivers" by printing the message in capitals, and refuses (transiently) the first
//! attempt of any message containing "flaky", to show a retry: relayq keeps the row, waits out
//! the backoff, and tries again, still in order for its session.
//!
//! Run: `cargo run --example custom_channel`

use std::time::Duration;

use relayq_actors::{Answer, Channel, ChannelSpec, Delivery, Outcome, Relayq, RelayqConfig};
use relayq_engine::{InboundMessage, QueuePolicy};
use tokio::sync::mpsc;

/// The channel: the only code that talks to "the outside world" (here, stdout).
#[derive(Clone)]
struct ShoutChannel {
    delivered: mpsc::UnboundedSender<String>,
}

impl Channel for ShoutChannel {
    fn deliver(&mut self, delivery: Delivery) -> Answer {
        if delivery.text().contains("flaky") && delivery.attempt == 1 {
            println!(
                "  [shout] row {} attempt 1: pretending the far end is down",
                delivery.id
            );
            return Outcome::retry("far end unavailable").into();
        }
        println!(
            "  [shout] {} <- {}",
            delivery.address(),
            delivery.text().to_uppercase()
        );
        let _ = self.delivered.send(delivery.text().to_string());
        // A channel that waits on the far end answers `Answer::later(async move { ... })`.
        Outcome::delivered().into()
    }

    fn timeout(&self) -> Duration {
        Duration::from_secs(5)
    }
}

#[actix::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::temp_dir().join(format!("relayq-custom-channel-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let mut config = RelayqConfig::new(dir.join("relayq.db"), "shout");
    config.queues.inbound = QueuePolicy {
        backoff: vec![Duration::from_millis(200)],
        ..QueuePolicy::inbound()
    };

    let (tx, mut delivered) = mpsc::unbounded_channel();
    let shout = ChannelSpec::of(ShoutChannel { delivered: tx });
    let relayq = Relayq::builder(config)
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
