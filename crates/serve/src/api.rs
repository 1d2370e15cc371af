//! Serve's REST API on the dashboard port: what `serve.run`, `serve.status` and
//! `serve.delete` use, and Ray's: `PUT /api/serve/applications/` (a declarative config, as
//! `serve deploy` and KubeRay send it), `GET` (Ray's `ServeInstanceDetails`) and `DELETE`
//! (shut everything down).

use crate::controller::ScaleError;
use crate::ray_shape::Source;
use crate::{DeployError, Serve};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use oxray_http::{op, schema, Documented};
use std::sync::Arc;

/// Serve's routes, described for the head's OpenAPI document.
pub fn router(serve: Arc<Serve>) -> Documented {
    let serve_op = |summary| op("serve", summary);
    let config = schema::object();
    Documented::new(true)
        .get("/api/oxray/serve/applications", serve_op("Serve's applications, as oxray's client reads them"), details)
        .put(
            "/api/oxray/serve/applications/{name}",
            serve_op("Deploy an application built by oxray's client")
                .body("application/json", schema::object())
                .answers(400, "a bad application")
                .answers(503, "the HTTP proxy could not start"),
            deploy,
        )
        .delete("/api/oxray/serve/applications/{name}", serve_op("Remove an application"), remove)
        .put(
            "/api/serve/applications/",
            serve_op("Apply a declarative Serve config, as `serve deploy` and KubeRay send it")
                .body("application/json", config)
                .answers(400, "a bad config"),
            apply,
        )
        .get(
            "/api/serve/applications/",
            serve_op("Ray's ServeInstanceDetails").query(&[(
                "api_type",
                serde_json::json!({ "type": "string", "enum": ["declarative", "imperative"] }),
                "only the applications deployed this way",
            )]),
            ray_details,
        )
        .delete("/api/serve/applications/", serve_op("Shut every application down"), shutdown)
        .post(
            "/api/v1/applications/{app}/deployments/{deployment}/scale",
            serve_op("Set a deployment's replica count")
                .body(
                    "application/json",
                    serde_json::json!({
                        "type": "object",
                        "required": ["target_num_replicas"],
                        "properties": { "target_num_replicas": { "type": "integer", "minimum": 0 } },
                    }),
                )
                .answers(400, "a bad request")
                .answers(404, "no such deployment")
                .answers(412, "the deployment autoscales"),
            scale,
        )
        .post(
            "/api/oxray/serve/queued",
            serve_op("Requests waiting in a process's handles, for autoscaling")
                .body("application/json", schema::object())
                .answers(204, "noted")
                .answers(400, "a bad report"),
            handle_queues,
        )
        .put(
            "/api/oxray/serve/http",
            serve_op("Start the HTTP proxies (`serve start`)")
                .body("application/json", schema::object())
                .answers(400, "bad options")
                .answers(503, "the HTTP proxy could not start"),
            start_http,
        )
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
        // The proxy's port is taken or cannot be bound: nothing broke in the head.
        Err(DeployError::Proxy(e)) => error(StatusCode::SERVICE_UNAVAILABLE, e),
    }
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct StartHttp {
    #[serde(default)]
    http_options: crate::HttpOptions,
    #[serde(default)]
    proxy_location: Option<crate::routing::ProxyLocation>,
}

/// `serve start`: the proxies run from now on, with no application; answers the HTTP
/// options in force (another Serve's, when one ran already).
async fn start_http(State(serve): State<Arc<Serve>>, body: axum::body::Bytes) -> Response {
    let wanted: StartHttp = match serde_json::from_slice(&body) {
        Ok(w) => w,
        Err(e) => return error(StatusCode::BAD_REQUEST, format!("invalid Serve start request: {e}")),
    };
    match serve.start_http(&wanted.http_options, wanted.proxy_location).await {
        Ok(options) => Json(serde_json::json!({ "http_options": options })).into_response(),
        Err(e) => error(StatusCode::SERVICE_UNAVAILABLE, e),
    }
}

async fn remove(State(serve): State<Arc<Serve>>, Path(name): Path<String>) -> Response {
    serve.controller().delete(&name);
    Json(serde_json::json!({})).into_response()
}

/// How long a DELETE waits for the replicas to stop (their graceful shutdown included).
const SHUTDOWN_PATIENCE: std::time::Duration = std::time::Duration::from_secs(60);

async fn shutdown(State(serve): State<Arc<Serve>>) -> Response {
    serve.shutdown_all(SHUTDOWN_PATIENCE).await;
    StatusCode::OK.into_response()
}

/// Ray answers a bad config with 400 and the error as text; an accepted one with an empty
/// 200 before anything is built.
async fn apply(State(serve): State<Arc<Serve>>, body: axum::body::Bytes) -> Response {
    match serve.apply_config(&body).await {
        Ok(()) => StatusCode::OK.into_response(),
        Err(e) => (StatusCode::BAD_REQUEST, e).into_response(),
    }
}

#[derive(serde::Deserialize)]
struct ScaleRequest {
    target_num_replicas: u32,
}

async fn scale(
    State(serve): State<Arc<Serve>>,
    Path((app, deployment)): Path<(String, String)>,
    body: axum::body::Bytes,
) -> Response {
    let request: ScaleRequest = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => return error(StatusCode::BAD_REQUEST, format!("Invalid request body: {e}")),
    };
    match serve.controller().scale(&app, &deployment, request.target_num_replicas) {
        Ok(()) => Json(serde_json::json!({
            "message": "Scaling request received. Deployment will get scaled asynchronously."
        }))
        .into_response(),
        Err(e @ ScaleError::NotFound) => error(StatusCode::NOT_FOUND, e.to_string()),
        Err(e @ ScaleError::NotEnabled(_)) => error(StatusCode::PRECONDITION_FAILED, e.to_string()),
    }
}

#[derive(serde::Deserialize)]
struct QueuedReport {
    process: String,
    /// `[app, deployment, requests waiting]` triples.
    queued: Vec<(String, String, i64)>,
}

async fn handle_queues(State(serve): State<Arc<Serve>>, body: axum::body::Bytes) -> Response {
    match serde_json::from_slice::<QueuedReport>(&body) {
        Ok(report) => {
            serve.controller().report_handle_queues(&report.process, &report.queued);
            StatusCode::NO_CONTENT.into_response()
        }
        Err(e) => error(StatusCode::BAD_REQUEST, format!("Invalid request body: {e}")),
    }
}

#[derive(serde::Deserialize)]
struct DetailsQuery {
    api_type: Option<String>,
}

async fn ray_details(State(serve): State<Arc<Serve>>, Query(q): Query<DetailsQuery>) -> Response {
    match Source::parse(q.api_type.as_deref()) {
        Ok(source) => Json(serve.ray_details(source)).into_response(),
        Err(e) => (StatusCode::BAD_REQUEST, e).into_response(),
    }
}
