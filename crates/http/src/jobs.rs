//! Ray's Jobs REST API: submit, inspect, stop, delete, logs and the log-tail WebSocket.
//! Errors are plain text with Ray's status codes.

use crate::jobs_api::ByteStream;
use crate::utf8::Utf8Carry;
use crate::ApiState;
use axum::body::{Body, Bytes};
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures_util::StreamExt;
use oxray_api_types::{not_found, ApiError, JobDetails, SubmitRequest};
use std::time::Duration;

/// Ray's status code for an error.
pub(crate) fn status_of(e: &ApiError) -> StatusCode {
    match e {
        ApiError::BadRequest(_) => StatusCode::BAD_REQUEST,
        ApiError::NotFound(_) => StatusCode::NOT_FOUND,
        ApiError::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
        ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

pub fn error(e: ApiError) -> Response {
    (status_of(&e), e.to_string()).into_response()
}

/// Requests that look like a browser's get env_vars values redacted, as Ray does.
fn from_browser(headers: &HeaderMap) -> bool {
    let agent = headers.get(header::USER_AGENT).and_then(|v| v.to_str().ok()).unwrap_or("");
    agent.starts_with("Mozilla")
        || headers.contains_key(header::ORIGIN)
        || headers.contains_key(header::REFERER)
        || headers
            .keys()
            .any(|k| k.as_str().starts_with("sec-fetch-") || k.as_str().starts_with("access-control-request-"))
}

fn redact(mut details: JobDetails) -> JobDetails {
    if let Some(vars) =
        details.runtime_env.as_mut().and_then(|env| env.get_mut("env_vars")).and_then(|v| v.as_object_mut())
    {
        for value in vars.values_mut() {
            *value = serde_json::Value::String("<redacted>".into());
        }
    }
    details
}

pub async fn submit(State(state): State<ApiState>, body: Bytes) -> Response {
    let request = match SubmitRequest::parse(&body) {
        Ok(r) => r,
        Err(e) => return error(e),
    };
    match state.jobs.submit(request).await {
        Ok(id) => Json(serde_json::json!({ "job_id": id, "submission_id": id })).into_response(),
        Err(e) => error(e),
    }
}

#[derive(serde::Deserialize)]
pub struct ListQuery {
    /// Only the newest this many jobs (a long history is not sent whole).
    limit: Option<usize>,
}

/// Every job, as Ray's, or the newest `limit`; the `x-oxray-total-jobs` header says how
/// many there are in all.
pub async fn list(State(state): State<ApiState>, Query(query): Query<ListQuery>, headers: HeaderMap) -> Response {
    let browser = from_browser(&headers);
    let (jobs, total) = match query.limit {
        Some(limit) => state.jobs.newest_jobs(limit),
        None => {
            let all = state.jobs.jobs();
            let total = all.len();
            (all, total)
        }
    };
    let jobs: Vec<JobDetails> = jobs.into_iter().map(|j| if browser { redact(j) } else { j }).collect();
    ([(oxray_api_types::TOTAL_JOBS_HEADER, total.to_string())], Json(jobs)).into_response()
}

pub async fn get(State(state): State<ApiState>, Path(id): Path<String>, headers: HeaderMap) -> Response {
    match state.jobs.job(&id) {
        Some(job) if from_browser(&headers) => Json(redact(job)).into_response(),
        Some(job) => Json(job).into_response(),
        None => error(not_found(&id)),
    }
}

pub async fn stop(State(state): State<ApiState>, Path(id): Path<String>) -> Response {
    match state.jobs.stop(&id).await {
        Ok(stopped) => Json(serde_json::json!({ "stopped": stopped })).into_response(),
        Err(e) => error(e),
    }
}

pub async fn delete(State(state): State<ApiState>, Path(id): Path<String>) -> Response {
    match state.jobs.delete(&id).await {
        Ok(()) => Json(serde_json::json!({ "deleted": true })).into_response(),
        Err(e) => error(e),
    }
}

/// `{"logs": "<whole log>"}`, written as the log arrives so a large log is never held in
/// memory whole.
pub async fn logs(State(state): State<ApiState>, Path(id): Path<String>) -> Response {
    let stream = match state.jobs.logs(&id, false).await {
        Ok(s) => s,
        Err(e) => return error(e),
    };
    let mut carry = Utf8Carry::default();
    let escaped = stream.map(move |chunk| chunk.map(|bytes| json_fragment(&carry.push(&bytes))));
    let body = futures_util::stream::once(async { Ok::<_, String>("{\"logs\": \"".to_string()) })
        .chain(escaped)
        .chain(futures_util::stream::once(async { Ok("\"}".to_string()) }));
    ([(header::CONTENT_TYPE, "application/json")], Body::from_stream(body)).into_response()
}

/// The inside of a JSON string literal.
fn json_fragment(text: &str) -> String {
    let quoted = serde_json::to_string(text).expect("strings serialize");
    quoted[1..quoted.len() - 1].to_string()
}

pub async fn tail(State(state): State<ApiState>, Path(id): Path<String>, ws: WebSocketUpgrade) -> Response {
    if state.jobs.job(&id).is_none() {
        return error(not_found(&id));
    }
    ws.on_upgrade(move |socket| stream_tail(socket, state, id))
}

/// TEXT frames of log, then close 1000 once the job's final status is recorded, so Ray's
/// CLI, which asks for the status right after, sees it.
async fn stream_tail(mut socket: WebSocket, state: ApiState, id: String) {
    let mut logs: ByteStream = match state.jobs.logs(&id, true).await {
        Ok(s) => s,
        Err(e) => return close(socket, 1011, &e.to_string()).await,
    };
    let mut carry = Utf8Carry::default();
    loop {
        tokio::select! {
            chunk = logs.next() => match chunk {
                Some(Ok(bytes)) => {
                    let text = carry.push(&bytes);
                    if !text.is_empty() && socket.send(Message::Text(text.into())).await.is_err() {
                        return;
                    }
                }
                Some(Err(e)) => return close(socket, 1011, &e).await,
                None => break,
            },
            incoming = socket.recv() => match incoming {
                None | Some(Err(_)) | Some(Ok(Message::Close(_))) => return,
                Some(Ok(_)) => {}
            },
        }
    }
    let rest = carry.finish();
    if !rest.is_empty() && socket.send(Message::Text(rest.into())).await.is_err() {
        return;
    }
    state.jobs.wait_terminal(&id, Duration::from_secs(30)).await;
    close(socket, 1000, "").await;
}

async fn close(mut socket: WebSocket, code: u16, reason: &str) {
    let reason: String = reason.chars().take(120).collect();
    let _ = socket.send(Message::Close(Some(CloseFrame { code, reason: reason.into() }))).await;
}
