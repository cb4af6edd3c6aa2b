//! The HTTP kit for channels that call HTTP APIs: one client builder, `Retry-After` parsing,
//! bounded body reading, and failure words that never hold a URL or a secret.
//!
//! ```text
//!   HttpClient::send(request) ──▶ Ok(Reply { status, retry_after, body })  the far end answered
//!                             └─▶ Err(Outcome)  no answer (timeout, refused, TLS, DNS: Retry)
//!                                               or a redirect not followed (Permanent)
//! ```
//! A kind classifies the `Reply` by its platform's rules; [`throttled`] and [`Reply::error`]
//! are the parts every platform shares.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use reqwest::header::{HeaderMap, HeaderName, HeaderValue, LOCATION, RETRY_AFTER};
use reqwest::redirect::{Action, Attempt, Policy};

use super::head;
use super::secret::Secret;
use crate::channels::{Outcome, SettingError};

/// The longest `Retry-After` honoured; a far end asking for more is tried again after this.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(3600);

/// The most of an answer's body that is read: platforms answer in a few KiB.
pub const MAX_BODY: usize = 64 * 1024;

/// How much of an error answer's body is kept as the row's error.
pub const KEPT_BODY: usize = 1024;

/// What replaces a secret found in text about to be kept or logged.
pub const REDACTED: &str = "[redacted]";

/// A channel's HTTP client, and the secrets none of its failure texts may show.
#[derive(Clone)]
pub struct HttpClient {
    client: reqwest::Client,
    secrets: Arc<[Secret]>,
}

/// The far end's answer: status, `Retry-After`, the headers (Discord's rate-limit buckets are
/// there) and the body (at most [`MAX_BODY`], with every secret of the channel taken out).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Reply {
    pub status: u16,
    /// `Retry-After`, read when the answer arrived (an HTTP date counts from then).
    pub retry_after: Option<Duration>,
    pub headers: HeaderMap,
    pub body: String,
}

impl HttpClient {
    /// A client whose requests time out after `timeout`, sending `headers` with each request,
    /// following redirects only as [`same_origin_307_308`] does. `secrets` are scrubbed from
    /// every text this client makes (the token in a bot API's URL, a webhook URL).
    pub fn new(timeout: Duration, headers: HeaderMap, secrets: Vec<Secret>) -> Self {
        let client = reqwest::Client::builder()
            .timeout(timeout)
            .redirect(Policy::custom(same_origin_307_308))
            .default_headers(headers)
            .build()
            .expect("the TLS backend initialises");
        HttpClient {
            client,
            secrets: secrets.into(),
        }
    }

    /// The underlying client, to build requests with.
    pub fn client(&self) -> &reqwest::Client {
        &self.client
    }

    /// Sends `request` and reads the answer. `Err` is the outcome when there is no answer to
    /// classify: no answer at all (retry) or a redirect that was not followed (permanent).
    pub async fn send(&self, request: reqwest::RequestBuilder) -> Result<Reply, Outcome> {
        let response = request.send().await.map_err(|e| {
            let error = match e.is_timeout() {
                true => "the far end did not answer in time".to_string(),
                false => self.scrub(&format!("request failed: {}", describe(&e))),
            };
            // No connection (DNS, refused, TLS): nothing went out. Past that, the far end may
            // have the request.
            match e.is_connect() {
                true => Outcome::Unreachable { error },
                false => Outcome::unknown(error),
            }
        })?;
        let status = response.status().as_u16();
        let retry_after = retry_after(response.headers(), SystemTime::now());
        if response.status().is_redirection() {
            return Err(redirected(status, response.url(), response.headers()));
        }
        let headers = response.headers().clone();
        let body = read_body(response, MAX_BODY).await;
        Ok(Reply {
            status,
            retry_after,
            headers,
            body: self.scrub(&String::from_utf8_lossy(&body)),
        })
    }

    /// `text` with each of the channel's secrets replaced by [`REDACTED`].
    pub fn scrub(&self, text: &str) -> String {
        self.secrets
            .iter()
            .map(Secret::expose)
            .filter(|s| !s.is_empty())
            .fold(text.to_string(), |text, secret| {
                text.replace(secret, REDACTED)
            })
    }
}

