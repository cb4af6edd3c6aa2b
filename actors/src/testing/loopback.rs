//! An HTTP server on loopback for the fake platforms: hyper's HTTP/1 server, each connection
//! a task, each request answered on tokio's blocking pool (a fake may hold a request, as a
//! long poll does, without holding up another).
//!
//! tiny_http did this before. Its pool gives each connection a thread for the connection's
//! life and loses a wake-up when two connections arrive together: the second then waits
//! until some kept-alive connection closes, and a client that keeps its connections (relayq
//! does) saw "the far end did not answer in time" (`in_a_forum_each_session_gets_a_topic_…`,
//! when the two topics were asked for at once).

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;

/// One request, as the fake sees it.
#[derive(Debug, Clone)]
pub struct Asked {
    pub method: String,
    /// Path and query, as requested.
    pub url: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub peer: SocketAddr,
}

impl Asked {
    /// The first value of header `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The body as text (invalid UTF-8 replaced).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// A `multipart/form-data` body's fields, in order (none for another body).
    pub fn form(&self) -> Vec<FormField> {
        let Some(boundary) = self
            .header("content-type")
            .filter(|t| t.starts_with("multipart/form-data"))
            .and_then(|t| t.split_once("boundary="))
            .map(|(_, b)| b.trim_matches('"').to_string())
        else {
            return Vec::new();
        };
        let delimiter = format!("--{boundary}").into_bytes();
        let mut fields = Vec::new();
        let mut rest = &self.body[..];
        let mut parts = Vec::new();
        while let Some(at) = find(rest, &delimiter) {
            parts.push(&rest[..at]);
            rest = &rest[at + delimiter.len()..];
        }
        for part in parts.into_iter().skip(1) {
            let Some(end) = find(part, b"\r\n\r\n") else {
                continue;
            };
            let head = String::from_utf8_lossy(&part[..end]).into_owned();
            let value = &part[end + 4..];
            let value = value.strip_suffix(b"\r\n").unwrap_or(value);
            let quoted = |key: &str| {
                head.split(&format!("{key}=\""))
                    .nth(1)?
                    .split('"')
                    .next()
                    .map(str::to_string)
            };
            let content_type = head
                .lines()
                .find_map(|l| l.strip_prefix("Content-Type: "))
                .map(|t| t.trim().to_string());
            fields.push(FormField {
                name: quoted(" name").unwrap_or_default(),
                filename: quoted("filename"),
                content_type,
                bytes: value.to_vec(),
            });
        }
        fields
    }
}

/// One field of a form (see [`Asked::form`]).
#[derive(Debug, Clone)]
pub struct FormField {
    pub name: String,
    pub filename: Option<String>,
    pub content_type: Option<String>,
    pub bytes: Vec<u8>,
}

impl FormField {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.bytes).into_owned()
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// The fake's answer to one request.
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Answer {
    pub fn new(status: u16, body: impl Into<Vec<u8>>) -> Answer {
        Answer {
            status,
            headers: vec![],
            body: body.into(),
        }
    }

    /// `value` as JSON, with its content type.
    pub fn json(status: u16, value: &serde_json::Value) -> Answer {
        Answer::new(status, value.to_string()).header("Content-Type", "application/json")
    }

    pub fn header(mut self, name: &str, value: &str) -> Answer {
        self.headers.push((name.to_string(), value.to_string()));
        self
    }
}

/// A running server; it stops taking connections when dropped (its port is then free).
pub struct Loopback {
    pub addr: SocketAddr,
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl Loopback {
    /// Serves on `port` of 127.0.0.1 (0: any free one), answering each request with `answer`.
    pub fn start(port: u16, answer: impl Fn(Asked) -> Answer + Send + Sync + 'static) -> Loopback {
        let listener = std::net::TcpListener::bind(("127.0.0.1", port)).expect("bind loopback");
        listener
            .set_nonblocking(true)
            .expect("a non-blocking listener");
        let addr = listener.local_addr().expect("its address");
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let answer: Arc<dyn Fn(Asked) -> Answer + Send + Sync> = Arc::new(answer);
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime");
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).expect("a listener");
                tokio::select! {
                    _ = stopped => {}
                    _ = accept(listener, answer) => {}
                }
            });
        });
        Loopback { addr, _stop: stop }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

