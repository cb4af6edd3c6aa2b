//! The HTTP kit for channels that call HTTP APIs: one client (`transport` carries its
//! requests), `Retry-After` parsing, bounded body reading, and failure words that never hold a
//! URL or a secret.
//!
//! ```text
//!   http.post(url).header(..).json(body)
//!     └▶ HttpClient::send ─▶ Ok(Reply { status, retry_after, headers, body })  answered
//!                        ├─▶ Err(Unreachable)  no connection (DNS, refused, TLS, proxy): nothing sent
//!                        ├─▶ Err(Unknown)      sent, no answer (timeout, cut): the far end may have it
//!                        └─▶ Err(Permanent)    a redirect not followed, a header that cannot be sent
//! ```
//! A kind classifies the `Reply` by its platform's rules; [`throttled`] and [`Reply::error`]
//! are the parts every platform shares.

mod body;
mod multipart;
mod transport;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::header::{HeaderMap, HeaderName, HeaderValue, ACCEPT, LOCATION, RETRY_AFTER};
use http::{Method, StatusCode};
use http_body_util::{BodyExt, Full};
use url::Url;

use super::head;
use super::secret::Secret;
use crate::settings::SettingError;
use relayq_engine::Outcome;
use transport::Transport;

/// The longest `Retry-After` honoured; a far end asking for more is tried again after this.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(3600);

/// The most of an answer's body that is read unless the request asks for more
/// ([`Request::read_up_to`]): platforms answer a send in a few KiB.
pub const MAX_BODY: usize = 64 * 1024;

/// How much of an error answer's body is kept as the row's error.
pub const KEPT_BODY: usize = 1024;

pub use super::secret::REDACTED;
pub use body::Upload;
pub use multipart::Multipart;

/// The most 307/308 redirects followed for one request.
const MAX_REDIRECTS: usize = 5;

/// A channel's HTTP client, and the secrets none of its failure texts may show.
#[derive(Clone)]
pub struct HttpClient {
    transport: Transport,
    timeout: Duration,
    /// Sent with every request (a bot token's `Authorization`, a `User-Agent`).
    headers: Arc<HeaderMap>,
    secrets: Arc<[Secret]>,
}

/// A request being built: [`HttpClient::get`] or [`HttpClient::post`], then headers and body.
pub struct Request {
    method: Method,
    url: Url,
    headers: HeaderMap,
    body: Bytes,
    /// A header value that cannot be sent, found while building: the request fails for good.
    invalid: Option<String>,
    /// The most of the answer's body read; past it the reply is [`Reply::cut`].
    read_limit: usize,
    /// A file streamed as the body, instead of `body`.
    upload: Option<Upload>,
}

/// Why a download did not finish, and whether trying again may help (the platform's 5xx, a
/// broken connection) or not (a refusal, a file over the limit).
#[derive(Debug, Clone, PartialEq)]
pub struct DownloadFailed {
    pub why: String,
    pub again: bool,
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
    /// The far end sent more than the request's read limit: `body` holds only its start, so
    /// it cannot be parsed and may hold a cut message (never log it whole).
    pub cut: bool,
}

impl HttpClient {
    /// A client whose requests time out after `timeout` (a connection not made within half of
    /// it is a failure before anything was sent), sending `headers` with each request,
    /// following redirects only as [`follows_redirect`] allows. `secrets` are scrubbed from
    /// every text this client makes (the token in a bot API's URL, a webhook URL).
    pub fn new(timeout: Duration, headers: HeaderMap, secrets: Vec<Secret>) -> Self {
        let mut defaults = HeaderMap::new();
        defaults.insert(ACCEPT, HeaderValue::from_static("*/*"));
        defaults.extend(headers);
        HttpClient {
            transport: Transport::new(timeout / 2),
            timeout,
            headers: Arc::new(defaults),
            secrets: secrets.into(),
        }
    }

    pub fn get(&self, url: Url) -> Request {
        self.request(Method::GET, url)
    }

    pub fn post(&self, url: Url) -> Request {
        self.request(Method::POST, url)
    }

    pub fn patch(&self, url: Url) -> Request {
        self.request(Method::PATCH, url)
    }

    pub fn put(&self, url: Url) -> Request {
        self.request(Method::PUT, url)
    }

