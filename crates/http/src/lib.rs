//! The head's HTTP API on the dashboard port: version and health, Ray's state API for
//! nodes, actors, tasks, placement groups, jobs, workers and logs, cluster status and Prometheus metrics, all behind the cluster token.

mod assets;
mod auth;
mod jobs;
mod jobs_api;
mod logs;
mod metrics;
mod nodes;
pub mod openapi;
mod packages;
mod state;
mod status;
mod ui;
mod utf8;

pub use jobs_api::{ByteStream, JobsApi};
pub use openapi::{op, schema, Documented};
pub use packages::MAX_PACKAGE_BYTES;

use axum::extract::DefaultBodyLimit;
use axum::Router;
use oxray_rpc::Token;
use oxray_types::NodeInfo;
use std::sync::Arc;

/// What the HTTP API reads from the control plane.
#[async_trait::async_trait]
pub trait ClusterView: Send + Sync + 'static {
    fn nodes(&self) -> Vec<NodeInfo>;
    /// Work waiting for resources, one line per waiting job or shape of work.
    fn pending(&self) -> Vec<String>;
    /// The same as shapes (for autoscalers), and how long each idle node (by id) has held
    /// nothing, in seconds.
    fn demand(&self) -> (Vec<oxray_api_types::PendingResources>, std::collections::HashMap<String, f64>) {
        Default::default()
    }
    /// Whether work no node can hold waits for a node an autoscaler adds (else it fails).
    fn autoscaling(&self) -> bool {
        false
    }
    fn set_autoscaling(&self, _on: bool) {}
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

/// The query of Ray's state API lists.
fn state_query() -> Vec<(&'static str, serde_json::Value, &'static str)> {
    let strings = serde_json::json!({ "type": "array", "items": { "type": "string" } });
    vec![
        ("limit", schema::integer(), "at most this many rows (100; 1 to 10,000)"),
        ("timeout", schema::number(), "seconds to wait for nodes and processes to answer"),
        ("detail", schema::boolean(), "every column, not only the default ones"),
        ("filter_keys", strings.clone(), "the columns of the filters, one per filter"),
        ("filter_predicates", strings.clone(), "= or !=, one per filter"),
        ("filter_values", strings, "the values of the filters, one per filter"),
        ("exclude_driver", schema::boolean(), "accepted for Ray's client; changes nothing"),
    ]
}

/// The query of the log endpoints: which file of which node, or whose output.
fn log_query() -> Vec<(&'static str, serde_json::Value, &'static str)> {
    vec![
        ("node_id", schema::string(), "the node, by id"),
        ("node_ip", schema::string(), "the node, by address"),
        ("filename", schema::string(), "a file in the node's log folder"),
        ("actor_id", schema::string(), "an actor's output"),
        ("task_id", schema::string(), "a task's output"),
        ("submission_id", schema::string(), "a job's driver output"),
        ("pid", schema::integer(), "a worker's output, by process id"),
        ("attempt_number", schema::integer(), "the task's attempt"),
        ("lines", schema::integer(), "the last this many lines; -1: all"),
        ("suffix", serde_json::json!({ "type": "string", "enum": ["out", "err"] }), "stdout or stderr"),
        ("interval", schema::number(), "seconds between reads when following"),
        ("timeout", schema::number(), "seconds to wait for the node"),
        ("filter_ansi_code", schema::boolean(), "strip terminal colour codes"),
    ]
}

