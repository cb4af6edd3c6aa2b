//! The dashboard in a real browser: Debian's Chromium, headless, driven over WebDriver
//! (chromedriver, through fantoccini) against a real `relayq serve`. A dead letter appears on
//! the page, is retried from it and is seen delivered; untrusted text stays text.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use fantoccini::{Client, ClientBuilder, Locator};
use relayq_engine::QueueName;
use serde_json::json;

use crate::common::api::{free_port, send, Api};
use crate::common::{wait_until, webhook_config, Gate};

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
const WAIT: Duration = Duration::from_secs(15);

/// chromedriver on a free port, killed when dropped.
struct Driver {
    child: Child,
    url: String,
}

impl Driver {
    fn start() -> Driver {
        assert!(
            Path::new(CHROMEDRIVER).exists() && Path::new(CHROMIUM).exists(),
            "the dashboard test needs Debian's chromium and chromium-driver: apt-get install -y chromium chromium-driver (.ci/run does)"
        );
        let port = free_port();
        let child = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver starts");
        let url = format!("http://127.0.0.1:{port}");
        let status = format!("{url}/status");
        wait_until("chromedriver to answer", WAIT, || {
            reqwest::blocking::get(&status).is_ok_and(|r| r.status().is_success())
        });
        Driver { child, url }
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A headless Chromium session. The flags keep it off the network this machine does not have
/// (background fetches would fail by the dozen) and in a profile of its own.
async fn browser(driver: &Driver, profile: &Path) -> Client {
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".into(),
        json!({
            "binary": CHROMIUM,
            "args": [
                "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--window-size=1400,1000", format!("--user-data-dir={}", profile.display()),
            ],
        }),
    );
    let connector = hyper_util::client::legacy::connect::HttpConnector::new();
    ClientBuilder::new(connector)
        .capabilities(caps)
        .connect(&driver.url)
        .await
        .expect("a Chromium session")
}

/// Chromium on the dashboard of `api`. The browser is driven async, on `runtime`; the API and
/// the database are used between its steps (the blocking client may not run inside it).
struct Page {
    runtime: tokio::runtime::Runtime,
    browser: Client,
    _driver: Driver,
    _profile: tempfile::TempDir,
}

impl Page {
    fn open(api: &Api) -> Page {
        let driver = Driver::start();
        let profile = tempfile::tempdir().unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let browser = runtime.block_on(browser(&driver, profile.path()));
        runtime
            .block_on(browser.goto(&format!("{}/", api.base)))
            .unwrap();
        Page {
            runtime,
            browser,
            _driver: driver,
            _profile: profile,
        }
    }
}

/// A command of Chromium's DevTools protocol, through chromedriver's `goog/cdp/execute`.
#[derive(Debug)]
struct DevTools(serde_json::Value);

impl fantoccini::wd::WebDriverCompatibleCommand for DevTools {
    fn endpoint(
        &self,
        base: &url::Url,
        session: Option<&str>,
    ) -> Result<url::Url, url::ParseError> {
        base.join(&format!(
            "session/{}/goog/cdp/execute",
            session.unwrap_or_default()
        ))
    }

