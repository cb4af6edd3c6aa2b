//! `GET /v1/openapi.json`: the API described as OpenAPI 3.1, generated from the handlers'
//! `#[utoipa::path]` attributes and the request types themselves (utoipa), so the document
//! moves with the code. A test runs schemathesis against a live daemon with it: every route,
//! its status codes, content types and response bodies must agree with the document.

use actix_web::{web, HttpResponse};
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::{Modify, OpenApi};

use super::schema::{AgentName, Refusals};
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
        sessions::list, sessions::expire, sessions::new, sessions::stop, sessions::command,
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
