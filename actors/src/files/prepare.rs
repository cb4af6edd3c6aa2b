//! A leased message's files fetched into its row's folder, and its prompt made: each file
//! tried `fetch_tries` times with backoff (a refusal, a file over the limit, once), a file
//! an earlier try wrote whole taken as it is, and each outcome said in the prompt.

use std::path::Path;
use std::time::Duration;

use relayq_engine::inbound::attachments::{self, Attachment, Fetched, FileKind};
use relayq_engine::inbound::writes::{PrepareInbound, Prepared};
use relayq_engine::{InboundMessage, Lease, Outcome, Queue};

use super::inbox::RowFolder;
use super::{Files, FilesNow};
use crate::delivery::keep_lease_while;
use crate::store::Store;

/// How many of a message's files are fetched at once.
const AT_ONCE: usize = 4;

/// The wait after the first failed try; doubled after each.
const FIRST_BACKOFF: Duration = Duration::from_secs(1);

/// Leased `message`'s files fetched into its session's directory (the agent's, as its hooks
/// report it; else the node's fallback), the lease kept meanwhile, and its prompt kept in its
/// row before anything is pasted: the message to paste, or what to record instead (the lease
/// lost, the database not answering: nothing was pasted, and what was fetched stays for the
/// next try).
pub async fn prepare_leased(
    store: &Store,
    queue: &Queue,
    lease: &Lease,
    files: &Files,
    message: InboundMessage,
) -> Result<InboundMessage, Outcome> {
    let now = files.now();
    let key = message.session.clone();
    let known = store
        .run(move |s| Ok(s.engine.session(&key)?.and_then(|r| r.cwd)))
        .await;
    let dir = match known {
        Ok(Some(cwd)) => std::path::PathBuf::from(cwd),
        // Not yet said by its hooks: the node's own folder, made as needed (private).
        Ok(None) => {
            use std::os::unix::fs::DirBuilderExt;
            let made = std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&now.fallback);
            if let Err(e) = made {
                tracing::warn!(dir = %now.fallback.display(), error = %e, "cannot make the folder for files of sessions whose directory is not known");
            }
            now.fallback.clone()
        }
        Err(e) => return Err(retry(format!("cannot read the session's directory: {e}"))),
    };
    let work = prepare(&now, &dir, lease.id, message);
    let message = keep_lease_while(store, queue, lease, work).await;
    let write = PrepareInbound {
        row: lease.id,
        token: lease.token,
        message: message.clone(),
    };
    match store.apply(write).await {
        Ok(Prepared { kept: true, told }) => {
            store.waking.outbound_written(told.into_iter().collect());
            Ok(message)
        }
        Ok(Prepared { kept: false, .. }) => Err(retry(
            "the lease ended while its files were fetched; not pasted".into(),
        )),
        Err(e) => Err(retry(format!(
            "cannot keep the prompt made of its files: {e}; not pasted"
        ))),
    }
}

/// Tried again shortly; nothing went out.
fn retry(error: String) -> Outcome {
    Outcome::Retry {
        error,
        after: Some(FIRST_BACKOFF),
    }
}

