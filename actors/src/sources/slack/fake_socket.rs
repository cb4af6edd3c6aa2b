//! A local Slack for Socket Mode, answering as docs.slack.dev documents it (and as
//! `tests/fixtures/slack/` holds it): `apps.connections.open` with an app-level token gives a
//! single-use WebSocket URL (`invalid_auth` for another token, `ratelimited` with 429 and
//! `Retry-After` when scripted); each connection starts with `hello`, then carries every
//! envelope not yet acknowledged, in order, once per connection (an envelope no connection
//! acknowledged is sent again on the next, `retry_attempt` counting up); `{"envelope_id"}`
//! frames acknowledge; `disconnect` asks the app for a new connection.

use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;

use crate::testing::loopback::{serve_websockets, websocket_listener, Answer, Asked, Loopback};

#[derive(Clone)]
pub struct FakeSlackSocket {
    /// The Web API's base URL, to give as `api_url`.
    pub api_url: String,
    app_token: String,
    ws_port: u16,
    shared: Arc<Mutex<SocketState>>,
}

#[derive(Default)]
struct SocketState {
    /// Every envelope pushed: its frame, whether acknowledged, how often sent.
    envelopes: Vec<(Value, bool, u32)>,
    /// Answers the next `apps.connections.open` calls get instead of a URL.
    open_failures: VecDeque<(u16, Value)>,
    /// When each refused `apps.connections.open` call came.
    refused_opens: Vec<Instant>,
    /// WebSocket connections accepted.
    connections: usize,
    /// Bumped by [`FakeSlackSocket::disconnect`]: open connections end.
    generation: u64,
}

impl FakeSlackSocket {
    /// Serves the Web API and the WebSocket on free loopback ports, for `app_token`.
    pub fn start(app_token: &str) -> FakeSlackSocket {
        let (ws, ws_port) = websocket_listener();
        let mut fake = FakeSlackSocket {
            api_url: String::new(),
            app_token: app_token.to_string(),
            ws_port,
            shared: Arc::default(),
        };
        let serving = fake.clone();
        serve_websockets(ws, move |stream| serving.clone().serve(stream));
        let serving = fake.clone();
        let api = Loopback::start(0, move |asked| serving.answer_open(&asked));
        fake.api_url = format!("{}/api", api.url());
        // It serves for the rest of the process, as the platform would.
        std::mem::forget(api);
        fake
    }

    /// Queues an `events_api` envelope carrying `event_callback` (as the Events API would
    /// post it); its envelope id.
    pub fn push_event(&self, event_callback: Value) -> String {
        self.push("events_api", event_callback)
    }

    /// Queues an `interactive` envelope carrying `payload` (a `block_actions`).
    pub fn push_interaction(&self, payload: Value) -> String {
        self.push("interactive", payload)
    }

    fn push(&self, kind: &str, payload: Value) -> String {
        let mut state = self.shared.lock().unwrap();
        let id = format!("envelope-{}", state.envelopes.len() + 1);
        let frame = json!({"envelope_id": id, "payload": payload, "type": kind,
                           "accepts_response_payload": kind == "interactive"});
        state.envelopes.push((frame, false, 0));
        id
    }

    /// Whether every envelope so far is acknowledged.
    pub fn all_acknowledged(&self) -> bool {
        self.shared.lock().unwrap().envelopes.iter().all(|e| e.1)
    }

    /// The next `apps.connections.open` calls are answered `status` with `body`, one each.
    pub fn fail_opens(&self, status: u16, body: Value, times: usize) {
        let mut state = self.shared.lock().unwrap();
        for _ in 0..times {
            state.open_failures.push_back((status, body.clone()));
        }
    }

    /// When each refused `apps.connections.open` came.
    pub fn refused_opens(&self) -> Vec<Instant> {
        self.shared.lock().unwrap().refused_opens.clone()
    }

    /// Sends `disconnect` (`refresh_requested`) on the open connections, and closes them.
    pub fn disconnect(&self) {
        self.shared.lock().unwrap().generation += 1;
    }

    fn answer_open(&self, asked: &Asked) -> Answer {
        let authorized =
            asked.header("Authorization") == Some(format!("Bearer {}", self.app_token).as_str());
        let (status, body, retry_after) = if !asked.url.ends_with("/apps.connections.open") {
            (404, json!({"ok": false, "error": "unknown_method"}), None)
        } else if !authorized {
            (200, json!({"ok": false, "error": "invalid_auth"}), None)
        } else {
            let mut state = self.shared.lock().unwrap();
            match state.open_failures.pop_front() {
                Some((status, body)) => {
                    state.refused_opens.push(Instant::now());
                    (status, body, (status == 429).then_some("1"))
                }
                None => {
                    let url = format!(
                        "ws://127.0.0.1:{}/link/?ticket={}",
                        self.ws_port,
                        state.connections + 1
                    );
                    (200, json!({"ok": true, "url": url}), None)
                }
            }
        };
        let response = Answer::new(status, body.to_string())
            .header("Content-Type", "application/json; charset=utf-8");
        match retry_after {
            Some(seconds) => response.header("Retry-After", seconds),
            None => response,
        }
    }

    /// One connection: hello, then every unacknowledged envelope once, reading acknowledgements.
    async fn serve(self, stream: tokio::net::TcpStream) {
        let Ok(mut socket) = tokio_tungstenite::accept_async(stream).await else {
            return;
        };
        let generation = {
            let mut state = self.shared.lock().unwrap();
            state.connections += 1;
            state.generation
        };
        let hello = json!({"type": "hello", "num_connections": 1,
            "debug_info": {"host": "applink-fake", "build_number": 10, "approximate_connection_time": 18060},
            "connection_info": {"app_id": "A0APP"}});
        if socket.send(Message::text(hello.to_string())).await.is_err() {
            return;
        }
        let mut sent_here: HashSet<String> = HashSet::new();
        loop {
            let (due, ended) = {
                let mut state = self.shared.lock().unwrap();
                let ended = state.generation != generation;
                let mut due = Vec::new();
                for (frame, acked, sent) in state.envelopes.iter_mut() {
                    let id = frame["envelope_id"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string();
                    if !*acked && !ended && sent_here.insert(id) {
                        let mut frame = frame.clone();
                        frame["retry_attempt"] = json!(*sent);
                        frame["retry_reason"] = json!(if *sent > 0 { "timeout" } else { "" });
                        *sent += 1;
                        due.push(frame);
                    }
                }
                (due, ended)
            };
            if ended {
                let bye = json!({"type": "disconnect", "reason": "refresh_requested", "debug_info": {"host": "applink-fake"}});
                let _ = socket.send(Message::text(bye.to_string())).await;
                let _ = socket.close(None).await;
                return;
            }
            for frame in due {
                if socket.send(Message::text(frame.to_string())).await.is_err() {
                    return;
                }
            }
            match tokio::time::timeout(Duration::from_millis(10), socket.next()).await {
                Err(_) => {}
                Ok(Some(Ok(Message::Text(text)))) => {
                    let ack: Value = serde_json::from_str(text.as_str()).unwrap_or_default();
                    let mut state = self.shared.lock().unwrap();
                    for (frame, acked, _) in state.envelopes.iter_mut() {
                        if frame["envelope_id"] == ack["envelope_id"] {
                            *acked = true;
                        }
                    }
                }
                Ok(Some(Ok(_))) => {}
                Ok(None) | Ok(Some(Err(_))) => return,
            }
        }
    }
}
