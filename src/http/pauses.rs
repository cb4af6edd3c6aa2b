//! `/v1/pauses`, `/v1/pause`, `/v1/resume`: the operator holds a queue, or one key of it (a
//! session, an outbound destination), and lets it go again. A paused queue or key gets no new
//! leases (deliveries under way finish); the pause is kept in the database, so it holds across
//! a restart.

use actix_web::{web, HttpResponse};
use relayq_engine::QueueName;
use serde::Deserialize;
use serde_json::json;

use super::body::Body;
use super::schema::{BodyRefusals, Refusals};
use super::{Answer, Api, ApiError};
use crate::views::pause_json;
use utoipa::ToSchema;

pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.route("/pauses", web::get().to(list))
        .route("/pause", web::post().to(pause))
        .route("/resume", web::post().to(resume));
}

/// `{"queue": "outbound", "key": "[\"tg\",\"42\"]"}`; without `key`, the whole queue.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct PauseTarget {
    #[schema(value_type = super::schema::Queue)]
    queue: QueueName,
    /// One key of it (a session, a destination); without it, the whole queue.
    key: Option<String>,
}

impl PauseTarget {
    fn key(&self) -> Result<Option<String>, ApiError> {
        match &self.key {
            Some(k) if k.is_empty() => Err(ApiError::invalid(
                "key is empty: leave it out to pause the whole queue",
            )
            .with_field("key")),
            // PostgreSQL cannot hold a NUL (a 500 under schemathesis), and no session or
            // destination key has a control character.
            Some(k) if k.chars().any(char::is_control) => Err(ApiError::invalid(
                "key has a control character: no session or destination key has one",
            )
            .with_field("key")),
            k => Ok(k.clone()),
        }
    }
}

#[utoipa::path(
    get, path = "/v1/pauses", tag = "pauses", operation_id = "list_pauses",
    responses((status = 200, description = "Every pause; `key` null for a whole queue", body = Vec<Object>), Refusals),
    security((), ("bearer" = []))
)]
pub(super) async fn list(api: web::Data<Api>) -> Answer {
    let pauses = api.read(move |e| e.pauses()).await?;
    let pauses: Vec<_> = pauses.iter().map(pause_json).collect();
    Ok(HttpResponse::Ok().json(pauses))
}

#[utoipa::path(
    post, path = "/v1/pause", tag = "pauses", request_body = PauseTarget,
    responses((status = 200, description = "Paused (kept across a restart)", body = Object), BodyRefusals, Refusals),
    security((), ("bearer" = []))
)]
pub(super) async fn pause(api: web::Data<Api>, Body(t): Body<PauseTarget>) -> Answer {
    let key = t.key()?;
    api.relayq.pause(t.queue, key.clone()).await?;
    Ok(HttpResponse::Ok().json(json!({"queue": t.queue, "key": key, "paused": true})))
}

/// Answers `was_paused: false` for what was not paused (resuming is idempotent).
#[utoipa::path(
    post, path = "/v1/resume", tag = "pauses", request_body = PauseTarget,
    responses((status = 200, description = "Resumed; `was_paused` false when it was not", body = Object), BodyRefusals, Refusals),
    security((), ("bearer" = []))
)]
pub(super) async fn resume(api: web::Data<Api>, Body(t): Body<PauseTarget>) -> Answer {
    let key = t.key()?;
    let was = api.relayq.resume(t.queue, key.clone()).await?;
    Ok(HttpResponse::Ok()
        .json(json!({"queue": t.queue, "key": key, "paused": false, "was_paused": was})))
}
