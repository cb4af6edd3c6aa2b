//! `/healthz`: the process answers. `/readyz`: it can do its work now — the database takes
//! a write, every channel is ready, and the daemon is not stopping.

use actix_web::{web, HttpResponse};
use serde_json::json;

use super::schema::ErrorBody;
use super::Api;

pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.route("/healthz", web::get().to(healthz))
        .route("/readyz", web::get().to(readyz));
}

#[utoipa::path(
    get, path = "/healthz", tag = "meta",
    responses((status = 200, description = "The process answers (no token needed)", body = Object))
)]
pub(super) async fn healthz() -> HttpResponse {
    HttpResponse::Ok().json(json!({"status": "ok"}))
}

#[utoipa::path(
    get, path = "/readyz", tag = "meta",
    responses(
        (status = 200, description = "Ready: the database takes writes, every channel is ready, not stopping", body = Object),
        (status = 503, description = "Not ready, and the `reasons`", body = Object),
        (status = 401, description = "The token is missing", body = ErrorBody),
    ),
    security((), ("bearer" = []))
)]
pub(super) async fn readyz(api: web::Data<Api>) -> HttpResponse {
    let mut reasons = Vec::new();
    if api.is_stopping() {
        reasons.push("the daemon is stopping".to_string());
    }
    // An empty write through the group commit: the database file takes writes.
    if let Err(e) = api.relayq.store().apply(relayq_engine::writes::Probe).await {
        reasons.push(format!("the database does not take writes: {e}"));
    }
    let engine = api.relayq.store().engine.clone();
    match web::block(move || engine.database().file_still_there()).await {
        Ok(Err(why)) => reasons.push(why),
        Ok(Ok(())) => {}
        Err(e) => reasons.push(format!("cannot look at the database file: {e}")),
    }
    let channels = api.relayq.channels();
    for name in channels.names() {
        if channels.unready(&name).is_some() {
            reasons.push(format!("channel {name} is not ready yet"));
        }
    }
    match reasons.is_empty() {
        true => HttpResponse::Ok().json(json!({"status": "ready"})),
        false => HttpResponse::ServiceUnavailable()
            .json(json!({"status": "not ready", "reasons": reasons})),
    }
}
