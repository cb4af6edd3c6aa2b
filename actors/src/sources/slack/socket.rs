//! `mode = "socket"`: Slack's Socket Mode, a held connection instead of a public URL. relayq
//! asks `apps.connections.open` (with the app-level token, `xapp-...`) for a single-use
//! `wss://` URL and reads envelopes from it:
//!
//! ```text
//!   apps.connections.open ──▶ wss://... ──▶ hello
//!     events_api  { envelope_id, payload: event_callback } ─▶ rows (as the Events API's)
//!     interactive { envelope_id, payload: block_actions }  ─▶ answers to approvals
//!     committed ──▶ {"envelope_id": ...}   (an envelope never acknowledged is sent again)
//!     disconnect (refresh_requested, ...) ──▶ a new connection, from the start
//! ```
//!
//! Slack keeps no position for an app: what was not acknowledged comes again, on this
//! connection or the next, and the rows' dedup key (conversation, `ts`) makes a repeat a
//! duplicate. So the stored offset stays as it is; the acknowledgement is the commit mark.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use super::{origin, SlackReader};
use crate::kit::http::{self, HttpClient};
use crate::kit::websocket::{Frame, PlatformSocket};
use crate::sources::{HeldConnection, HeldSource, OnConnection, Pushed, Arrived};

/// How long `apps.connections.open` may take, with its answer.
const OPEN_TIMEOUT: Duration = Duration::from_secs(40);

#[derive(Clone)]
pub struct SlackSocket {
    reader: Arc<SlackReader>,
    /// `apps.connections.open`, with the app-level token in the client's headers.
    open: url::Url,
    http: HttpClient,
    origin: String,
}

impl SlackSocket {
    pub fn new(reader: SlackReader, open: url::Url, http: HttpClient) -> Self {
        SlackSocket {
            reader: Arc::new(reader),
            open,
            http,
            origin: String::new(),
        }
    }

    /// The single-use URL of a new connection, or what went wrong in words an operator can act
    /// on. A 429 waits out its `Retry-After` before saying so.
    async fn ticket(&self) -> Result<String, String> {
        let request = self
            .http
            .post(self.open.clone())
            .body(String::new(), "application/x-www-form-urlencoded");
        let reply = self
            .http
            .send(request)
            .await
            .map_err(|e| format!("cannot reach Slack: {}", e.text().unwrap_or_default()))?;
        let answer = reply.json::<Value>().unwrap_or_default();
        if reply.status == 429 {
            let wait = reply
                .retry_after
                .unwrap_or(Duration::from_secs(5))
                .min(http::MAX_RETRY_AFTER);
            tokio::time::sleep(wait).await;
            return Err(format!("Slack is rate limiting apps.connections.open; waited {wait:?}"));
        }
        match (answer["ok"].as_bool(), answer["url"].as_str()) {
            (Some(true), Some(url)) => Ok(url.to_string()),
            _ => {
                let error = answer["error"].as_str().unwrap_or("no answer Slack documents");
                Err(match error {
                    "invalid_auth" | "not_authed" | "token_revoked" | "not_allowed_token_type" => format!(
                        "Slack {}: {error}: check app_token (an app-level token, xapp-..., with the connections:write scope)",
                        reply.status
                    ),
                    _ => format!("Slack {}: {error}", reply.status),
                })
            }
        }
    }
}

impl HeldSource for SlackSocket {
    type Connection = SlackConnection;

    fn named(&mut self, name: &str) {
        self.origin = origin(name);
    }

    fn connect(&self, _resume: Option<String>) -> OnConnection<'static, SlackConnection> {
        let socket = self.clone();
        Box::pin(async move {
            let url = tokio::time::timeout(OPEN_TIMEOUT, socket.ticket())
                .await
                .map_err(|_| format!("apps.connections.open took over {OPEN_TIMEOUT:?}"))??;
            let connection = PlatformSocket::connect(&url).await?;
            tracing::info!(source = socket.origin, "Slack Socket Mode connected");
            Ok(SlackConnection { socket, connection })
        })
    }

    fn acknowledge(&mut self, answered: Vec<relayq_engine::approvals::Answered>) {
        self.reader.acknowledge(answered);
    }

    fn tapped(&mut self, taps: Vec<(String, String)>) {
        self.reader.tapped(taps);
    }

    fn ready_check(&self) -> Option<crate::kit::ReadyCheck> {
        let socket = self.clone();
        Some(Box::pin(async move { socket.ticket().await.map(|_| ()) }))
    }
}

pub struct SlackConnection {
    socket: SlackSocket,
    connection: PlatformSocket,
}

impl SlackConnection {
    /// What one frame gives: rows or answers with the envelope to acknowledge, nothing (a
    /// hello), or the end of this connection.
    fn read(&self, text: &str) -> Result<Option<Arrived>, String> {
        let frame: Value = serde_json::from_str(text)
            .map_err(|e| format!("Slack sent a frame that is not JSON: {e}"))?;
        let envelope = frame["envelope_id"].as_str().map(str::to_string);
        let reader = &self.socket.reader;
        let origin = &self.socket.origin;
        let pushed = match frame["type"].as_str() {
            Some("hello") => return Ok(None),
            Some("disconnect") => {
                let reason = frame["reason"].as_str().unwrap_or("no reason given");
                return Err(format!("Slack asked for a new connection ({reason})"));
            }
            Some("events_api") if frame["payload"]["type"] == "event_callback" => {
                reader.event_callback(&frame["payload"], origin)
            }
            Some("interactive") => reader.interaction(&frame["payload"], origin),
            other => {
                tracing::debug!(kind = ?other, "acknowledging a Socket Mode envelope relayq does not take");
                Pushed::Messages(Vec::new())
            }
        };
        let mut received = Arrived {
            acks: envelope.into_iter().collect(),
            ..Arrived::default()
        };
        match pushed {
            Pushed::Messages(messages) => received.messages = messages,
            Pushed::Answers(answers) => received.answers = answers,
            Pushed::Requests(requests) => received.requests = requests,
            Pushed::Answer(_) => {}
        }
        Ok(Some(received))
    }
}

impl HeldConnection for SlackConnection {
    fn next(&mut self) -> OnConnection<'_, Arrived> {
        Box::pin(async move {
            loop {
                match self.connection.next_frame().await? {
                    Frame::Closed(reason) => {
                        return Err(format!("Slack closed the connection: {reason}"))
                    }
                    Frame::Text(text) => {
                        if let Some(received) = self.read(&text)? {
                            return Ok(received);
                        }
                    }
                }
            }
        })
    }

    fn acknowledge(&mut self, acks: Vec<String>) -> OnConnection<'_, ()> {
        Box::pin(async move {
            for envelope in acks {
                let ack = serde_json::json!({ "envelope_id": envelope });
                self.connection.send_text(ack.to_string()).await?;
            }
            Ok(())
        })
    }
}