    pub fn delete(&self, url: Url) -> Request {
        self.request(Method::DELETE, url)
    }

    fn request(&self, method: Method, mut url: Url) -> Request {
        let mut headers = HeaderMap::clone(&self.headers);
        if let Some(credentials) = take_credentials(&mut url) {
            headers.insert(http::header::AUTHORIZATION, credentials);
        }
        Request {
            method,
            url,
            headers,
            body: Bytes::new(),
            invalid: None,
            read_limit: MAX_BODY,
            upload: None,
        }
    }

    /// Sends `request` and reads the answer. `Err` is the outcome when there is no answer to
    /// classify: no answer at all (retry), a redirect that was not followed or a request that
    /// cannot be sent (permanent).
    pub async fn send(&self, request: Request) -> Result<Reply, Outcome> {
        self.send_within(request, self.timeout).await
    }

    /// [`send`](Self::send), given `within` instead of the client's timeout (an upload).
    pub async fn send_within(&self, request: Request, within: Duration) -> Result<Reply, Outcome> {
        match tokio::time::timeout(within, self.exchange(request)).await {
            Ok(answer) => answer,
            // The request may have gone out: the far end may have it.
            Err(_) => Err(Outcome::unknown("the far end did not answer in time")),
        }
    }

    async fn exchange(&self, mut request: Request) -> Result<Reply, Outcome> {
        if let Some(reason) = request.invalid.take() {
            return Err(Outcome::Permanent { reason });
        }
        let mut hops = 0;
        let response = loop {
            let response = self
                .transport
                .request(request.to_hyper()?)
                .await
                .map_err(|e| self.no_answer(&e))?;
            match follows_redirect(&request.url, response.status(), response.headers(), hops) {
                Some(next) => (request.url, hops) = (next, hops + 1),
                None => break response,
            }
        };
        let status = response.status();
        let retry_after = retry_after(response.headers(), SystemTime::now());
        if status.is_redirection() {
            return Err(redirected(
                status.as_u16(),
                &request.url,
                response.headers(),
            ));
        }
        let (head, body) = response.into_parts();
        let limit = request.read_limit;
        let mut body = read_body(body, limit as u64 + 1)
            .await
            .unwrap_or_else(|read| read);
        let cut = body.len() > limit;
        body.truncate(limit);
        Ok(Reply {
            status: status.as_u16(),
            retry_after,
            headers: head.headers,
            body: self.scrub(&String::from_utf8_lossy(&body)),
            cut,
        })
    }

    /// Streams the file at `url` (one a platform keeps) into `out` as it arrives, never holding
    /// it whole, refusing more than `limit` bytes and giving up after `within`. Answers the
    /// bytes written; the error says whether trying again may help, with the channel's
    /// secrets taken out.
    pub async fn download_into(
        &self,
        request: Request,
        limit: u64,
        within: Duration,
        out: &mut tokio::fs::File,
    ) -> Result<u64, DownloadFailed> {
        use tokio::io::AsyncWriteExt;
        let again = |why: String| DownloadFailed { why, again: true };
        let fetch = async {
            let head = request.to_hyper().map_err(|e| DownloadFailed {
                why: e.text().unwrap_or_default().to_string(),
                again: false,
            })?;
            let response =
                self.transport.request(head).await.map_err(|e| {
                    again(self.scrub(&format!("download failed: {}", describe(&e))))
                })?;
            let status = response.status();
            if !status.is_success() {
                // The platform's own trouble and its limits pass; a refusal stays one.
                let again = status.is_server_error() || status == StatusCode::TOO_MANY_REQUESTS;
                return Err(DownloadFailed {
                    why: format!("download failed: HTTP {}", status.as_u16()),
                    again,
                });
            }
            let mut body = response.into_body();
            let mut written = 0u64;
            while let Some(frame) = body.frame().await {
                let frame =
                    frame.map_err(|_| again("download failed: the connection broke".into()))?;
                let Some(data) = frame.data_ref() else {
                    continue;
                };
                written += data.len() as u64;
                if written > limit {
                    return Err(DownloadFailed {
                        why: format!("it is over {} bytes, the most taken", limit),
                        again: false,
                    });
                }
                out.write_all(data)
                    .await
                    .map_err(|e| again(format!("cannot write the file: {e}")))?;
            }
            out.flush()
                .await
                .map_err(|e| again(format!("cannot write the file: {e}")))?;
            Ok(written)
        };
        match tokio::time::timeout(within, fetch).await {
            Ok(done) => done,
            Err(_) => Err(again(format!(
                "download failed: not done within {}",
                humantime::format_duration(within)
            ))),
        }
    }

