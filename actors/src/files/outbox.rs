//! The outbox: a folder per session, `<session dir>/.relayq/outbox/<session>/`, whose files
//! relayq sends to the session's chat, as `relayq send` would, on the node its agent runs on.
//!
//! A file is taken once it is complete: one whose name starts with `.` or ends with
//! `.partial` or `.tmp` is being written (write under such a name, then rename it: a rename is
//! atomic), and any other is taken only when its size and time are the same at two looks a
//! second apart (a program that writes in place). Taken, it is renamed into
//! `.queued/<stamp>/` (so it is never taken twice, nor changed under its row) and its row
//! written with a key made of that stamp: a crash between the two finds it in `.queued/` and
//! writes the row then, once.
//! A file refused (the deny list, too large) goes to `.refused/`, and the chat is told why.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use actix::prelude::*;
use relayq_engine::outbound::writes::EnqueueOutbound;
use relayq_engine::sessions::SessionRecord;

use super::inbox::safe_file_name;
use super::outgoing::{self, Destination};
use super::Files;
use crate::store::Store;

/// How often the outboxes are looked at.
const LOOK_EVERY: Duration = Duration::from_secs(1);

/// Where the outbox folders are, inside a session's directory.
pub const OUTBOX: &str = ".relayq/outbox";

/// A session's outbox, inside its directory `dir`.
pub fn outbox_of(dir: &Path, session: &str) -> PathBuf {
    dir.join(OUTBOX).join(safe_file_name(session))
}

/// See the module's doc.
pub struct OutboxActor {
    store: Store,
    files: Files,
    /// What each file looked like at the last look: (size, modified).
    seen: HashMap<PathBuf, (u64, SystemTime)>,
    /// The queued files whose rows this daemon wrote (those queued before it started are
    /// written again once: a duplicate by their key, or the row a crash kept from them).
    written: HashSet<PathBuf>,
    looking: bool,
}

impl OutboxActor {
    pub fn new(store: Store, files: Files) -> Self {
        OutboxActor {
            store,
            files,
            seen: HashMap::new(),
            written: HashSet::new(),
            looking: false,
        }
    }

    fn look(&mut self, ctx: &mut Context<Self>) {
        if self.looking {
            return;
        }
        self.looking = true;
        let store = self.store.clone();
        let files = self.files.clone();
        let seen = std::mem::take(&mut self.seen);
        let mut written = std::mem::take(&mut self.written);
        let work = async move {
            let node = store.engine.node().to_string();
            let sessions = store.run(|s| s.engine.sessions()).await.unwrap_or_default();
            let here: Vec<SessionRecord> = sessions
                .into_iter()
                .filter(|s| s.state == "active" && s.cwd.is_some() && s.origin.is_some())
                .filter(|s| s.node.as_deref().is_none_or(|n| n == node))
                .collect();
            let store_now = store.clone();
            let known = written.clone();
            let looked = tokio::task::spawn_blocking(move || {
                let written = known;
                let mut seen_now = HashMap::new();
                let mut ready = Vec::new();
                for session in &here {
                    let dir = outbox_of(
                        Path::new(session.cwd.as_deref().unwrap_or("/")),
                        &session.key,
                    );
                    ready.extend(
                        complete_files(&dir, &seen, &mut seen_now)
                            .into_iter()
                            .map(|f| (session.clone(), f)),
                    );
                    // Taken before a crash and maybe not written down: written now (once).
                    let queued = queued(&dir).into_iter().filter(|f| !written.contains(f));
                    ready.extend(queued.map(|f| (session.clone(), f)));
                }
                (seen_now, ready)
            })
            .await;
            let (seen_now, ready) = looked.unwrap_or_default();
            for (session, file) in ready {
                written.extend(take(&store_now, &files, &session, &file).await);
            }
            (seen_now, written)
        };
        ctx.spawn(work.into_actor(self).map(|(seen, written), act, _| {
            act.seen = seen;
            act.written = written;
            act.looking = false;
        }));
    }
}

impl Actor for OutboxActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        ctx.run_interval(LOOK_EVERY, |act, ctx| act.look(ctx));
    }
}

/// The complete files in outbox `dir` (see the module's doc), noting each file's look in
/// `seen_now`.
fn complete_files(
    dir: &Path,
    seen: &HashMap<PathBuf, (u64, SystemTime)>,
    seen_now: &mut HashMap<PathBuf, (u64, SystemTime)>,
) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut ready = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let writing = name.starts_with('.') || name.ends_with(".partial") || name.ends_with(".tmp");
        let Ok(meta) = entry.path().symlink_metadata() else {
            continue;
        };
        if writing || !meta.is_file() {
            continue;
        }
        let look = (
            meta.len(),
            meta.modified().unwrap_or(SystemTime::UNIX_EPOCH),
        );
        let path = entry.path();
        match seen.get(&path) == Some(&look) {
            true => ready.push(path),
            false => {
                seen_now.insert(path, look);
            }
        }
    }
    ready.sort();
    ready
}

