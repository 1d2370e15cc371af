//! Serve's REST API on the dashboard port: what `serve.run`, `serve.status` and
//! `serve.delete` use, and Ray's `DELETE /api/serve/applications/` (shut everything down).

use crate::{DeployError, Serve};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, put};
use axum::Json;
use std::sync::Arc;

pub fn router(serve: Arc<Serve>) -> axum::Router {
    axum::Router::new()
        .route("/api/oxray/serve/applications", get(details))
        .route("/api/oxray/serve/applications/{name}", put(deploy).delete(remove))
        .route("/api/serve/applications/", delete(shutdown))
        .with_state(serve)
}

fn error(status: StatusCode, message: String) -> Response {
    (status, Json(serde_json::json!({ "error": message }))).into_response()
}

async fn details(State(serve): State<Arc<Serve>>) -> Response {
    Json(serve.controller().details()).into_response()
}

async fn deploy(State(serve): State<Arc<Serve>>, Path(name): Path<String>, body: axum::body::Bytes) -> Response {
    let spec = match serde_json::from_slice(&body) {
        Ok(spec) => spec,
        Err(e) => return error(StatusCode::BAD_REQUEST, format!("invalid application: {e}")),
    };
    match serve.deploy(&name, spec).await {
        Ok(()) => Json(serde_json::json!({})).into_response(),
        Err(DeployError::Invalid(e)) => error(StatusCode::BAD_REQUEST, e),
        Err(DeployError::Proxy(e)) => error(StatusCode::INTERNAL_SERVER_ERROR, e),
    }
}

async fn remove(State(serve): State<Arc<Serve>>, Path(name): Path<String>) -> Response {
    serve.controller().delete(&name);
    Json(serde_json::json!({})).into_response()
}

async fn shutdown(State(serve): State<Arc<Serve>>) -> Response {
    serve.controller().delete_all();
    Json(serde_json::json!({})).into_response()
}
