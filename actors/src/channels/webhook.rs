//! `kind = "webhook"`: POSTs the delivery as JSON to a URL, with an `Idempotency-Key` header
//! that stays the same across retries of a row, so the far end can drop a repeat.
//! 2xx: delivered. 408, 429, 5xx, timeouts and network errors: try again later, after the
//! response's `Retry-After` when it gives one. Any other 4xx: permanent (the request itself is
//! wrong; sending it again cannot help). Redirects: 307 and 308 (which keep the method and the
//! body) are followed within the URL's origin; any other 3xx is permanent, since following a
//! 301, 302 or 303 turns the POST into a bodyless GET whose 2xx would mean nothing was sent.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use actix::prelude::*;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, RETRY_AFTER};
use serde::{Deserialize, Serialize};

use super::{default_timeout, tail, Deliver, Delivery, Message, Outcome};

/// The longest `Retry-After` honoured; a far end asking for more is tried again after this.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(3600);

/// How much of an error response's body is kept as the row's error.
const KEPT_BODY: usize = 1024;

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct WebhookConfig {
    /// Where to POST, e.g. `https://bridge.example.com/relayq`.
    pub url: String,
    /// Extra request headers, e.g. `{ Authorization = "Bearer ..." }`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// A request not answered within this is abandoned and retried.
    #[serde(default = "default_timeout", with = "humantime_serde")]
    pub timeout: Duration,
}

impl WebhookConfig {
    /// Checks the URL and headers; the error says what to fix.
    pub fn check(&self) -> Result<(), String> {
        // The URL may hold a secret (Slack and Discord webhook URLs do): never repeat it.
        let url = reqwest::Url::parse(&self.url)
            .map_err(|e| format!("url is not a URL ({e}); write e.g. \"https://host/path\""))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(format!(
                "url has scheme '{}': use an http or https URL",
                url.scheme()
            ));
        }
        headers(&self.headers).map(|_| ())
    }
}

pub struct WebhookChannel {
    config: WebhookConfig,
    client: reqwest::Client,
}

impl WebhookChannel {
    pub fn new(config: WebhookConfig) -> Self {
        let client = reqwest::Client::builder()
            .timeout(config.timeout)
            .redirect(reqwest::redirect::Policy::custom(
                follow_only_same_origin_307_308,
            ))
            .default_headers(headers(&config.headers).unwrap_or_default())
            .build()
            .expect("the TLS backend initialises");
        WebhookChannel { config, client }
    }
}

impl Actor for WebhookChannel {
    type Context = Context<Self>;
}

impl Handler<Deliver> for WebhookChannel {
    type Result = ResponseFuture<Outcome>;

    fn handle(&mut self, Deliver(delivery): Deliver, _: &mut Context<Self>) -> Self::Result {
        let request = self
            .client
            .post(&self.config.url)
            .header("Idempotency-Key", idempotency_key(&delivery))
            .header("Content-Type", "application/json")
            .body(serde_json::to_vec(&delivery).expect("a delivery always serialises"));
        Box::pin(async move {
            let response = match request.send().await {
                Ok(r) => r,
                // The URL may carry a secret (Slack and Discord webhook URLs do): keep it out.
                Err(e) if e.is_timeout() => {
                    return Outcome::retry("the webhook did not answer in time")
                }
                Err(e) => return Outcome::retry(format!("webhook request failed: {}", cause(&e))),
            };
            let status = response.status().as_u16();
            let retry_after = response
                .headers()
                .get(RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| parse_retry_after(v, SystemTime::now()));
            if response.status().is_redirection() {
                return redirected(status, response.url(), response.headers());
            }
            let body = if response.status().is_success() {
                String::new()
            } else {
                read_some(response).await
            };
            classify(status, retry_after, &body)
        })
    }
}

/// The redirect policy: only 307 and 308 keep the method and the body, and only within the
/// origin the message was addressed to (a few hops at most).
fn follow_only_same_origin_307_308(
    attempt: reqwest::redirect::Attempt<'_>,
) -> reqwest::redirect::Action {
    let keeps_body = matches!(attempt.status().as_u16(), 307 | 308);
    let same_origin = attempt
        .previous()
        .first()
        .is_some_and(|first| first.origin() == attempt.url().origin());
    if keeps_body && same_origin && attempt.previous().len() <= 5 {
        attempt.follow()
    } else {
        attempt.stop()
    }
}

/// A redirect that was not followed: permanent, saying where the URL points, without the path
/// and query, which may hold a secret (Slack and Discord webhook URLs do).
fn redirected(status: u16, from: &reqwest::Url, headers: &HeaderMap) -> Outcome {
    let target = headers
        .get(reqwest::header::LOCATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|location| from.join(location).ok())
        .map(|to| redacted(&to))
        .unwrap_or_else(|| "an unreadable Location".into());
    Outcome::Permanent {
        reason: format!(
            "HTTP {status}: the webhook URL redirects to {target}; relayq follows only 307/308 \
             redirects within the same origin (a 301/302/303 would drop the message body): \
             set the channel's url to where it points"
        ),
    }
}

/// A URL with nothing that may be secret: scheme, host and port; the path as `/…`.
pub fn redacted(url: &reqwest::Url) -> String {
    let origin = url.origin().ascii_serialization();
    if url.path() == "/" && url.query().is_none() {
        origin
    } else {
        format!("{origin}/…")
    }
}