    fn method_and_body(&self, _: &url::Url) -> (http::Method, Option<String>) {
        (http::Method::POST, Some(self.0.to_string()))
    }
}

/// Every request of the browser answered `ms` later: a page that waits for its first poll
/// shows that wait.
async fn slow_network(browser: &Client, ms: u64) {
    browser
        .issue_cmd(DevTools(json!({"cmd": "Network.enable", "params": {}})))
        .await
        .unwrap();
    let conditions =
        json!({"offline": false, "latency": ms, "downloadThroughput": -1, "uploadThroughput": -1});
    browser
        .issue_cmd(DevTools(
            json!({"cmd": "Network.emulateNetworkConditions", "params": conditions}),
        ))
        .await
        .unwrap();
}

/// The first element `css` finds, once it is there.
async fn element(browser: &Client, css: &str) -> fantoccini::elements::Element {
    let found = browser
        .wait()
        .at_most(WAIT)
        .for_element(Locator::Css(css))
        .await;
    found.unwrap_or_else(|e| panic!("no {css} on the page: {e}"))
}

/// The text of the first element `css` finds, once it is there. The page redraws its tables on
/// every poll, so an element found a moment ago may be gone when it is read: find it again.
async fn text_of(browser: &Client, css: &str) -> String {
    loop {
        match element(browser, css).await.text().await {
            Err(e) if e.is_stale_element_reference() => continue,
            read => return read.unwrap_or_else(|e| panic!("{css} could not be read: {e}")),
        }
    }
}

/// Clicks the element `css` finds, once it is there. A click on an element the page has just
/// redrawn is refused by the browser without clicking, so it is safe to find it and click again.
async fn click(browser: &Client, css: &str) {
    loop {
        match element(browser, css).await.click().await {
            Err(e) if e.is_stale_element_reference() => continue,
            clicked => {
                return clicked.unwrap_or_else(|e| panic!("{css} could not be clicked: {e}"))
            }
        }
    }
}

/// Waits until `css` finds `text`.
async fn wait_text(browser: &Client, css: &str, text: &str) {
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let now = match browser.find(Locator::Css(css)).await {
            Ok(e) => e.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        };
        if now == text {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{css} shows {now:?}, not {text:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[test]
fn a_dead_letter_appears_on_the_dashboard_is_retried_from_it_and_is_seen_delivered() {
    let gate = Gate::shut();
    let api = Api::start(webhook_config(&gate.hook.url).set("daemon", "shutdown_grace = \"5s\""));
    let page = Page::open(&api);
    let (rt, browser) = (&page.runtime, &page.browser);
    assert_eq!(
        rt.block_on(text_of(browser, "#queue-outbound td:first-child")),
        "outbound"
    );

    // Markup in a destination is shown as text, never run or rendered.
    let hostile = "<img src=x onerror=\"document.title='owned'\">";
    let id = send(&api, hostile, "hello");
    api.app.wait_state(QueueName::Outbound, id, "dead");
    let row = format!("#dead-{id}");
    let key = rt.block_on(text_of(browser, &format!("{row} td.key")));
    assert_eq!(key, json!(["hook", hostile]).to_string(), "the key as text");
    let images = rt
        .block_on(browser.find_all(Locator::Css("#dead img")))
        .unwrap();
    assert!(images.is_empty(), "no element was made from the key");
    assert_ne!(rt.block_on(browser.title()).unwrap(), "owned");
    let error = rt.block_on(text_of(browser, &format!("{row} td.error")));
    assert!(error.contains("404"), "the error is shown: {error}");

    // Retried from the page: delivered, gone from the dead letters, counted.
    gate.set_open(true);
    rt.block_on(click(browser, &format!("{row} button.retry")));
    api.app.wait_state(QueueName::Outbound, id, "delivered");
    rt.block_on(wait_text(browser, "#queue-outbound td.delivered", "1"));
    rt.block_on(wait_text(browser, "#queue-outbound td.dead", "0"));
    assert!(
        rt.block_on(browser.find(Locator::Css(&row))).is_err(),
        "no longer dead"
    );

    // Another dead letter, left for the screenshot.
    gate.set_open(false);
    let refused = send(&api, "chat-2", "refused");
    api.app.wait_state(QueueName::Outbound, refused, "dead");
    gate.set_open(true);

    // Pausing the outbound queue from the page holds a new message until resumed.
    rt.block_on(click(browser, "#queue-outbound button.pause"));
    rt.block_on(text_of(browser, "#queue-outbound button.resume"));
    let held = send(&api, "chat-1", "held");
    rt.block_on(wait_text(
        browser,
        "#lanes tr[data-queue=outbound] .state",
        "paused",
    ));
    assert_eq!(api.app.row(QueueName::Outbound, held).state, "pending");
    rt.block_on(text_of(browser, &format!("#dead-{refused}")));

    // The README's screenshot: `RELAYQ_SCREENSHOT=docs/dashboard.png cargo test dashboard`.
    let png = rt.block_on(browser.screenshot()).unwrap();
    assert!(png.starts_with(b"\x89PNG"), "a PNG screenshot");
    if let Ok(path) = std::env::var("RELAYQ_SCREENSHOT") {
        std::fs::write(path, &png).unwrap();
    }
    rt.block_on(click(browser, "#queue-outbound button.resume"));
    api.app.wait_state(QueueName::Outbound, held, "delivered");
    rt.block_on(browser.clone().close()).unwrap();
    api.stop();
}

/// Issue 41, item 20: a page just opened (its screenshot, 3 times in 7) showed "loading…" and
/// empty tables until the first poll answered. Without a token the page comes with its first
/// answers: the moment it has loaded, its dead letter and its age are there.
#[test]
fn a_dashboard_just_opened_shows_its_data_not_loading() {
    let gate = Gate::shut();
    let api = Api::start(webhook_config(&gate.hook.url).set("daemon", "shutdown_grace = \"5s\""));
    let id = send(&api, "chat-1", "refused");
    api.app.wait_state(QueueName::Outbound, id, "dead");
    let page = Page::open(&api);
    let (rt, browser) = (&page.runtime, &page.browser);
    // Each request (the page, its script, each poll) answered 1 s late; the page opened anew,
    // its load waited for; then read at once, without waiting for anything to appear.
    rt.block_on(async {
        slow_network(browser, 1000).await;
        browser.goto(&format!("{}/", api.base)).await.unwrap();
    });
    let now = |css: &str| {
        rt.block_on(async {
            match browser.find(Locator::Css(css)).await {
                Ok(e) => e.text().await.unwrap_or_default(),
                Err(_) => String::new(),
            }
        })
    };
    let updated = now("#updated");
    assert!(updated.starts_with("updated "), "{updated:?}");
    assert!(updated.ends_with(" ago)"), "the data's age: {updated:?}");
    assert_eq!(now(&format!("#dead-{id} td:first-child")), id.to_string());
    assert_eq!(now("#queue-outbound td.dead"), "1");
    rt.block_on(browser.clone().close()).unwrap();
    api.stop();
}

#[test]
fn with_a_token_the_dashboard_asks_for_it_once_and_then_shows_the_queues() {
    let api = Api::start_with_env(
        crate::common::file_config()
            .set("http", "token_env = \"RELAYQ_TEST_TOKEN\"")
            .set("daemon", "shutdown_grace = \"5s\""),
        &[("RELAYQ_TEST_TOKEN", "dash-t0ken")],
    );
    let page = Page::open(&api);
    let (rt, browser) = (&page.runtime, &page.browser);
    // The page itself needs no token; its API calls do, and it asks.
    rt.block_on(element(browser, "#login:not([hidden])"));
    let error = rt.block_on(text_of(browser, "#error"));
    assert!(error.contains("token"), "{error}");
    assert!(
        rt.block_on(browser.find(Locator::Css("#queue-inbound")))
            .is_err(),
        "no data without the token"
    );
    rt.block_on(async {
        let field = element(browser, "#token").await;
        field.send_keys("dash-t0ken").await.unwrap();
        click(browser, "#login button").await;
    });
    assert_eq!(
        rt.block_on(text_of(browser, "#queue-inbound td:first-child")),
        "inbound"
    );
    // Kept for the tab: a reload does not ask again.
    rt.block_on(browser.refresh()).unwrap();
    rt.block_on(text_of(browser, "#queue-inbound td:first-child"));
    let login = rt.block_on(element(browser, "#login"));
    assert_eq!(
        rt.block_on(login.attr("hidden")).unwrap().as_deref(),
        Some("true")
    );
    rt.block_on(browser.clone().close()).unwrap();
    api.stop();
}

/// Issue 27, item 23: the lanes' "Until" column compared the RFC 3339 time with a number and
/// was always empty.
#[test]
fn the_until_column_shows_when_a_backing_off_lane_is_tried_again() {
    let (_hook, api) = crate::common::api::failing_hook();
    let id = send(&api, "chat-1", "hello");
    wait_until("the first attempt", WAIT, || {
        api.app.row(QueueName::Outbound, id).attempts == 1
            && api.app.row(QueueName::Outbound, id).state == "pending"
    });
    let page = Page::open(&api);
    let (rt, browser) = (&page.runtime, &page.browser);
    let until = rt.block_on(text_of(
        browser,
        "#lanes tr[data-queue=outbound] td:nth-child(5)",
    ));
    assert!(
        until.starts_with("in ") && until.ends_with(" min"),
        "{until:?}"
    );
    rt.block_on(browser.clone().close()).unwrap();
    api.stop();
}

/// Issue 28: what each session's agent is doing, from its own events, with since when.
#[test]
fn the_agents_table_shows_each_sessions_agent_state() {
    let api = Api::start(crate::common::file_config().set("daemon", "shutdown_grace = \"5s\""));
    let fixture = |name: &str| {
        std::fs::read_to_string(format!(
            "{}/tests/fixtures/claude-code/captured/{name}",
            env!("CARGO_MANIFEST_DIR")
        ))
        .unwrap()
    };
    let env = [("RELAYQ_SESSION", "s1")];
    for event in ["SessionStart.json", "PermissionRequest.json"] {
        let out = api.app.hook("claude", &fixture(event), false, &env);
        assert!(out.status.success(), "{out:?}");
    }
    let page = Page::open(&api);
    let (rt, browser) = (&page.runtime, &page.browser);
    rt.block_on(wait_text(
        browser,
        "#agents tr[data-session=s1] .state",
        // With the permission mode its events say (issue 41, item 13).
        "awaiting approval · default",
    ));
    let since = rt.block_on(text_of(
        browser,
        "#agents tr[data-session=s1] td:nth-child(5)",
    ));
    assert!(since.ends_with(" ago"), "{since}");
    rt.block_on(browser.clone().close()).unwrap();
    api.stop();
}

/// Issue 29: an agent's open permission question is listed with what it asks, and Allow on
/// the dashboard answers it: the waiting hook prints the allow and the row leaves the table.
#[test]
fn an_open_approval_is_listed_and_allowed_from_the_dashboard() {
    let api = Api::start(crate::common::file_config().set("daemon", "shutdown_grace = \"5s\""));
    // The session talks to a chat: its question can be answered from outside the terminal.
    let message = serde_json::json!({"session": "s1", "origin": "telegram:bot", "content": "hi",
                                     "source_message_id": "1", "source_channel_id": "7"});
    let (status, _) = crate::common::api::answer(api.post("/v1/inbound", &message));
    assert_eq!(status, 201);
    let payload = std::fs::read_to_string(format!(
        "{}/tests/fixtures/claude-code/captured/PermissionRequest.json",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    let hook = api
        .app
        .spawn_hook("claude", &payload, false, &[("RELAYQ_SESSION", "s1")]);
    let page = Page::open(&api);
    let (rt, browser) = (&page.runtime, &page.browser);
    let asks = rt.block_on(text_of(browser, "#approvals tbody tr td:nth-child(4)"));
    assert_eq!(asks, "Bash: touch probe-p512802.txt");
    rt.block_on(click(browser, "#approvals tbody tr button.allow"));
    let out = hook.wait_with_output().unwrap();
    let printed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        printed["hookSpecificOutput"]["decision"]["behavior"],
        "allow"
    );
    rt.block_on(async {
        let deadline = std::time::Instant::now() + WAIT;
        while browser
            .find(Locator::Css("#approvals tbody tr"))
            .await
            .is_ok()
        {
            assert!(
                std::time::Instant::now() < deadline,
                "the approval stays listed"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    rt.block_on(browser.clone().close()).unwrap();
    api.stop();
}

/// Issue 31: the daemons serving the database, with what each holds: this one, alive, with
/// the session its hooks registered.
#[test]
fn the_nodes_table_shows_each_daemon_and_what_it_holds() {
    let config = crate::common::file_config()
        .set("daemon", "shutdown_grace = \"5s\"")
        .set("node", "name = \"desk\"");
    let api = Api::start(config);
    let start = r#"{"hook_event_name":"SessionStart","session_id":"n1","source":"startup"}"#;
    let out = api
        .app
        .hook("claude", start, false, &[("RELAYQ_SESSION", "s1")]);
    assert!(out.status.success(), "{out:?}");
    let page = Page::open(&api);
    let (rt, browser) = (&page.runtime, &page.browser);
    rt.block_on(wait_text(
        browser,
        "#nodes tr[data-node=desk] td:nth-child(2)",
        "alive",
    ));
    rt.block_on(wait_text(
        browser,
        "#nodes tr[data-node=desk] td:nth-child(4)",
        "1",
    ));
    rt.block_on(browser.clone().close()).unwrap();
    api.stop();
}
