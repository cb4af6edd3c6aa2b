//! `GET /metrics`: Prometheus (OpenMetrics text), every name prefixed `relayq_`. The counters
//! are kept by the runtime as work happens (see `relayq_actors::metrics`); the row counts,
//! oldest pending ages, channel states and pauses are read at each scrape, so they include
//! rows written by other processes.

use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;

use actix_web::{web, HttpResponse};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};
use relayq_actors::metrics::ChannelLabel;
use relayq_engine::{Engine, EngineError, QueueName};

use super::schema::Refusals;
use super::{Answer, Api, ApiError};

pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.route("/metrics", web::get().to(metrics));
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct QueueState {
    queue: &'static str,
    state: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct QueueLabel {
    queue: &'static str,
}

/// What a scrape reads from the database.
struct Stored {
    rows: BTreeMap<(QueueName, String), i64>,
    oldest: Vec<(QueueName, i64)>,
    pauses: Vec<QueueName>,
    now: i64,
}

fn read(engine: &Engine) -> Result<Stored, EngineError> {
    let mut rows = BTreeMap::new();
    for c in engine.counts()? {
        *rows.entry((c.queue, c.state)).or_insert(0) += c.count;
    }
    Ok(Stored {
        rows,
        oldest: engine
            .oldest_pending()?
            .into_iter()
            .map(|o| (o.queue, o.created_at))
            .collect(),
        pauses: engine.pauses()?.into_iter().map(|p| p.queue).collect(),
        now: engine.now(),
    })
}

#[utoipa::path(
    get, path = "/metrics", tag = "meta",
    responses(
        (status = 200, description = "Prometheus metrics: OpenMetrics text when asked for (`Accept`), else the Prometheus text format 0.0.4",
            content((String = "application/openmetrics-text"), (String = "text/plain"))),
        Refusals,
    ),
    security((), ("bearer" = []))
)]
pub(super) async fn metrics(api: web::Data<Api>, req: actix_web::HttpRequest) -> Answer {
    let stored = api.read(read).await?;
    let mut registry = Registry::with_prefix("relayq");
    api.relayq.store().metrics.register(&mut registry);

    let rows = Family::<QueueState, Gauge>::default();
    for queue in QueueName::ALL {
        // Every queue and state appears, 0 when empty, so a rate or an alert never sees a gap.
        for state in ["pending", "leased", "delivered", "dead", "expired"] {
            let n = stored.rows.get(&(queue, state.to_string())).copied();
            let label = QueueState {
                queue: queue.as_str(),
                state: state.into(),
            };
            rows.get_or_create(&label).set(n.unwrap_or(0));
        }
    }
    registry.register("rows", "Rows in the database by queue and state", rows);

    let oldest = Family::<QueueLabel, Gauge<f64, AtomicU64>>::default();
    for queue in QueueName::ALL {
        let age = stored
            .oldest
            .iter()
            .find(|(q, _)| *q == queue)
            .map_or(0.0, |(_, created)| {
                (stored.now - created).max(0) as f64 / 1000.0
            });
        oldest
            .get_or_create(&QueueLabel {
                queue: queue.as_str(),
            })
            .set(age);
    }
    registry.register_with_unit(
        "oldest_pending_age",
        "Age of the oldest unfinished row per queue (0 when none)",
        Unit::Seconds,
        oldest,
    );

    let pauses = Family::<QueueLabel, Gauge>::default();
    for queue in QueueName::ALL {
        let n = stored.pauses.iter().filter(|q| **q == queue).count();
        pauses
            .get_or_create(&QueueLabel {
                queue: queue.as_str(),
            })
            .set(n as i64);
    }
    registry.register(
        "operator_pauses",
        "Pauses the operator set per queue (a whole queue or keys of it)",
        pauses,
    );

    let (ready, held) = (
        Family::<ChannelLabel, Gauge>::default(),
        Family::<ChannelLabel, Gauge>::default(),
    );
    let channels = api.relayq.channels();
    for name in channels.names() {
        let label = ChannelLabel {
            channel: name.clone(),
        };
        ready
            .get_or_create(&label)
            .set(channels.unready(&name).is_none() as i64);
        held.get_or_create(&label)
            .set(channels.penalty(&name).is_some() as i64);
    }
    registry.register(
        "channel_ready",
        "1 when the channel is ready to send",
        ready,
    );
    registry.register(
        "channel_paused",
        "1 while the channel sends nothing: its circuit breaker is open, or the platform rate-limited it as a whole",
        held,
    );

    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry)
        .map_err(|e| ApiError::invalid(format!("cannot encode the metrics: {e}")))?;
    let openmetrics = req
        .headers()
        .get(actix_web::http::header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("application/openmetrics-text"));
    Ok(match openmetrics {
        true => HttpResponse::Ok()
            .content_type("application/openmetrics-text; version=1.0.0; charset=utf-8")
            .body(text),
        false => HttpResponse::Ok()
            .content_type("text/plain; version=0.0.4; charset=utf-8")
            .body(prometheus_text(&text)),
    })
}

/// OpenMetrics text as the Prometheus text format (0.0.4), for scrapers and tools that do not
/// ask for OpenMetrics (`curl`, `promtool check metrics`): a counter's HELP and TYPE name its
/// samples (`relayq_enqueued_total`), not the family, so every sample has its help; no `# UNIT`
/// or `# EOF` lines.
fn prometheus_text(openmetrics: &str) -> String {
    let counters: Vec<&str> = openmetrics
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE ")?.strip_suffix(" counter"))
        .collect();
    let mut text = String::with_capacity(openmetrics.len());
    for line in openmetrics.lines() {
        if line.starts_with("# UNIT ") || line == "# EOF" {
            continue;
        }
        let renamed = ["# HELP ", "# TYPE "].iter().find_map(|tag| {
            let rest = line.strip_prefix(tag)?;
            let (name, tail) = rest.split_once(' ')?;
            counters
                .contains(&name)
                .then(|| format!("{tag}{name}_total {tail}"))
        });
        text.push_str(renamed.as_deref().unwrap_or(line));
        text.push('\n');
    }
    text
}