/// What went wrong with a request that got no answer, in words an operator can act on:
/// reqwest's own text is "error sending request"; the cause is down its chain of sources.
/// Never contains the URL.
pub fn cause(error: &reqwest::Error) -> String {
    let (mut chain, mut io_kind) = (Vec::new(), None);
    let mut source: Option<&dyn std::error::Error> = std::error::Error::source(error);
    while let Some(e) = source {
        chain.push(e.to_string());
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            io_kind = Some(io.kind());
        }
        source = e.source();
    }
    let all = chain.join(": ").to_lowercase();
    let what = if error.is_timeout() || all.contains("timed out") {
        "timed out"
    } else if all.contains("dns error") || all.contains("failed to lookup") {
        "DNS lookup failed (is the host name right?)"
    } else if io_kind == Some(std::io::ErrorKind::ConnectionRefused) {
        "connection refused (nothing listens at that host and port)"
    } else if [
        "tls",
        "certificate",
        "handshake",
        "corrupt message",
        "alert",
    ]
    .iter()
    .any(|w| all.contains(w))
        || io_kind == Some(std::io::ErrorKind::InvalidData)
    {
        "TLS failed (is the scheme right, and the certificate valid?)"
    } else if io_kind == Some(std::io::ErrorKind::ConnectionReset) {
        "connection reset by the far end"
    } else {
        "the request could not be sent"
    };
    match chain.last() {
        Some(detail) => format!("{what} ({detail})"),
        None => what.to_string(),
    }
}

/// The key the far end deduplicates on: the message's own, else one fixed per row.
pub fn idempotency_key(delivery: &Delivery) -> String {
    match &delivery.message {
        Message::Outbound(m) => m.idempotency_key_for(delivery.id),
        Message::Inbound(_) => format!("relayq-{}-{}", delivery.queue, delivery.id),
    }
}

/// What an HTTP answer means for the row.
pub fn classify(status: u16, retry_after: Option<Duration>, body: &str) -> Outcome {
    let error = if body.is_empty() {
        format!("HTTP {status}")
    } else {
        format!("HTTP {status}: {body}")
    };
    match status {
        200..=299 => Outcome::Delivered,
        408 | 429 | 500..=599 => Outcome::Retry {
            error,
            after: retry_after,
        },
        400..=499 => Outcome::Permanent { reason: error },
        // 1xx/3xx left after redirects: unexpected, so not final.
        _ => Outcome::Retry {
            error,
            after: retry_after,
        },
    }
}

/// `Retry-After` as delay-seconds or an HTTP date, capped at [`MAX_RETRY_AFTER`].
pub fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    let delay = match value.parse::<u64>() {
        Ok(secs) => Duration::from_secs(secs),
        Err(_) => httpdate::parse_http_date(value)
            .ok()?
            .duration_since(now)
            .unwrap_or_default(),
    };
    Some(delay.min(MAX_RETRY_AFTER))
}

fn headers(map: &BTreeMap<String, String>) -> Result<HeaderMap, String> {
    let mut headers = HeaderMap::new();
    for (name, value) in map {
        let n = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| format!("'{name}' is not a valid HTTP header name"))?;
        let v = HeaderValue::from_str(value).map_err(|_| {
            format!("the value of header '{name}' is not a valid HTTP header value")
        })?;
        headers.insert(n, v);
    }
    Ok(headers)
}

/// The start of an error response's body, for the row's error.
async fn read_some(mut response: reqwest::Response) -> String {
    let mut bytes = Vec::new();
    while bytes.len() < KEPT_BODY {
        match response.chunk().await {
            Ok(Some(chunk)) => bytes.extend_from_slice(&chunk),
            _ => break,
        }
    }
    bytes.truncate(KEPT_BODY);
    tail(&String::from_utf8_lossy(&bytes), KEPT_BODY)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_classes() {
        assert_eq!(classify(204, None, ""), Outcome::Delivered);
        for s in [408, 429, 500, 502, 503] {
            assert!(
                matches!(classify(s, None, ""), Outcome::Retry { .. }),
                "{s}"
            );
        }
        for s in [400, 401, 403, 404, 410, 422] {
            assert!(
                matches!(classify(s, None, "no"), Outcome::Permanent { .. }),
                "{s}"
            );
        }
        assert_eq!(
            classify(429, Some(Duration::from_secs(7)), "slow down"),
            Outcome::Retry {
                error: "HTTP 429: slow down".into(),
                after: Some(Duration::from_secs(7))
            }
        );
    }

    #[test]
    fn retry_after_as_seconds_or_date_capped_at_an_hour() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        assert_eq!(parse_retry_after("3", now), Some(Duration::from_secs(3)));
        let in_90s = httpdate::fmt_http_date(now + Duration::from_secs(90));
        assert_eq!(
            parse_retry_after(&in_90s, now),
            Some(Duration::from_secs(90))
        );
        assert_eq!(parse_retry_after("86400", now), Some(MAX_RETRY_AFTER));
        assert_eq!(parse_retry_after("soon", now), None);
    }

    #[test]
    fn config_check_names_the_problem() {
        let c = |url: &str| WebhookConfig {
            url: url.into(),
            headers: BTreeMap::from([("X-Token".into(), "t".into())]),
            timeout: Duration::from_secs(1),
        };
        c("http://127.0.0.1:9/hook").check().unwrap();
        let secret = c("hooks.example.com/services/T0/B0/s3cr3t")
            .check()
            .unwrap_err();
        assert!(
            secret.contains("is not a URL") && !secret.contains("s3cr3t"),
            "{secret}"
        );
        let e = c("ftp://user:s3cr3t@x/y").check().unwrap_err();
        assert!(e.contains("scheme 'ftp'") && !e.contains("s3cr3t"), "{e}");
        let mut bad = c("http://x/");
        bad.headers.insert("bad header".into(), "v".into());
        assert!(bad
            .check()
            .unwrap_err()
            .contains("not a valid HTTP header name"));
    }
}
