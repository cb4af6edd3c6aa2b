//! Files to the chat: what a file must be before it becomes a row (`relayq send`, the outbox).
//! Inside the session's directory (or a folder `[files] send_from` allows), not matching a
//! `deny` glob, a regular file, under the size the channel takes; its type read from its
//! first bytes, its SHA-256 written down so what is sent later is what was checked.

use std::io::Read;
use std::path::{Path, PathBuf};

use relayq_engine::outbound::{OutboundFile, OutboundMessage};
use relayq_engine::sessions::Origin;

use super::FileSettings;

/// Why a file is not sent.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Refused {
    #[error("{0} cannot be read: {1}")]
    Unreadable(String, String),
    #[error("{0} is not a regular file")]
    NotAFile(String),
    #[error("{0} is outside the session's directory {1}: add its folder to [files] send_from to allow it")]
    Outside(String, String),
    #[error("{0} matches the deny list ({1}): files like it hold secrets; remove the pattern from [files] deny to allow it")]
    Denied(String, String),
    #[error("{path} is {size}, over {limit}")]
    TooLarge {
        path: String,
        size: String,
        limit: String,
    },
}

/// Checks the file at `path` (relative to `cwd`) for the session working in `project`, and
/// describes it for its row; `limit` is the most the channel takes, with the words naming it.
pub fn check(
    path: &Path,
    cwd: &Path,
    project: &Path,
    settings: &FileSettings,
    limit: (u64, &str),
    node: &str,
) -> Result<OutboundFile, Refused> {
    let shown = path.display().to_string();
    let unreadable = |e: std::io::Error| Refused::Unreadable(shown.clone(), e.to_string());
    // Links resolved: where the bytes are is what is checked.
    let real = cwd.join(path).canonicalize().map_err(unreadable)?;
    let meta = std::fs::metadata(&real).map_err(unreadable)?;
    if !meta.is_file() {
        return Err(Refused::NotAFile(shown));
    }
    let roots: Vec<PathBuf> = std::iter::once(project.to_path_buf())
        .chain(settings.send_from.iter().cloned())
        .filter_map(|root| root.canonicalize().ok())
        .collect();
    let Some(root) = roots.iter().find(|root| real.starts_with(root)) else {
        return Err(Refused::Outside(shown, project.display().to_string()));
    };
    let inside = real.strip_prefix(root).unwrap_or(&real);
    if let Some(pattern) = denied(inside, &settings.deny) {
        return Err(Refused::Denied(shown, pattern));
    }
    let (max, words) = limit;
    let max = max.min(settings.max_bytes);
    if meta.len() > max {
        let size = relayq_engine::inbound::attachments::human_size(meta.len());
        let limit = match max == settings.max_bytes && max < limit.0 {
            true => format!(
                "[files] max_bytes ({})",
                relayq_engine::inbound::attachments::human_size(max)
            ),
            false => words.to_string(),
        };
        return Err(Refused::TooLarge {
            path: shown,
            size,
            limit,
        });
    }
    let (sha256, mime) = digest(&real).map_err(unreadable)?;
    let name = real
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "file".into());
    Ok(OutboundFile {
        path: real.display().to_string(),
        name,
        size: meta.len(),
        sha256,
        mime,
        node: node.to_string(),
    })
}

/// Where a session's files go: its chat (the origin of its last chat message) on the channel
/// that answers it, and the most that channel takes.
#[derive(Debug, Clone)]
pub struct Destination {
    pub session: String,
    pub channel: String,
    pub origin: Origin,
    pub limit: (u64, &'static str),
}

impl Destination {
    /// The row that sends `file` there, `caption` with it.
    pub fn row(&self, file: OutboundFile, caption: &str) -> OutboundMessage {
        OutboundMessage {
            file: Some(file),
            session: Some(self.session.clone()),
            event: Some("file".into()),
            thread: self.origin.thread.clone(),
            ..OutboundMessage::text(&self.channel, &self.origin.chat, caption)
        }
    }

