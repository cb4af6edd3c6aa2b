//! `/v1/dead`: dead letters to browse (filtered, a page at a time), to retry in their
//! original order and to purge, by id or by filter, with a dry run. The same choices and
//! refusals as `relayq dead` (see [`crate::dead_letters`]).

use std::collections::BTreeSet;
use std::time::Duration;

use actix_web::http::StatusCode;
use actix_web::{web, HttpRequest, HttpResponse};
use relayq_engine::{DeadQuery, QueueName};
use serde::Deserialize;
use serde_json::json;

use super::body::{self, Body};
use super::schema::{BodyRefusals, Bulk, ErrorBody, Refusals};
use super::{Answer, Api, ApiError};
use crate::dead_letters::{self, DeadError, DeadFilter};
use utoipa::{IntoParams, ToSchema};

/// The most rows one page holds.
const MAX_PAGE: usize = 1000;

pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.route("/dead", web::get().to(list))
        .route("/dead/retry", web::post().to(retry))
        .route("/dead/purge", web::post().to(purge));
}

/// `GET /v1/dead?queue=&key=&reason=&older_than=&limit=&after=`: oldest first; `after` is the
/// last id of the previous page (`next_after` in its answer).
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(super) struct DeadListQuery {
    #[param(value_type = Option<super::schema::Queue>)]
    queue: Option<QueueName>,
    /// A session, or an outbound destination as the list shows it.
    key: Option<String>,
    /// Text the reason or the last error contains.
    reason: Option<String>,
    /// Died longer ago than this (`90s`, `1h`, `2d`).
    #[serde(default, with = "humantime_serde")]
    #[param(value_type = Option<String>)]
    older_than: Option<Duration>,
    /// Rows on a page, 1 to 1000 (100).
    #[serde(default = "default_page")]
    #[param(value_type = Option<usize>)]
    limit: usize,
    /// The last id of the previous page (its `next_after`).
    #[serde(default)]
    #[param(value_type = Option<i64>)]
    after: i64,
}

fn default_page() -> usize {
    100
}

/// `POST /v1/dead/retry` and `/v1/dead/purge`: `ids`, or filters (rows matching every one
/// given), or `all: true`; nothing chosen is refused rather than taken as "every row".
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct BulkRequest {
    #[serde(default)]
    ids: Vec<i64>,
    #[schema(value_type = Option<super::schema::Queue>)]
    queue: Option<QueueName>,
    key: Option<String>,
    reason: Option<String>,
    /// Died longer ago than this (`90s`, `1h`, `2d`).
    #[serde(default, with = "humantime_serde")]
    #[schema(value_type = Option<String>)]
    older_than: Option<Duration>,
    #[serde(default)]
    all: bool,
    /// Answer what would be done, and change nothing.
    #[serde(default)]
    dry_run: bool,
    /// Retry rows whose later messages were already delivered (they arrive out of order).
    #[serde(default)]
    force: bool,
}

impl BulkRequest {
    fn filter(&self) -> Result<DeadFilter, ApiError> {
        let filter = DeadFilter {
            ids: self.ids.clone(),
            queue: self.queue,
            key: self.key.clone(),
            reason: self.reason.clone(),
            older_than: self.older_than,
        };
        match (filter.is_empty(), self.all) {
            (true, false) => Err(ApiError::invalid(
                "say which dead rows: ids, a filter (queue, key, reason, older_than), or all: true",
            )),
            (false, true) if !self.ids.is_empty() => {
                Err(ApiError::invalid("ids and all: true exclude each other").with_field("all"))
            }
            _ => Ok(filter),
        }
    }
}

#[utoipa::path(
    get, path = "/v1/dead", tag = "dead letters", operation_id = "list_dead", params(DeadListQuery),
    responses((status = 200, description = "A page of dead letters, oldest first: `rows`, `total`, `next_after`", body = Object), Refusals),
    security((), ("bearer" = []))
)]
pub(super) async fn list(api: web::Data<Api>, req: HttpRequest) -> Answer {
    let q: DeadListQuery = body::query(&req)?;
    if !(1..=MAX_PAGE).contains(&q.limit) {
        return Err(ApiError::invalid(format!("limit must be 1..={MAX_PAGE}")).with_field("limit"));
    }
    // Paged in SQL: the dashboard asks every 2 s, and a page must not read every dead row.
    let query = DeadQuery {
        queue: q.queue,
        key: q.key,
        reason: q.reason,
        died_before: q.older_than.map(dead_letters::died_before),
        after: q.after,
        limit: q.limit + 1,
    };
    let (mut rows, total) = api.read(move |e| e.dead_page(&query)).await?;
    let more = rows.len() > q.limit;
    rows.truncate(q.limit);
    Ok(HttpResponse::Ok().json(json!({
        "rows": rows.iter().map(dead_letters::row_json).collect::<Vec<_>>(),
        "total": total,
        "next_after": if more { rows.last().map(|r| r.id) } else { None },
    })))
}

