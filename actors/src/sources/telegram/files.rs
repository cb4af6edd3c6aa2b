//! A Telegram bot's files, fetched by the node that delivers the message: `getFile` names the
//! file's path, then the file is streamed from `<api_url>/file/bot<token>/<path>`.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use super::{answered, Inner, TelegramSource};
use crate::files::{DownloadFailed, FileFetcher, Fetching};

/// See the module's doc.
pub struct TelegramFiles {
    inner: Arc<Inner>,
}

impl TelegramFiles {
    pub fn of(source: &TelegramSource) -> Self {
        TelegramFiles {
            inner: source.inner.clone(),
        }
    }
}

impl FileFetcher for TelegramFiles {
    fn fetch<'a>(
        &'a self,
        handle: &'a str,
        limit: u64,
        within: Duration,
        out: &'a mut tokio::fs::File,
    ) -> Fetching<'a> {
        Box::pin(async move {
            let inner = &self.inner;
            let again = |why: String| DownloadFailed { why, again: true };
            let reply = inner
                .call(&inner.short, "getFile", &json!({ "file_id": handle }))
                .await
                .map_err(again)?;
            let found = answered(&reply).map_err(|refused| DownloadFailed {
                // A file_id Telegram does not know stays unknown; its trouble passes.
                again: reply.status == 429 || reply.status >= 500,
                why: format!("getFile: {refused}"),
            })?;
            let Some(remote) = found["file_path"].as_str() else {
                return Err(DownloadFailed {
                    why: "getFile gave no file_path (the file is over the bot limit)".into(),
                    again: false,
                });
            };
            let url = inner
                .files
                .join(remote.trim_start_matches('/'))
                .map_err(|e| DownloadFailed {
                    why: format!("getFile gave a file_path that is not a path: {e}"),
                    again: false,
                })?;
            let request = inner.short.get(url);
            inner.short.download_into(request, limit, within, out).await
        })
    }
}
