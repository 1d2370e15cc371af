//! A driver's or worker's connection to its cluster (`Client`), made by `connect`; its
//! Python methods are in the submodules by what they are about.

use oxray_worker::placement_groups as pg;
use oxray_worker::{
    available_resources, cluster_resources, ActorCall, Cluster, LocalCluster, LocalOptions, ObjectTable, Outcome,
    OwnerLinks, RestartPlan, Route, Submitter, Target, TaskSpec,
};
use pyo3::exceptions::{PyConnectionError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use std::collections::BTreeMap;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

mod actors;
mod groups;
mod objects;
mod tasks;

use crate::errors::{get_error, parse_token, to_py};
use crate::waiting;

/// A driver's connection to a cluster, and the private cluster it started, if any.
#[pyclass(module = "oxray._native")]
pub struct Client {
    runtime: tokio::runtime::Runtime,
    cluster: Cluster,
    /// Taken by `shutdown`, which other threads may be inside calls while it runs.
    local: Mutex<Option<LocalCluster>>,
    token: oxray_worker::Token,
    /// The interpreter workers run: this driver's.
    python: String,
    /// The node this process runs on, when known (set for jobs and workers).
    node_hint: Option<String>,
    objects: Arc<ObjectTable>,
    submitter: Mutex<Option<Arc<Submitter>>>,
    /// This process's object server, started when a reference first leaves the process:
    /// read with the GIL held, so never behind a lock.
    object_address: std::sync::OnceLock<String>,
    /// Held (without the GIL) while the object server starts.
    starting_object_server: Mutex<()>,
    /// The agent and address of the node this process runs on, once looked up.
    local_node: Mutex<Option<LocalNode>>,
    /// The node's object store, when this process runs on the node's machine.
    store: Mutex<Option<Option<Arc<oxray_worker::NodeStore>>>>,
    /// The other processes' object servers.
    links: Arc<OwnerLinks>,
    /// Store files being written, by object id.
    creating: Mutex<HashMap<String, oxray_worker::StoredFile>>,
    /// Set once this process offers its node store for large results.
    results_in_store: std::sync::OnceLock<()>,
    /// In a worker process, how it tells its agent that it waits (made on first wait).
    blocked_notice: std::sync::OnceLock<Option<oxray_worker::BlockedNotice>>,
    /// A driver's job, held open at the head until `shutdown`.
    driver_job: Mutex<Option<oxray_worker::job::DriverJob>>,
}

/// `get` and `wait` timeouts: seconds, or forever.
fn deadline(timeout: Option<f64>) -> Option<tokio::time::Instant> {
    timeout.map(|t| tokio::time::Instant::now() + Duration::from_secs_f64(t.max(0.0)))
}

/// The node a driver or worker runs on, as its cluster knows it.
#[derive(Clone)]
struct LocalNode {
    agent: String,
    ip: String,
    id: String,
}

/// Resolves `address` as `ray.init` does and connects; starts a private local cluster when
/// there is none to join.
#[pyfunction]
#[pyo3(signature = (address, env_address, current_address, token, local, package_dir, python, node_hint))]
#[allow(clippy::too_many_arguments)]
pub fn connect(
    py: Python<'_>,
    address: Option<String>,
    env_address: Option<String>,
    current_address: Option<String>,
    token: Option<String>,
    local: LocalArg,
    package_dir: Option<PathBuf>,
    python: String,
    node_hint: Option<String>,
) -> PyResult<Client> {
    py.detach(|| {
        let runtime = core_runtime()?;
        let target = oxray_worker::resolve(address.as_deref(), env_address.as_deref(), current_address.as_deref()).map_err(to_py)?;
        let (address, token, local) = match target {
            Target::Connect(address) => {
                if local.0.is_some() || local.1.is_some() || local.2.is_some() || local.3.is_some() || local.4.is_some()
                {
                    return Err(PyValueError::new_err(
                        "num_cpus, num_gpus, resources, object_store_memory and labels describe a new local cluster; they cannot be given when connecting to an existing one",
                    ));
                }
                let token = std::env::var("OXRAY_AUTH_TOKEN")
                    .ok()
                    .filter(|t| !t.trim().is_empty())
                    .or_else(|| oxray_config::private_clusters::token_for(&address))
                    .or(token)
                    .ok_or_else(|| {
                        PyConnectionError::new_err(format!(
                            "no cluster token for {address}: set OXRAY_AUTH_TOKEN or save it in ~/.oxray/auth_token"
                        ))
                    })?;
                (address, token, None)
            }
            Target::StartLocal => {
                let bin = oxray_worker::find_oxray_binary(package_dir.as_deref()).ok_or_else(|| {
                    PyRuntimeError::new_err("cannot start a local cluster: the `oxray` executable is not on PATH (or set OXRAY_BIN)")
                })?;
                let options = LocalOptions {
                    num_cpus: local.0,
                    num_gpus: local.1,
                    resources_json: local.2,
                    object_store_memory: local.3,
                    labels: local.4,
                };
                let cluster = LocalCluster::start(&bin, &options).map_err(to_py)?;
                (cluster.address.clone(), cluster.token.clone(), Some(cluster))
            }
        };
        let token = parse_token(&token)?;
        let cluster = runtime.block_on(Cluster::connect(&address, &token)).map_err(to_py)?;
        let objects = Arc::new(ObjectTable::default());
        let links = OwnerLinks::new(token.clone(), runtime.handle().clone());
        objects.set_owners(links.clone());
        let client = Client {
            runtime,
            cluster,
            local: Mutex::new(local),
            token,
            python,
            node_hint,
            objects,
            submitter: Mutex::new(None),
            object_address: std::sync::OnceLock::new(),
            starting_object_server: Mutex::new(()),
            local_node: Mutex::new(None),
            store: Mutex::new(None),
            creating: Mutex::new(HashMap::new()),
            results_in_store: std::sync::OnceLock::new(),
            blocked_notice: std::sync::OnceLock::new(),
            links,
            driver_job: Mutex::new(None),
        };
        if std::env::var_os("OXRAY_WORKER_ID").is_none() {
            client.register_driver()?;
        }
        Ok(client)
    })
}

/// How long `shutdown` waits for group removals still on their way (the head may be gone).
const GROUP_CHANGES_AT_EXIT: std::time::Duration = std::time::Duration::from_secs(5);
/// How long an ending driver waits for its last task and actor states to reach the head.
const EVENTS_AT_EXIT: std::time::Duration = std::time::Duration::from_secs(2);
/// How long a disconnecting process may take to give its task workers back.
const LEASES_AT_EXIT: std::time::Duration = std::time::Duration::from_secs(2);

/// The core's own runtime: one thread, beside Python's.
fn core_runtime() -> PyResult<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .map_err(|e| PyRuntimeError::new_err(e.to_string()))
}

