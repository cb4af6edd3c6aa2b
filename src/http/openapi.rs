//! `GET /v1/openapi.json`: the API described as OpenAPI 3.1, generated from the handlers'
//! `#[utoipa::path]` attributes and the request types themselves (utoipa), so the document
//! moves with the code. A test runs schemathesis against a live daemon with it: every route,
//! its status codes, content types and response bodies must agree with the document.

use actix_web::{web, HttpResponse};
use serde::Serialize;
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::{Modify, OpenApi, ToSchema};

use super::{approvals, dead, health, hooks, ingress, lanes, metrics, pauses, sessions, v1};

pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.route("/openapi.json", web::get().to(document));
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "relayq",
        description = "Durable, ordered, at-least-once delivery between chat platforms and agent sessions. With `[http] token`, every route but /healthz needs `Authorization: Bearer <token>`."
    ),
    paths(
        v1::enqueue_inbound, v1::enqueue_outbound, v1::message, v1::status,
        dead::list, dead::retry, dead::purge,
        sessions::list, sessions::expire,
        approvals::list, approvals::allow, approvals::deny,
        hooks::record, ingress::ingress,
        pauses::list, pauses::pause, pauses::resume,
        lanes::lanes,
        health::healthz, health::readyz, metrics::metrics,
        document,
    ),
    components(schemas(AgentName)),
    modifiers(&BearerToken)
)]
pub struct ApiDoc;

/// The token scheme, for clients generated from the document.
struct BearerToken;

impl Modify for BearerToken {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(Http::new(HttpAuthScheme::Bearer)),
        );
    }
}

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

#[utoipa::path(
    get, path = "/v1/openapi.json", tag = "meta",
    responses((status = 200, description = "This document", content_type = "application/json", body = Object), Refusals)
)]
pub(super) async fn document() -> HttpResponse {
    HttpResponse::Ok().content_type("application/json").body(
        ApiDoc::openapi()
            .to_json()
            .expect("the document serialises"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The documented names, from the generated document.
    fn documented(schema: &str) -> Vec<String> {
        let doc = serde_json::to_value(ApiDoc::openapi()).unwrap();
        let values = &doc["components"]["schemas"][schema]["enum"];
        let values = values
            .as_array()
            .unwrap_or_else(|| panic!("{schema}: {values}"));
        values
            .iter()
            .map(|v| v.as_str().unwrap().to_string())
            .collect()
    }

    /// The documentation-only enums stand for the engine's: they must name the same values,
    /// each of which the engine reads.
    #[test]
    fn the_documented_names_are_the_engines() {
        let queues: Vec<String> = relayq_engine::QueueName::ALL
            .iter()
            .map(|q| q.as_str().to_string())
            .collect();
        assert_eq!(documented("Queue"), queues);
        for kind in documented("Kind") {
            kind.parse::<relayq_engine::outbound::Kind>()
                .unwrap_or_else(|e| panic!("{kind}: {e}"));
        }
        for message_type in documented("MessageType") {
            message_type
                .parse::<relayq_engine::MessageType>()
                .unwrap_or_else(|e| panic!("{message_type}: {e}"));
        }
        for agent in documented("AgentName") {
            agent
                .parse::<relayq_engine::Agent>()
                .unwrap_or_else(|e| panic!("{agent}: {e}"));
        }
    }
}