async fn accept(
    listener: tokio::net::TcpListener,
    answer: Arc<dyn Fn(Asked) -> Answer + Send + Sync>,
) {
    while let Ok((stream, peer)) = listener.accept().await {
        let _ = stream.set_nodelay(true);
        let answer = answer.clone();
        let service = hyper::service::service_fn(move |request| {
            let answer = answer.clone();
            async move { Ok::<_, hyper::Error>(respond(request, peer, answer).await) }
        });
        tokio::spawn(
            hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service),
        );
    }
}

async fn respond(
    request: hyper::Request<hyper::body::Incoming>,
    peer: SocketAddr,
    answer: Arc<dyn Fn(Asked) -> Answer + Send + Sync>,
) -> hyper::Response<Full<Bytes>> {
    let (head, body) = request.into_parts();
    let body = body
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let asked = Asked {
        method: head.method.to_string(),
        url: head
            .uri
            .path_and_query()
            .map(|p| p.as_str().to_string())
            .unwrap_or_else(|| "/".into()),
        headers: head
            .headers
            .iter()
            .map(|(n, v)| {
                (
                    n.to_string(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect(),
        body: body.to_vec(),
        peer,
    };
    let answered = tokio::task::spawn_blocking(move || answer(asked))
        .await
        .unwrap_or_else(|_| Answer::new(500, "the fake panicked answering"));
    let mut response = hyper::Response::builder().status(answered.status);
    for (name, value) in &answered.headers {
        response = response.header(name.as_str(), value.as_str());
    }
    response
        .body(Full::new(Bytes::from(answered.body)))
        .expect("a response the fake can send")
}

/// A loopback port for a fake platform's held connections (Slack's Socket Mode, Discord's
/// gateway): bound now, served by [`serve_websockets`] once the fake knows its address.
pub fn websocket_listener() -> (std::net::TcpListener, u16) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    listener
        .set_nonblocking(true)
        .expect("a non-blocking listener");
    let port = listener.local_addr().expect("its address").port();
    (listener, port)
}

/// Serves `listener` for the rest of the process, as the platform would: each accepted
/// connection handed to `serve` on a task of its own.
pub fn serve_websockets<F, Fut>(listener: std::net::TcpListener, serve: F)
where
    F: Fn(tokio::net::TcpStream) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        runtime.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).expect("a listener");
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve(stream));
            }
        });
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufRead, BufReader, Write};
    use std::net::TcpStream;
    use std::time::Duration;

    /// One GET on `stream` (kept alive); whether an answer came within 2 s.
    fn answered(stream: &mut TcpStream) -> bool {
        stream
            .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(2)))
            .unwrap();
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        let mut status = String::new();
        let ok = reader.read_line(&mut status).is_ok() && status.starts_with("HTTP/1.1 200");
        let mut line = String::new();
        while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
            line.clear();
        }
        let mut body = [0u8; 2];
        let _ = std::io::Read::read_exact(&mut reader, &mut body);
        ok
    }

    /// The fault tiny_http had (see the module's note): two connections arriving together,
    /// while earlier ones are kept alive, are both answered at once.
    #[test]
    fn two_connections_arriving_together_beside_kept_ones_are_both_answered() {
        let server = Loopback::start(0, |_| Answer::new(200, "ok"));
        let mut kept = Vec::new();
        for round in 0..200 {
            let mut a = TcpStream::connect(server.addr).unwrap();
            let mut b = TcpStream::connect(server.addr).unwrap();
            let (first, second) = (answered(&mut a), answered(&mut b));
            assert!(first && second, "round {round}: a {first}, b {second}");
            kept.extend([a, b]);
            if kept.len() > 8 {
                kept.drain(..2);
            }
        }
    }
}
