//! `POST /v1/ingress/{source}`: platforms that push (Telegram's webhook mode, Slack's Events
//! API) post here. The source proves the request is the platform's (its secret, its
//! signature) instead of the API token, reads it, and the messages are committed before the
//! answer: 200 means the rows are on disk, so a restart never loses an answered push, and a
//! push the platform retries (no answer, a 5xx) is a duplicate of the rows already written.

use actix_web::http::StatusCode;
use actix_web::{web, HttpRequest, HttpResponse};
use relayq_actors::sources::{Push, PushRefused, Pushed};
use relayq_actors::ActorError;
use relayq_engine::EngineError;
use serde_json::json;

use super::body::PushBody;
use super::schema::{BodyRefusals, ErrorBody};
use super::{Answer, Api, ApiError};

/// Where pushes come in; the token does not apply under it (the source checks the platform's
/// own proof).
pub const PREFIX: &str = "/v1/ingress/";

pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.route("/ingress/{source}", web::post().to(ingress));
}

#[utoipa::path(
    post, path = "/v1/ingress/{source}", tag = "ingress", operation_id = "ingress",
    params(("source" = String, Path, description = "A source in webhook mode, `[sources.NAME]`")),
    request_body(content = Object, description = "The platform's push: a Telegram update, a Slack event (JSON), a Slack button click (`application/x-www-form-urlencoded`, `payload=<JSON>`)"),
    responses(
        (status = 200, description = "Committed (or nothing to take); Slack's challenge answered", body = Object),
        (status = 400, description = "Not a push the source can read", body = ErrorBody),
        (status = 401, description = "Not proven to come from the platform (secret, signature, timestamp)", body = ErrorBody),
        (status = 404, description = "No source of that name takes pushes", body = ErrorBody),
        (status = 503, description = "Not committed (the daemon is stopping, the database busy): the platform retries", body = ErrorBody),
        (status = 500, description = "Not committed", body = ErrorBody),
        BodyRefusals,
    )
)]
pub(super) async fn ingress(
    api: web::Data<Api>,
    name: web::Path<String>,
    req: HttpRequest,
    PushBody(body): PushBody,
) -> Answer {
    let Some(source) = api.relayq.push_source(&name) else {
        return Err(ApiError::not_found(format!(
            "no source {name:?} takes pushes (a [sources.NAME] in webhook mode)"
        )));
    };
    let headers = req
        .headers()
        .iter()
        .filter_map(|(n, v)| {
            Some((
                n.as_str().to_ascii_lowercase(),
                v.to_str().ok()?.to_string(),
            ))
        })
        .collect();
    let push = Push {
        headers,
        body: body.to_vec(),
    };
    let messages = match source.receive(&name, &push).await {
        Ok(Pushed::Answer(answer)) => return Ok(HttpResponse::Ok().json(answer)),
        Ok(Pushed::Messages(messages)) => messages,
        Ok(Pushed::Requests(requests)) => {
            let taps = api.relayq.record_session_requests(requests).await?;
            source.tapped(taps);
            return Ok(HttpResponse::Ok().json(json!({ "requests": "recorded" })));
        }
        Ok(Pushed::Answers(answers)) => {
            let answered = api.relayq.record_answers(answers).await?;
            let n = answered.len();
            source.acknowledge(answered);
            return Ok(HttpResponse::Ok().json(json!({ "answered": n })));
        }
        Err(PushRefused::NotThePlatform(why)) => {
            tracing::warn!(source = %name, why, "refused a push that does not prove it comes from the platform");
            return Err(ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", why));
        }
        Err(PushRefused::Unreadable(why)) => return Err(ApiError::invalid(why)),
    };
    let (mut written, mut refused) = (0, 0);
    let messages = match messages.iter().any(|m| m.unlisted) {
        true => api.relayq.admit(messages).await?,
        false => messages,
    };
    for message in messages {
        match api.relayq.enqueue(message.clone()).await {
            Ok(enqueued) => written += usize::from(!enqueued.duplicate),
            // Retrying cannot make it fit: answered 200 so the platform moves on, and what
            // was refused is kept (expired, cut) where `status` counts it.
            Err(ActorError::Invalid(why) | ActorError::Engine(EngineError::Invalid(why))) => {
                refused += 1;
                match api.relayq.record_refused(message).await? {
                    Some(_) => {}
                    None => {
                        tracing::error!(source = %name, why, "a pushed message was not taken")
                    }
                }
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(HttpResponse::Ok().json(json!({ "written": written, "refused": refused })))
}
