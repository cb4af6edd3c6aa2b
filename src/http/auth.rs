//! The bearer token: when `[http]` has one, every request but `/healthz` and the dashboard's
//! static files must carry
//! `Authorization: Bearer <token>`. Compared in constant time, so the answer's timing does
//! not tell how much of a guess was right.

use actix_web::body::{EitherBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::header;
use actix_web::middleware::Next;
use actix_web::{web, Error, ResponseError};
use relayq_actors::kit::secret::Secret;
use subtle::ConstantTimeEq;

use super::error::ApiError;

/// The token requests must carry, if any.
#[derive(Clone)]
pub struct Token(pub Option<Secret>);

/// Paths anyone may ask: a liveness probe carries no credentials, and the dashboard's files
/// hold no data (the page asks for the token and sends it with every API call). Pushes under
/// `/v1/ingress/` prove they come from their platform instead (see `ingress`).
const OPEN: &[&str] = &["/healthz", "/", "/dashboard.js", "/dashboard.css"];

pub async fn require_token(
    token: web::Data<Token>,
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<EitherBody<impl MessageBody>>, Error> {
    let Some(expected) = &token.0 else {
        return Ok(next.call(req).await?.map_into_left_body());
    };
    if OPEN.contains(&req.path()) || req.path().starts_with(super::ingress::PREFIX) {
        return Ok(next.call(req).await?.map_into_left_body());
    }
    let given = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or_default();
    if bool::from(given.as_bytes().ct_eq(expected.expose().as_bytes())) {
        return Ok(next.call(req).await?.map_into_left_body());
    }
    let refused = ApiError::new(
        actix_web::http::StatusCode::UNAUTHORIZED,
        "unauthorized",
        "this API needs the token from [http] in the config: send `Authorization: Bearer <token>`",
    );
    let mut response = refused.error_response();
    response.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        header::HeaderValue::from_static("Bearer"),
    );
    Ok(req.into_response(response).map_into_right_body())
}
