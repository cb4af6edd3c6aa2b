//! A WebSocket held open to a platform (Slack's Socket Mode, Discord's gateway): connect with a
//! deadline, read text frames, write text frames, and notice a connection that died silently
//! (no frame for a while: a ping; no answer to it either: gone). Reconnecting with backoff is
//! the source actor's: a held source's error closes the connection and the actor opens a new
//! one after its backoff, from the stored resume token.

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

/// How long opening a connection (TCP, TLS, the upgrade) may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// With no frame for this long a ping is sent; with none for twice as long, the connection
/// is taken for dead.
pub const QUIET_LIMIT: Duration = Duration::from_secs(30);

pub struct WebSocket {
    stream: WebSocketStream<MaybeTlsStream<TcpStream>>,
}

/// What a platform's connection gave: a text frame, or its end.
#[derive(Debug, PartialEq)]
pub enum Frame {
    Text(String),
    /// The platform closed the connection (with its reason, if it gave one).
    Closed(String),
}

impl WebSocket {
    /// Opens `url` (`wss://`, or `ws://` for a local server). The URL may hold a ticket or a
    /// token: it is never put in an error.
    pub async fn connect(url: &str) -> Result<WebSocket, String> {
        let connecting = tokio_tungstenite::connect_async(url);
        match tokio::time::timeout(CONNECT_TIMEOUT, connecting).await {
            Ok(Ok((stream, _))) => Ok(WebSocket { stream }),
            Ok(Err(e)) => Err(format!("cannot open the WebSocket connection: {e}")),
            Err(_) => Err(format!(
                "the WebSocket connection did not open within {CONNECT_TIMEOUT:?}"
            )),
        }
    }

    /// The next text frame. Pings are answered (by the library) and binary frames skipped; a
    /// connection quiet for [`QUIET_LIMIT`] is pinged, and one that stays quiet is an error.
    pub async fn next_frame(&mut self) -> Result<Frame, String> {
        let mut pinged = false;
        loop {
            let frame = match tokio::time::timeout(QUIET_LIMIT, self.stream.next()).await {
                Ok(frame) => frame,
                Err(_) if pinged => {
                    return Err(format!(
                        "no frame for {:?}, not even an answer to a ping: the connection is gone",
                        QUIET_LIMIT * 2
                    ))
                }
                Err(_) => {
                    pinged = true;
                    self.stream
                        .send(Message::Ping(Default::default()))
                        .await
                        .map_err(|e| format!("cannot ping the WebSocket connection: {e}"))?;
                    continue;
                }
            };
            pinged = false;
            match frame {
                None => return Ok(Frame::Closed("the connection ended".into())),
                Some(Err(e)) => return Err(format!("the WebSocket connection failed: {e}")),
                Some(Ok(Message::Text(text))) => return Ok(Frame::Text(text.to_string())),
                Some(Ok(Message::Close(close))) => {
                    let reason = close.map_or_else(
                        || "no reason given".to_string(),
                        |c| format!("{} {}", u16::from(c.code), c.reason),
                    );
                    return Ok(Frame::Closed(reason));
                }
                Some(Ok(_)) => {}
            }
        }
    }

    /// Writes a text frame.
    pub async fn send_text(&mut self, text: String) -> Result<(), String> {
        self.stream
            .send(Message::text(text))
            .await
            .map_err(|e| format!("cannot write to the WebSocket connection: {e}"))
    }
}
