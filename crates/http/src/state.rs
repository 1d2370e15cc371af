//! Ray's state API on the dashboard port (`ray list`, `ray get`, `ray summary`): the query
//! Ray's client sends, the rows the control plane has, Ray's envelope.

use crate::{rest_response, ApiState};
use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::Json;
use oxray_api_types::state::{self, ListQuery, StateFilter, StateKind};
use oxray_api_types::MAX_LIMIT;
use std::time::Duration;

pub(crate) type Reply = (StatusCode, Json<serde_json::Value>);

pub(crate) fn bad_request(msg: String) -> Reply {
    (StatusCode::BAD_REQUEST, Json(rest_response(false, &msg, serde_json::json!({ "result": null }))))
}

pub(crate) fn ok(result: serde_json::Value) -> Reply {
    (StatusCode::OK, Json(rest_response(true, "", serde_json::json!({ "result": result }))))
}

fn parse_bool(name: &str, value: &str) -> Result<bool, String> {
    match value.to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" => Ok(true),
        "false" | "0" | "no" => Ok(false),
        _ => Err(format!("invalid {name} {value:?}: expected True or False")),
    }
}

/// How long nodes and processes get to answer a state request that asks them, unless the
/// request's `timeout` says otherwise (Ray's client sends 30 s).
pub(crate) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);
/// The longest `timeout` taken.
const MAX_TIMEOUT: Duration = Duration::from_secs(600);

/// What a list request asks for, before its filters are checked against a kind's columns.
pub(crate) struct Query {
    pub limit: usize,
    pub detail: bool,
    /// How long nodes and processes get to answer.
    pub timeout: Duration,
    /// `(key, predicate, value)`.
    pub filters: Vec<(String, String, String)>,
}

/// Ray sends filters as three parallel repeated parameters, and parameters of its own
/// (exclude_driver, server_timeout_multiplier) that change nothing here.
pub(crate) fn parse(query: &str) -> Result<Query, String> {
    let pairs: Vec<(String, String)> =
        serde_urlencoded::from_str(query).map_err(|e| format!("malformed query: {e}"))?;
    let mut q = Query { limit: 100, detail: false, timeout: DEFAULT_TIMEOUT, filters: Vec::new() };
    let (mut keys, mut preds, mut values) = (Vec::new(), Vec::new(), Vec::new());
    for (name, value) in pairs {
        match name.as_str() {
            "limit" => {
                q.limit = value.parse().map_err(|_| format!("invalid limit {value:?}: expected a positive integer"))?;
                if q.limit == 0 || q.limit > MAX_LIMIT {
                    return Err(format!("limit must be between 1 and {MAX_LIMIT}, got {}", q.limit));
                }
            }
            "detail" => q.detail = parse_bool("detail", &value)?,
            "timeout" => q.timeout = parse_timeout(&value)?,
            "filter_keys" => keys.push(value),
            "filter_predicates" => preds.push(value),
            "filter_values" => values.push(value),
            _ => {}
        }
    }
    if keys.len() != preds.len() || keys.len() != values.len() {
        return Err("filter_keys, filter_predicates and filter_values must come in equal numbers".into());
    }
    q.filters = keys.into_iter().zip(preds).zip(values).map(|((k, p), v)| (k, p, v)).collect();
    Ok(q)
}

/// Seconds, as Ray's client sends them.
fn parse_timeout(value: &str) -> Result<Duration, String> {
    let seconds: f64 = value.parse().map_err(|_| format!("invalid timeout {value:?}: expected seconds"))?;
    if seconds.is_nan() || seconds <= 0.0 {
        return Err(format!("timeout must be positive, got {value}"));
    }
    Ok(Duration::from_secs_f64(seconds.min(MAX_TIMEOUT.as_secs_f64())))
}

fn list_query(kind: StateKind, raw: Option<&str>) -> Result<(ListQuery, Duration), String> {
    let q = parse(raw.unwrap_or(""))?;
    let filters = q.filters.iter().map(|(k, p, v)| StateFilter::new(kind, k, p, v)).collect::<Result<Vec<_>, _>>()?;
    Ok((ListQuery { limit: q.limit, detail: q.detail, filters }, q.timeout))
}

