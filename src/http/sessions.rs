//! `/v1/sessions`: the session registry the hook events keep, and expiring a session (its
//! pending messages will never be delivered), as `relayq session list | expire`.

use actix_web::{web, HttpResponse};
use serde_json::json;

use super::schema::Refusals;
use super::{Answer, Api, ApiError};

pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.route("/sessions", web::get().to(list))
        .route("/sessions/{session}/expire", web::post().to(expire));
}

#[utoipa::path(
    get, path = "/v1/sessions", tag = "sessions", operation_id = "list_sessions",
    responses((status = 200, description = "As `relayq session list --json`", body = Vec<Object>), Refusals),
    security((), ("bearer" = []))
)]
pub(super) async fn list(api: web::Data<Api>) -> Answer {
    let sessions = api.read(move |e| e.sessions()).await?;
    let sessions: Vec<_> = sessions.iter().map(crate::views::session_json).collect();
    Ok(HttpResponse::Ok().json(sessions))
}

/// Answers how many pending messages were expired (0 for a session with none, or unknown:
/// expiring is idempotent).
#[utoipa::path(
    post, path = "/v1/sessions/{session}/expire", tag = "sessions", operation_id = "expire_session",
    params(("session" = String, Path, description = "The session id")),
    responses((status = 200, description = "`session` and how many pending messages `expired`", body = Object), Refusals),
    security((), ("bearer" = []))
)]
pub(super) async fn expire(api: web::Data<Api>, session: web::Path<String>) -> Answer {
    if session.trim().is_empty() {
        return Err(ApiError::invalid("the session id is empty").with_field("session"));
    }
    let expired = api.relayq.expire_session(&session).await?;
    Ok(HttpResponse::Ok().json(json!({"session": session.as_str(), "expired": expired})))
}