/// `message` (row `row`) with each file fetched into `<dir>/<inbox>/<row>/` and its outcome,
/// and its `prompt` made. Never fails: a file that cannot be had is a line saying why.
pub async fn prepare(
    files: &FilesNow,
    dir: &Path,
    row: i64,
    mut message: InboundMessage,
) -> InboundMessage {
    let folder = RowFolder::make(dir, &files.settings.inbox, row).map_err(|e| {
        format!(
            "its folder in {} cannot be made ({e})",
            dir.join(&files.settings.inbox).display()
        )
    });
    let origin = message.origin.clone();
    // An album's files are fetched a few at a time, each into its own place: the prompt keeps
    // the album's order whatever order they finish in.
    let outcomes: Vec<Option<(Fetched, Option<u64>)>> = {
        use futures_util::StreamExt;
        let folder = &folder;
        let origin = &origin;
        let jobs = message
            .attachments
            .iter()
            .enumerate()
            .map(|(n, a)| async move {
                if a.skipped.is_some() || a.fetched.is_some() {
                    return None;
                }
                let folder = match folder {
                    Ok(folder) => folder,
                    Err(why) => return Some((Fetched::Failed { why: why.clone() }, None)),
                };
                let path = folder.file(n + 1, &file_name(a));
                Some(match fetch(files, origin, a, &path).await {
                    Ok(bytes) => {
                        let fetched = match a.kind {
                            FileKind::Voice => hear(files, &path, a.mime.as_deref()).await,
                            _ => Fetched::Saved {
                                path: path.display().to_string(),
                            },
                        };
                        (fetched, Some(bytes))
                    }
                    Err(why) => (Fetched::Failed { why }, None),
                })
            });
        futures_util::stream::iter(jobs)
            .buffered(AT_ONCE)
            .collect()
            .await
    };
    for (a, outcome) in message.attachments.iter_mut().zip(outcomes) {
        let Some((fetched, bytes)) = outcome else {
            continue;
        };
        if let Fetched::Failed { why } = &fetched {
            tracing::warn!(
                row,
                origin,
                file = a.describe(),
                why,
                "a file of a chat message could not be fetched; the agent is told it is missing"
            );
        }
        a.size = bytes.or(a.size);
        a.fetched = Some(fetched);
    }
    message.prompt = Some(attachments::prompt(&message.content, &message.attachments));
    message
}

/// A voice note's words, or why the agent gets the recording instead.
async fn hear(files: &FilesNow, path: &Path, mime: Option<&str>) -> Fetched {
    let kept = path.display().to_string();
    let Some(transcriber) = &files.transcriber else {
        return Fetched::NotHeard {
            path: kept,
            why: "no [transcription] server is set up".into(),
        };
    };
    match transcriber.hear(path, mime).await {
        Ok(words) => Fetched::Heard { path: kept, words },
        Err(why) => {
            tracing::warn!(
                file = kept,
                why,
                "a voice note was not transcribed; the agent gets the recording"
            );
            Fetched::NotHeard { path: kept, why }
        }
    }
}

/// The name a file is kept under: the sender's, or one for its kind.
fn file_name(a: &Attachment) -> String {
    if let Some(name) = a.name.as_deref().filter(|n| !n.trim().is_empty()) {
        return name.to_string();
    }
    match a.kind {
        FileKind::Photo => "photo.jpg",
        FileKind::Voice => "voice.ogg",
        FileKind::Audio => "audio",
        FileKind::Video => "video.mp4",
        FileKind::VideoNote => "video_note.mp4",
        FileKind::Animation => "animation.mp4",
        FileKind::Document | FileKind::Other => "file",
    }
    .to_string()
}

/// Fetches `a` to `path` whole, or says why not; answers its size.
async fn fetch(files: &FilesNow, origin: &str, a: &Attachment, path: &Path) -> Result<u64, String> {
    if let Some(bytes) = RowFolder::complete(path) {
        return Ok(bytes); // an earlier try, cut before its prompt was kept, wrote it whole
    }
    let Some(fetcher) = files.fetchers.get(origin) else {
        return Err(format!(
            "this node's config has no source for {origin} to fetch it with"
        ));
    };
    let settings = &files.settings;
    let cannot_write = |e: std::io::Error| format!("cannot write {}: {e}", path.display());
    let mut backoff = FIRST_BACKOFF;
    let mut tries = 0;
    loop {
        tries += 1;
        let (partial, mut out) = RowFolder::partial(path).await.map_err(cannot_write)?;
        let fetched = fetcher
            .fetch(
                &a.handle,
                settings.max_bytes,
                settings.fetch_timeout,
                &mut out,
            )
            .await;
        match fetched {
            Ok(bytes) => {
                RowFolder::finish(&partial, out, path)
                    .await
                    .map_err(cannot_write)?;
                return Ok(bytes);
            }
            Err(failed) => {
                drop(out);
                let _ = tokio::fs::remove_file(&partial).await;
                if !failed.again || tries >= settings.fetch_tries {
                    return Err(match tries {
                        1 => failed.why,
                        n => format!("{} (tried {n} times)", failed.why),
                    });
                }
                tracing::info!(
                    origin,
                    tries,
                    why = failed.why,
                    "fetching a file failed; trying again"
                );
                tokio::time::sleep(backoff).await;
                backoff *= 2;
            }
        }
    }
}
