//! The dashboard at `/`: one static page, its script and its style, compiled into the binary.
//! The script calls the API (`/v1/status`, `/v1/lanes`, `/v1/dead`, `/v1/pauses`, and the
//! retry, purge, pause and resume routes) with the token the page asks for.
//!
//! The page may not be framed (a framing site could trick a click on "Purge"), and its content
//! security policy allows only its own script and style: a value from the API that slipped
//! into the page as markup could still not run.

use actix_web::http::header;
use actix_web::{web, HttpResponse};

const PAGE: &str = include_str!("dashboard/index.html");
const SCRIPT: &str = include_str!("dashboard/dashboard.js");
const STYLE: &str = include_str!("dashboard/dashboard.css");

pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.route("/", web::get().to(page))
        .route("/dashboard.js", web::get().to(script))
        .route("/dashboard.css", web::get().to(style));
}

fn file(content_type: &'static str, body: &'static str) -> HttpResponse {
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

async fn page() -> HttpResponse {
    file("text/html; charset=utf-8", PAGE)
}

async fn script() -> HttpResponse {
    file("text/javascript; charset=utf-8", SCRIPT)
}

async fn style() -> HttpResponse {
    file("text/css; charset=utf-8", STYLE)
}