/// `(kind, target, soft, bundle_index)` from Python: "DEFAULT", "SPREAD", "NODE" (the
/// target is a node id), "PG" (the target is a placement group id) or "LABELS" (the target
/// is a JSON list of label selectors, tried in order).
type StrategyArg = (String, String, bool, i32);
/// A new local cluster's node, from `init`: `(num_cpus, num_gpus, resources as JSON,
/// object_store_memory, labels as "k=v,...")`.
type LocalArg = (Option<u32>, Option<u32>, Option<String>, Option<u64>, Option<String>);
/// An application metric as `oxray.util.metrics` hands it over.
type MetricTuple = (String, String, String, Vec<(String, String)>, f64, Vec<f64>, Vec<u64>, f64, u64);

fn parse_strategy((kind, target, soft, index): StrategyArg) -> PyResult<oxray_worker::Strategy> {
    match kind.as_str() {
        "DEFAULT" => Ok(oxray_worker::Strategy::Default),
        "SPREAD" => Ok(oxray_worker::Strategy::Spread),
        "NODE" => Ok(oxray_worker::Strategy::Node { node_id: target, soft }),
        "PG" => Ok(oxray_worker::Strategy::Bundle { group: target, index }),
        "LABELS" => serde_json::from_str(&target)
            .map(oxray_worker::Strategy::Labels)
            .map_err(|e| PyValueError::new_err(format!("label selectors must be a JSON list of objects: {e}"))),
        other => Err(PyValueError::new_err(format!("unknown scheduling strategy {other:?}"))),
    }
}

fn actor_call(
    actor_id: &str,
    address: &str,
    owner: Option<String>,
    method: String,
    creation: bool,
    max_task_retries: i64,
) -> ActorCall {
    ActorCall {
        actor_id: actor_id.to_string(),
        address: address.to_string(),
        owner: owner.filter(|o| !o.is_empty()),
        method,
        creation,
        max_task_retries,
        place: None,
        dead: None,
        gpu_ids: Vec::new(),
    }
}

