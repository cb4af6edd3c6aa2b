//! A Slack message's files, fetched by the node that delivers it: each file's
//! `url_private_download`, with the bot token (scope `files:read`). The token goes only to
//! Slack's file host or the configured `api_url`'s, never to an address an event names
//! elsewhere.

use std::time::Duration;

use url::Url;

use crate::files::{DownloadFailed, FileFetcher, Fetching};
use crate::kit::http::HttpClient;

/// Where Slack keeps files.
const FILE_HOST: &str = "files.slack.com";

/// See the module's doc.
pub struct SlackFiles {
    /// Sends the bot token; `None` when the source has none.
    client: Option<HttpClient>,
    /// The configured `api_url`, whose host may serve files too (a local Slack).
    api: Option<Url>,
}

impl SlackFiles {
    pub fn new(client: Option<HttpClient>, api: Option<Url>) -> Self {
        SlackFiles { client, api }
    }

    /// Whether the bot token may be sent to `url`.
    fn trusted(&self, url: &Url) -> bool {
        let api_host = self
            .api
            .as_ref()
            .is_some_and(|api| api.origin() == url.origin());
        api_host || (url.scheme() == "https" && url.host_str() == Some(FILE_HOST))
    }
}

impl FileFetcher for SlackFiles {
    fn fetch<'a>(
        &'a self,
        handle: &'a str,
        limit: u64,
        within: Duration,
        out: &'a mut tokio::fs::File,
    ) -> Fetching<'a> {
        Box::pin(async move {
            let refused = |why: String| DownloadFailed { why, again: false };
            let Some(client) = &self.client else {
                return Err(refused(
                    "the Slack source has no bot token (give token, with the files:read scope)"
                        .into(),
                ));
            };
            let url = Url::parse(handle)
                .map_err(|e| refused(format!("the file's address is not a URL: {e}")))?;
            if !self.trusted(&url) {
                return Err(refused(format!(
                    "the file is not on {FILE_HOST}, so the bot token is not sent there"
                )));
            }
            client.download_into(client.get(url), limit, within, out).await
        })
    }
}
