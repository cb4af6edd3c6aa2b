//! The dashboard at `/`: one static page, its script and its style, compiled into the binary.
//! The script calls the API (`/v1/status`, `/v1/lanes`, `/v1/dead`, `/v1/pauses`, and the
//! retry, purge, pause and resume routes) with the token the page asks for.
//!
//! Where the API needs no token, the page comes with its first answers inside (a JSON data
//! block, never run as script): the tables are drawn before the first poll answers, so a page
//! just opened (or its screenshot) never shows "loading…" in place of the data.
//!
//! The page may not be framed (a framing site could trick a click on "Purge"), and its content
//! security policy allows only its own script and style: a value from the API that slipped
//! into the page as markup could still not run.

use actix_web::http::header;
use actix_web::{body, web, HttpRequest, HttpResponse};

use super::auth::Token;
use super::{approvals, dead, lanes, pauses, sessions, v1, Answer, Api};

const PAGE: &str = include_str!("dashboard/index.html");
const SCRIPT: &str = include_str!("dashboard/dashboard.js");
const STYLE: &str = include_str!("dashboard/dashboard.css");

pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.route("/", web::get().to(page))
        .route("/dashboard.js", web::get().to(script))
        .route("/dashboard.css", web::get().to(style));
}

fn file(content_type: &'static str, body: impl body::MessageBody + 'static) -> HttpResponse {
    HttpResponse::Ok()
        .content_type(content_type)
        .insert_header((
            header::CONTENT_SECURITY_POLICY,
            "default-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
        ))
        .insert_header((header::X_FRAME_OPTIONS, "DENY"))
        .insert_header((header::X_CONTENT_TYPE_OPTIONS, "nosniff"))
        .insert_header((header::CACHE_CONTROL, "no-cache"))
        .body(body)
}

async fn page(api: web::Data<Api>, token: web::Data<Token>, req: HttpRequest) -> HttpResponse {
    let first = match token.0 {
        Some(_) => None,
        None => first_answers(api, req).await,
    };
    let page = match first {
        // `<` escaped, so no value can close the block.
        Some(json) => PAGE.replace(
            FIRST_ANSWERS,
            &format!(
                "<script type=\"application/json\" id=\"first\">{}</script>",
                json.replace('<', "\\u003c")
            ),
        ),
        None => PAGE.to_string(),
    };
    file("text/html; charset=utf-8", page)
}

/// Where the page's first answers go.
const FIRST_ANSWERS: &str = "<!-- first answers -->";

/// The answers the script asks for, from the same handlers, as one JSON object; `None` when
/// one of them failed (the script then asks, and shows why).
async fn first_answers(api: web::Data<Api>, req: HttpRequest) -> Option<String> {
    let approvals_query = web::Query::from_query("").ok()?;
    let answers = [
        ("status", v1::status(api.clone()).await),
        ("lanes", lanes::lanes(api.clone(), req.clone()).await),
        ("dead", dead::list(api.clone(), req).await),
        ("pauses", pauses::list(api.clone()).await),
        ("sessions", sessions::list(api.clone()).await),
        ("approvals", approvals::list(api, approvals_query).await),
    ];
    let mut parts = Vec::with_capacity(answers.len());
    for (name, answer) in answers {
        parts.push(format!("\"{name}\":{}", json_of(answer).await?));
    }
    Some(format!("{{{}}}", parts.join(",")))
}

async fn json_of(answer: Answer) -> Option<String> {
    let response = answer.ok().filter(|r| r.status().is_success())?;
    let bytes = body::to_bytes(response.into_body()).await.ok()?;
    String::from_utf8(bytes.to_vec()).ok()
}

async fn script() -> HttpResponse {
    file("text/javascript; charset=utf-8", SCRIPT)
}

async fn style() -> HttpResponse {
    file("text/css; charset=utf-8", STYLE)
}
