//! What a source kind configured in `config.toml` provides: its settings, checked when the file
//! is read and built into a [`Source`] when the daemon starts.

use std::path::Path;
use std::sync::Arc;

use actix::prelude::*;

use super::actor::SourceActor;
use super::contract::Source;
use crate::lifecycle::Stop;
use crate::settings::SettingError;
use crate::store::Store;
use crate::supervisor::EnqueueFrom;

/// A kind of source as `config.toml` names it, implemented by the kind's `Config` in
/// `sources/<kind>/`.
pub trait SourceKind {
    type Source: Source;

    /// Checks what the file alone can tell; the error names the key.
    fn check(&self) -> Result<(), SettingError> {
        Ok(())
    }

    /// Makes the source, reading what comes from the daemon's environment.
    fn build(&self) -> Result<Self::Source, SettingError>;

    /// Makes relative paths relative to `base`, the config file's folder.
    fn resolve_paths(&mut self, _base: &Path) {}
}

/// Checks, then builds the source a kind's settings describe.
pub(super) fn spec<K: SourceKind>(kind: &K) -> Result<SourceSpec, SettingError> {
    kind.check()?;
    kind.build().map(SourceSpec::of)
}

type Start = dyn Fn(String, Store, Recipient<EnqueueFrom>) -> Recipient<Stop> + Send + Sync;

/// How to run one named source.
#[derive(Clone)]
pub struct SourceSpec {
    start: Arc<Start>,
}

impl SourceSpec {
    /// Runs `source` in a [`SourceActor`].
    pub fn of<S: Source>(source: S) -> Self {
        SourceSpec {
            start: Arc::new(move |name, store, enqueue| {
                SourceActor::new(name, source.clone(), store, enqueue)
                    .start()
                    .recipient()
            }),
        }
    }

    /// Starts the source's actor; it hands what it reads to `enqueue`.
    pub fn start(
        &self,
        name: &str,
        store: Store,
        enqueue: Recipient<EnqueueFrom>,
    ) -> Recipient<Stop> {
        (self.start)(name.to_string(), store, enqueue)
    }
}
