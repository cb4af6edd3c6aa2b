//! What the API answers when a request fails: a status and
//! `{"error": {"code": "...", "message": "...", "field": "..."}}`, the message saying what to
//! change. Engine and actor errors are turned into these at this edge, as the CLI turns them
//! into exit codes.

use actix_web::http::StatusCode;
use actix_web::{HttpResponse, ResponseError};
use relayq_actors::ActorError;
use relayq_engine::EngineError;
use serde_json::json;

/// What a handler answers: its response, or the error the client is told.
pub type Answer = Result<HttpResponse, ApiError>;

#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct ApiError {
    pub status: StatusCode,
    /// Stable, for programs: `invalid`, `not_found`, `queue_full`, `unauthorized`,
    /// `too_large`, `unsupported_media_type`, `unavailable`, `internal`.
    pub code: &'static str,
    pub message: String,
    /// The request field at fault, when one is.
    pub field: Option<String>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
            field: None,
        }
    }

    pub fn invalid(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::BAD_REQUEST, "invalid", message)
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::NOT_FOUND, "not_found", message)
    }

    pub fn unavailable(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", message)
    }

    pub fn with_field(mut self, field: impl Into<String>) -> Self {
        self.field = Some(field.into()).filter(|f: &String| !f.is_empty() && f != ".");
        self
    }
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        self.status
    }

    fn error_response(&self) -> HttpResponse {
        let mut error = json!({"code": self.code, "message": self.message});
        if let Some(field) = &self.field {
            error["field"] = field.clone().into();
        }
        HttpResponse::build(self.status).json(json!({ "error": error }))
    }
}

impl From<EngineError> for ApiError {
    fn from(e: EngineError) -> Self {
        match e {
            EngineError::Invalid(m) => ApiError::invalid(m),
            EngineError::QueueFull { .. } => {
                ApiError::new(StatusCode::TOO_MANY_REQUESTS, "queue_full", e.to_string())
            }
            e if e.is_busy() => ApiError::unavailable(format!("{e}; try again")),
            e => {
                tracing::error!(error = %e, "HTTP request failed");
                ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string())
            }
        }
    }
}

impl From<ActorError> for ApiError {
    fn from(e: ActorError) -> Self {
        match e {
            ActorError::Engine(e) => e.into(),
            ActorError::Invalid(m) => ApiError::invalid(m),
            ActorError::ShuttingDown => ApiError::unavailable(e.to_string()),
            e => {
                tracing::error!(error = %e, "HTTP request failed");
                ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string())
            }
        }
    }
}

impl From<actix_web::error::BlockingError> for ApiError {
    fn from(e: actix_web::error::BlockingError) -> Self {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string())
    }
}