impl Reply {
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// `HTTP 503: <start of the body>`, for the row's error.
    pub fn error(&self) -> String {
        match head(&self.body, KEPT_BODY) {
            body if body.is_empty() => format!("HTTP {}", self.status),
            body => format!("HTTP {}: {body}", self.status),
        }
    }

    /// The body as JSON of type `T`, if it is.
    pub fn json<T: serde::de::DeserializeOwned>(&self) -> Option<T> {
        serde_json::from_str(&self.body).ok()
    }
}

/// A 429 that says when to come back: throttled until then (capped at [`MAX_RETRY_AFTER`]),
/// the attempt not counted. `wait` overrides the header when the platform says it in its body
/// (Telegram's `parameters.retry_after`, Discord's `retry_after`).
pub fn throttled(reply: &Reply, wait: Option<Duration>) -> Option<Outcome> {
    let wait = wait.map(|w| w.min(MAX_RETRY_AFTER)).or(reply.retry_after)?;
    (reply.status == 429).then(|| Outcome::Throttled {
        reason: reply.error(),
        wait,
        channel_wide: false,
    })
}

/// `Retry-After` of `headers`, as delay-seconds or an HTTP date.
pub fn retry_after(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    headers
        .get(RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| parse_retry_after(v, now))
}

/// `Retry-After` as delay-seconds (fractions allowed, as some platforms send) or an HTTP date,
/// capped at [`MAX_RETRY_AFTER`].
pub fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    let delay = match value.parse::<f64>() {
        Ok(secs) if secs.is_finite() && secs >= 0.0 => {
            Duration::from_secs_f64(secs.min(MAX_RETRY_AFTER.as_secs_f64()))
        }
        Ok(_) => return None,
        Err(_) => httpdate::parse_http_date(value)
            .ok()?
            .duration_since(now)
            .unwrap_or_default(),
    };
    Some(delay.min(MAX_RETRY_AFTER))
}

/// Header settings as a `HeaderMap`, each value marked sensitive (never in reqwest's `Debug`).
/// The error names the header (`headers.NAME`), never its value.
pub fn headers(map: &BTreeMap<String, Secret>) -> Result<HeaderMap, SettingError> {
    let mut headers = HeaderMap::new();
    for (name, value) in map {
        let key = format!("headers.{name}");
        let n = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| SettingError::new(&key, "is not a valid HTTP header name"))?;
        let mut v = HeaderValue::from_str(value.expose())
            .map_err(|_| SettingError::new(&key, "is not a valid HTTP header value"))?;
        v.set_sensitive(true);
        headers.insert(n, v);
    }
    Ok(headers)
}

/// An API's base URL setting, checked as [`check_url`] does and ending in `/`, so that a
/// method's name joins under its path (`.../api` + `chat.postMessage`).
pub fn base_url(key: &str, url: &str) -> Result<reqwest::Url, SettingError> {
    let mut base = check_url(key, url)?;
    if !base.path().ends_with('/') {
        let path = format!("{}/", base.path());
        base.set_path(&path);
    }
    Ok(base)
}

/// Checks that `url` is an http(s) URL, without ever repeating it (it may hold a secret).
pub fn check_url(key: &str, url: &str) -> Result<reqwest::Url, SettingError> {
    let parsed = reqwest::Url::parse(url).map_err(|e| {
        SettingError::new(
            key,
            format!("is not a URL ({e}); write e.g. \"https://host/path\""),
        )
    })?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(SettingError::new(
            key,
            format!("has scheme '{}': use an http or https URL", parsed.scheme()),
        ));
    }
    Ok(parsed)
}