/// The files of `dir/.queued/<stamp>/` (taken, maybe not written down).
fn queued(dir: &Path) -> Vec<PathBuf> {
    let Ok(stamps) = std::fs::read_dir(dir.join(".queued")) else {
        return Vec::new();
    };
    let mut found: Vec<PathBuf> = stamps
        .flatten()
        .filter_map(|stamp| std::fs::read_dir(stamp.path()).ok())
        .flat_map(|files| files.flatten().map(|f| f.path()))
        .filter(|p| p.is_file())
        .collect();
    found.sort();
    found
}

/// Takes `file` of `session`'s outbox: queued, written down as a row (or refused, the chat
/// told). A file already in `.queued/` is written down under the same key, so a second write
/// of it is a duplicate. Answers the queued file once its row is written.
async fn take(
    store: &Store,
    files: &Files,
    session: &SessionRecord,
    file: &Path,
) -> Option<PathBuf> {
    let now = files.now();
    let destination = destination(store, &now, session)?;
    // Renames and the file's hash (up to its whole size, read once) off the actor's thread.
    let (session_now, file_now, node) = (
        session.clone(),
        file.to_path_buf(),
        store.engine.node().to_string(),
    );
    let made = tokio::task::spawn_blocking(move || {
        row_for(&session_now, &file_now, &now, &destination, &node)
    })
    .await;
    let (queued, message) = made.ok()??;
    let destination_key = message.destination_key();
    match store.apply(EnqueueOutbound(vec![message])).await {
        Ok(_) => {
            store.waking.outbound_written(vec![destination_key]);
            Some(queued)
        }
        Err(e) => {
            tracing::warn!(session = session.key, error = %e, "cannot write a file's row; tried again at the next look");
            None
        }
    }
}

/// `file` of `session`'s outbox queued (renamed into `.queued/<stamp>/`, unless it is there
/// already) and its row made (or, refused, moved to `.refused/` and the chat's notice made).
/// Blocking: renames, and the file read whole for its hash.
fn row_for(
    session: &SessionRecord,
    file: &Path,
    now: &super::FilesNow,
    destination: &Destination,
    node: &str,
) -> Option<(PathBuf, relayq_engine::outbound::OutboundMessage)> {
    let name = file.file_name().unwrap_or_default().to_owned();
    let parent = file.parent().unwrap_or(Path::new("/"));
    let was_queued = parent
        .parent()
        .and_then(Path::file_name)
        .is_some_and(|n| n == ".queued");
    let (queued, dir) = match was_queued {
        true => (
            file.to_path_buf(),
            parent.parent().and_then(Path::parent).unwrap_or(parent),
        ),
        false => {
            let stamp = SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .unwrap_or_default()
                .as_millis();
            let folder = parent.join(".queued").join(stamp.to_string());
            let queued = folder.join(&name);
            let moved =
                std::fs::create_dir_all(&folder).and_then(|()| std::fs::rename(file, &queued));
            if let Err(e) = moved {
                tracing::warn!(file = %file.display(), error = %e, "cannot take a file from the outbox");
                return None;
            }
            (queued, parent)
        }
    };
    let stamp = queued
        .parent()
        .and_then(Path::file_name)
        .unwrap_or_default()
        .to_string_lossy()
        .into_owned();
    let project = PathBuf::from(session.cwd.clone().unwrap_or_default());
    let checked = outgoing::check(
        &queued,
        &project,
        &project,
        &now.settings,
        destination.limit,
        node,
    );
    let key = format!(
        "relayq-outbox-{}-{stamp}-{}",
        session.key,
        name.to_string_lossy()
    );
    let message = match checked {
        Ok(file) => relayq_engine::outbound::OutboundMessage {
            idempotency_key: Some(key),
            ..destination.row(file, "")
        },
        Err(why) => {
            tracing::warn!(session = session.key, error = %why, "a file of the outbox is refused; the chat is told");
            let refused_dir = dir.join(".refused").join(&stamp);
            let _ = std::fs::create_dir_all(&refused_dir)
                .and_then(|()| std::fs::rename(&queued, refused_dir.join(&name)));
            relayq_engine::outbound::OutboundMessage {
                idempotency_key: Some(key),
                ..destination.refusals(&[why])
            }
        }
    };
    Some((queued, message))
}

/// Where `session`'s files go, if its chat is answered by a channel that sends files.
fn destination(
    store: &Store,
    now: &super::FilesNow,
    session: &SessionRecord,
) -> Option<Destination> {
    let origin = session.origin.clone()?;
    let routes = store.door.routes.read().expect("routes lock").clone();
    let channel = routes.replies.get(&origin.origin)?.clone();
    let limit = *now.limits.get(&channel)?;
    Some(Destination {
        session: session.key.clone(),
        channel,
        origin,
        limit,
    })
}
