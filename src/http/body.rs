//! Reading a request's JSON body: only as `Content-Type: application/json` (415 otherwise),
//! at most `max_request_bytes` (413 past it, without reading the rest), then parsed with the
//! path of the field at fault in the error.
//!
//! The content type matters for safety, not form: a web page on any site can make a browser
//! POST `text/plain` or a form to `127.0.0.1` without asking, but not `application/json`
//! (that needs a CORS preflight, which this API never grants). Bodies of other types would let
//! any page a user opens enqueue messages to their agents.

use std::future::Future;
use std::pin::Pin;

use actix_web::http::{header, StatusCode};
use actix_web::{dev, web, FromRequest, HttpRequest};
use futures_util::StreamExt;
use serde::de::DeserializeOwned;

use super::error::ApiError;
use super::Api;

/// A handler's JSON body, read as [`Raw`] reads it, then parsed with the field at fault
/// named: `Body(request): Body<T>`.
pub struct Body<T>(pub T);

impl<T: DeserializeOwned + 'static> FromRequest for Body<T> {
    type Error = ApiError;
    type Future = Pin<Box<dyn Future<Output = Result<Self, ApiError>>>>;

    fn from_request(req: &HttpRequest, payload: &mut dev::Payload) -> Self::Future {
        let raw = Raw::from_request(req, payload);
        Box::pin(async move {
            let Raw(body) = raw.await?;
            parse(&body).map(Body)
        })
    }
}

/// A handler's body as it came, checked for its content type and size: `Raw(body): Raw`.
pub struct Raw(pub web::BytesMut);

impl FromRequest for Raw {
    type Error = ApiError;
    type Future = Pin<Box<dyn Future<Output = Result<Self, ApiError>>>>;

    fn from_request(req: &HttpRequest, payload: &mut dev::Payload) -> Self::Future {
        let body = body_of(req, payload, &["application/json"]);
        Box::pin(async move { body.await.map(Raw) })
    }
}

/// A platform's push as it came: JSON, or a form (Slack posts button clicks as
/// `payload=<JSON>`). Only for `POST /v1/ingress/NAME`, whose source checks the platform's
/// proof (a signature, a secret header) that no web page can forge: the form type's danger
/// (any page can make a browser post one) does not reach it.
pub struct PushBody(pub web::BytesMut);

impl FromRequest for PushBody {
    type Error = ApiError;
    type Future = Pin<Box<dyn Future<Output = Result<Self, ApiError>>>>;

    fn from_request(req: &HttpRequest, payload: &mut dev::Payload) -> Self::Future {
        let types = &["application/json", "application/x-www-form-urlencoded"];
        let body = body_of(req, payload, types);
        Box::pin(async move { body.await.map(PushBody) })
    }
}

/// The request's body, sent as one of `types`, within `http.max_request_bytes`.
fn body_of(
    req: &HttpRequest,
    payload: &mut dev::Payload,
    types: &'static [&'static str],
) -> impl Future<Output = Result<web::BytesMut, ApiError>> {
    let (req, payload) = (req.clone(), payload.take());
    async move {
        let limit = req
            .app_data::<web::Data<Api>>()
            .map_or(0, |api| api.max_request_bytes);
        read(&req, payload, limit, types).await
    }
}

fn parse<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    let mut de = serde_json::Deserializer::from_slice(body);
    serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let field = e.path().to_string();
        ApiError::invalid(format!(
            "the body is not what this route takes: {}",
            e.inner()
        ))
        .with_field(field)
    })
}

/// A route's query string (`?queue=outbound&limit=50`), with the parameter at fault named.
pub fn query<T: DeserializeOwned>(req: &HttpRequest) -> Result<T, ApiError> {
    web::Query::<T>::from_query(req.query_string())
        .map(web::Query::into_inner)
        .map_err(|e| {
            ApiError::invalid(format!(
                "the query string is not what this route takes: {e}"
            ))
        })
}

/// The body as it came, sent as one of `types`, within `limit`.
async fn read(
    req: &HttpRequest,
    mut payload: dev::Payload,
    limit: usize,
    types: &[&str],
) -> Result<web::BytesMut, ApiError> {
    let content_type = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let essence = content_type.split(';').next().unwrap_or_default().trim();
    if !types.iter().any(|t| essence.eq_ignore_ascii_case(t)) {
        return Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            match types {
                [json] => format!(
                    "the body must be JSON sent as `Content-Type: {json}` (got {content_type:?})"
                ),
                _ => format!(
                    "the body must be sent as `Content-Type:` one of {types:?} (got {content_type:?})"
                ),
            },
        ));
    }
    let too_large = || {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "too_large",
            format!("the request body is over {limit} bytes (http.max_request_bytes)"),
        )
    };
    let mut body = web::BytesMut::new();
    while let Some(chunk) = payload.next().await {
        let chunk = chunk.map_err(|e| ApiError::invalid(format!("cannot read the body: {e}")))?;
        if body.len() + chunk.len() > limit {
            return Err(too_large());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}
