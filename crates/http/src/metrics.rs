use crate::ApiState;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use oxray_api_types::state::StateKind;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

type Labels = Vec<(String, String)>;
type FloatGauge = Gauge<f64, AtomicU64>;

/// Rows of the state API counted by their state and `by` (a task's name, an actor's class).
fn count_rows(state: &ApiState, kind: StateKind, by: &str) -> Family<Labels, Gauge> {
    let counts = Family::<Labels, Gauge>::default();
    for row in state.view.state_rows(kind).0 {
        let text = |key: &str| row.get(key).and_then(|v| v.as_str()).unwrap_or_default().to_string();
        counts.get_or_create(&vec![("state".into(), text("state")), (by.into(), text(by))]).inc();
    }
    counts
}

/// Builds the gauges from the current view at each scrape; the view is small (one entry per
/// node and resource), so there is nothing to keep in between.
pub async fn render(State(state): State<ApiState>) -> Response {
    let nodes = state.view.nodes();
    let by_state = Family::<Labels, Gauge>::default();
    let total = Family::<Labels, FloatGauge>::default();
    let available = Family::<Labels, FloatGauge>::default();
    for s in ["ALIVE", "DEAD"] {
        let count = nodes.iter().filter(|n| n.state.as_str() == s).count();
        by_state.get_or_create(&vec![("state".into(), s.to_string())]).set(count as i64);
    }
    for node in nodes.iter().filter(|n| n.is_alive()) {
        for (name, amount) in node.resources_total.iter().filter(|(k, _)| !k.starts_with("node:")) {
            let labels = vec![
                ("node_id".to_string(), node.node_id.hex()),
                ("node_ip".to_string(), node.node_ip.clone()),
                ("resource".to_string(), name.to_string()),
            ];
            total.get_or_create(&labels).set(amount);
            available.get_or_create(&labels).set(node.resources_available.get(name));
        }
    }
    let mut registry = Registry::with_prefix("oxray");
    registry.register(
        "tasks",
        "Task attempts the head knows of, by state and name",
        count_rows(&state, StateKind::Tasks, "name"),
    );
    registry.register(
        "actors",
        "Actors the head knows of, by state and class",
        count_rows(&state, StateKind::Actors, "class_name"),
    );
    let jobs = Family::<Labels, Gauge>::default();
    for job in state.jobs.jobs() {
        jobs.get_or_create(&vec![("status".into(), job.status.to_string())]).inc();
    }
    registry.register("jobs", "Submitted jobs, by status", jobs);
    registry.register("cluster_nodes", "Nodes the head has seen, by state", by_state);
    registry.register("node_resources_total", "Resources of each alive node", total);
    registry.register("node_resources_available", "Free resources of each alive node", available);
    let mut body = String::new();
    if let Err(e) = encode(&mut body, &registry) {
        return (StatusCode::INTERNAL_SERVER_ERROR, format!("cannot encode metrics: {e}")).into_response();
    }
    ([(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")], body).into_response()
}
