//! Where a message's files are written: `<project>/.relayq/inbox/<row id>/`, one folder per
//! row, made by relayq and never through a link; each file is written under a hidden partial
//! name and renamed whole, so a path the agent is given always names a complete file, and a
//! delivery tried again after a crash finds it there instead of fetching it twice.

use std::io;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Component, Path, PathBuf};

/// A row's folder in an inbox.
#[derive(Debug, Clone)]
pub struct RowFolder {
    dir: PathBuf,
}

impl RowFolder {
    /// Makes (or finds) `<base>/<inbox>/<row>`: `inbox` is relative (`.relayq/inbox`), each
    /// of its folders is made mode 0700 (they hold the user's messages) and one that is a link
    /// is refused, so a file written there cannot land outside `base`.
    pub fn make(base: &Path, inbox: &Path, row: i64) -> io::Result<RowFolder> {
        let mut dir = base.to_path_buf();
        let row = row.to_string();
        for part in inbox.components().chain([Component::Normal(row.as_ref())]) {
            let Component::Normal(name) = part else {
                return Err(io::Error::other(format!(
                    "{} is not a relative path without ..",
                    inbox.display()
                )));
            };
            dir.push(name);
            match std::fs::symlink_metadata(&dir) {
                Ok(meta) if meta.file_type().is_dir() => {}
                Ok(_) => {
                    return Err(io::Error::other(format!(
                        "{} is not a folder (a link or a file): files are not written through it",
                        dir.display()
                    )))
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
                        Ok(()) => {}
                        // Made meanwhile by another delivery of the same project: looked at again.
                        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                            if !std::fs::symlink_metadata(&dir)?.file_type().is_dir() {
                                return Err(io::Error::other(format!(
                                    "{} is not a folder",
                                    dir.display()
                                )));
                            }
                        }
                        Err(e) => return Err(e),
                    }
                }
                Err(e) => return Err(e),
            }
        }
        Ok(RowFolder { dir })
    }

    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// Where the `n`th file (from 1), named `name` by its sender, is kept: `01-name`, the name
    /// made safe (see [`safe_file_name`]), so an album's files list in its order.
    pub fn file(&self, n: usize, name: &str) -> PathBuf {
        self.dir.join(format!("{n:02}-{}", safe_file_name(name)))
    }

    /// The file at `path`, when an earlier try wrote it whole.
    pub fn complete(path: &Path) -> Option<u64> {
        let meta = std::fs::symlink_metadata(path).ok()?;
        meta.file_type().is_file().then_some(meta.len())
    }

    /// A new partial file for `path` (hidden, beside it; an old one is replaced), opened
    /// without following a link.
    pub async fn partial(path: &Path) -> io::Result<(PathBuf, tokio::fs::File)> {
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        let partial = path.with_file_name(format!(".{name}.partial"));
        let _ = tokio::fs::remove_file(&partial).await;
        let file = tokio::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&partial)
            .await?;
        Ok((partial, file))
    }

    /// The partial file, written, becomes `path`: synced first, so what a crash leaves is
    /// either no file at `path` or the whole one.
    pub async fn finish(partial: &Path, file: tokio::fs::File, path: &Path) -> io::Result<()> {
        file.sync_all().await?;
        drop(file);
        tokio::fs::rename(partial, path).await
    }
}

/// A sender's file name made safe to keep: letters, digits, `.`, `-` and `_` kept, everything
/// else (slashes, spaces, control characters) `_`, no leading dot, at most 100 characters.
pub fn safe_file_name(name: &str) -> String {
    let kept: String = name
        .chars()
        .map(|c| match c {
            'a'..='z' | 'A'..='Z' | '0'..='9' | '.' | '-' | '_' => c,
            _ => '_',
        })
        .take(100)
        .collect();
    match kept.trim_start_matches('.') {
        "" => "file".into(),
        rest => rest.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_senders_name_cannot_climb_out_of_the_folder_or_hide() {
        assert_eq!(safe_file_name("../../.bashrc"), "_.._.bashrc");
        assert_eq!(safe_file_name(".env"), "env");
        assert_eq!(safe_file_name("a b/c\u{0}.txt"), "a_b_c_.txt");
        assert_eq!(safe_file_name("..."), "file");
        let dir = tempfile::tempdir().unwrap();
        let folder = RowFolder::make(dir.path(), Path::new(".relayq/inbox"), 7).unwrap();
        assert_eq!(
            folder.file(3, "../x.png"),
            dir.path().join(".relayq/inbox/7/03-_x.png")
        );
    }

    #[test]
    fn a_link_in_the_inbox_path_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join(".relayq")).unwrap();
        std::os::unix::fs::symlink(elsewhere.path(), dir.path().join(".relayq/inbox")).unwrap();
        let refused = RowFolder::make(dir.path(), Path::new(".relayq/inbox"), 1).unwrap_err();
        assert!(refused.to_string().contains("not a folder"), "{refused}");
        assert!(std::fs::read_dir(elsewhere.path())
            .unwrap()
            .next()
            .is_none());
        let climbing = RowFolder::make(dir.path(), Path::new("../up"), 1).unwrap_err();
        assert!(climbing.to_string().contains("without .."), "{climbing}");
    }

    #[actix_rt::test]
    async fn a_file_is_at_its_path_only_once_written_whole() {
        use tokio::io::AsyncWriteExt;
        let dir = tempfile::tempdir().unwrap();
        let folder = RowFolder::make(dir.path(), Path::new("inbox"), 2).unwrap();
        let path = folder.file(1, "log.txt");
        let (partial, mut file) = RowFolder::partial(&path).await.unwrap();
        file.write_all(b"half").await.unwrap();
        assert_eq!(RowFolder::complete(&path), None, "not there while partial");
        // A crash here: the next try starts the partial file again.
        let (partial, mut file) = {
            drop(file);
            let _ = partial;
            RowFolder::partial(&path).await.unwrap()
        };
        file.write_all(b"whole file").await.unwrap();
        RowFolder::finish(&partial, file, &path).await.unwrap();
        assert_eq!(RowFolder::complete(&path), Some(10));
        assert!(!partial.exists());
    }
}
