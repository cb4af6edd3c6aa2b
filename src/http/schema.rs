//! The shapes the API's routes share in its OpenAPI document: error bodies, counts written,
//! the names a path or a field takes, and the refusals every route may answer. The routes
//! use them; `openapi` gathers the routes into the document.

use serde::Serialize;
use utoipa::ToSchema;

/// Every error: a stable `code` for programs, a `message` saying what to change, and the
/// request `field` at fault when there is one.
#[derive(Serialize, ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Serialize, ToSchema)]
pub struct ErrorDetail {
    /// `invalid`, `not_found`, `queue_full`, `unauthorized`, `too_large`,
    /// `unsupported_media_type`, `not_dead`, `out_of_order`, `unavailable`, `internal`.
    pub code: String,
    pub message: String,
    #[schema(nullable = false)]
    pub field: Option<String>,
}

/// What an enqueue wrote: the row (or the row a duplicate repeats).
#[derive(Serialize, ToSchema)]
pub struct Written {
    pub id: i64,
    pub duplicate: bool,
    /// Written already expired, for this reason: it will not be delivered.
    #[schema(nullable = false)]
    pub expired: Option<String>,
    /// Rows written for a text split for its channel (absent when one).
    #[schema(nullable = false)]
    pub parts: Option<u32>,
}

/// A bulk dead-letter operation's answer.
#[derive(Serialize, ToSchema)]
pub struct Bulk {
    pub dry_run: bool,
    pub count: usize,
    pub ids: Vec<i64>,
    /// Retry only: the rows replayed out of order (`force`), or that would be.
    #[schema(nullable = false)]
    pub out_of_order: Option<Vec<String>>,
}

/// The request fields that take one of the engine's names, as the document lists them (the
/// engine's types stay free of the API's schema crate). Documentation only: never built.
#[allow(dead_code)]
#[derive(ToSchema)]
#[schema(rename_all = "lowercase")]
pub enum Queue {
    Inbound,
    Hooks,
    Outbound,
}

/// What part of an agent's reply an outbound message is. Documentation only.
#[allow(dead_code)]
#[derive(ToSchema)]
#[schema(rename_all = "lowercase")]
pub enum Kind {
    Final,
    Block,
    Tool,
}

/// The kind of user message. Documentation only.
#[allow(dead_code)]
#[derive(ToSchema)]
#[schema(rename_all = "lowercase")]
pub enum MessageType {
    Text,
    Voice,
    File,
}

/// The agent CLIs whose hook payloads relayq reads. Documentation only.
#[allow(dead_code)]
#[derive(ToSchema)]
#[schema(rename_all = "lowercase")]
pub enum AgentName {
    Claude,
    Codex,
    Gemini,
}

/// The answers every route may give besides its own. (Documentation only: never built.)
#[allow(dead_code)]
#[derive(utoipa::IntoResponses)]
pub enum Refusals {
    /// The request is not what the route takes; `field` names what to fix.
    #[response(status = 400)]
    Invalid(#[to_schema] ErrorBody),
    /// `[http] token` is set and the request does not carry it.
    #[response(status = 401)]
    Unauthorized(ErrorBody),
    /// The daemon is stopping, or the database is busy: try again.
    #[response(status = 503)]
    Unavailable(ErrorBody),
    /// Something failed inside; the daemon's log says what.
    #[response(status = 500)]
    Internal(ErrorBody),
}

/// The answers of a route that reads a JSON body. (Documentation only: never built.)
#[allow(dead_code)]
#[derive(utoipa::IntoResponses)]
pub enum BodyRefusals {
    /// The body is over `http.max_request_bytes`.
    #[response(status = 413)]
    TooLarge(ErrorBody),
    /// The body was not sent as `Content-Type: application/json`.
    #[response(status = 415)]
    UnsupportedMediaType(ErrorBody),
}