    /// The outcome of a request that got no answer: nothing went out when no connection was
    /// made (DNS, refused, TLS); past that, the far end may have the request.
    fn no_answer(&self, e: &hyper_util::client::legacy::Error) -> Outcome {
        let error = self.scrub(&format!("request failed: {}", describe(e)));
        match e.is_connect() {
            true => Outcome::Unreachable { error },
            false => Outcome::unknown(error),
        }
    }

    /// `text` with each of the channel's secrets replaced by [`REDACTED`].
    pub fn scrub(&self, text: &str) -> String {
        super::secret::scrub(text, self.secrets.iter().map(Secret::expose))
    }
}

impl Request {
    /// Adds a header (the name in any case). A value that cannot be sent makes the request
    /// fail for good, naming the header (never its value).
    pub fn header(mut self, name: &'static str, value: &str) -> Self {
        match (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(value),
        ) {
            (Ok(name), Ok(value)) => {
                self.headers.insert(name, value);
            }
            _ => {
                self.invalid = Some(format!(
                    "the {name} header cannot be sent: its value is not a valid HTTP header value"
                ))
            }
        }
        self
    }

    /// A JSON body (`Content-Type: application/json`).
    pub fn json(self, body: impl Into<Bytes>) -> Self {
        self.body(body, "application/json")
    }

    pub fn body(mut self, body: impl Into<Bytes>, content_type: &'static str) -> Self {
        self.headers.insert(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static(content_type),
        );
        self.body = body.into();
        self
    }

    /// A file streamed from disk as the body (an upload's form, see [`Multipart::upload`]),
    /// with its content type and length.
    pub fn upload(mut self, upload: Upload, content_type: &'static str) -> Self {
        self.headers.insert(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static(content_type),
        );
        self.headers.insert(
            http::header::CONTENT_LENGTH,
            HeaderValue::from(upload.length()),
        );
        self.upload = Some(upload);
        self
    }

    /// The hyper request for one hop. The body is shared, not copied, between hops; a file is
    /// read again from its start.
    fn to_hyper(&self) -> Result<hyper::Request<body::Body>, Outcome> {
        let uri = http::Uri::try_from(self.url.as_str()).map_err(|_| Outcome::Permanent {
            reason: format!(
                "{} is not a URL an HTTP request can go to",
                redacted(&self.url)
            ),
        })?;
        let body = match &self.upload {
            Some(upload) => upload.body(),
            None => http_body_util::Either::Left(Full::new(self.body.clone())),
        };
        let mut request = hyper::Request::new(body);
        *request.method_mut() = self.method.clone();
        *request.uri_mut() = uri;
        *request.headers_mut() = self.headers.clone();
        Ok(request)
    }

    /// Reads up to `bytes` of the answer's body instead of [`MAX_BODY`]: for answers that carry
    /// what users wrote (a source's updates, a history page), bounded by what the platform can
    /// send in one answer.
    pub fn read_up_to(mut self, bytes: usize) -> Self {
        self.read_limit = bytes;
        self
    }

    /// Adds `pairs` to the URL's query, form-encoded.
    pub fn query(mut self, pairs: &[(&str, &str)]) -> Self {
        self.url.query_pairs_mut().extend_pairs(pairs);
        self
    }
}

/// Credentials in a URL (`https://user:password@host/…`, percent-encoded) as the
/// `Authorization: Basic` they stand for, taken out of the URL, which goes out without them.
fn take_credentials(url: &mut Url) -> Option<HeaderValue> {
    use base64::Engine;
    if url.username().is_empty() && url.password().is_none() {
        return None;
    }
    let decoded = |s: &str| {
        percent_encoding::percent_decode_str(s)
            .decode_utf8_lossy()
            .into_owned()
    };
    let pair = format!(
        "{}:{}",
        decoded(url.username()),
        decoded(url.password().unwrap_or(""))
    );
    let _ = url.set_username("");
    let _ = url.set_password(None);
    let token = base64::engine::general_purpose::STANDARD.encode(pair);
    let mut value = HeaderValue::from_str(&format!("Basic {token}")).ok()?;
    value.set_sensitive(true);
    Some(value)
}

