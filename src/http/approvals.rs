//! `/v1/approvals`: agents' permission questions, listed and answered as `relayq approvals`
//! does (the first answer wins; the chat's question is edited to the outcome).

use actix_web::http::StatusCode;
use actix_web::{web, HttpResponse};
use relayq_engine::approvals::{AnswerResult, Decision, Scope};
use serde::Deserialize;

use super::schema::{ErrorBody, Refusals};
use super::{Answer, Api, ApiError};
use crate::operator::{no_longer_open, operator};
use crate::views::approval_json;
use relayq_engine::approvals::writes::AnswerApproval;

/// The name an answer through the API is recorded under.
const API_ANSWERER: &str = "the relayq API";

pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.route("/approvals", web::get().to(list))
        .route("/approvals/{id}/allow", web::post().to(allow))
        .route("/approvals/{id}/deny", web::post().to(deny));
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
pub(super) struct ApprovalListQuery {
    /// The answered ones too (newest first); the open ones only when false.
    #[serde(default)]
    all: bool,
}

#[utoipa::path(
    get, path = "/v1/approvals", tag = "approvals", operation_id = "list_approvals",
    params(ApprovalListQuery),
    responses((status = 200, description = "As `relayq approvals list --json`", body = Vec<Object>), Refusals),
    security((), ("bearer" = []))
)]
pub(super) async fn list(api: web::Data<Api>, query: web::Query<ApprovalListQuery>) -> Answer {
    let all = query.all;
    let rows = api.read(move |e| e.approvals(!all, 200)).await?;
    let rows: Vec<_> = rows.iter().map(approval_json).collect();
    Ok(HttpResponse::Ok().json(rows))
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
pub(super) struct AllowQuery {
    /// Allow the like for the rest of the agent's session, where the agent has that answer.
    #[serde(default)]
    session: bool,
}

/// 200 with the approval; 404 no such approval; 409 no longer open (nothing changed).
#[utoipa::path(
    post, path = "/v1/approvals/{id}/allow", tag = "approvals", operation_id = "allow_approval",
    params(("id" = String, Path, description = "The approval id"), AllowQuery),
    responses(
        (status = 200, description = "The approval, allowed", body = Object),
        (status = 404, description = "No such approval", body = ErrorBody),
        (status = 409, description = "No longer open: nothing changed", body = ErrorBody),
        Refusals,
    ),
    security((), ("bearer" = []))
)]
pub(super) async fn allow(
    api: web::Data<Api>,
    id: web::Path<String>,
    query: web::Query<AllowQuery>,
) -> Answer {
    let scope = if query.session {
        Scope::Session
    } else {
        Scope::Once
    };
    answer(api, id.into_inner(), Decision::Allow(scope)).await
}

/// 200 with the approval; 404 no such approval; 409 no longer open (nothing changed).
#[utoipa::path(
    post, path = "/v1/approvals/{id}/deny", tag = "approvals", operation_id = "deny_approval",
    params(("id" = String, Path, description = "The approval id")),
    responses(
        (status = 200, description = "The approval, denied", body = Object),
        (status = 404, description = "No such approval", body = ErrorBody),
        (status = 409, description = "No longer open: nothing changed", body = ErrorBody),
        Refusals,
    ),
    security((), ("bearer" = []))
)]
pub(super) async fn deny(api: web::Data<Api>, id: web::Path<String>) -> Answer {
    answer(api, id.into_inner(), Decision::Deny).await
}

async fn answer(api: web::Data<Api>, id: String, decision: Decision) -> Answer {
    // Through the daemon's group commit, as every write of the daemon's.
    let answer = AnswerApproval {
        id: id.clone(),
        decision,
        who: operator(API_ANSWERER, "api"),
    };
    let result = api.relayq.store().apply(answer).await?;
    match result {
        AnswerResult::Recorded(a) => {
            api.relayq.approvals_changed();
            Ok(HttpResponse::Ok().json(approval_json(&a)))
        }
        AnswerResult::AlreadyEnded(a) => Err(ApiError::new(
            StatusCode::CONFLICT,
            "not_open",
            no_longer_open(&a),
        )),
        AnswerResult::NotFound => Err(ApiError::not_found(format!("no approval {id:?}"))),
        other @ (AnswerResult::NotHere(_) | AnswerResult::NotAllowed) => Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            other.reply(),
        )),
    }
}