#[utoipa::path(
    post, path = "/v1/dead/retry", tag = "dead letters", operation_id = "retry_dead", request_body = BulkRequest,
    responses(
        (status = 200, description = "Pending again, each destination's rows in their original order", body = Bulk),
        (status = 409, description = "`not_dead`: an id is not a dead row; `out_of_order`: a later message was delivered (`force`)", body = ErrorBody),
        BodyRefusals, Refusals,
    ),
    security((), ("bearer" = []))
)]
pub(super) async fn retry(api: web::Data<Api>, Body(r): Body<BulkRequest>) -> Answer {
    let filter = r.filter()?;
    let door = api.relayq.store().door.clone();
    let (dry_run, force) = (r.dry_run, r.force);
    let (rows, revived, out_of_order) = web::block(move || {
        let engine = &door.engine;
        let rows = dead_letters::select(engine, &filter)?;
        let mut out_of_order = dead_letters::out_of_order(engine, &rows)?;
        if !force && !dry_run && !out_of_order.is_empty() {
            return Err(out_of_order.swap_remove(0));
        }
        let revived = match dry_run {
            true => Vec::new(),
            false => dead_letters::retry(&door, &rows, |_| {})?,
        };
        let out_of_order: Vec<String> = out_of_order.iter().map(|e| e.to_string()).collect();
        Ok((rows, revived, out_of_order))
    })
    .await??;
    let keys: BTreeSet<(QueueName, &str)> =
        revived.iter().map(|(_, q, k)| (*q, k.as_str())).collect();
    for (queue, key) in keys {
        api.relayq.wake(queue, key);
    }
    let ids: Vec<i64> = match dry_run {
        true => rows.iter().map(|r| r.id).collect(),
        false => revived.iter().map(|(id, _, _)| *id).collect(),
    };
    Ok(HttpResponse::Ok().json(json!({
        "dry_run": dry_run, "count": ids.len(), "ids": ids, "out_of_order": out_of_order,
    })))
}

#[utoipa::path(
    post, path = "/v1/dead/purge", tag = "dead letters", operation_id = "purge_dead", request_body = BulkRequest,
    responses(
        (status = 200, description = "Deleted (or, with `dry_run`, what would be)", body = Bulk),
        (status = 409, description = "`not_dead`: an id is not a dead row", body = ErrorBody),
        BodyRefusals, Refusals,
    ),
    security((), ("bearer" = []))
)]
pub(super) async fn purge(api: web::Data<Api>, Body(r): Body<BulkRequest>) -> Answer {
    let filter = r.filter()?;
    let door = api.relayq.store().door.clone();
    let dry_run = r.dry_run;
    let ids = web::block(move || -> Result<Vec<i64>, DeadError> {
        let rows = dead_letters::select(&door.engine, &filter)?;
        Ok(match dry_run {
            true => rows.iter().map(|r| r.id).collect(),
            false => dead_letters::purge(&door, &rows, |_| {})?,
        })
    })
    .await??;
    Ok(HttpResponse::Ok().json(json!({"dry_run": dry_run, "count": ids.len(), "ids": ids})))
}

impl From<DeadError> for ApiError {
    fn from(e: DeadError) -> Self {
        match e {
            DeadError::NotDead(_) => ApiError::new(
                StatusCode::CONFLICT,
                "not_dead",
                format!("{e}; GET /v1/dead lists them (nothing was changed)"),
            )
            .with_field("ids"),
            DeadError::OutOfOrder { .. } => ApiError::new(
                StatusCode::CONFLICT,
                "out_of_order",
                format!("{e}; force: true replays it anyway (nothing was changed)"),
            )
            .with_field("force"),
            DeadError::Engine(e) => e.into(),
        }
    }
}
