//! Channels: where delivered rows go. A channel is an actor that handles [`Deliver`] and
//! answers with an [`Outcome`]; it is the only code that talks to the outside world.
//!
//! Adding a channel means adding one file here: its config struct, its actor, its error
//! classification, and a variant in [`ChannelConfig`]. Code that embeds relayq can also
//! register its own channel actor with [`ChannelSpec`] (see `examples/custom_channel.rs`).

pub mod exec;
pub mod file;
pub mod tmux;
pub mod webhook;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use actix::prelude::*;
use relayq_engine::{InboundMessage, OutboundMessage};
use serde::{Deserialize, Serialize};

/// A row to deliver, as a channel sees it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Delivery {
    /// The row id: stable across retries, usable as an idempotency key by the far end.
    pub id: i64,
    pub queue: String,
    /// Which attempt this is, from 1.
    pub attempt: u32,
    /// When the row was written (unix ms).
    pub created_at: i64,
    #[serde(flatten)]
    pub message: Message,
}

/// What is being delivered.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Message {
    /// A chat message for an agent session.
    Inbound(InboundMessage),
    /// A message for a chat platform or webhook.
    Outbound(OutboundMessage),
}

impl Delivery {
    /// Where it goes on the channel: the session for inbound, the destination for outbound.
    pub fn address(&self) -> &str {
        match &self.message {
            Message::Inbound(m) => &m.session,
            Message::Outbound(m) => &m.to,
        }
    }

    /// The agent session it is for or about, when there is one.
    pub fn session(&self) -> Option<&str> {
        match &self.message {
            Message::Inbound(m) => Some(&m.session),
            Message::Outbound(m) => m.session.as_deref(),
        }
    }

    /// The text to type or send.
    pub fn text(&self) -> &str {
        match &self.message {
            Message::Inbound(m) => &m.content,
            Message::Outbound(m) => &m.text,
        }
    }
}

/// Ask a channel to deliver one row.
#[derive(Debug, Clone, actix::Message)]
#[rtype(result = "Outcome")]
pub struct Deliver(pub Delivery);

/// How a delivery went. Expected outcomes are values, not errors.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Delivered,
    /// Transient: try again later (after `after` if the far end said, else per policy).
    Retry {
        error: String,
        after: Option<Duration>,
    },
    /// Permanent: retrying cannot help; the row is dead.
    Permanent {
        reason: String,
    },
    /// The row can no longer be delivered where it is addressed (its session is gone): it is
    /// expired with this reason, neither retried nor kept as a dead letter.
    Expired {
        reason: String,
    },
}

impl Outcome {
    pub fn retry(error: impl Into<String>) -> Self {
        Outcome::Retry {
            error: error.into(),
            after: None,
        }
    }
}

/// Starts a fresh instance of a channel actor; called again if the running one dies.
pub type ChannelFactory = Arc<dyn Fn() -> Recipient<Deliver> + Send + Sync>;

/// How to run one named channel.
#[derive(Clone)]
pub struct ChannelSpec {
    pub factory: ChannelFactory,
    /// A delivery taking longer than this is abandoned and retried.
    pub timeout: Duration,
}

impl ChannelSpec {
    pub fn new(
        timeout: Duration,
        factory: impl Fn() -> Recipient<Deliver> + Send + Sync + 'static,
    ) -> Self {
        ChannelSpec {
            factory: Arc::new(factory),
            timeout,
        }
    }
}

/// The channel kinds configurable in `config.toml` as `[channels.NAME]` with `kind = ...`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum ChannelConfig {
    File(file::FileConfig),
    Exec(exec::ExecConfig),
    Tmux(tmux::TmuxConfig),
    Webhook(webhook::WebhookConfig),
}

impl ChannelConfig {
    /// How long one delivery may take before it is abandoned and retried.
    pub fn timeout(&self) -> Duration {
        match self {
            ChannelConfig::File(c) => c.timeout,
            ChannelConfig::Exec(c) => c.timeout,
            ChannelConfig::Tmux(c) => c.timeout,
            ChannelConfig::Webhook(c) => c.timeout,
        }
    }

    pub fn spec(&self) -> ChannelSpec {
        match self.clone() {
            ChannelConfig::File(c) => ChannelSpec::new(c.timeout, move || {
                file::FileChannel::new(c.clone()).start().recipient()
            }),
            ChannelConfig::Exec(c) => ChannelSpec::new(c.timeout, move || {
                exec::ExecChannel::new(c.clone()).start().recipient()
            }),
            ChannelConfig::Tmux(c) => ChannelSpec::new(c.timeout, move || {
                tmux::TmuxChannel::new(c.clone()).start().recipient()
            }),
            ChannelConfig::Webhook(c) => ChannelSpec::new(c.timeout, move || {
                webhook::WebhookChannel::new(c.clone()).start().recipient()
            }),
        }
    }
}

/// A running channel: its current actor and its timeout.
#[derive(Clone)]
pub struct ChannelHandle {
    pub name: String,
    pub recipient: Recipient<Deliver>,
    pub timeout: Duration,
}

struct Slot {
    spec: ChannelSpec,
    running: Option<Recipient<Deliver>>,
}

/// The registered channels. Hands out the running actor of a channel, starting a new one when
/// the previous one died (a panic in a handler closes the actor's mailbox), so a crashing
/// channel costs a retry, never the daemon.
#[derive(Clone, Default)]
pub struct ChannelDirectory {
    slots: Arc<Mutex<HashMap<String, Slot>>>,
}

impl ChannelDirectory {
    pub fn register(&self, name: &str, spec: ChannelSpec) {
        self.slots.lock().unwrap().insert(
            name.to_string(),
            Slot {
                spec,
                running: None,
            },
        );
    }

    /// Replaces every channel (a config reload): channels not in `specs` are removed, the
    /// others start afresh with their new settings on their next delivery. Deliveries in flight
    /// finish on the actor they started with.
    pub fn replace_all(&self, specs: Vec<(String, ChannelSpec)>) {
        let mut slots = self.slots.lock().unwrap();
        slots.clear();
        for (name, spec) in specs {
            slots.insert(
                name,
                Slot {
                    spec,
                    running: None,
                },
            );
        }
    }

    pub fn contains(&self, name: &str) -> bool {
        self.slots.lock().unwrap().contains_key(name)
    }

    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.slots.lock().unwrap().keys().cloned().collect();
        names.sort();
        names
    }

    /// The live actor of channel `name`, (re)started if needed. Must run inside an actix system.
    pub fn get(&self, name: &str) -> Option<ChannelHandle> {
        let mut slots = self.slots.lock().unwrap();
        let slot = slots.get_mut(name)?;
        let alive = slot.running.as_ref().is_some_and(|r| r.connected());
        if !alive {
            if slot.running.is_some() {
                tracing::warn!(channel = name, "channel actor died; starting a new one");
            }
            slot.running = Some((slot.spec.factory)());
        }
        Some(ChannelHandle {
            name: name.to_string(),
            recipient: slot.running.clone().expect("just started"),
            timeout: slot.spec.timeout,
        })
    }
}

/// Keeps the last `max` bytes' worth of a process's stderr for `last_error`, on a char boundary.
pub(crate) fn tail(text: &str, max: usize) -> String {
    let text = text.trim();
    if text.len() <= max {
        return text.to_string();
    }
    let mut start = text.len() - max;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    format!("...{}", &text[start..])
}

fn default_timeout() -> Duration {
    Duration::from_secs(30)
}
