//! The daemon's HTTP API (`[http]`, off by default): versioned JSON endpoints for adapters in
//! any language, and health probes for service managers, on actix-web inside `relayq serve`.
//!
//! ```text
//! client ──HTTP──▶ worker thread ──RelayqHandle──▶ SupervisorActor / commit thread ──▶ rows
//!                  (guard: Host, Origin, announced    (the same checks as the CLI)
//!                   size; token, body limit, JSON)
//! ```
//!
//! Routes (all JSON):
//! - `GET /`: the dashboard (a static page calling the API below).
//! - `GET /healthz`: the process answers (no token needed).
//! - `GET /metrics`: Prometheus metrics, `relayq_` names (token needed, like `/v1`).
//! - `GET /readyz`: the database takes writes, every channel is ready, not stopping; 503 and
//!   the reasons otherwise.
//! - `POST /v1/inbound`, `POST /v1/outbound`: enqueue; 201 written, 200 a duplicate of a row
//!   already written (its id), 400 with what to fix, 429 queue full (nothing written).
//! - `GET /v1/messages/{id}`: one row's story, as `relayq show --json`.
//! - `GET /v1/status`: as `relayq status --json`.
//! - `GET /v1/openapi.json`: this API as OpenAPI, generated from the handlers.
//! - `GET /v1/dead` (filters, pages), `POST /v1/dead/retry`, `POST /v1/dead/purge` (by ids,
//!   filters or `all`, with `dry_run`): as `relayq dead`.
//! - `GET /v1/sessions`, `POST /v1/sessions/{session}/expire`: as `relayq session`.
//! - `POST /v1/hooks/{agent}`: an agent's hook event, as `relayq hook` takes it.
//! - `GET /v1/lanes`: every session and destination with unfinished rows, and its state.
//! - `POST /v1/ingress/{source}`: a platform's push (Telegram webhook, Slack Events API).
//! - `GET /v1/pauses`, `POST /v1/pause`, `POST /v1/resume`: hold a queue or one key.
//! - `GET /v1/approvals`, `POST /v1/approvals/{id}/allow|deny`: as `relayq approvals`.

mod approvals;
mod auth;
mod body;
mod config;
mod dashboard;
mod dead;
mod error;
mod guard;
mod health;
mod hooks;
mod ingress;
mod lanes;
mod metrics;
mod openapi;
mod pauses;
mod schema;
mod sessions;
mod v1;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use actix_web::{middleware, web, App, HttpServer};
use relayq_actors::RelayqHandle;

pub use config::HttpConfig;
pub use error::{Answer, ApiError};

/// What every request handler reaches.
#[derive(Clone)]
pub struct Api {
    pub relayq: RelayqHandle,
    /// Set when the daemon begins to stop: `/readyz` answers 503 from then on.
    pub stopping: Arc<AtomicBool>,
    pub max_request_bytes: usize,
}

impl Api {
    /// Runs `read` on the engine off the HTTP worker (a blocking database read).
    pub async fn read<T: Send + 'static, E: Into<ApiError> + Send + 'static>(
        &self,
        read: impl FnOnce(&relayq_engine::Engine) -> Result<T, E> + Send + 'static,
    ) -> Result<T, ApiError> {
        let engine = self.relayq.store().engine.clone();
        web::block(move || read(&engine)).await?.map_err(Into::into)
    }

    pub fn is_stopping(&self) -> bool {
        self.stopping.load(Ordering::SeqCst)
    }
}

/// A started server: stop it before the runtime, so no request arrives at a stopping relayq.
pub struct Server {
    handle: actix_web::dev::ServerHandle,
    stopping: Arc<AtomicBool>,
    pub address: std::net::SocketAddr,
}

impl Server {
    /// Binds `[http] listen` and serves on the current actix system. The token is read now:
    /// one that cannot be read refuses the start.
    pub fn start(config: &HttpConfig, relayq: RelayqHandle) -> Result<Server, String> {
        let address = config.address().map_err(|m| format!("http.listen: {m}"))?;
        let token = auth::Token(config.token()?);
        let listener = std::net::TcpListener::bind(address)
            .map_err(|e| format!("cannot listen on {address} (http.listen): {e}"))?;
        let address = listener.local_addr().unwrap_or(address);
        let guard = guard::Guard::new(address, token.0.is_some(), config.max_request_bytes);
        let stopping = Arc::new(AtomicBool::new(false));
        let api = Api {
            relayq,
            stopping: stopping.clone(),
            max_request_bytes: config.max_request_bytes,
        };
        let server = HttpServer::new(move || {
            App::new()
                .app_data(web::Data::new(api.clone()))
                .app_data(web::Data::new(token.clone()))
                .app_data(web::Data::new(guard.clone()))
                .wrap(middleware::from_fn(auth::require_token))
                .wrap(middleware::from_fn(guard::check))
                .configure(health::routes)
                .configure(dashboard::routes)
                .configure(metrics::routes)
                .service(
                    web::scope("/v1")
                        .configure(v1::routes)
                        .configure(openapi::routes),
                )
                .default_service(web::to(not_found))
        })
        .workers(config.workers)
        // `serve` handles the signals: it stops this server first, then the runtime.
        .disable_signals()
        .listen(listener)
        .map_err(|e| format!("cannot listen on {address} (http.listen): {e}"))?;
        let server = server.run();
        let handle = server.handle();
        actix_rt::spawn(server);
        tracing::info!(%address, "HTTP API listening");
        Ok(Server {
            handle,
            stopping,
            address,
        })
    }

    /// Answers no new request; lets those in flight finish.
    pub async fn stop(self) {
        self.stopping.store(true, Ordering::SeqCst);
        self.handle.stop(true).await;
    }
}

async fn not_found(req: actix_web::HttpRequest) -> Result<actix_web::HttpResponse, ApiError> {
    Err(ApiError::not_found(format!(
        "no route {} {}; the API is under /v1 (see the README's HTTP API section)",
        req.method(),
        req.path()
    )))
}
