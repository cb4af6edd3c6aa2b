//! `GET /v1/lanes`: every session and destination with unfinished rows, oldest first, and what
//! it is doing: `delivering`, `due`, `throttled` or `unreachable` (until its head is due again),
//! `backing off` or `blocked by a failing head`, `paused` by the operator, or `channel paused`
//! (its channel's breaker is open, or the platform rate-limited the whole channel).

use actix_web::{web, HttpRequest, HttpResponse};
use relayq_engine::queue::Lane;
use relayq_engine::QueueName;
use serde::Deserialize;
use serde_json::json;

use super::schema::Refusals;
use super::{body, Answer, Api, ApiError};
use crate::output::with_times;
use utoipa::IntoParams;

/// The most lanes one answer holds.
const MAX_LANES: usize = 1000;

pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.route("/lanes", web::get().to(lanes));
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(super) struct LanesQuery {
    /// At most this many lanes, 1 to 1000 (200).
    #[serde(default = "default_limit")]
    #[param(value_type = Option<usize>)]
    limit: usize,
}

fn default_limit() -> usize {
    200
}

#[utoipa::path(
    get, path = "/v1/lanes", tag = "rows", params(LanesQuery),
    responses((status = 200, description = "Every session and destination with unfinished rows, and its `state`", body = Vec<Object>), Refusals),
    security((), ("bearer" = []))
)]
pub(super) async fn lanes(api: web::Data<Api>, req: HttpRequest) -> Answer {
    let q: LanesQuery = body::query(&req)?;
    if !(1..=MAX_LANES).contains(&q.limit) {
        return Err(ApiError::invalid(format!("limit must be 1..={MAX_LANES}")).with_field("limit"));
    }
    let engine = api.relayq.store().engine.clone();
    let (lanes, now) = web::block(move || {
        Ok::<_, relayq_engine::EngineError>((engine.lanes(q.limit)?, engine.now()))
    })
    .await??;
    let shown: Vec<_> = lanes
        .iter()
        .map(|lane| lane_json(&api, lane, now))
        .collect();
    Ok(HttpResponse::Ok().json(shown))
}

fn lane_json(api: &Api, lane: &Lane, now: i64) -> serde_json::Value {
    let paused = api.relayq.store().pauses.holds(lane.queue, &lane.key);
    let channel_paused = lane.queue == QueueName::Outbound
        && channel_of(&lane.key).is_some_and(|c| api.relayq.channels().penalty(&c).is_some());
    let state = match () {
        _ if paused && lane.leased == 0 => "paused",
        _ if channel_paused && lane.leased == 0 => "channel paused",
        _ => lane.state(now),
    };
    let mut value = serde_json::to_value(lane).expect("a lane serialises");
    value["state"] = json!(state);
    value["paused"] = json!(paused);
    with_times(value, &["head_next_attempt_at", "head_created_at"])
}

/// The channel of an outbound key (`["channel","destination"]`).
fn channel_of(key: &str) -> Option<String> {
    let parts: Vec<String> = serde_json::from_str(key).ok()?;
    parts.into_iter().next()
}
