//! Endpoints the dashboard needs beyond Ray's APIs: pages of jobs, events, one node with
//! its processes and its agent's log, and the sign-in that sets the token cookie.

use crate::auth::TOKEN_COOKIE;
use crate::jobs::error;
use crate::ApiState;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use oxray_api_types::{ApiError, JobPage, NodeRow};
use serde::Deserialize;
use std::collections::BTreeMap;

#[derive(Deserialize)]
pub struct PageQuery {
    #[serde(default)]
    offset: usize,
    limit: Option<usize>,
}

/// Newest first, so the first page shows what was just submitted.
pub async fn jobs(State(state): State<ApiState>, Query(q): Query<PageQuery>) -> Json<JobPage> {
    let mut all = state.jobs.jobs();
    let mut by_status = BTreeMap::new();
    for job in &all {
        *by_status.entry(job.status.to_string()).or_insert(0) += 1;
    }
    let total = all.len();
    all.reverse();
    let limit = q.limit.unwrap_or(50).clamp(1, 1000);
    let jobs = all.into_iter().skip(q.offset).take(limit).collect();
    Json(JobPage { total, by_status, jobs })
}

#[derive(Deserialize)]
pub struct LimitQuery {
    limit: Option<usize>,
}

pub async fn events(State(state): State<ApiState>, Query(q): Query<LimitQuery>) -> Response {
    Json(state.view.events(q.limit.unwrap_or(50).min(1000))).into_response()
}

pub async fn node(State(state): State<ApiState>, Path(id): Path<String>) -> Response {
    let Some(node) = state.view.nodes().into_iter().find(|n| n.node_id.hex() == id) else {
        return error(ApiError::NotFound(format!("Node {id} does not exist")));
    };
    let workers: Vec<serde_json::Value> = state
        .jobs
        .jobs()
        .into_iter()
        .filter(|j| j.driver_node_id.as_deref() == Some(id.as_str()) && j.status == "RUNNING")
        .map(|j| {
            serde_json::json!({
                "pid": j.driver_info.as_ref().map(|d| d.pid.clone()),
                "submission_id": j.submission_id,
                "job_id": j.job_id,
                "status": j.status,
                "entrypoint": j.entrypoint,
            })
        })
        .collect();
    let mut row = serde_json::to_value(NodeRow::new(&node, true)).expect("rows serialize");
    row["resources_available"] = serde_json::to_value(node.resources_available.to_map()).expect("maps serialize");
    Json(serde_json::json!({ "node": row, "workers": workers })).into_response()
}

pub async fn node_log(State(state): State<ApiState>, Path(id): Path<String>) -> Response {
    match state.view.node_log(&id, 256 * 1024).await {
        Ok(text) => ([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], text).into_response(),
        Err(e) => error(e),
    }
}

#[derive(Deserialize)]
pub struct UsageQuery {
    node_id: Option<String>,
}

/// The nodes' use over the last hour (one reading per `step_ms`), for the charts.
pub async fn usage(State(state): State<ApiState>, Query(q): Query<UsageQuery>) -> Json<serde_json::Value> {
    let nodes = state.view.usage_history(q.node_id.as_deref().filter(|n| !n.is_empty()));
    Json(serde_json::json!({ "step_ms": oxray_api_types::usage::STEP_MS, "nodes": nodes }))
}

pub async fn authentication_mode() -> Json<serde_json::Value> {
    Json(serde_json::json!({ "authentication_mode": "token" }))
}

/// Checks the token once and keeps it in an HttpOnly cookie, which the dashboard's own
/// requests and WebSockets then carry.
pub async fn authenticate(State(state): State<ApiState>, headers: HeaderMap) -> Response {
    let given = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok());
    match given {
        None => (StatusCode::UNAUTHORIZED, "Unauthorized: Missing authentication token").into_response(),
        Some(value) if state.token.matches_bearer(value) => {
            let cookie = format!("{TOKEN_COOKIE}={}; Path=/; HttpOnly; SameSite=Strict", state.token.as_str());
            ([(header::SET_COOKIE, cookie)], "Authenticated").into_response()
        }
        Some(_) => (StatusCode::FORBIDDEN, "Forbidden: Invalid authentication token").into_response(),
    }
}
