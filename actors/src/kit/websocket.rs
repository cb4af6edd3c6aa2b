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

pub struct PlatformSocket {
    stream: WebSocketStream<MaybeTlsStream<TcpStream>>,
}

/// What a platform's connection gave: a text frame, or its end.
#[derive(Debug, PartialEq)]
pub enum Frame {
    Text(String),
    /// The platform closed the connection (with its reason, if it gave one).
    Closed(String),
}

impl PlatformSocket {
    /// Opens `url` (`wss://`, or `ws://` for a local server). The URL may hold a ticket or a
    /// token: it is never put in an error.
    pub async fn connect(url: &str) -> Result<PlatformSocket, String> {
        let connecting = tokio_tungstenite::connect_async(url);
        match tokio::time::timeout(CONNECT_TIMEOUT, connecting).await {
            Ok(Ok((stream, _))) => Ok(PlatformSocket { stream }),
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A `wss://` URL goes through rustls (its crypto provider chosen by the crate's features):
    /// a server that hangs up during the handshake is an error to retry, not a panic.
    #[actix_rt::test]
    async fn a_tls_connection_cut_during_the_handshake_is_an_error() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                drop(stream);
            }
        });
        let error = PlatformSocket::connect(&format!("wss://127.0.0.1:{port}/link"))
            .await
            .err()
            .expect("no WebSocket without a TLS handshake");
        assert!(
            error.starts_with("cannot open the WebSocket connection"),
            "{error}"
        );
    }

    /// Text frames come through; a close is the end of the connection, with its reason.
    #[actix_rt::test]
    async fn text_frames_come_through_and_a_close_ends_the_connection() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        actix_rt::spawn(async move {
            let (stream, _) = listener.accept().await.unwrap();
            let mut socket = tokio_tungstenite::accept_async(stream).await.unwrap();
            socket.send(Message::text("hello")).await.unwrap();
            let echoed = socket.next().await.unwrap().unwrap();
            socket.send(echoed).await.unwrap();
            socket.close(None).await.unwrap();
        });
        let mut ws = PlatformSocket::connect(&format!("ws://127.0.0.1:{port}/"))
            .await
            .unwrap();
        assert_eq!(ws.next_frame().await, Ok(Frame::Text("hello".into())));
        ws.send_text("ack".into()).await.unwrap();
        assert_eq!(ws.next_frame().await, Ok(Frame::Text("ack".into())));
        assert!(matches!(ws.next_frame().await, Ok(Frame::Closed(_))));
    }
}