    /// The message that tells the chat which files were refused, and why: never a file that
    /// silently does not come.
    pub fn refusals(&self, refused: &[Refused]) -> OutboundMessage {
        let lines: Vec<String> = refused
            .iter()
            .map(|r| format!("• {}", r.for_the_chat()))
            .collect();
        let text = format!(
            "{} tried to send files relayq did not send:\n{}",
            self.session,
            lines.join("\n")
        );
        OutboundMessage {
            session: Some(self.session.clone()),
            event: Some("file".into()),
            thread: self.origin.thread.clone(),
            ..OutboundMessage::text(&self.channel, &self.origin.chat, &text)
        }
    }
}

impl Refused {
    /// As the chat reads it: the file's name, not where it is on the machine.
    pub fn for_the_chat(&self) -> String {
        let name = |p: &str| {
            Path::new(p)
                .file_name()
                .map_or(p.to_string(), |n| n.to_string_lossy().into_owned())
        };
        match self {
            Refused::Unreadable(p, _) => format!("{}: cannot be read", name(p)),
            Refused::NotAFile(p) => format!("{}: not a file", name(p)),
            Refused::Outside(p, _) => format!("{}: outside the session's directory", name(p)),
            Refused::Denied(p, pattern) => format!("{}: on the deny list ({pattern})", name(p)),
            Refused::TooLarge { path, size, limit } => {
                format!("{} ({size}): over {limit}", name(path))
            }
        }
    }
}

/// How long a file's row waits for its node once that node is lost (a crash, a restart); a node
/// stopped, or lost longer, will not send it.
const NODE_GRACE: std::time::Duration = std::time::Duration::from_secs(120);

/// What stops a file's row from being sent now, if anything: it is on another node's disk
/// (that node sends it: tried again shortly, uncounted; a node stopped, or lost past
/// [`NODE_GRACE`], never will, and the row ends so the chat's later messages go), or it is no longer the file that was checked (its SHA-256
/// changed: never sent, the row says why).
pub async fn ready_to_send(
    store: &crate::store::Store,
    file: &OutboundFile,
) -> Option<relayq_engine::Outcome> {
    use relayq_engine::Outcome;
    let here = store.engine.node();
    if file.node != here {
        // Its node sends it; a node that is not running cannot, and the chat's later messages
        // are not held behind it for ever: the row ends, saying why.
        let node = file.node.clone();
        let now = store.engine.now();
        let gone = store
            .run(move |s| {
                let nodes = s.engine.nodes()?;
                let found = nodes.iter().find(|n| n.node.name == node);
                Ok(found.is_none_or(|n| {
                    let lost_long = n.node.seen_at < now - NODE_GRACE.as_millis() as i64;
                    !n.alive && (n.node.stopped_at.is_some() || lost_long)
                }))
            })
            .await;
        return Some(match gone {
            Ok(true) => Outcome::Permanent {
                reason: format!(
                    "the file is on node {}, which is not running: not sent (the chat's later \
                     messages are not held behind it); send it again from a running node",
                    file.node
                ),
            },
            Ok(false) | Err(_) => Outcome::Throttled {
                reason: format!("the file is on node {}, which sends it", file.node),
                wait: std::time::Duration::from_secs(2),
                channel_wide: false,
            },
        });
    }
    let path = PathBuf::from(&file.path);
    let read = tokio::task::spawn_blocking(move || digest(&path)).await;
    let changed = |why: String| {
        Some(Outcome::Permanent {
            reason: format!(
                "{} {why} since it was queued: not sent; send it again",
                file.path
            ),
        })
    };
    match read {
        Ok(Ok((sha256, _))) if sha256 == file.sha256 => None,
        Ok(Ok(_)) => changed("changed".into()),
        Ok(Err(e)) => changed(format!("cannot be read ({e})")),
        Err(e) => changed(format!("cannot be read ({e})")),
    }
}

/// The first `deny` pattern `inside` (a path relative to its root) matches: a pattern with a
/// `/` is matched against the whole relative path, one without against each of its parts
/// (`*.pem` denies `keys/a.pem`; `.git/**` everything under `.git`).
fn denied(inside: &Path, deny: &[String]) -> Option<String> {
    let options = glob::MatchOptions {
        case_sensitive: true,
        require_literal_separator: true,
        require_literal_leading_dot: false,
    };
    deny.iter()
        .find(|pattern| {
            let Ok(glob) = glob::Pattern::new(pattern) else {
                return false;
            };
            match pattern.contains('/') {
                true => glob.matches_path_with(inside, options),
                false => inside
                    .components()
                    .any(|part| glob.matches_with(&part.as_os_str().to_string_lossy(), options)),
            }
        })
        .cloned()
}

/// The file's SHA-256 (hex) and the type its first bytes say, read once, a chunk at a time.
pub fn digest(path: &Path) -> std::io::Result<(String, String)> {
    let mut file = std::fs::File::open(path)?;
    let mut context = ring::digest::Context::new(&ring::digest::SHA256);
    let mut chunk = vec![0u8; 64 * 1024];
    let mut start = Vec::new();
    loop {
        let n = file.read(&mut chunk)?;
        if n == 0 {
            break;
        }
        if start.len() < 8192 {
            start.extend_from_slice(&chunk[..n.min(8192 - start.len())]);
        }
        context.update(&chunk[..n]);
    }
    let hex: String = context
        .finish()
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    Ok((hex, mime_of(&start)))
}

/// The type `start` (a file's first bytes) says; `application/octet-stream` when it says none.
pub fn mime_of(start: &[u8]) -> String {
    match infer::get(start) {
        Some(kind) => kind.mime_type().to_string(),
        None if std::str::from_utf8(start).is_ok() => "text/plain".into(),
        None => "application/octet-stream".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PNG: &[u8] = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR";

    fn settings() -> FileSettings {
        FileSettings::default()
    }

    #[test]
    fn a_file_in_the_project_is_described_by_its_bytes_not_its_name() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("plot.txt"), PNG).unwrap();
        let file = check(
            Path::new("plot.txt"),
            dir.path(),
            dir.path(),
            &settings(),
            (50 << 20, "Telegram's 50 MB"),
            "n1",
        )
        .unwrap();
        assert_eq!(
            file.mime, "image/png",
            "its bytes say PNG, whatever its name"
        );
        assert_eq!(file.size, PNG.len() as u64);
        assert_eq!(file.sha256.len(), 64);
        assert_eq!(file.node, "n1");
    }

