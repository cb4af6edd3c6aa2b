//! How a channel's requests reach the far end: hyper's HTTP/1 client with a connection pool,
//! TLS by rustls (the webpki roots), and the proxies of the environment.
//!
//! ```text
//!   request ──▶ pool ──(no idle connection)──▶ Connector::call(dst)
//!                                               ├─ no proxy for dst:  TCP (+ TLS for https)
//!                                               ├─ https via a proxy: CONNECT tunnel, then TLS
//!                                               └─ http via a proxy:  TCP to the proxy, the
//!                                                  request in absolute form
//! ```
//!
//! reqwest did this before, at about 4 µs more per request on the actix thread (its redirect
//! layer parses each request's URL again); the outbound benchmark is bound by that thread.
//! `HTTP_PROXY`, `HTTPS_PROXY`, `ALL_PROXY` and `NO_PROXY` (and their lowercase forms) are
//! read as curl reads them, when the client is made.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll};
use std::thread::ThreadId;
use std::time::Duration;

use http::{HeaderValue, Uri};
use hyper::rt::{Read, ReadBufCursor, Write};
use hyper_rustls::{HttpsConnector, MaybeHttpsStream};
use hyper_util::client::legacy::connect::proxy::Tunnel;
use hyper_util::client::legacy::connect::{Connected, Connection, HttpConnector};
use hyper_util::client::legacy::Client;
use hyper_util::client::proxy::matcher::Matcher;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::net::TcpStream;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A pool of connections to the far ends of one channel, and the proxy rules.
///
/// Each thread sending through it has its own pool: a connection is driven by a task on the
/// thread that opened it, so a request from another thread would wake that thread for every
/// request (see [`send_threads`](crate::outbound::send_threads)).
#[derive(Clone)]
pub struct Transport {
    connector: Connector,
    pools: Arc<Mutex<Vec<(ThreadId, Pool)>>>,
    /// `None` when the environment names no proxy: no request pays for the rules then.
    proxies: Option<Arc<Matcher>>,
}

/// hyper's pooled client: the connections of one thread.
type Pool = Client<Connector, super::body::Body>;

impl Transport {
    /// A transport whose connections (TCP, a proxy's tunnel, TLS) give up after
    /// `connect_timeout`: a connection never made is a failure before any byte was sent.
    pub fn new(connect_timeout: Duration) -> Self {
        let proxies = proxies_named().then(|| Arc::new(Matcher::from_env()));
        let mut tcp = HttpConnector::new();
        tcp.enforce_http(false);
        tcp.set_nodelay(true);
        // Probes on idle connections, as reqwest set them: a pooled connection or a long poll
        // through a NAT that dropped it is found dead in about a minute, not hours.
        tcp.set_keepalive(Some(Duration::from_secs(15)));
        tcp.set_keepalive_interval(Some(Duration::from_secs(15)));
        tcp.set_keepalive_retries(Some(3));
        let connector = Connector {
            tcp,
            tls: tls_config(),
            proxies: proxies.clone(),
            timeout: connect_timeout,
        };
        Transport {
            connector,
            pools: Arc::default(),
            proxies,
        }
    }

    /// Sends `request` on a connection of this thread's pool; the answer's head, its body
    /// still to read.
    pub async fn request(
        &self,
        mut request: hyper::Request<super::body::Body>,
    ) -> Result<hyper::Response<hyper::body::Incoming>, hyper_util::client::legacy::Error> {
        // A plain-http request through a proxy carries the proxy's credentials itself; an
        // https one gives them in its tunnel's CONNECT.
        if request.uri().scheme() == Some(&http::uri::Scheme::HTTP) {
            if let Some(auth) = self.proxy_auth(request.uri()) {
                request
                    .headers_mut()
                    .insert(http::header::PROXY_AUTHORIZATION, auth);
            }
        }
        // The future holds what it needs: the lock is not held while it runs.
        let sent = self.pool_of_this_thread(|pool| pool.request(request));
        sent.await
    }

    /// Calls `f` with this thread's pool, made on its first request.
    fn pool_of_this_thread<T>(&self, f: impl FnOnce(&Pool) -> T) -> T {
        let me = std::thread::current().id();
        let mut pools = self.pools.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, pool)) = pools.iter().find(|(thread, _)| *thread == me) {
            return f(pool);
        }
        let pool = Client::builder(TokioExecutor::new())
            .pool_timer(TokioTimer::new())
            .pool_idle_timeout(Duration::from_secs(90))
            .build(self.connector.clone());
        let out = f(&pool);
        pools.push((me, pool));
        out
    }

    fn proxy_auth(&self, dst: &Uri) -> Option<HeaderValue> {
        self.proxies.as_ref()?.intercept(dst)?.basic_auth().cloned()
    }
}

/// Whether the environment names a proxy at all.
fn proxies_named() -> bool {
    ["ALL_PROXY", "HTTPS_PROXY", "HTTP_PROXY"]
        .iter()
        .flat_map(|name| [name.to_string(), name.to_lowercase()])
        .any(|name| std::env::var_os(name).is_some_and(|v| !v.is_empty()))
}

/// rustls with the webpki roots and ring, made once: every channel's client shares it.
fn tls_config() -> Arc<rustls::ClientConfig> {
    static CONFIG: OnceLock<Arc<rustls::ClientConfig>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let roots = rustls::RootCertStore {
                roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
            };
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let config = rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .expect("ring supports the default TLS versions")
                .with_root_certificates(roots)
                .with_no_client_auth();
            Arc::new(config)
        })
        .clone()
}