/// How Ray's clients name an uploaded package: `gcs://_ray_pkg_<hash>.zip`.
fn package_path() -> [(&'static str, serde_json::Value); 2] {
    [
        ("protocol", serde_json::json!({ "type": "string", "enum": ["gcs"] })),
        (
            "name",
            serde_json::json!({ "type": "string", "pattern": "^[A-Za-z0-9_.-]{1,200}\\.(zip|whl|tar\\.gz|tgz|tar\\.xz)$" }),
        ),
    ]
}

/// What Ray's Jobs API takes to submit a job.
fn job_submission() -> serde_json::Value {
    serde_json::json!({
        "type": "object",
        "required": ["entrypoint"],
        "properties": {
            "entrypoint": { "type": "string" },
            "submission_id": { "type": "string", "nullable": true },
            "job_id": { "type": "string", "nullable": true },
            "runtime_env": { "type": "object", "nullable": true },
            "metadata": { "type": "object", "additionalProperties": { "type": "string" }, "nullable": true },
            "entrypoint_num_cpus": { "type": "number", "nullable": true },
            "entrypoint_num_gpus": { "type": "number", "nullable": true },
            "entrypoint_memory": { "type": "integer", "nullable": true },
            "entrypoint_resources": { "type": "object", "additionalProperties": { "type": "number" }, "nullable": true },
        },
    })
}

/// The dashboard port's API; `others` are routes other parts of the head add (Serve's),
/// behind the cluster token as the rest. `/api/openapi.json` describes all of it.
pub fn router(state: ApiState, others: Documented) -> Router {
    let document = Arc::new(std::sync::OnceLock::new());
    let described = document.clone();
    let openapi_json = move || async move { axum::Json(described.get().cloned().unwrap_or_default()) };
    let state_list = |summary| op("state", summary).query(&state_query());
    let jobs = |summary| op("jobs", summary);
    let ui = |summary| op("dashboard", summary);
    let protected = Documented::new(true)
        .get("/api/v0/nodes", state_list("The cluster's nodes"), nodes::list)
        .get("/api/v0/actors", state_list("Actors"), state::actors)
        .get("/api/v0/tasks", state_list("Task attempts"), state::tasks)
        .get("/api/v0/placement_groups", state_list("Placement groups"), state::placement_groups)
        .get("/api/v0/jobs", state_list("Jobs, drivers included"), state::jobs)
        .get("/api/v0/workers", state_list("Worker processes of every node"), state::workers)
        .get("/api/v0/objects", state_list("Object references held by every owner"), state::objects)
        .get("/api/v0/objects/summarize", op("state", "Objects by call site"), state::summarize_objects)
        .get("/api/v0/tasks/summarize", op("state", "Tasks by function and state"), state::summarize_tasks)
        .get("/api/v0/actors/summarize", op("state", "Actors by class and state"), state::summarize_actors)
        .get(
            "/api/v0/tasks/timeline",
            op("state", "A Chrome trace of the tasks of a job").query(&[(
                "job_id",
                schema::string(),
                "the job; all jobs when absent",
            )]),
            state::timeline,
        )
        .get(
            "/api/v0/logs",
            op("logs", "The log files of a node that match a glob")
                .query(&log_query()[..2])
                .query(&[("glob", schema::string(), "a file name pattern"), ("timeout", schema::number(), "seconds")])
                .answers(400, "no node named")
                .answers(404, "no such node"),
            logs::list,
        )
        .get(
            "/api/v0/logs/{media_type}",
            op("logs", "A log file or a process's output: `file` reads it, `stream` follows it")
                .path(&[("media_type", serde_json::json!({ "type": "string", "enum": ["file", "stream"] }))])
                .query(&log_query())
                .answers(404, "no such node, file or process"),
            logs::read,
        )
        .get(
            "/api/cluster_status",
            op("status", "Nodes, resources and pending work, as `ray status` reads them").query(&[(
                "format",
                schema::string(),
                "accepted for Ray's client",
            )]),
            status::cluster_status,
        )
        .put(
            "/api/autoscaling",
            op("status", "Turn autoscaling on or off: whether work no node can hold waits for a node")
                .body("application/json", status::autoscaling_schema())
                .answers(400, "not {\"enabled\": true or false}"),
            status::set_autoscaling,
        )
        .get("/metrics", op("status", "Prometheus metrics of the cluster"), metrics::render)
        .get("/api/jobs/{id}", jobs("A job").answers(404, "no such job"), jobs::get)
        .delete(
            "/api/jobs/{id}",
            jobs("Forget a finished job").answers(400, "the job has not finished").answers(404, "no such job"),
            jobs::delete,
        )
        .post("/api/jobs/{id}/stop", jobs("Stop a job").answers(404, "no such job"), jobs::stop)
        .get("/api/jobs/{id}/logs", jobs("A job's driver output").answers(404, "no such job"), jobs::logs)
        .get(
            "/api/jobs/{id}/logs/tail",
            jobs("Follow a job's driver output (a WebSocket)").answers(400, "not a WebSocket request"),
            jobs::tail,
        )
        .get(
            "/api/packages/{protocol}/{name}",
            op("packages", "Whether a working-directory package is stored")
                .path(&package_path())
                .answers(404, "not stored"),
            packages::head,
        )
        .put(
            "/api/packages/{protocol}/{name}",
            op("packages", "Store a working-directory package (a zip file)")
                .path(&package_path())
                .body("application/octet-stream", schema::bytes())
                .answers(400, "a bad name or archive")
                .answers(413, "larger than the head takes"),
            packages::put,
        )
        .get(
            "/api/ui/jobs",
            ui("A page of jobs, newest first").query(&[
                ("offset", schema::integer(), "jobs to skip"),
                ("limit", schema::integer(), "jobs on the page"),
            ]),
            ui::jobs,
        )
        .get("/api/ui/events", ui("The newest events").query(&[("limit", schema::integer(), "how many")]), ui::events)
        .get("/api/ui/nodes/{id}", ui("A node and its workers").answers(404, "no such node"), ui::node)
        .get("/api/ui/nodes/{id}/log", ui("The end of a node agent's log").answers(404, "no such node"), ui::node_log)
        .get(
            "/api/ui/usage",
            ui("The nodes' use over the last hour").query(&[("node_id", schema::string(), "one node")]),
            ui::usage,
        )
        .get("/api/openapi.json", op("status", "This document"), openapi_json);
    // Ray's clients use both spellings.
    let protected = ["/api/jobs/", "/api/jobs"].into_iter().fold(protected, |api, path| {
        api.get(path, jobs("Every job").query(&[("limit", schema::integer(), "the newest this many")]), jobs::list)
            .post(
                path,
                jobs("Submit a job").body("application/json", job_submission()).answers(400, "a bad submission"),
                jobs::submit,
            )
    });
    let (protected, protected_paths) = protected.finish(|r| {
        // Package uploads stream with their own limit; JSON bodies stay small.
        r.layer(DefaultBodyLimit::max(8 * 1024 * 1024))
            // Unknown paths answer 404 only to callers with the token, as Ray's server does.
            .fallback(|| async { (axum::http::StatusCode::NOT_FOUND, "Not Found") })
            .layer(axum::middleware::from_fn_with_state(state.clone(), auth::require_token))
    });
    let public = Documented::new(false)
        .get("/api/version", op("status", "Versions, as Ray's clients check them"), status::version)
        // What Ray's Serve CLI checks first.
        .get("/api/ray/version", op("status", "Versions, as Ray's Serve CLI checks them"), status::version)
        .get("/api/gcs_healthz", op("status", "Whether the head answers"), status::healthz)
        .get("/-/healthz", op("status", "Whether the head answers"), status::healthz)
        .get("/", ui("The dashboard"), assets::index)
        .get("/static/{name}", ui("The dashboard's files").answers(404, "no such file"), assets::asset)
        .get("/api/authentication_mode", ui("Whether the dashboard asks for a token"), ui::authentication_mode)
        .post(
            "/api/authenticate",
            ui("Check a token and keep it in a cookie").answers(401, "a wrong token"),
            ui::authenticate,
        );
    let (others, mut paths) = others.into_parts();
    let (public, public_paths) = public.into_parts();
    paths.merge(protected_paths);
    paths.merge(public_paths);
    let _ = document.set(openapi::document(&paths));
    let token = state.token.clone();
    public.merge(protected).with_state(state).merge(with_token(others, token))
}

/// `router` behind the cluster token, as the rest of the API.
fn with_token(router: Router, token: Token) -> Router {
    router.layer(axum::middleware::from_fn_with_state(token, auth::require))
}

/// Ray's generic dashboard envelope.
pub(crate) fn rest_response(ok: bool, msg: &str, data: serde_json::Value) -> serde_json::Value {
    serde_json::json!({ "result": ok, "msg": msg, "data": data })
}

#[cfg(test)]
mod tests;
