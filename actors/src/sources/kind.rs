//! What a source kind configured in `config.toml` provides: its settings, checked when the file
//! is read and built into a [`Source`] when the daemon starts.

use std::path::Path;
use std::sync::Arc;

use actix::prelude::*;

use super::actor::SourceActor;
use super::contract::{PushSource, Source};
use crate::channels::ChannelConfig;
use crate::inbound::supervisor::EnqueueFrom;
use crate::lifecycle::Stop;
use crate::pacing::Budgets;
use crate::settings::SettingError;
use crate::store::Store;

/// A kind of source as `config.toml` names it, implemented by the kind's `Config` in
/// `sources/<kind>/`.
pub trait SourceKind {
    /// Checks what the file alone can tell; the error names the key.
    fn check(&self) -> Result<(), SettingError> {
        Ok(())
    }

    /// Makes the source, reading what comes from the daemon's environment: one relayq fetches
    /// from ([`SourceSpec::of`]) or one the platform pushes to ([`SourceSpec::pushed`]).
    fn build(&self) -> Result<SourceSpec, SettingError>;

    /// Makes relative paths relative to `base`, the config file's folder.
    fn resolve_paths(&mut self, _base: &Path) {}

    /// Whether the platform pushes to relayq's HTTP API (a webhook) instead of being fetched.
    fn pushed(&self) -> bool {
        false
    }

    /// How the node that delivers this source's messages fetches their files, if they can
    /// have any (`name` is the source's).
    fn files(&self, _name: &str) -> Option<crate::files::FileSource> {
        None
    }

    /// How the sessions this source feeds answer its chats, if they can (`name` is the
    /// source's, from `[sources.NAME]`).
    fn replies(&self, _name: &str) -> Option<Replies> {
        None
    }
}

/// How sessions answer a source's chats: notices routed `to = "origin"` go to the chat a
/// session's last message came from, through `channel`.
#[derive(Debug, Clone, PartialEq)]
pub struct Replies {
    /// The origin the source's messages carry (`telegram:NAME`).
    pub origin: String,
    /// The channel that sends the answers.
    pub channel: String,
    /// That channel's settings, made from the source's, for when config.toml has no
    /// `[channels.<channel>]` (a bot that reads also writes, with the same token).
    pub default_config: ChannelConfig,
    /// What its chats see while their agents work (see [`progress`](crate::progress)).
    pub progress: Option<crate::progress::settings::ProgressSettings>,
}

/// Checks, then builds the source a kind's settings describe.
pub(super) fn spec<K: SourceKind>(kind: &K) -> Result<SourceSpec, SettingError> {
    kind.check()?;
    kind.build()
}

type Start = dyn Fn(String, Store, Recipient<EnqueueFrom>, Option<Arc<dyn Budgets>>) -> Recipient<Stop>
    + Send
    + Sync;

/// How to run one named source.
#[derive(Clone)]
pub struct SourceSpec {
    run: RunMode,
    /// See [`Source::ready_check`].
    ready_check: Arc<dyn Fn() -> Option<crate::kit::ReadyCheck> + Send + Sync>,
    /// The channel that answers the source's chats, whose budget its cosmetic calls share.
    pub reply_channel: Option<String>,
}

#[derive(Clone)]
enum RunMode {
    /// Read by a [`SourceActor`].
    Fetched(Arc<Start>),
    /// Pushed to the HTTP API (`POST /v1/ingress/NAME`).
    Pushed(Arc<dyn PushSource>),
}

impl SourceSpec {
    /// Runs `source` in a [`SourceActor`].
    pub fn of<S: Source>(source: S) -> Self {
        let asker = source.clone();
        SourceSpec {
            ready_check: Arc::new(move || asker.ready_check()),
            run: RunMode::Fetched(Arc::new(move |name, store, enqueue, budget| {
                SourceActor::new(name, source.clone(), store, enqueue, budget)
                    .start()
                    .recipient()
            })),
            reply_channel: None,
        }
    }

    /// A source the platform pushes to: the HTTP API hands it each push.
    pub fn pushed(source: impl PushSource) -> Self {
        SourceSpec {
            run: RunMode::Pushed(Arc::new(source)),
            ready_check: Arc::new(|| None),
            reply_channel: None,
        }
    }

    /// See [`Source::ready_check`].
    pub fn ready_check(&self) -> Option<crate::kit::ReadyCheck> {
        (self.ready_check)()
    }

    /// The push source, when the platform pushes.
    pub fn push_source(&self) -> Option<Arc<dyn PushSource>> {
        match &self.run {
            RunMode::Pushed(source) => Some(source.clone()),
            RunMode::Fetched(_) => None,
        }
    }

    /// This spec, its chats answered through `channel`.
    pub fn answered_by(mut self, channel: Option<String>) -> Self {
        self.reply_channel = channel;
        self
    }

    /// Starts the source's actor; it hands what it reads to `enqueue`. `budget`: the reply
    /// channel's pacing. A pushed source has no actor: it is told it started.
    pub fn start(
        &self,
        name: &str,
        store: Store,
        enqueue: Recipient<EnqueueFrom>,
        budget: Option<Arc<dyn Budgets>>,
    ) -> Option<Recipient<Stop>> {
        match &self.run {
            RunMode::Fetched(start) => Some(start(name.to_string(), store, enqueue, budget)),
            RunMode::Pushed(source) => {
                source.started(name);
                None
            }
        }
    }
}
