use crate::{rest_response, ApiState};
use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::Json;
use oxray_api_types::{list_nodes, NodeFilter, MAX_LIMIT};

type Reply = (StatusCode, Json<serde_json::Value>);

fn bad_request(msg: String) -> Reply {
    (StatusCode::BAD_REQUEST, Json(rest_response(false, &msg, serde_json::json!({ "result": null }))))
}

fn parse_bool(name: &str, value: &str) -> Result<bool, String> {
    match value.to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" => Ok(true),
        "false" | "0" | "no" => Ok(false),
        _ => Err(format!("invalid {name} {value:?}: expected True or False")),
    }
}

struct NodeQuery {
    limit: usize,
    detail: bool,
    filters: Vec<NodeFilter>,
}

/// Ray sends filters as three parallel repeated parameters.
fn parse(query: &str) -> Result<NodeQuery, String> {
    let pairs: Vec<(String, String)> =
        serde_urlencoded::from_str(query).map_err(|e| format!("malformed query: {e}"))?;
    let mut q = NodeQuery { limit: 100, detail: false, filters: Vec::new() };
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
            "filter_keys" => keys.push(value),
            "filter_predicates" => preds.push(value),
            "filter_values" => values.push(value),
            // timeout, exclude_driver, server_timeout_multiplier: nothing here waits on them.
            _ => {}
        }
    }
    if keys.len() != preds.len() || keys.len() != values.len() {
        return Err("filter_keys, filter_predicates and filter_values must come in equal numbers".into());
    }
    for ((k, p), v) in keys.iter().zip(&preds).zip(&values) {
        q.filters.push(NodeFilter::new(k, p, v).map_err(|e| e.to_string())?);
    }
    Ok(q)
}

pub async fn list(State(state): State<ApiState>, RawQuery(query): RawQuery) -> Reply {
    let q = match parse(query.as_deref().unwrap_or("")) {
        Ok(q) => q,
        Err(msg) => return bad_request(msg),
    };
    let list = list_nodes(&state.view.nodes(), &q.filters, q.limit, q.detail);
    (StatusCode::OK, Json(rest_response(true, "", serde_json::json!({ "result": list }))))
}
