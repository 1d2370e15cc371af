use crate::{rest_response, ApiState};
use axum::extract::{Query, State};
use axum::Json;
use oxray_api_types::ClusterStatus;
use serde::Deserialize;

/// Ray's clients parse `version` as an integer and compare `ray_version` with `>=`.
pub async fn version(State(state): State<ApiState>) -> Json<serde_json::Value> {
    Json(serde_json::json!({
        "version": "4",
        "ray_version": oxray_types::RAY_COMPAT_VERSION,
        "ray_commit": format!("oxray-{}", env!("CARGO_PKG_VERSION")),
        "session_name": state.session_name,
        "oxray_version": env!("CARGO_PKG_VERSION"),
    }))
}

pub async fn healthz() -> &'static str {
    "success"
}

#[derive(Deserialize)]
pub struct StatusQuery {
    #[allow(dead_code)]
    format: Option<String>,
}

pub async fn cluster_status(State(state): State<ApiState>, _q: Query<StatusQuery>) -> Json<serde_json::Value> {
    let (pending, idle) = state.view.demand();
    let status = ClusterStatus::from_nodes(&state.view.nodes(), state.view.pending()).with_demand(pending, &idle);
    Json(rest_response(
        true,
        "Got cluster status.",
        serde_json::json!({
            "autoscaling_status": null,
            "autoscaling_error": null,
            "cluster_status": status,
        }),
    ))
}
