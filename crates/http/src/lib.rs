//! The head's HTTP API on the dashboard port: version and health, Ray's state API for
//! nodes, actors, tasks, placement groups, jobs, workers and logs, cluster status and Prometheus metrics, all behind the cluster token.

mod assets;
mod auth;
mod jobs;
mod jobs_api;
mod logs;
mod metrics;
mod nodes;
mod packages;
mod state;
mod status;
mod ui;
mod utf8;

pub use jobs_api::{ByteStream, JobsApi};
pub use packages::MAX_PACKAGE_BYTES;

use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};
use axum::Router;
use oxray_rpc::Token;
use oxray_types::NodeInfo;
use std::sync::Arc;

/// What the HTTP API reads from the control plane.
#[async_trait::async_trait]
pub trait ClusterView: Send + Sync + 'static {
    fn nodes(&self) -> Vec<NodeInfo>;
    /// Work waiting for resources, one line per waiting job.
    fn pending(&self) -> Vec<String>;
    /// The newest events, newest first.
    fn events(&self, limit: usize) -> Vec<oxray_api_types::Event>;
    /// Every row of a kind of Ray's state API (not jobs: the jobs API has those), with
    /// every column, and a warning when some are missing.
    fn state_rows(&self, kind: oxray_api_types::state::StateKind) -> (Vec<serde_json::Value>, String);
    /// The end of a node agent's own log.
    async fn node_log(&self, node_id: &str, max_bytes: u64) -> Result<String, oxray_api_types::ApiError>;
    /// The application metrics of the cluster's processes, in the OpenMetrics text format.
    fn user_metrics(&self) -> String;
    /// The latest reading of each live node's use, by node id.
    fn node_usage(&self) -> Vec<(String, oxray_api_types::usage::NodeUsage)>;
    /// The readings of the last hour (one per few seconds), by node id; of one node when given.
    fn usage_history(
        &self,
        node_id: Option<&str>,
    ) -> std::collections::HashMap<String, Vec<oxray_api_types::usage::NodeUsage>>;
    /// The workers of every live node, as rows of Ray's state API, and a warning naming
    /// the nodes that did not answer.
    async fn worker_rows(&self, timeout: std::time::Duration) -> (Vec<serde_json::Value>, String);
    /// The object references every process that owns objects holds, as rows of Ray's state
    /// API, and what could not be listed.
    async fn object_rows(&self, timeout: std::time::Duration) -> (Vec<serde_json::Value>, String);
    /// The names of a live node's log files that match a glob.
    async fn list_logs(&self, node: &NodeInfo, glob: &str) -> Result<Vec<String>, oxray_api_types::ApiError>;
    /// A log file, streamed from its node.
    async fn read_log(
        &self,
        target: &oxray_api_types::logs::LogTarget,
    ) -> Result<ByteStream, oxray_api_types::ApiError>;
}

#[derive(Clone)]
pub struct ApiState {
    pub view: Arc<dyn ClusterView>,
    pub jobs: Arc<dyn JobsApi>,
    pub token: Token,
    pub session_name: String,
    /// Uploaded packages larger than this get 413.
    pub max_package_bytes: u64,
}

pub fn router(state: ApiState) -> Router {
    let protected = Router::new()
        .route("/api/v0/nodes", get(nodes::list))
        .route("/api/v0/actors", get(state::actors))
        .route("/api/v0/tasks", get(state::tasks))
        .route("/api/v0/placement_groups", get(state::placement_groups))
        .route("/api/v0/jobs", get(state::jobs))
        .route("/api/v0/workers", get(state::workers))
        .route("/api/v0/objects", get(state::objects))
        .route("/api/v0/objects/summarize", get(state::summarize_objects))
        .route("/api/v0/logs", get(logs::list))
        .route("/api/v0/logs/{media_type}", get(logs::read))
        .route("/api/v0/tasks/summarize", get(state::summarize_tasks))
        .route("/api/v0/tasks/timeline", get(state::timeline))
        .route("/api/v0/actors/summarize", get(state::summarize_actors))
        .route("/api/cluster_status", get(status::cluster_status))
        .route("/metrics", get(metrics::render))
        .route("/api/jobs/", get(jobs::list).post(jobs::submit))
        .route("/api/jobs", get(jobs::list).post(jobs::submit))
        .route("/api/jobs/{id}", get(jobs::get).delete(jobs::delete))
        .route("/api/jobs/{id}/stop", post(jobs::stop))
        .route("/api/jobs/{id}/logs", get(jobs::logs))
        .route("/api/jobs/{id}/logs/tail", get(jobs::tail))
        .route("/api/packages/{protocol}/{name}", get(packages::head).put(packages::put))
        .route("/api/ui/jobs", get(ui::jobs))
        .route("/api/ui/events", get(ui::events))
        .route("/api/ui/nodes/{id}", get(ui::node))
        .route("/api/ui/nodes/{id}/log", get(ui::node_log))
        .route("/api/ui/usage", get(ui::usage))
        // Package uploads stream with their own limit; JSON bodies stay small.
        .layer(DefaultBodyLimit::max(8 * 1024 * 1024))
        // Unknown paths answer 404 only to callers with the token, as Ray's server does.
        .fallback(|| async { (axum::http::StatusCode::NOT_FOUND, "Not Found") })
        .layer(axum::middleware::from_fn_with_state(state.clone(), auth::require_token));
    Router::new()
        .route("/api/version", get(status::version))
        // What Ray's Serve CLI checks first.
        .route("/api/ray/version", get(status::version))
        .route("/api/gcs_healthz", get(status::healthz))
        .route("/-/healthz", get(status::healthz))
        .route("/", get(assets::index))
        .route("/static/{name}", get(assets::asset))
        .route("/api/authentication_mode", get(ui::authentication_mode))
        .route("/api/authenticate", post(ui::authenticate))
        .merge(protected)
        .with_state(state)
}

/// `router` behind the cluster token, as the rest of the API (for routes other crates add).
pub fn with_token(router: Router, token: Token) -> Router {
    router.layer(axum::middleware::from_fn_with_state(token, auth::require))
}

/// Ray's generic dashboard envelope.
pub(crate) fn rest_response(ok: bool, msg: &str, data: serde_json::Value) -> serde_json::Value {
    serde_json::json!({ "result": ok, "msg": msg, "data": data })
}

#[cfg(test)]
mod tests;
