//! Files both ways. In: a chat message's files are written down with its row as what arrived
//! (see `relayq_engine::inbound::attachments`); the node that delivers the message fetches
//! them into its session's project before it is pasted ([`prepare`]):
//!
//! ```text
//!   SessionActor leases a row with files ─▶ prepare: each file ─▶ FileFetcher (its source's
//!        platform, retried) ─▶ <project>/.relayq/inbox/<row>/NN-name (whole or not at all)
//!        ─▶ PrepareInbound: the prompt kept in the row, the chat told what it should know
//!        ─▶ pasted like any message (a crash after this pastes the same prompt, fetches nothing)
//! ```

#[cfg(any(test, feature = "test-helpers"))]
pub mod fake_transcriber;
pub mod inbox;
pub mod outbox;
pub mod outgoing;
pub mod prepare;
mod settings;
pub mod transcribe;

use std::collections::HashMap;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::{Arc, RwLock};

pub use crate::kit::http::DownloadFailed;
pub use settings::FileSettings;
pub use transcribe::{Transcriber, TranscriptionSettings};

/// How long sending one file may take (an upload of 50 MB on a slow link), whatever the
/// channel's own timeout for a message.
pub const SEND_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(600);

/// A file's caption when an earlier send of it may have arrived (a crash cut it before the
/// platform answered): sent again, marked so the chat knows it may have it twice.
pub fn marked_if_repeat(caption: &str, possible_repeat: bool) -> String {
    match (possible_repeat, caption.is_empty()) {
        (false, _) => caption.to_string(),
        (true, true) => REPEAT_MARK.to_string(),
        (true, false) => format!("{REPEAT_MARK}\n{caption}"),
    }
}

/// See [`marked_if_repeat`].
pub const REPEAT_MARK: &str = "(sent again after a restart: you may have this file already)";

/// A fetch of one file under way.
pub type Fetching<'a> = Pin<Box<dyn Future<Output = Result<u64, DownloadFailed>> + 'a>>;

/// How a platform's files are fetched, made from its source's settings on every node (the
/// node that delivers a message may not be the one that read it).
pub trait FileFetcher: Send + Sync + 'static {
    /// Streams the file the platform calls `handle` into `out`, at most `limit` bytes, within
    /// `within`; answers the bytes written.
    fn fetch<'a>(
        &'a self,
        handle: &'a str,
        limit: u64,
        within: std::time::Duration,
        out: &'a mut tokio::fs::File,
    ) -> Fetching<'a>;
}

/// A source's fetcher, by the origin its messages carry (`telegram:NAME`).
#[derive(Clone)]
pub struct FileSource {
    pub origin: String,
    pub fetcher: Arc<dyn FileFetcher>,
}

impl std::fmt::Debug for FileSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileSource")
            .field("origin", &self.origin)
            .finish_non_exhaustive()
    }
}

/// What the delivering node fetches files with: the sources' fetchers and the settings,
/// replaced whole when the config is reloaded.
#[derive(Clone, Default)]
pub struct Files {
    current: Arc<RwLock<Arc<FilesNow>>>,
}

/// The fetchers and settings in force.
#[derive(Default)]
pub struct FilesNow {
    pub settings: FileSettings,
    /// Where a session's files go when its directory is not known (beside the database).
    pub fallback: PathBuf,
    pub fetchers: HashMap<String, Arc<dyn FileFetcher>>,
    /// Turns voice notes into words, when `[transcription]` is set.
    pub transcriber: Option<Transcriber>,
    /// The channels that send files: the most each takes, and the words naming it.
    pub limits: HashMap<String, (u64, &'static str)>,
}

/// What [`Files`] is made of, from the config.
#[derive(Debug, Clone, Default)]
pub struct FilesConfig {
    pub settings: FileSettings,
    /// Each source's fetcher.
    pub sources: Vec<FileSource>,
    /// `[transcription]`, if set.
    pub transcription: Option<TranscriptionSettings>,
    /// The channels that send files (see [`FilesNow::limits`]).
    pub limits: HashMap<String, (u64, &'static str)>,
}

impl Files {
    pub fn new(config: FilesConfig, fallback: PathBuf) -> Self {
        let files = Files::default();
        files.replace(config, fallback);
        files
    }

    /// The config was reloaded: what comes next is fetched with these.
    pub fn replace(&self, config: FilesConfig, fallback: PathBuf) {
        let fetchers = config
            .sources
            .into_iter()
            .map(|s| (s.origin, s.fetcher))
            .collect();
        // Checked when the config was read; a token file gone since is said here.
        let transcriber = config.transcription.and_then(|t| match t.transcriber() {
            Ok(transcriber) => Some(transcriber),
            Err(e) => {
                let e = e.within("transcription");
                tracing::error!(error = %e, "voice notes are not transcribed");
                None
            }
        });
        let now = FilesNow {
            settings: config.settings,
            fallback,
            fetchers,
            transcriber,
            limits: config.limits,
        };
        *self.current.write().expect("files lock") = Arc::new(now);
    }

    /// What is in force now.
    pub fn now(&self) -> Arc<FilesNow> {
        self.current.read().expect("files lock").clone()
    }
}