    #[test]
    fn secrets_links_out_and_folders_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let p = dir.path();
        std::fs::create_dir_all(p.join(".git/objects")).unwrap();
        std::fs::create_dir_all(p.join("keys")).unwrap();
        for name in [
            ".env",
            "keys/server.pem",
            "id_ed25519",
            ".git/objects/ab",
            "ok.txt",
        ] {
            std::fs::write(p.join(name), "x").unwrap();
        }
        std::fs::write(outside.path().join("secret"), "x").unwrap();
        std::os::unix::fs::symlink(outside.path().join("secret"), p.join("link")).unwrap();
        let limit = (50 << 20, "Telegram's 50 MB");
        let refused =
            |name: &str| check(Path::new(name), p, p, &settings(), limit, "n").unwrap_err();
        for (name, pattern) in [
            (".env", ".env"),
            ("keys/server.pem", "*.pem"),
            ("id_ed25519", "id_*"),
            (".git/objects/ab", ".git/**"),
        ] {
            assert_eq!(refused(name), Refused::Denied(name.into(), pattern.into()));
        }
        assert!(
            matches!(refused("link"), Refused::Outside(..)),
            "a link out is where it points"
        );
        assert!(matches!(refused("keys"), Refused::NotAFile(_)));
        assert!(matches!(refused("missing"), Refused::Unreadable(..)));
        let mut allowing = settings();
        allowing.send_from = vec![outside.path().to_path_buf()];
        assert!(check(Path::new("link"), p, p, &allowing, limit, "n").is_ok());
        let small = (0, "Telegram's 50 MB");
        let too_large = check(Path::new("ok.txt"), p, p, &settings(), small, "n").unwrap_err();
        assert!(
            too_large.to_string().contains("over Telegram's 50 MB"),
            "{too_large}"
        );
    }
}