/// Reads at most `max` bytes of `body`. A body cut short by the far end is `Err` with what
/// was read.
async fn read_body(mut body: hyper::body::Incoming, max: u64) -> Result<Vec<u8>, Vec<u8>> {
    let mut bytes = Vec::new();
    while (bytes.len() as u64) < max {
        match body.frame().await {
            Some(Ok(frame)) => {
                if let Some(data) = frame.data_ref() {
                    bytes.extend_from_slice(data);
                }
            }
            Some(Err(_)) => return Err(bytes),
            None => break,
        }
    }
    bytes.truncate(max as usize);
    Ok(bytes)
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

/// `Authorization: <scheme> <token>` as headers, the value marked sensitive; the error names
/// setting `key`, never the token.
pub fn authorization(key: &str, scheme: &str, token: &Secret) -> Result<HeaderMap, SettingError> {
    let mut value = HeaderValue::from_str(&format!("{scheme} {}", token.expose()))
        .map_err(|_| SettingError::new(key, "holds characters an HTTP header cannot"))?;
    value.set_sensitive(true);
    Ok(HeaderMap::from_iter([(http::header::AUTHORIZATION, value)]))
}

/// Header settings as a `HeaderMap`, each value marked sensitive (never in a `Debug` print).
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
pub fn base_url(key: &str, url: &str) -> Result<Url, SettingError> {
    let mut base = check_url(key, url)?;
    if !base.path().ends_with('/') {
        let path = format!("{}/", base.path());
        base.set_path(&path);
    }
    Ok(base)
}

/// Checks that `url` is an http(s) URL, without ever repeating it (it may hold a secret).
pub fn check_url(key: &str, url: &str) -> Result<Url, SettingError> {
    let parsed = Url::parse(url).map_err(|e| {
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

/// Where a redirect leads, when it is followed: only 307 and 308 keep the method and the
/// body, and only within the origin the message was addressed to (five hops at
/// most). A 301/302/303 would turn the POST into a bodyless GET, whose 2xx would mean nothing
/// was sent.
pub fn follows_redirect(
    from: &Url,
    status: StatusCode,
    headers: &HeaderMap,
    hops: usize,
) -> Option<Url> {
    if !matches!(status.as_u16(), 307 | 308) || hops >= MAX_REDIRECTS {
        return None;
    }
    let location = headers.get(LOCATION)?.to_str().ok()?;
    let next = from.join(location).ok()?;
    (next.origin() == from.origin()).then_some(next)
}

/// A redirect that was not followed: permanent, saying where the URL points, without the path
/// and query, which may hold a secret (Slack and Discord webhook URLs do).
fn redirected(status: u16, from: &Url, headers: &HeaderMap) -> Outcome {
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

/// What of `url` a far end may echo back and must be scrubbed: the user and password, as
/// they are and as the `Basic` credentials sent for them; every query value, decoded and as
/// written; path segments that look like tokens (with a digit, or 16 characters or more:
/// Slack's and Discord's webhook paths are tokens).
pub fn url_secrets(url: &Url) -> Vec<Secret> {
    use base64::Engine;
    let mut secrets = Vec::new();
    let decoded = |s: &str| {
        percent_encoding::percent_decode_str(s)
            .decode_utf8_lossy()
            .into_owned()
    };
    if let Some(password) = url.password() {
        let (user, password) = (decoded(url.username()), decoded(password));
        let basic = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        secrets.extend([
            password,
            basic,
            url.password().unwrap_or_default().to_string(),
        ]);
    }
    for (_, value) in url.query_pairs() {
        secrets.push(value.into_owned());
    }
    if let Some(query) = url.query() {
        secrets.extend(
            query
                .split('&')
                .filter_map(|pair| pair.split_once('='))
                .map(|(_, v)| v.to_string()),
        );
    }
    let token_like =
        |s: &&str| s.len() >= 16 || (s.len() >= 6 && s.chars().any(|c| c.is_ascii_digit()));
    secrets.extend(
        url.path_segments()
            .into_iter()
            .flatten()
            .filter(token_like)
            .map(str::to_string),
    );
    secrets
        .into_iter()
        .filter(|s| !s.is_empty())
        .map(Secret::new)
        .collect()
}

/// A URL with nothing that may be secret: scheme, host and port; the path as `/…`.
pub fn redacted(url: &Url) -> String {
    let origin = url.origin().ascii_serialization();
    if url.path() == "/" && url.query().is_none() {
        origin
    } else {
        format!("{origin}/…")
    }
}

/// What went wrong with a request that got no answer, in words an operator can act on: the
/// client's own text is "client error (Connect)"; the cause is down its chain of sources.
/// Never contains the URL.
pub fn describe(error: &(dyn std::error::Error + 'static)) -> String {
    let (mut chain, mut io_kind) = (Vec::new(), None);
    let mut source = error.source();
    while let Some(e) = source {
        chain.push(e.to_string());
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            io_kind = Some(io.kind());
        }
        source = e.source();
    }
    let all = chain.join(": ").to_lowercase();
    let what = if io_kind == Some(std::io::ErrorKind::TimedOut) || all.contains("timed out") {
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
    } else if all.contains("proxy") || all.contains("tunnel") {
        "the proxy refused or failed (check HTTP_PROXY / HTTPS_PROXY)"
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
    fn only_307_and_308_are_followed_within_the_origin_and_five_times_at_most() {
        let from = Url::parse("https://hooks.example.com/a/b").unwrap();
        let to = |location: &str| {
            HeaderMap::from_iter([(LOCATION, HeaderValue::from_str(location).unwrap())])
        };
        let follow = |status: u16, location: &str, hops| {
            let status = StatusCode::from_u16(status).unwrap();
            follows_redirect(&from, status, &to(location), hops).map(String::from)
        };
        assert_eq!(
            follow(307, "/c?x=1", 0).as_deref(),
            Some("https://hooks.example.com/c?x=1")
        );
        assert_eq!(
            follow(308, "https://hooks.example.com/d", 4).as_deref(),
            Some("https://hooks.example.com/d")
        );
        assert_eq!(follow(308, "/d", MAX_REDIRECTS), None, "too many hops");
        for status in [301, 302, 303] {
            assert_eq!(follow(status, "/c", 0), None, "{status} drops the body");
        }
        assert_eq!(follow(307, "https://other.example.com/c", 0), None);
        assert_eq!(follow(307, "http://hooks.example.com/c", 0), None);
        let no_location =
            follows_redirect(&from, StatusCode::TEMPORARY_REDIRECT, &HeaderMap::new(), 0);
        assert_eq!(no_location, None);
    }

    #[test]
    fn a_header_name_in_any_case_is_taken_and_an_unsendable_value_fails_the_request() {
        let http = HttpClient::new(Duration::from_secs(1), HeaderMap::new(), Vec::new());
        let url = Url::parse("https://hooks.example.com/x").unwrap();
        let request = http.post(url.clone()).header("Idempotency-Key", "k1");
        assert_eq!(request.headers["idempotency-key"], "k1");
        assert!(request.invalid.is_none());
        let bad = http.post(url).header("Idempotency-Key", "k\n1");
        assert!(bad
            .invalid
            .unwrap()
            .contains("the Idempotency-Key header cannot be sent"));
    }

    #[test]
    fn credentials_in_a_url_go_as_basic_auth_and_leave_the_url() {
        let http = HttpClient::new(Duration::from_secs(1), HeaderMap::new(), Vec::new());
        let url = Url::parse("https://user:p%40ss@hooks.example.com/x").unwrap();
        let request = http.post(url);
        assert_eq!(request.url.as_str(), "https://hooks.example.com/x");
        // base64("user:p@ss")
        assert_eq!(
            request.headers[http::header::AUTHORIZATION],
            "Basic dXNlcjpwQHNz"
        );
        assert!(request.headers[http::header::AUTHORIZATION].is_sensitive());
        let plain = http.get(Url::parse("https://hooks.example.com/x").unwrap());
        assert!(!plain.headers.contains_key(http::header::AUTHORIZATION));
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
