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
            "autoscaling_enabled": state.view.autoscaling(),
            "cluster_status": status,
        }),
    ))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Autoscaling {
    enabled: bool,
}

pub fn autoscaling_schema() -> serde_json::Value {
    serde_json::json!({
        "type": "object",
        "required": ["enabled"],
        "additionalProperties": false,
        "properties": {"enabled": {"type": "boolean"}},
    })
}

/// What an autoscaler (the operator, for `enableInTreeAutoscaling`) says of the cluster.
pub async fn set_autoscaling(
    State(state): State<ApiState>,
    body: Result<Json<Autoscaling>, axum::extract::rejection::JsonRejection>,
) -> (axum::http::StatusCode, Json<serde_json::Value>) {
    match body {
        Ok(Json(Autoscaling { enabled })) => {
            state.view.set_autoscaling(enabled);
            let message = format!("Autoscaling is {}.", if enabled { "on" } else { "off" });
            (axum::http::StatusCode::OK, Json(rest_response(true, &message, serde_json::json!({ "enabled": enabled }))))
        }
        Err(e) => {
            let message = format!("expected {{\"enabled\": true or false}}: {}", e.body_text());
            (axum::http::StatusCode::BAD_REQUEST, Json(rest_response(false, &message, serde_json::json!({}))))
        }
    }
}
