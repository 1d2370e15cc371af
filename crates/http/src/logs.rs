//! Ray's log API on the dashboard port: a node's log files by group (`/api/v0/logs`), and a
//! log by file, worker pid, actor, task or job, whole or followed (`/api/v0/logs/{file,stream}`).

use crate::jobs::{error, status_of};
use crate::state::{ok, rows, Reply, DEFAULT_TIMEOUT};
use crate::{rest_response, ApiState};
use axum::body::Body;
use axum::extract::{Path, RawQuery, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures_util::StreamExt;
use oxray_api_types::logs::{categorize, find_node, resolve, Known, LogQuery};
use oxray_api_types::state::StateKind;
use oxray_api_types::ApiError;

fn pairs(raw: Option<&str>) -> Result<Vec<(String, String)>, ApiError> {
    serde_urlencoded::from_str(raw.unwrap_or("")).map_err(|e| ApiError::BadRequest(format!("malformed query: {e}")))
}

/// An error in Ray's envelope.
fn failed(e: ApiError) -> Reply {
    (status_of(&e), Json(rest_response(false, &e.to_string(), serde_json::json!({ "result": null }))))
}

/// `GET /api/v0/logs?node_id=|node_ip=&glob=`: the node's files, grouped as Ray groups them.
pub async fn list(State(state): State<ApiState>, RawQuery(raw): RawQuery) -> Reply {
    let pairs = match pairs(raw.as_deref()) {
        Ok(p) => p,
        Err(e) => return failed(e),
    };
    let get = |name: &str| pairs.iter().find(|(k, v)| k == name && !v.is_empty()).map(|(_, v)| v.as_str());
    let nodes = state.view.nodes();
    let node = match find_node(&nodes, get("node_id"), get("node_ip")) {
        Ok(n) => n,
        Err(e) => return failed(e),
    };
    match state.view.list_logs(node, get("glob").unwrap_or("*")).await {
        Ok(files) => ok(serde_json::to_value(categorize(&files)).expect("maps serialize")),
        Err(e) => failed(e),
    }
}

/// `GET /api/v0/logs/file` (a read) and `/api/v0/logs/stream` (followed): the bytes of the
/// log, or the reason there are none as plain text, as Ray's client reads them.
pub async fn read(State(state): State<ApiState>, Path(media_type): Path<String>, RawQuery(raw): RawQuery) -> Response {
    open(&state, &media_type, raw.as_deref()).await.unwrap_or_else(error)
}

async fn open(state: &ApiState, media_type: &str, raw: Option<&str>) -> Result<Response, ApiError> {
    let pairs = pairs(raw)?;
    let download = pairs
        .iter()
        .find(|(k, _)| k == "download_filename")
        .map(|(_, v)| v.clone())
        .unwrap_or_else(|| "file.txt".into());
    let query = LogQuery::parse(pairs, media_type)?;
    let nodes = state.view.nodes();
    let by_task = query.task_id.is_some();
    let by_actor = query.actor_id.is_some();
    let tasks = if by_task { rows(state, StateKind::Tasks, DEFAULT_TIMEOUT).await.0 } else { Vec::new() };
    let actors = if by_actor { rows(state, StateKind::Actors, DEFAULT_TIMEOUT).await.0 } else { Vec::new() };
    let jobs: Vec<(String, Option<String>)> = match &query.submission_id {
        Some(_) => state.jobs.jobs().into_iter().filter_map(|j| Some((j.submission_id?, j.driver_node_id))).collect(),
        None => Vec::new(),
    };
    let target = resolve(&query, &Known { nodes: &nodes, actors: &actors, tasks: &tasks, jobs: &jobs })?;
    let stream = state.view.read_log(&target).await?;
    let stream = if query.filter_ansi_code {
        stream.map(|chunk| chunk.map(|b| bytes::Bytes::from(strip_ansi(&b)))).boxed()
    } else {
        stream
    };
    let disposition = format!("attachment; filename=\"{}\"", download.replace(['"', '\r', '\n'], ""));
    Ok((
        [(header::CONTENT_TYPE, "text/plain".to_string()), (header::CONTENT_DISPOSITION, disposition)],
        Body::from_stream(stream),
    )
        .into_response())
}

/// `text` without its ANSI escape sequences (colours, cursor moves): ESC `[` parameters, a
/// final letter.
fn strip_ansi(text: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len());
    let mut i = 0;
    while i < text.len() {
        if text[i] == 0x1b && text.get(i + 1) == Some(&b'[') {
            let mut j = i + 2;
            while j < text.len() && (text[j].is_ascii_digit() || text[j] == b';') {
                j += 1;
            }
            if j < text.len() && text[j].is_ascii_alphabetic() {
                i = j + 1;
                continue;
            }
        }
        out.push(text[i]);
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ansi_codes_are_stripped_and_the_rest_kept() {
        assert_eq!(strip_ansi(b"\x1b[31mred\x1b[0m \x1b[1;32mok\x1b[K!"), b"red ok!");
        assert_eq!(strip_ansi(b"plain [1m \x1b"), b"plain [1m \x1b");
    }
}
