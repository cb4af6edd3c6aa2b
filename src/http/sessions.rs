//! `/v1/sessions`: the session registry the hook events keep, and expiring a session (its
//! pending messages will never be delivered), as `relayq session list | expire`; starting and
//! stopping a session in a project, as `/new` and `/stop` do in a chat and `relayq session new
//! | stop` do (the same write), followed at `/v1/sessions/commands/{id}`.

use actix_web::{web, HttpResponse};
use serde_json::json;

use relayq_engine::chat_sessions::{self, names, ChatCommand, CommandState, SessionRequest};
use serde::Deserialize;
use utoipa::ToSchema;

use super::body::Body;
use super::schema::{AgentName, BodyRefusals, Refusals};
use super::{Answer, Api, ApiError};

pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.route("/sessions", web::get().to(list))
        .route("/sessions", web::post().to(new))
        .route("/sessions/{session}/expire", web::post().to(expire))
        .route("/sessions/{session}/stop", web::post().to(stop))
        .route("/sessions/commands/{id}", web::get().to(command));
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

/// A session to start in a project (`[projects.NAME]`).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct NewSession {
    /// The project (1 to 64 of `A-Z a-z 0-9 . _ -`).
    project: String,
    /// The agent; default: the project's first.
    #[schema(value_type = Option<AgentName>)]
    agent: Option<String>,
    /// The session's name (1 to 64 of `A-Z a-z 0-9 _ -`); default: PROJECT-AGENT-N.
    name: Option<String>,
}

/// Answers 202 with the command's row once it is recorded for the project's node (`state`
/// `ready`); `GET /v1/sessions/commands/{id}` says when it is `done` (or `failed`, and why). A
/// request that cannot be carried out (no such project, the agent not allowed there, the
/// name taken) is refused 400 with why, and nothing starts.
#[utoipa::path(
    post, path = "/v1/sessions", tag = "sessions", operation_id = "new_session",
    request_body = NewSession,
    responses((status = 202, description = "The command's row (`id`, `state`, `session`, `node`, `outcome`)", body = Object), BodyRefusals, Refusals),
    security((), ("bearer" = []))
)]
pub(super) async fn new(api: web::Data<Api>, Body(r): Body<NewSession>) -> Answer {
    let field = |field: &'static str| move |why: String| ApiError::invalid(why).with_field(field);
    let project = names::check_project_name(&r.project).map_err(field("project"))?;
    let agent = r
        .agent
        .map(|a| {
            a.parse::<relayq_engine::Agent>()
                .map_err(|e| field("agent")(e.to_string()))
        })
        .transpose()?;
    let name = r
        .name
        .map(|n| names::check_session_name(&n))
        .transpose()
        .map_err(field("name"))?;
    let command = ChatCommand::New {
        project: Some(project),
        agent,
        name,
    };
    carry_out(&api, command).await
}

/// Answers 202 with the command's row (`state` `ready`): its node ends the agent (its own
/// exit, then SIGTERM); `GET /v1/sessions/commands/{id}` says when it is `done`. A session not
/// started from a chat or by `relayq session new` is refused 400.
#[utoipa::path(
    post, path = "/v1/sessions/{session}/stop", tag = "sessions", operation_id = "stop_session",
    params(("session" = String, Path, description = "The session's name")),
    responses((status = 202, description = "The command's row", body = Object), Refusals),
    security((), ("bearer" = []))
)]
pub(super) async fn stop(api: web::Data<Api>, session: web::Path<String>) -> Answer {
    let session = names::check_session_name(&session)
        .map_err(|why| ApiError::invalid(why).with_field("session"))?;
    let command = ChatCommand::Stop {
        session: Some(session),
    };
    carry_out(&api, command).await
}

#[utoipa::path(
    get, path = "/v1/sessions/commands/{id}", tag = "sessions", operation_id = "session_command",
    params(("id" = i64, Path, description = "The command's id")),
    responses(
        (status = 200, description = "The command's row: `state` ready, running, done or failed, and its `outcome`", body = Object),
        (status = 404, description = "No such command", body = super::schema::ErrorBody),
        Refusals,
    ),
    security((), ("bearer" = []))
)]
pub(super) async fn command(api: web::Data<Api>, id: web::Path<String>) -> Answer {
    // Read here, not by the path extractor, whose refusal is plain text.
    let Ok(id) = id.parse::<i64>() else {
        return Err(ApiError::not_found(format!(
            "no session command {:?}: ids are numbers",
            id.as_str()
        )));
    };
    let row = api
        .read(move |e| chat_sessions::command(&e.database().read()?, id))
        .await?;
    match row {
        Some(row) => Ok(HttpResponse::Ok().json(row)),
        None => Err(ApiError::not_found(format!("no session command {id}"))),
    }
}

/// Records the operator's `command` through the same write as a chat's; its row (202), or
/// the refusal it was recorded with (400).
async fn carry_out(api: &Api, command: ChatCommand) -> Answer {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let token = format!("api-{}-{}-{n}", std::process::id(), crate::output::now_ms());
    let request = SessionRequest::operator(command, &token, "operator (HTTP API)");
    api.relayq.record_session_requests(vec![request]).await?;
    let row = api
        .read(move |e| {
            let db = e.database().read()?;
            let op = chat_sessions::OPERATOR;
            match chat_sessions::command_of_message(&db, op, op, &token)? {
                Some(id) => chat_sessions::command(&db, id),
                None => Ok(None),
            }
        })
        .await?
        .ok_or_else(|| ApiError::unavailable("the command was not recorded; try again"))?;
    if row.state == CommandState::Failed {
        let why = row.outcome.clone().unwrap_or_default();
        let why = why.strip_prefix("Not done: ").unwrap_or(&why).to_string();
        return Err(ApiError::invalid(why));
    }
    Ok(HttpResponse::Accepted().json(row))
}
