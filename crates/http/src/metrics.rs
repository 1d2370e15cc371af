use crate::ApiState;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use oxray_api_types::state::StateKind;
use oxray_api_types::usage::NodeUsage;
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

/// A gauge of node use: its name, its help, and how to read it from a reading.
type UsageGauge = (&'static str, &'static str, fn(&NodeUsage) -> f64);

/// The latest reading of each live node's use, as gauges by node (and GPU).
fn register_usage(registry: &mut Registry, usage: &[(String, NodeUsage)]) {
    let gauges: [UsageGauge; 7] = [
        ("node_cpu_utilization", "Fraction of the node's CPUs busy", |u| u.cpu_fraction),
        ("node_memory_used_bytes", "Memory in use on the node", |u| u.memory_used as f64),
        ("node_memory_total_bytes", "Memory of the node", |u| u.memory_total as f64),
        ("object_store_used_bytes", "Bytes of objects in the node's shared-memory store", |u| {
            u.object_store_used as f64
        }),
        ("object_store_spilled_bytes", "Bytes of objects spilled to the node's disk", |u| {
            u.object_store_spilled as f64
        }),
        ("node_workers_leased", "Tasks and actors running on the node", |u| u.workers_leased as f64),
        ("node_gpus", "GPUs the node reports", |u| u.gpus.len() as f64),
    ];
    for (name, help, read) in gauges {
        let family = Family::<Labels, FloatGauge>::default();
        for (node, u) in usage {
            family.get_or_create(&vec![("node_id".into(), node.clone())]).set(read(u));
        }
        registry.register(name, help, family);
    }
    let utilization = Family::<Labels, FloatGauge>::default();
    let gpu_memory = Family::<Labels, FloatGauge>::default();
    for (node, u) in usage {
        for gpu in &u.gpus {
            let labels = vec![("node_id".into(), node.clone()), ("gpu".into(), gpu.index.to_string())];
            utilization.get_or_create(&labels).set(gpu.utilization);
            gpu_memory.get_or_create(&labels).set(gpu.memory_used as f64);
        }
    }
    registry.register("node_gpu_utilization", "Fraction of each GPU busy", utilization);
    registry.register("node_gpu_memory_used_bytes", "Memory in use on each GPU", gpu_memory);
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
    register_usage(&mut registry, &state.view.node_usage());
    let mut body = String::new();
    if let Err(e) = encode(&mut body, &registry) {
        return (StatusCode::INTERNAL_SERVER_ERROR, format!("cannot encode metrics: {e}")).into_response();
    }
    // The application's metrics go before the end marker.
    let end = body.rfind("# EOF").unwrap_or(body.len());
    body.insert_str(end, &state.view.user_metrics());
    ([(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")], body).into_response()
}