#[pymethods]
impl Client {
    #[getter]
    fn address(&self) -> String {
        self.cluster.address().to_string()
    }

    /// The cluster token, for the HTTP API (packages of runtime_envs).
    #[getter]
    fn token(&self) -> String {
        self.token.as_str().to_string()
    }

    #[getter]
    fn dashboard_url(&self) -> String {
        self.cluster.dashboard_url().to_string()
    }

    #[getter]
    fn session_name(&self) -> String {
        self.cluster.session_name().to_string()
    }

    /// The oxray home of the private cluster this client started, if it started one.
    #[getter]
    fn local_home(&self) -> Option<String> {
        self.local.lock().expect("local lock").as_ref().map(|l| l.home().display().to_string())
    }

    /// Every node as JSON (Python shapes it into Ray's `nodes()` dictionaries).
    fn nodes_json(&self, py: Python<'_>) -> PyResult<String> {
        let nodes = py.detach(|| self.cluster.nodes()).map_err(to_py)?;
        serde_json::to_string(&nodes).map_err(|e| PyRuntimeError::new_err(e.to_string()))
    }

    /// The id of the node this process runs on (`get_runtime_context().get_node_id()`).
    fn node_id(&self, py: Python<'_>) -> PyResult<String> {
        Ok(py.detach(|| self.local_node())?.id)
    }

    fn cluster_resources(&self, py: Python<'_>) -> PyResult<BTreeMap<String, f64>> {
        let nodes = py.detach(|| self.cluster.nodes()).map_err(to_py)?;
        Ok(cluster_resources(&nodes))
    }

    fn available_resources(&self, py: Python<'_>) -> PyResult<BTreeMap<String, f64>> {
        let nodes = py.detach(|| self.cluster.nodes()).map_err(to_py)?;
        Ok(available_resources(&nodes))
    }

    /// Sends this process's application metrics, each `(name, kind, description, tags,
    /// value, boundaries, bucket_counts, sum, count)`, as from `reporter` ("node:pid").
    fn report_metrics(&self, py: Python<'_>, reporter: String, samples: Vec<MetricTuple>) -> PyResult<()> {
        let metrics = samples
            .into_iter()
            .map(|(name, kind, description, tags, value, boundaries, bucket_counts, sum, count)| {
                oxray_worker::MetricSample {
                    name,
                    kind,
                    description,
                    tags: tags.into_iter().collect(),
                    value,
                    boundaries,
                    bucket_counts,
                    sum,
                    count,
                }
            })
            .collect();
        py.detach(|| self.cluster.report_metrics(reporter, metrics)).map_err(to_py)
    }

    /// Stops the private cluster, if this client started one.
    fn shutdown(&self, py: Python<'_>) {
        // Removals of groups still on their way reach the head before this process ends.
        let groups = self.cluster.groups().clone();
        let settled = async move { tokio::time::timeout(GROUP_CHANGES_AT_EXIT, groups.all_settled()).await };
        let _ = py.detach(|| self.cluster.call(|_| settled));
        // Taken without the GIL: a thread making the submitter holds the lock while it asks
        // the head, which may be down for a while.
        let submitter = py.detach(|| self.submitter.lock().expect("submitter lock").clone());
        if let Some(submitter) = submitter {
            let flushed = async move {
                // Task workers go back now: this process may live on after it disconnects,
                // and the agent frees what it holds only when it ends.
                let _ = tokio::time::timeout(LEASES_AT_EXIT, submitter.close()).await;
                tokio::time::timeout(EVENTS_AT_EXIT, submitter.flush_events()).await
            };
            let _ = py.detach(|| self.runtime.block_on(flushed));
        }
        py.detach(|| {
            if let Some(Some(store)) = self.store.lock().expect("store lock").as_ref() {
                store.release_kept();
            }
        });
        // The job ends at the head once its stream closes.
        drop(self.driver_job.lock().expect("driver job lock").take());
        let local = self.local.lock().expect("local lock").take();
        if let Some(mut local) = local {
            // This thread's own head connection answers the stopping head's goodbye meanwhile,
            // so the head need not wait for it to close.
            let stopped = async move { tokio::task::spawn_blocking(move || local.stop()).await };
            let _ = py.detach(|| self.cluster.call(|_| stopped));
        }
    }
}