/// The rows of a kind; `timeout` bounds the wait for nodes and processes asked for theirs.
pub(crate) async fn rows(state: &ApiState, kind: StateKind, timeout: Duration) -> (Vec<serde_json::Value>, String) {
    match kind {
        StateKind::Jobs => {
            let jobs = state.jobs.jobs().iter().filter_map(|j| serde_json::to_value(j).ok()).collect();
            (jobs, String::new())
        }
        StateKind::Workers => state.view.worker_rows(timeout).await,
        StateKind::Objects => state.view.object_rows(timeout).await,
        _ => state.view.state_rows(kind),
    }
}

async fn list(state: ApiState, kind: StateKind, raw: Option<String>) -> Reply {
    let (query, timeout) = match list_query(kind, raw.as_deref()) {
        Ok(q) => q,
        Err(msg) => return bad_request(msg),
    };
    let (rows, warning) = rows(&state, kind, timeout).await;
    ok(state::list(kind, rows, &query, &warning))
}

pub async fn actors(State(s): State<ApiState>, RawQuery(q): RawQuery) -> Reply {
    list(s, StateKind::Actors, q).await
}

pub async fn tasks(State(s): State<ApiState>, RawQuery(q): RawQuery) -> Reply {
    list(s, StateKind::Tasks, q).await
}

pub async fn placement_groups(State(s): State<ApiState>, RawQuery(q): RawQuery) -> Reply {
    list(s, StateKind::PlacementGroups, q).await
}

pub async fn jobs(State(s): State<ApiState>, RawQuery(q): RawQuery) -> Reply {
    list(s, StateKind::Jobs, q).await
}

pub async fn workers(State(s): State<ApiState>, RawQuery(q): RawQuery) -> Reply {
    list(s, StateKind::Workers, q).await
}

pub async fn objects(State(s): State<ApiState>, RawQuery(q): RawQuery) -> Reply {
    list(s, StateKind::Objects, q).await
}

pub async fn summarize_objects(State(s): State<ApiState>) -> Reply {
    ok(state::summarize_objects(&rows(&s, StateKind::Objects, DEFAULT_TIMEOUT).await.0))
}

pub async fn summarize_tasks(State(s): State<ApiState>) -> Reply {
    ok(state::summarize_tasks(&rows(&s, StateKind::Tasks, DEFAULT_TIMEOUT).await.0))
}

pub async fn summarize_actors(State(s): State<ApiState>) -> Reply {
    ok(state::summarize_actors(&rows(&s, StateKind::Actors, DEFAULT_TIMEOUT).await.0))
}

/// The tasks of a job (of every job without `job_id`) as a Chrome trace, without Ray's
/// envelope: what Ray's dashboard downloads.
pub async fn timeline(State(s): State<ApiState>, RawQuery(q): RawQuery) -> Reply {
    let pairs: Vec<(String, String)> = serde_urlencoded::from_str(q.as_deref().unwrap_or("")).unwrap_or_default();
    let job = pairs.into_iter().find(|(k, _)| k == "job_id").map(|(_, v)| v);
    let (rows, _) = rows(&s, StateKind::Tasks, DEFAULT_TIMEOUT).await;
    let rows: Vec<serde_json::Value> = match job {
        Some(job) => rows.into_iter().filter(|r| r["job_id"].as_str() == Some(job.as_str())).collect(),
        None => rows,
    };
    (StatusCode::OK, Json(state::timeline(&rows)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_timeout_ray_sends_bounds_the_wait_for_nodes() {
        assert_eq!(parse("").unwrap().timeout, DEFAULT_TIMEOUT);
        assert_eq!(parse("timeout=30&limit=5").unwrap().timeout, Duration::from_secs(30));
        assert_eq!(parse("timeout=0.5").unwrap().timeout, Duration::from_millis(500));
        assert_eq!(parse("timeout=100000").unwrap().timeout, MAX_TIMEOUT);
        for bad in ["timeout=0", "timeout=-1", "timeout=soon", "timeout=NaN"] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }
}
