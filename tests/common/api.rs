//! A `relayq serve` with the HTTP API on, and a client for it: for the API's and the
//! dashboard's tests.

use std::time::Duration;

use reqwest::blocking::{Client, Response};
use serde_json::{json, Value};

use super::{wait_until, webhook_config, App, Config, Daemon, Endpoint, Reply};

/// A port free now on loopback (the daemon binds it a moment later).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A daemon serving `config` with the API on, and the API's base URL.
pub struct Api {
    pub app: App,
    pub daemon: Option<Daemon>,
    pub base: String,
    pub client: Client,
    pub token: Option<String>,
}

impl Api {
    pub fn start(config: Config) -> Api {
        Api::start_with_env(config, &[])
    }

    pub fn start_with_env(config: Config, env: &[(&str, &str)]) -> Api {
        let port = free_port();
        let config = config
            .set("http", "enabled = true")
            .set("http", &format!("listen = \"127.0.0.1:{port}\""));
        let app = App::new(config);
        let daemon = app.serve_with_env(env);
        let api = Api {
            app,
            daemon: Some(daemon),
            base: format!("http://127.0.0.1:{port}"),
            client: Client::builder()
                .timeout(Duration::from_secs(10))
                .build()
                .unwrap(),
            token: None,
        };
        wait_until("the API to answer", Duration::from_secs(10), || {
            api.client
                .get(format!("{}/healthz", api.base))
                .send()
                .is_ok_and(|r| r.status() == 200)
        });
        api
    }

    pub fn request(
        &self,
        method: reqwest::Method,
        path: &str,
    ) -> reqwest::blocking::RequestBuilder {
        let r = self.client.request(method, format!("{}{path}", self.base));
        match &self.token {
            Some(t) => r.bearer_auth(t),
            None => r,
        }
    }

    pub fn get(&self, path: &str) -> Response {
        self.request(reqwest::Method::GET, path).send().unwrap()
    }

    pub fn post(&self, path: &str, body: &Value) -> Response {
        self.request(reqwest::Method::POST, path)
            .json(body)
            .send()
            .unwrap()
    }

    /// A GET of `path` with one header.
    pub fn get_with(&self, path: &str, (name, value): (&str, &str)) -> Response {
        let request = self.request(reqwest::Method::GET, path).header(name, value);
        request.send().unwrap()
    }

    /// A POST to `path` with one header and, when given, a raw body.
    pub fn post_raw(
        &self,
        path: &str,
        (name, value): (&str, &str),
        body: Option<&str>,
    ) -> Response {
        let request = self
            .request(reqwest::Method::POST, path)
            .header(name, value);
        match body {
            Some(body) => request.body(body.to_string()),
            None => request,
        }
        .send()
        .unwrap()
    }

    pub fn stop(mut self) {
        self.daemon.take().unwrap().stop();
    }

    /// Stops the daemon and starts another on the same database and port.
    pub fn restart(&mut self) {
        self.daemon.take().unwrap().stop();
        self.daemon = Some(self.app.serve());
        wait_until("the API to answer again", Duration::from_secs(10), || {
            self.client
                .get(format!("{}/healthz", self.base))
                .send()
                .is_ok_and(|r| r.status() == 200)
        });
    }
}

/// Status and JSON body.
pub fn answer(r: Response) -> (u16, Value) {
    let status = r.status().as_u16();
    let text = r.text().unwrap();
    let body = serde_json::from_str(&text).unwrap_or_else(|_| panic!("not JSON: {text}"));
    (status, body)
}

/// The API of a daemon whose `hook` webhook (the returned endpoint) answers every send 500,
/// and whose outbound rows wait an hour before each retry: lanes that stay failing.
pub fn failing_hook() -> (Endpoint, Api) {
    let hook = Endpoint::start(|_| Reply::status(500));
    let api = Api::start(
        webhook_config(&hook.url)
            .set("queues.outbound", "backoff = [\"1h\"]")
            .set("daemon", "shutdown_grace = \"5s\""),
    );
    (hook, api)
}

/// Enqueues `text` to `to` on the `hook` webhook channel over HTTP; returns the row id.
pub fn send(api: &Api, to: &str, text: &str) -> i64 {
    let (status, body) = answer(api.post(
        "/v1/outbound",
        &json!({"channel": "hook", "to": to, "text": text}),
    ));
    assert_eq!(status, 201, "{body}");
    body["id"].as_i64().unwrap()
}