impl Client {
    /// Tells the head this process is a driver: it is given its job id (Ray's JobID).
    fn register_driver(&self) -> PyResult<()> {
        let node = self.local_node().ok();
        let info = oxray_worker::DriverInfo {
            job_id: String::new(),
            submission_id: std::env::var("OXRAY_JOB_ID").unwrap_or_default(),
            pid: std::process::id(),
            node_id: node.as_ref().map(|n| n.id.clone()).unwrap_or_default(),
            ip: node.map(|n| n.ip).unwrap_or_default(),
            entrypoint: std::env::args_os().map(|a| a.to_string_lossy().into_owned()).collect::<Vec<_>>().join(" "),
        };
        let job =
            self.runtime.block_on(oxray_worker::job::register_driver(self.cluster.head(), info)).map_err(to_py)?;
        *self.driver_job.lock().expect("driver job lock") = Some(job);
        Ok(())
    }

    fn blocked_notice(&self) -> Option<&oxray_worker::BlockedNotice> {
        self.blocked_notice
            .get_or_init(|| {
                let _inside = self.runtime.enter();
                oxray_worker::BlockedNotice::from_env(&self.token)
            })
            .as_ref()
    }

    /// Opens the node store and starts serving objects (once), so workers on this node can
    /// hand large results over in the store rather than inline.
    fn take_results_in_store(&self, py: Python<'_>) {
        if self.results_in_store.get().is_some() {
            return;
        }
        if py.detach(|| self.node_store()).is_some() {
            if let Err(e) = self.owner_address(py) {
                tracing::debug!("large results stay inline: {e}");
            }
        }
        let _ = self.results_in_store.set(());
    }

    /// The node's object store, opened on first use: only when the store directory on this
    /// machine belongs to this process's node.
    fn node_store(&self) -> Option<Arc<oxray_worker::NodeStore>> {
        let mut slot = self.store.lock().expect("store lock");
        if let Some(store) = slot.as_ref() {
            return store.clone();
        }
        let opened = self.open_store();
        if let Some(store) = &opened {
            self.objects.set_store(store.clone());
        }
        *slot = Some(opened.clone());
        opened
    }

    fn open_store(&self) -> Option<Arc<oxray_worker::NodeStore>> {
        let nodes = self.cluster.nodes().ok()?;
        let agent = self.local_node().ok()?.agent;
        let node = nodes.iter().find(|n| n.agent_address() == agent)?;
        let (memory, spill) = oxray_worker::object_store_dirs(node.agent_port);
        let owner = std::fs::read_to_string(memory.join("node")).ok()?;
        if owner.trim() != node.node_id.hex() {
            return None;
        }
        let capacity = node.resources_total.get(oxray_types::resource_names::OBJECT_STORE_MEMORY) as u64;
        match oxray_worker::NodeStore::open(&memory, &spill, capacity) {
            Ok(store) => Some(Arc::new(store)),
            Err(e) => {
                tracing::warn!("cannot open the node's object store: {e}");
                None
            }
        }
    }

    /// The node this process runs on: the one it was told, else the head's node.
    fn local_node(&self) -> PyResult<LocalNode> {
        let mut slot = self.local_node.lock().expect("local node lock");
        if let Some(node) = slot.as_ref() {
            return Ok(node.clone());
        }
        let nodes = self.cluster.nodes().map_err(to_py)?;
        let usable: Vec<_> = nodes.iter().filter(|n| n.is_alive() && n.agent_port != 0).collect();
        let node = usable
            .iter()
            .find(|n| Some(n.node_id.hex()) == self.node_hint)
            .or_else(|| usable.iter().find(|n| n.is_head_node))
            .or_else(|| usable.first())
            .ok_or_else(|| PyRuntimeError::new_err("no alive node can run tasks"))?;
        let found = LocalNode { agent: node.agent_address(), ip: node.node_ip.clone(), id: node.node_id.hex() };
        *slot = Some(found.clone());
        Ok(found)
    }

    /// The submitter, made on first use: it needs the agent of this process's node.
    fn submitter(&self) -> PyResult<Arc<Submitter>> {
        let mut slot = self.submitter.lock().expect("submitter lock");
        if let Some(s) = slot.as_ref() {
            return Ok(s.clone());
        }
        let agent = self.local_node()?.agent;
        // Lazy channels start their connection task on the runtime.
        let _runtime = self.runtime.enter();
        let submitter = Arc::new(Submitter::new(
            self.objects.clone(),
            &agent,
            self.token.clone(),
            self.python.clone(),
            Some(self.cluster.head()),
            self.cluster.groups().clone(),
            self.links.clone(),
        ));
        *slot = Some(submitter.clone());
        Ok(submitter)
    }
}
