//! The dashboard's files, compiled into the binary so it works with no network.

use axum::extract::Path;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};

const INDEX: &str = include_str!("../../../ui/index.html");
const APP: &str = include_str!("../../../ui/app.js");
const STYLE: &str = include_str!("../../../ui/style.css");

fn file(body: &'static str, content_type: &'static str) -> Response {
    ([(header::CONTENT_TYPE, content_type), (header::CACHE_CONTROL, "no-cache")], body).into_response()
}

/// The page itself holds no cluster data; it asks for the token before showing any.
pub async fn index() -> Response {
    file(INDEX, "text/html; charset=utf-8")
}

pub async fn asset(Path(name): Path<String>) -> Response {
    match name.as_str() {
        "app.js" => file(APP, "text/javascript; charset=utf-8"),
        "style.css" => file(STYLE, "text/css; charset=utf-8"),
        _ => (StatusCode::NOT_FOUND, "Not Found").into_response(),
    }
}
