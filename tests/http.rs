//! The HTTP API through real HTTP on loopback, against a real `relayq serve`: enqueue with the
//! CLI's checks and answers, one message's story, status, health, the token, body limits.

use std::time::Duration;

use reqwest::blocking::{Client, Response};
use serde_json::{json, Value};

use crate::common::{file_config, wait_until, App, Config, Daemon};

/// A port free now on loopback (the daemon binds it a moment later).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A daemon serving `config` with the API on, and the API's base URL.
struct Api {
    app: App,
    daemon: Option<Daemon>,
    base: String,
    client: Client,
    token: Option<String>,
}

impl Api {
    fn start(config: Config) -> Api {
        Api::start_with_env(config, &[])
    }

    fn start_with_env(config: Config, env: &[(&str, &str)]) -> Api {
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

    fn request(&self, method: reqwest::Method, path: &str) -> reqwest::blocking::RequestBuilder {
        let r = self.client.request(method, format!("{}{path}", self.base));
        match &self.token {
            Some(t) => r.bearer_auth(t),
            None => r,
        }
    }

    fn get(&self, path: &str) -> Response {
        self.request(reqwest::Method::GET, path).send().unwrap()
    }

    fn post(&self, path: &str, body: &Value) -> Response {
        self.request(reqwest::Method::POST, path)
            .json(body)
            .send()
            .unwrap()
    }

    fn stop(mut self) {
        self.daemon.take().unwrap().stop();
    }
}

/// Status and JSON body.
fn answer(r: Response) -> (u16, Value) {
    let status = r.status().as_u16();
    let text = r.text().unwrap();
    let body = serde_json::from_str(&text).unwrap_or_else(|_| panic!("not JSON: {text}"));
    (status, body)
}

fn rows(app: &App) -> i64 {
    app.engine().counts().unwrap().iter().map(|c| c.count).sum()
}

#[test]
fn an_inbound_message_enqueued_over_http_is_delivered_and_its_repeat_answers_200_with_the_same_row()
{
    let api = Api::start(file_config());
    let message = json!({"session": "s1", "origin": "telegram", "content": "hello",
                         "source_message_id": "m-1", "source_channel_id": "chat-9"});
    let (status, first) = answer(api.post("/v1/inbound", &message));
    assert_eq!(status, 201, "{first}");
    assert_eq!(first["duplicate"], false);
    let id = first["id"].as_i64().unwrap();

    let (status, again) = answer(api.post("/v1/inbound", &message));
    assert_eq!(
        (status, again["id"].as_i64(), &again["duplicate"]),
        (200, Some(id), &json!(true))
    );

    // The same message id from another chat is another message (not a duplicate).
    let other_chat = json!({"session": "s1", "origin": "telegram", "content": "hi",
                            "source_message_id": "m-1", "source_channel_id": "chat-10"});
    let (status, other) = answer(api.post("/v1/inbound", &other_chat));
    assert_eq!(status, 201, "{other}");
    assert_ne!(other["id"].as_i64(), Some(id));

    wait_until("both delivered", Duration::from_secs(10), || {
        api.app.lines("out.jsonl").len() == 2
    });
    let (status, row) = answer(api.get(&format!("/v1/messages/{id}")));
    assert_eq!(status, 200);
    assert_eq!(
        (row["id"].as_i64(), &row["state"]),
        (Some(id), &json!("delivered"))
    );
    assert_eq!(row["payload"]["content"], "hello");
    api.stop();
}

#[test]
fn a_bad_body_is_refused_400_naming_the_field_and_nothing_is_written() {
    let api = Api::start(file_config());
    for (body, field, says) in [
        (
            json!({"origin": "t", "content": "x"}),
            None,
            "missing field `session`",
        ),
        (
            json!({"session": "s", "origin": "t", "type": "fax"}),
            Some("type"),
            "unknown variant",
        ),
        (
            json!({"session": "s", "origin": "t", "colour": 1}),
            None,
            "unknown field `colour`",
        ),
        (
            json!({"session": "", "origin": "t", "content": "x"}),
            None,
            "session",
        ),
    ] {
        let (status, error) = answer(api.post("/v1/inbound", &body));
        assert_eq!(status, 400, "{body} → {error}");
        assert_eq!(error["error"]["code"], "invalid");
        let message = error["error"]["message"].as_str().unwrap();
        assert!(message.contains(says), "{says:?} not in {message:?}");
        if let Some(field) = field {
            assert_eq!(error["error"]["field"], field, "{error}");
        }
    }
    let not_json = api
        .request(reqwest::Method::POST, "/v1/inbound")
        .header("content-type", "application/json")
        .body("session=s")
        .send()
        .unwrap();
    assert_eq!(not_json.status(), 400);
    let (status, error) = answer(api.post(
        "/v1/outbound",
        &json!({"channel": "nowhere", "to": "x", "text": "hi"}),
    ));
    assert_eq!(status, 400);
    assert!(error["error"]["message"]
        .as_str()
        .unwrap()
        .contains("channel 'nowhere' is not configured"));
    assert_eq!(rows(&api.app), 0, "a refused request writes nothing");
    api.stop();
}

/// A page on any site can make the user's browser POST a form or `text/plain` to loopback
/// without a preflight; only `application/json` needs one, which the API never grants.
#[test]
fn a_cross_site_form_post_without_a_json_content_type_is_refused_415_and_writes_nothing() {
    let api = Api::start(file_config());
    let body = r#"{"session":"s1","origin":"web","content":"rm -rf ~"}"#;
    for content_type in [
        Some("text/plain"),
        Some("application/x-www-form-urlencoded"),
        None,
    ] {
        let mut request = api.request(reqwest::Method::POST, "/v1/inbound").body(body);
        if let Some(t) = content_type {
            request = request.header("content-type", t);
        }
        let (status, error) = answer(request.send().unwrap());
        assert_eq!(status, 415, "{content_type:?}: {error}");
        assert_eq!(error["error"]["code"], "unsupported_media_type");
    }
    let (status, _) = answer(
        api.request(reqwest::Method::POST, "/v1/inbound")
            .header("content-type", "application/json; charset=utf-8")
            .body(body)
            .send()
            .unwrap(),
    );
    assert_eq!(status, 201);
    assert_eq!(rows(&api.app), 1);
    let preflight = api
        .request(reqwest::Method::OPTIONS, "/v1/inbound")
        .header("origin", "https://evil.example")
        .header("access-control-request-method", "POST")
        .send()
        .unwrap();
    assert!(preflight
        .headers()
        .get("access-control-allow-origin")
        .is_none());
    api.stop();
}

#[test]
fn an_outbound_message_past_the_destinations_max_key_depth_is_refused_429_queue_full() {
    let config = file_config()
        .set("queues.outbound", "max_key_depth = 1")
        // A channel that cannot send (a closed port): the first row stays unfinished.
        .channel("hook", "webhook", &["url = \"http://127.0.0.1:9/\""]);
    let api = Api::start(config);
    let message = json!({"channel": "hook", "to": "ops", "text": "one"});
    let (status, first) = answer(api.post("/v1/outbound", &message));
    assert_eq!(status, 201, "{first}");
    let (status, full) = answer(api.post(
        "/v1/outbound",
        &json!({"channel": "hook", "to": "ops", "text": "two"}),
    ));
    assert_eq!(status, 429, "{full}");
    assert_eq!(full["error"]["code"], "queue_full");
    assert!(full["error"]["message"]
        .as_str()
        .unwrap()
        .contains("QUEUE_FULL"));
    // Another destination has room.
    let (status, _) = answer(api.post(
        "/v1/outbound",
        &json!({"channel": "hook", "to": "dev", "text": "three"}),
    ));
    assert_eq!(status, 201);
    assert_eq!(rows(&api.app), 2);
    api.stop();
}

#[test]
fn with_a_token_every_route_but_healthz_needs_it_and_a_wrong_one_is_refused_401() {
    let config = file_config().set("http", "token_env = \"API_TOKEN\"");
    let mut api = Api::start_with_env(config, &[("API_TOKEN", "s3cret-token")]);
    let status = |r: Response| r.status().as_u16();
    assert_eq!(status(api.get("/v1/status")), 401);
    assert_eq!(status(api.get("/readyz")), 401);
    api.token = Some("s3cret-tokeX".into());
    let (code, refused) = answer(api.get("/v1/status"));
    assert_eq!(
        (code, &refused["error"]["code"]),
        (401, &json!("unauthorized"))
    );
    api.token = Some("s3cret-token-and-more".into());
    assert_eq!(status(api.get("/v1/status")), 401);
    api.token = Some("s3cret-token".into());
    assert_eq!(status(api.get("/v1/status")), 200);
    assert_eq!(status(api.get("/readyz")), 200);
    api.token = None;
    assert_eq!(status(api.get("/healthz")), 200);
    assert!(!api.daemon.as_ref().unwrap().log().contains("s3cret-token"));
    api.stop();
}

#[test]
fn the_daemon_refuses_to_serve_the_api_beyond_loopback_without_a_token() {
    let config = file_config()
        .set("http", "enabled = true")
        .set("http", &format!("listen = \"0.0.0.0:{}\"", free_port()));
    let app = App::new(config);
    let out = app.run(&["serve"]);
    let err = crate::common::assert_usage_error(&out, "http.token");
    assert!(err.contains("127.0.0.1"), "says how to fix it: {err}");
}

#[test]
fn a_body_over_max_request_bytes_is_refused_413_unread() {
    let config = file_config()
        .set("daemon", "max_body_bytes = 1024")
        .set("http", "max_request_bytes = 2048");
    let api = Api::start(config);
    let big = json!({"session": "s", "origin": "t", "content": "x".repeat(4096)});
    let (status, error) = answer(api.post("/v1/inbound", &big));
    assert_eq!(
        (status, &error["error"]["code"]),
        (413, &json!("too_large"))
    );
    // Under the request limit but over the message limit: the CLI's refusal, 400.
    let over = json!({"session": "s", "origin": "t", "content": "x".repeat(1500)});
    let (status, error) = answer(api.post("/v1/inbound", &over));
    assert_eq!(status, 400, "{error}");
    assert_eq!(rows(&api.app), 0);
    api.stop();
}

#[test]
fn status_readyz_and_unknown_routes_answer_json() {
    let api = Api::start(file_config());
    let (status, ready) = answer(api.get("/readyz"));
    assert_eq!((status, &ready["status"]), (200, &json!("ready")));
    api.post(
        "/v1/inbound",
        &json!({"session": "s", "origin": "t", "content": "x"}),
    );
    wait_until("delivered", Duration::from_secs(10), || {
        api.app.lines("out.jsonl").len() == 1
    });
    let (status, report) = answer(api.get("/v1/status"));
    assert_eq!(status, 200);
    let cli: Value = serde_json::from_str(&api.app.ok(&["status", "--json"])).unwrap();
    assert_eq!(report["counts"], cli["counts"], "the API and the CLI agree");
    let (status, missing) = answer(api.get("/v1/messages/999"));
    assert_eq!(
        (status, &missing["error"]["code"]),
        (404, &json!("not_found"))
    );
    let (status, bad) = answer(api.get("/v1/messages/abc"));
    assert_eq!((status, &bad["error"]["field"]), (400, &json!("id")));
    let (status, _) = answer(api.get("/v2/anything"));
    assert_eq!(status, 404);
    api.stop();
}
