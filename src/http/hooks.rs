//! `POST /v1/hooks/{agent}`: an agent's hook event over HTTP (Claude Code's `http` hook type
//! posts its payload here), mapped and stored as `relayq hook` stores it. Answers 204 with
//! an empty body once the row is committed (Claude Code reads an empty 2xx as success); an
//! ignored event gets 204 too. `?session=` overrides the agent's session id, as
//! `RELAYQ_SESSION` does for the command.
//!
//! While the daemon is down this route is gone, and the agent's event with it: the command
//! hook (`relayq hook`), which writes straight into the database (or its spool, when it cannot
//! reach it in time), is the one that survives an outage.

use actix_web::http::StatusCode;
use actix_web::{web, HttpRequest, HttpResponse};
use relayq_engine::hooks::{self, Received};
use relayq_engine::Agent;
use serde::Deserialize;

use super::body::{self, Raw};
use super::schema::{BodyRefusals, ErrorBody, Refusals};
use super::{Answer, Api, ApiError};
use utoipa::IntoParams;

pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.route("/hooks/{agent}", web::post().to(record));
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(super) struct HookQuery {
    /// Overrides the agent's session id, as `RELAYQ_SESSION` does for `relayq hook`.
    session: Option<String>,
}

#[utoipa::path(
    post, path = "/v1/hooks/{agent}", tag = "hooks", operation_id = "record_hook",
    params(("agent" = super::schema::AgentName, Path), HookQuery),
    request_body(content = Object, description = "The agent's hook payload, as it comes"),
    responses(
        (status = 204, description = "Stored (or not an event relayq forwards)"),
        (status = 404, description = "Not an agent relayq knows", body = ErrorBody),
        BodyRefusals, Refusals,
    ),
    security((), ("bearer" = []))
)]
pub(super) async fn record(
    api: web::Data<Api>,
    agent: web::Path<String>,
    req: HttpRequest,
    Raw(input): Raw,
) -> Answer {
    let agent: Agent = agent.parse().map_err(|e: relayq_engine::EngineError| {
        ApiError::not_found(e.to_string()).with_field("agent")
    })?;
    let q: HookQuery = body::query(&req)?;
    let session = q.session.filter(|s| !s.trim().is_empty());
    let input = String::from_utf8_lossy(&input);
    match hooks::receive(agent, &input, session) {
        Received::Ignored => Ok(HttpResponse::NoContent().finish()),
        Received::Event(event) => {
            api.relayq.record_hook(event).await?;
            Ok(HttpResponse::NoContent().finish())
        }
        Received::Invalid { event, error } => {
            api.relayq.record_hook(event).await?;
            Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid",
                format!("{error}; recorded as an error event"),
            ))
        }
    }
}