/// Makes the connections the pool lacks: directly, or through the proxy the environment
/// names for the destination.
#[derive(Clone)]
struct Connector {
    tcp: HttpConnector,
    tls: Arc<rustls::ClientConfig>,
    proxies: Option<Arc<Matcher>>,
    timeout: Duration,
}

impl tower_service::Service<Uri> for Connector {
    type Response = Conn;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Conn, BoxError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, dst: Uri) -> Self::Future {
        let connector = self.clone();
        Box::pin(async move {
            match tokio::time::timeout(connector.timeout, connector.connect(dst)).await {
                Ok(conn) => conn,
                Err(_) => Err(io::Error::new(io::ErrorKind::TimedOut, "connect timed out").into()),
            }
        })
    }
}

impl Connector {
    async fn connect(self, dst: Uri) -> Result<Conn, BoxError> {
        let mut direct = HttpsConnector::from((self.tcp.clone(), self.tls.clone()));
        let Some(proxy) = self.proxies.as_ref().and_then(|p| p.intercept(&dst)) else {
            let io = tower_service::Service::call(&mut direct, dst).await?;
            return Ok(Conn::Direct {
                io: Box::new(io),
                proxied: false,
            });
        };
        if dst.scheme() == Some(&http::uri::Scheme::HTTPS) {
            let mut tunnel = Tunnel::new(proxy.uri().clone(), direct);
            if let Some(auth) = proxy.basic_auth() {
                tunnel = tunnel.with_auth(auth.clone());
            }
            let mut tls = HttpsConnector::from((tunnel, self.tls));
            let io = tower_service::Service::call(&mut tls, dst).await?;
            return Ok(Conn::Tunneled(Box::new(io)));
        }
        let io = tower_service::Service::call(&mut direct, proxy.uri().clone()).await?;
        Ok(Conn::Direct {
            io: Box::new(io),
            proxied: true,
        })
    }
}

type Tcp = MaybeHttpsStream<TokioIo<TcpStream>>;

/// One connection: to the far end or a plain-http proxy (`proxied`: requests go in absolute
/// form), or TLS through a proxy's tunnel.
pub enum Conn {
    // Boxed (one allocation per connection, not per request): a TLS stream is over 1 KiB,
    // and TLS inside TLS (an https proxy) twice that.
    Direct { io: Box<Tcp>, proxied: bool },
    Tunneled(Box<MaybeHttpsStream<Tcp>>),
}

impl Connection for Conn {
    fn connected(&self) -> Connected {
        match self {
            Conn::Direct { io, proxied } => io.connected().proxy(*proxied),
            Conn::Tunneled(io) => io.connected(),
        }
    }
}

impl Read for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Direct { io, .. } => Pin::new(&mut **io).poll_read(cx, buf),
            Conn::Tunneled(io) => Pin::new(&mut **io).poll_read(cx, buf),
        }
    }
}

impl Write for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Conn::Direct { io, .. } => Pin::new(&mut **io).poll_write(cx, buf),
            Conn::Tunneled(io) => Pin::new(&mut **io).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Conn::Direct { io, .. } => Pin::new(&mut **io).poll_write_vectored(cx, bufs),
            Conn::Tunneled(io) => Pin::new(&mut **io).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Conn::Direct { io, .. } => io.is_write_vectored(),
            Conn::Tunneled(io) => io.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Direct { io, .. } => Pin::new(&mut **io).poll_flush(cx),
            Conn::Tunneled(io) => Pin::new(&mut **io).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Direct { io, .. } => Pin::new(&mut **io).poll_shutdown(cx),
            Conn::Tunneled(io) => Pin::new(&mut **io).poll_shutdown(cx),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;
    use std::net::SocketAddr;

    /// A GET through `transport`, its answer read to the end (so its connection goes back to
    /// the pool).
    async fn get(transport: Transport, url: String) {
        let request = hyper::Request::get(url)
            .body(http_body_util::Either::Left(http_body_util::Full::default()))
            .unwrap();
        let answer = transport.request(request).await.expect("an answer");
        answer.into_body().collect().await.expect("the body");
    }

    /// A request from another thread would be handed to the connection's task on the thread
    /// that opened it, waking that thread each time: each thread sends on its own connections.
    #[actix::test]
    async fn each_thread_sends_on_connections_of_its_own_and_reuses_them() {
        let peers: Arc<Mutex<Vec<SocketAddr>>> = Arc::default();
        let noted = peers.clone();
        let server = crate::testing::loopback::Loopback::start(0, move |asked| {
            noted.lock().unwrap().push(asked.peer);
            crate::testing::loopback::Answer::new(200, "")
        });
        let url = format!("{}/", server.url());
        let transport = Transport::new(Duration::from_secs(5));
        get(transport.clone(), url.clone()).await;
        get(transport.clone(), url.clone()).await;
        let other = actix::Arbiter::new();
        for _ in 0..2 {
            let (done, finished) = tokio::sync::oneshot::channel();
            let (transport, url) = (transport.clone(), url.clone());
            other.spawn_fn(move || {
                actix_rt::spawn(async move {
                    get(transport, url).await;
                    let _ = done.send(());
                });
            });
            finished.await.unwrap();
        }
        other.stop();
        let peers = peers.lock().unwrap().clone();
        assert_eq!(peers.len(), 4);
        assert_eq!(peers[0], peers[1], "this thread reuses its connection");
        assert_eq!(peers[2], peers[3], "the other thread reuses its own");
        assert_ne!(peers[0], peers[2], "each thread has its own: {peers:?}");
    }
}
