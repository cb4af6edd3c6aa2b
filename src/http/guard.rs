//! What a web page the user opens must not make their browser do to the API, and bodies that
//! must not hold a worker: checked before any route runs.
//!
//! ```text
//! request ─▶ Content-Length over max_request_bytes?        → 413 at once, nothing read
//!          ─▶ a control character in the path or a query?   → 400 (never reaches a filter)
//!          ─▶ /healthz or a platform's push (/v1/ingress/)?  → on (they prove themselves)
//!          ─▶ no token, and Host is not this address?        → 421 (DNS rebinding)
//!          ─▶ a write from another Origin, or as a form?     → 403 / 415 (CSRF)
//!          ─▶ the routes
//! ```
//!
//! A page on `rebind.example` that re-points its name at 127.0.0.1 reaches the API as "its own"
//! origin, but its requests still say `Host: rebind.example`: without a token only the
//! listening address's own names are answered. A page on any site can make a browser send a
//! bodyless or form POST without a preflight; every browser of the last decade sends `Origin`
//! with it, and a write from an origin that is not the API's own is refused.

use actix_web::body::{EitherBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::{header, Method, StatusCode};
use actix_web::middleware::Next;
use actix_web::{web, Error, ResponseError};

use super::error::ApiError;

/// The checks' settings, made once at start.
#[derive(Clone)]
pub struct Guard {
    /// The `Host` values answered without a token: the listening address's own names.
    hosts: Vec<String>,
    /// With a token every request proves itself; any `Host` is answered (a reverse proxy's).
    token: bool,
    max_request_bytes: usize,
}

impl Guard {
    pub fn new(address: std::net::SocketAddr, token: bool, max_request_bytes: usize) -> Guard {
        let port = address.port();
        let mut hosts = vec![
            address.to_string(),
            format!("127.0.0.1:{port}"),
            format!("localhost:{port}"),
            format!("[::1]:{port}"),
        ];
        if port == 80 {
            hosts.extend(["127.0.0.1", "localhost", "[::1]"].map(String::from));
        }
        Guard {
            hosts,
            token,
            max_request_bytes,
        }
    }

    /// Why `req` is refused before its route runs, if it is.
    fn refusal(&self, req: &ServiceRequest) -> Option<ApiError> {
        let announced = req
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok());
        if announced.is_some_and(|n| n > self.max_request_bytes as u64) {
            return Some(ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "too_large",
                format!(
                    "the request body is over {} bytes (http.max_request_bytes)",
                    self.max_request_bytes
                ),
            ));
        }
        if let Some(refused) = control_in_url(req) {
            return Some(refused);
        }
        let path = req.path();
        if path == "/healthz" || path.starts_with(super::ingress::PREFIX) {
            return None;
        }
        let host = req
            .headers()
            .get(header::HOST)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        if !self.token && !self.hosts.iter().any(|h| h.eq_ignore_ascii_case(host)) {
            return Some(ApiError::new(
                StatusCode::MISDIRECTED_REQUEST,
                "wrong_host",
                format!(
                    "this API answers requests addressed to {} only (the Host header said {:?}); \
                     to serve it under another name, set http.token_env so every request \
                     carries the token",
                    self.hosts[0], host
                ),
            ));
        }
        if matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS) {
            return None;
        }
        if let Some(origin) = req.headers().get(header::ORIGIN) {
            let own = format!("http://{host}");
            if !origin.as_bytes().eq_ignore_ascii_case(own.as_bytes()) {
                return Some(ApiError::new(
                    StatusCode::FORBIDDEN,
                    "cross_origin",
                    format!(
                        "a request from a page on {} may not change anything here; only this \
                         API's own pages ({own}) and programs that send no Origin may",
                        String::from_utf8_lossy(origin.as_bytes()).escape_debug()
                    ),
                ));
            }
        }
        let form = req
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(|t| t.split(';').next().unwrap_or_default().trim())
            .is_some_and(|t| !t.eq_ignore_ascii_case("application/json"));
        form.then(|| {
            ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                "a request that changes something is sent as `Content-Type: application/json` \
                 (or with no body and no Content-Type)",
            )
        })
    }
}

/// A control character in the decoded path or a query value: no id, name or filter of this
/// API holds one, and PostgreSQL's text refuses a NUL (found by fuzzing `GET /v1/dead?key=`,
/// a 500 from the database where SQLite found nothing). Refused for every route at once.
fn control_in_url(req: &ServiceRequest) -> Option<ApiError> {
    let control = |s: &str| s.chars().find(|c| c.is_control());
    let path = percent_encoding::percent_decode_str(req.path()).decode_utf8_lossy();
    let (place, c) = match control(&path) {
        Some(c) => ("path".to_string(), c),
        None => {
            let pairs = web::Query::<Vec<(String, String)>>::from_query(req.query_string()).ok()?;
            pairs.0.into_iter().find_map(|(name, value)| {
                let c = control(&name).or_else(|| control(&value))?;
                Some((format!("query parameter {name:?}"), c))
            })?
        }
    };
    Some(ApiError::invalid(format!(
        "the {place} has a control character (U+{:04X}): ids, names and filters never hold \
         one; send it without",
        c as u32
    )))
}

pub async fn check(
    guard: web::Data<Guard>,
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<EitherBody<impl MessageBody>>, Error> {
    match guard.refusal(&req) {
        None => Ok(next.call(req).await?.map_into_left_body()),
        Some(refused) => {
            let response = refused.error_response();
            Ok(req.into_response(response).map_into_right_body())
        }
    }
}
