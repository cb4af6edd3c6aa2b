//! A Discord message's attachments, fetched by the node that delivers it: each attachment's
//! `url` on Discord's CDN (signed by Discord, so no token is sent). Only Discord's CDN hosts,
//! or the configured `api_url`'s (a local Discord), are fetched from: an event cannot make
//! relayq fetch from anywhere else.

use std::time::Duration;

use url::Url;

use crate::files::{DownloadFailed, FileFetcher, Fetching};
use crate::kit::http::HttpClient;

/// Where Discord serves attachments.
const CDN_HOSTS: [&str; 2] = ["cdn.discordapp.com", "media.discordapp.net"];

/// See the module's doc.
pub struct DiscordFiles {
    /// A client without the bot's token.
    client: HttpClient,
    /// The configured `api_url`, whose host may serve files too (a local Discord).
    api: Option<Url>,
}

impl DiscordFiles {
    pub fn new(api: Option<Url>) -> Self {
        let client = HttpClient::new(Duration::from_secs(30), Default::default(), Vec::new());
        DiscordFiles { client, api }
    }

    fn trusted(&self, url: &Url) -> bool {
        let api_host = self
            .api
            .as_ref()
            .is_some_and(|api| api.origin() == url.origin());
        let cdn = url.scheme() == "https" && url.host_str().is_some_and(|h| CDN_HOSTS.contains(&h));
        api_host || cdn
    }
}

impl FileFetcher for DiscordFiles {
    fn fetch<'a>(
        &'a self,
        handle: &'a str,
        limit: u64,
        within: Duration,
        out: &'a mut tokio::fs::File,
    ) -> Fetching<'a> {
        Box::pin(async move {
            let refused = |why: String| DownloadFailed { why, again: false };
            let url = Url::parse(handle)
                .map_err(|e| refused(format!("the attachment's address is not a URL: {e}")))?;
            if !self.trusted(&url) {
                return Err(refused(
                    "the attachment is not on Discord's CDN, so relayq does not fetch it".into(),
                ));
            }
            self.client
                .download_into(self.client.get(url), limit, within, out)
                .await
        })
    }
}