/// The redirect policy: only 307 and 308 keep the method and the body, and only within the
/// origin the message was addressed to (a few hops at most). A 301/302/303 would turn the POST
/// into a bodyless GET, whose 2xx would mean nothing was sent.
pub fn same_origin_307_308(attempt: Attempt<'_>) -> Action {
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
        .get(LOCATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|location| from.join(location).ok())
        .map(|to| redacted(&to))
        .unwrap_or_else(|| "an unreadable Location".into());
    Outcome::Permanent {
        reason: format!(
            "HTTP {status}: the URL redirects to {target}; relayq follows only 307/308 \
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
/// reqwest's own text is "error sending request for url (…)"; the cause is down its chain of
/// sources. Never contains the URL.
pub fn describe(error: &reqwest::Error) -> String {
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
        Some(detail) if !error.is_timeout() => format!("{what} ({detail})"),
        _ => what.to_string(),
    }
}

/// Reads at most `max` bytes of the body; a body cut short by the far end is kept as read.
async fn read_body(mut response: reqwest::Response, max: usize) -> Vec<u8> {
    let mut bytes = Vec::new();
    while bytes.len() < max {
        match response.chunk().await {
            Ok(Some(chunk)) => bytes.extend_from_slice(&chunk),
            _ => break,
        }
    }
    bytes.truncate(max);
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_as_seconds_or_date_capped_at_an_hour() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        assert_eq!(parse_retry_after("3", now), Some(Duration::from_secs(3)));
        assert_eq!(
            parse_retry_after("1.5", now),
            Some(Duration::from_millis(1500))
        );
        let in_90s = httpdate::fmt_http_date(now + Duration::from_secs(90));
        assert_eq!(
            parse_retry_after(&in_90s, now),
            Some(Duration::from_secs(90))
        );
        let past = httpdate::fmt_http_date(now - Duration::from_secs(90));
        assert_eq!(parse_retry_after(&past, now), Some(Duration::ZERO));
        assert_eq!(parse_retry_after("86400", now), Some(MAX_RETRY_AFTER));
        assert_eq!(parse_retry_after("soon", now), None);
        assert_eq!(parse_retry_after("-1", now), None);
    }

    #[test]
    fn a_429_with_a_wait_is_throttled_and_without_one_is_not() {
        let reply = |status, retry_after| Reply {
            status,
            retry_after,
            body: "slow down".into(),
            ..Reply::default()
        };
        assert_eq!(
            throttled(&reply(429, Some(Duration::from_secs(7))), None),
            Some(Outcome::Throttled {
                reason: "HTTP 429: slow down".into(),
                wait: Duration::from_secs(7),
                channel_wide: false,
            })
        );
        let body_says = throttled(&reply(429, None), Some(Duration::from_secs(2)));
        assert!(
            matches!(body_says, Some(Outcome::Throttled { wait, .. }) if wait == Duration::from_secs(2))
        );
        assert_eq!(throttled(&reply(429, None), None), None);
        assert_eq!(
            throttled(&reply(503, Some(Duration::from_secs(7))), None),
            None
        );
    }

    #[test]
    fn scrub_takes_every_secret_out() {
        let http = HttpClient::new(
            Duration::from_secs(1),
            HeaderMap::new(),
            vec![Secret::new("tok3n"), Secret::new("")],
        );
        assert_eq!(
            http.scrub("bad token tok3n at /bottok3n/x"),
            "bad token [redacted] at /bot[redacted]/x"
        );
    }

    #[test]
    fn url_and_header_checks_name_the_key_and_never_repeat_the_value() {
        let e = check_url("url", "hooks.example.com/services/T0/B0/s3cr3t").unwrap_err();
        assert!(
            e.key == "url" && e.message.contains("is not a URL") && !e.message.contains("s3cr3t"),
            "{e}"
        );
        let e = check_url("url", "ftp://user:s3cr3t@x/y").unwrap_err();
        assert!(
            e.message.contains("scheme 'ftp'") && !e.message.contains("s3cr3t"),
            "{e}"
        );
        let bad = BTreeMap::from([("bad header".to_string(), Secret::new("v"))]);
        assert_eq!(headers(&bad).unwrap_err().key, "headers.bad header");
        let bad = BTreeMap::from([("X-Token".to_string(), Secret::new("s3cr3t\n"))]);
        let e = headers(&bad).unwrap_err();
        assert!(!e.to_string().contains("s3cr3t"), "{e}");
    }
}
