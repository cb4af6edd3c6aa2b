//! `mode = "webhook"`: Telegram posts each update to `POST /v1/ingress/NAME`, carrying the
//! secret given to `setWebhook` in `X-Telegram-Bot-Api-Secret-Token`. The update is read as a
//! polled one is (allowlist, chat → session, content), and the HTTP API answers 200 only once
//! its row is committed: Telegram retries an update it saw no answer to, and the row's dedup
//! key (origin, chat, message id) makes the retry a duplicate.

use std::sync::Arc;

use serde_json::{json, Value};
use subtle::ConstantTimeEq;

use super::{answered, TelegramSource};
use crate::kit::secret::Secret;
use crate::sources::{Push, PushRefused, PushSource, Pushed, Receive};

/// The header Telegram sends the webhook's secret in (lower case, as [`Push`] keeps names).
pub const SECRET_HEADER: &str = "x-telegram-bot-api-secret-token";

pub struct TelegramWebhook {
    source: TelegramSource,
    secret: Secret,
    /// Registered with `setWebhook` at start, when given.
    url: Option<String>,
}

impl TelegramWebhook {
    pub fn new(source: TelegramSource, secret: Secret, url: Option<String>) -> Self {
        TelegramWebhook {
            source,
            secret,
            url,
        }
    }
}

impl PushSource for TelegramWebhook {
    fn receive<'a>(&'a self, name: &'a str, push: &'a Push) -> Receive<'a> {
        Box::pin(async move {
            let given = push.header(SECRET_HEADER).unwrap_or_default();
            if !bool::from(given.as_bytes().ct_eq(self.secret.expose().as_bytes())) {
                return Err(PushRefused::NotThePlatform(format!(
                    "the {SECRET_HEADER} header does not carry this source's webhook_secret"
                )));
            }
            let update: Value = serde_json::from_slice(&push.body)
                .map_err(|e| PushRefused::Unreadable(format!("the update is not JSON: {e}")))?;
            let Some(id) = update["update_id"].as_i64() else {
                return Err(PushRefused::Unreadable("the update has no update_id".into()));
            };
            Ok(match self.source.inner.accept(id, update, &super::origin(name)).await {
                Some(super::TakenUpdate::Message(message)) => Pushed::Messages(vec![message]),
                Some(super::TakenUpdate::Answer(answer)) => Pushed::Answers(vec![answer]),
                Some(super::TakenUpdate::Request(request)) => Pushed::Requests(vec![request]),
                None => Pushed::Messages(Vec::new()),
            })
        })
    }

    fn acknowledge(&self, answered: Vec<relayq_engine::approvals::Answered>) {
        crate::sources::Source::acknowledge(&mut self.source.clone(), answered);
    }

    fn tapped(&self, taps: Vec<(String, String)>) {
        self.source.inner.answer_taps(taps);
    }

    fn started(&self, name: &str) {
        let Some(url) = self.url.clone() else {
            tracing::info!(source = name, "Telegram webhook mode: relayq takes updates at POST /v1/ingress/{name}; register the public URL with setWebhook (and secret_token)");
            return;
        };
        let (inner, secret, name) = (self.source.inner.clone(), self.secret.clone(), name.to_string());
        actix_rt::spawn(async move { register(inner, &url, &secret, &name).await });
    }
}

/// `setWebhook` with the URL and the secret, for new messages only.
async fn register(inner: Arc<super::Inner>, url: &str, secret: &Secret, name: &str) {
    let body = json!({
        "url": url,
        "secret_token": secret.expose(),
        "allowed_updates": super::ALLOWED_UPDATES,
    });
    match inner.call(&inner.short, "setWebhook", &body).await {
        Ok(reply) => match answered(&reply) {
            Ok(_) => tracing::info!(source = name, url, "Telegram webhook registered"),
            Err(e) => tracing::error!(source = name, url, error = %e, "setWebhook refused: Telegram will not post updates"),
        },
        Err(e) => tracing::error!(source = name, url, error = %e, "cannot register the Telegram webhook"),
    }
}
