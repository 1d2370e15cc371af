use crate::state::{bad_request, Reply};
use crate::{rest_response, ApiState};
use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::Json;
use oxray_api_types::{list_nodes, NodeFilter};

/// Nodes keep their own filters (typed, shared with `oxray list nodes`).
fn parse(query: &str) -> Result<(usize, bool, Vec<NodeFilter>), String> {
    let q = crate::state::parse(query)?;
    let filters = q
        .filters
        .iter()
        .map(|(k, p, v)| NodeFilter::new(k, p, v).map_err(|e| e.to_string()))
        .collect::<Result<_, _>>()?;
    Ok((q.limit, q.detail, filters))
}

pub async fn list(State(state): State<ApiState>, RawQuery(query): RawQuery) -> Reply {
    let (limit, detail, filters) = match parse(query.as_deref().unwrap_or("")) {
        Ok(q) => q,
        Err(msg) => return bad_request(msg),
    };
    let list = list_nodes(&state.view.nodes(), &filters, limit, detail);
    (StatusCode::OK, Json(rest_response(true, "", serde_json::json!({ "result": list }))))
}
