//! `/v1`: enqueue inbound and outbound messages, one message's story, the status; and the
//! routes of `dead`, `sessions`, `hooks`, `pauses` and `lanes`. Each route does what its CLI command does, with
//! the same checks and the same answers.

use actix_web::http::StatusCode;
use actix_web::{web, HttpResponse};
use relayq_engine::outbound::Kind;
use relayq_engine::{Enqueued, InboundMessage, MessageType, OutboundMessage};
use serde::{Deserialize, Serialize};

use super::body::Body;
use super::schema::{BodyRefusals, ErrorBody, Refusals, Written};
use super::{Answer, Api, ApiError};
use utoipa::ToSchema;

pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.route("/inbound", web::post().to(enqueue_inbound))
        .route("/outbound", web::post().to(enqueue_outbound))
        .route("/messages/{id}", web::get().to(message))
        .route("/status", web::get().to(status))
        .configure(super::dead::routes)
        .configure(super::sessions::routes)
        .configure(super::hooks::routes)
        .configure(super::pauses::routes)
        .configure(super::lanes::routes)
        .configure(super::approvals::routes)
        .configure(super::ingress::routes);
}

/// `POST /v1/inbound`: `relayq enqueue inbound`'s fields, as JSON. Not `InboundMessage`
/// itself: that type reads stored payloads and so tolerates unknown fields, where a request
/// with a misspelt field must be refused.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct InboundRequest {
    /// The agent session to deliver to.
    session: String,
    /// Where the message came from (telegram, discord, terminal, ...).
    origin: String,
    /// `text` (the default), `voice` or `file`.
    #[serde(rename = "type", default)]
    #[schema(value_type = Option<super::schema::MessageType>)]
    message_type: MessageType,
    #[serde(default)]
    content: String,
    source_message_id: Option<String>,
    source_channel_id: Option<String>,
    source_thread_id: Option<String>,
    actor_id: Option<String>,
    actor_name: Option<String>,
    actor_avatar_url: Option<String>,
    /// Extra JSON handed to the channel with the message.
    #[schema(value_type = Option<Object>)]
    payload: Option<serde_json::Value>,
}

/// `POST /v1/outbound`: `relayq enqueue outbound`'s fields, as JSON.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct OutboundRequest {
    /// A configured channel.
    channel: String,
    /// The destination on it (a chat id, a channel id, a webhook's `to`).
    to: String,
    text: String,
    /// `final` (the default), `block` or `tool`.
    #[serde(default)]
    #[schema(value_type = Option<super::schema::Kind>)]
    kind: Kind,
    idempotency_key: Option<String>,
    thread: Option<String>,
    reply_to: Option<String>,
}

#[utoipa::path(
    post, path = "/v1/inbound", tag = "enqueue", request_body = InboundRequest,
    responses(
        (status = 201, description = "Written", body = Written),
        (status = 200, description = "A duplicate: the row written before", body = Written),
        (status = 429, description = "The queue or the session is full: nothing was written", body = ErrorBody),
        BodyRefusals, Refusals,
    ),
    security((), ("bearer" = []))
)]
pub(super) async fn enqueue_inbound(api: web::Data<Api>, Body(r): Body<InboundRequest>) -> Answer {
    let message = InboundMessage {
        session: r.session,
        origin: r.origin,
        message_type: r.message_type,
        content: r.content,
        source_message_id: r.source_message_id,
        source_channel_id: r.source_channel_id,
        source_thread_id: r.source_thread_id,
        actor_id: r.actor_id,
        actor_name: r.actor_name,
        actor_avatar_url: r.actor_avatar_url,
        payload: r.payload,
        // Files come from chat sources, which describe them; a caller gives text.
        attachments: Vec::new(),
        album: None,
        album_quiet: std::time::Duration::ZERO,
        prompt: None,
        route_by_chat: false,
        unlisted: false,
    };
    let enqueued = api.relayq.enqueue(message).await?;
    Ok(written(&enqueued, &enqueued))
}

#[utoipa::path(
    post, path = "/v1/outbound", tag = "enqueue", request_body = OutboundRequest,
    responses(
        (status = 201, description = "Written (as parts when the text is over the channel's limit)", body = Written),
        (status = 200, description = "A duplicate (same idempotency key): the row written before", body = Written),
        (status = 429, description = "The queue or the destination is full: nothing was written", body = ErrorBody),
        BodyRefusals, Refusals,
    ),
    security((), ("bearer" = []))
)]
pub(super) async fn enqueue_outbound(
    api: web::Data<Api>,
    Body(r): Body<OutboundRequest>,
) -> Answer {
    let message = OutboundMessage {
        kind: r.kind,
        idempotency_key: r.idempotency_key,
        thread: r.thread,
        reply_to: r.reply_to,
        ..OutboundMessage::text(&r.channel, &r.to, &r.text)
    };
    let written_rows = api.relayq.enqueue_outbound(message).await?;
    Ok(written(&written_rows.first, &written_rows))
}

/// 201 with the new row, or 200 with the row an earlier enqueue wrote (a duplicate): the
/// body is what `enqueue --json` prints.
fn written(enqueued: &Enqueued, body: &impl Serialize) -> HttpResponse {
    let status = match enqueued.duplicate {
        true => StatusCode::OK,
        false => StatusCode::CREATED,
    };
    HttpResponse::build(status).json(body)
}

#[utoipa::path(
    get, path = "/v1/messages/{id}", tag = "rows",
    params(("id" = i64, Path, description = "A row id")),
    responses(
        (status = 200, description = "The row, every field, as `relayq show --json`", body = Object),
        (status = 404, description = "No such row", body = ErrorBody),
        Refusals,
    ),
    security((), ("bearer" = []))
)]
pub(super) async fn message(api: web::Data<Api>, id: web::Path<String>) -> Answer {
    let id: i64 = id.parse().map_err(|_| {
        ApiError::invalid(format!("{id:?} is not a row id; ids are whole numbers")).with_field("id")
    })?;
    let row = api.read(move |e| e.row(id)).await?;
    match row {
        Some(row) => Ok(HttpResponse::Ok().json(crate::views::row_json(&row))),
        None => Err(ApiError::not_found(format!(
            "there is no row {id} (pruned, or never written; GET /v1/status shows what there is)"
        ))),
    }
}

#[utoipa::path(
    get, path = "/v1/status", tag = "rows",
    responses((status = 200, description = "As `relayq status --json`", body = Object), Refusals),
    security((), ("bearer" = []))
)]
pub(super) async fn status(api: web::Data<Api>) -> Answer {
    let status = api.read(crate::views::Status::read).await?;
    Ok(HttpResponse::Ok().json(status.json()))
}
