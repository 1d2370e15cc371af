//! `oxray._native`: the Rust core inside Python. Thin glue: it converts and forwards to
//! `oxray-worker`, releasing the GIL around everything that waits.

use oxray_worker::placement_groups as pg;
use oxray_worker::{
    available_resources, cluster_resources, ActorCall, Cluster, Executor, GetError, LocalCluster, LocalOptions,
    ObjectTable, Outcome, OwnerLinks, RestartPlan, Route, Submitter, Target, TaskSpec, WorkerError,
};
use pyo3::exceptions::{PyConnectionError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use std::collections::BTreeMap;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

mod waiting;

fn to_py(e: WorkerError) -> PyErr {
    match e {
        WorkerError::NoCluster | WorkerError::Connect(_) => PyConnectionError::new_err(e.to_string()),
        _ => PyRuntimeError::new_err(e.to_string()),
    }
}

/// A driver's connection to a cluster, and the private cluster it started, if any.
#[pyclass(module = "oxray._native")]
struct Client {
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
    /// This process's object server, started when a reference first leaves the process.
    object_address: Mutex<Option<String>>,
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
}

/// `get` and `wait` timeouts: seconds, or forever.
fn deadline(timeout: Option<f64>) -> Option<tokio::time::Instant> {
    timeout.map(|t| tokio::time::Instant::now() + Duration::from_secs_f64(t.max(0.0)))
}

fn get_error(e: GetError) -> PyErr {
    match e {
        GetError::Timeout(_) => pyo3::exceptions::PyTimeoutError::new_err(e.to_string()),
        GetError::Unknown(_) => PyValueError::new_err(e.to_string()),
    }
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
fn connect(
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
        Ok(Client {
            runtime,
            cluster,
            local: Mutex::new(local),
            token,
            python,
            node_hint,
            objects,
            submitter: Mutex::new(None),
            object_address: Mutex::new(None),
            local_node: Mutex::new(None),
            store: Mutex::new(None),
            creating: Mutex::new(HashMap::new()),
            results_in_store: std::sync::OnceLock::new(),
            blocked_notice: std::sync::OnceLock::new(),
            links,
        })
    })
}

/// How long `shutdown` waits for group removals still on their way (the head may be gone).
const GROUP_CHANGES_AT_EXIT: std::time::Duration = std::time::Duration::from_secs(5);
/// How long an ending driver waits for its last task and actor states to reach the head.
const EVENTS_AT_EXIT: std::time::Duration = std::time::Duration::from_secs(2);

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

fn status_error(s: tonic::Status) -> PyErr {
    match s.code() {
        tonic::Code::InvalidArgument | tonic::Code::NotFound | tonic::Code::AlreadyExists => {
            PyValueError::new_err(s.message().to_string())
        }
        _ => PyConnectionError::new_err(s.message().to_string()),
    }
}

/// The token of the cluster a process of this user started with `init()` that serves
/// `address` on this machine.
#[pyfunction]
fn private_cluster_token(address: &str) -> Option<String> {
    oxray_config::private_clusters::token_for(address)
}

/// Whether a node with `labels` meets a label selector: the core's rule, for what the
/// driver decides itself (how many Train workers fit).
#[pyfunction]
fn selector_matches(selector: oxray_types::Selector, labels: HashMap<String, String>) -> bool {
    oxray_types::selector_matches(&selector, |key| labels.get(key).map(String::as_str))
}

fn parse_token(text: &str) -> PyResult<oxray_worker::Token> {
    oxray_worker::Token::parse(text).map_err(|e| PyValueError::new_err(format!("invalid cluster token: {e}")))
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

    /// Starts a task; returns the ids of the objects that will hold its results.
    #[pyo3(signature = (name, function, args, dependencies, contained, resources, max_retries=3, retry_exceptions=false, num_returns=1, env_vars=BTreeMap::new(), strategy=(String::from("DEFAULT"), String::new(), false, -1), streaming=false))]
    #[allow(clippy::too_many_arguments)]
    fn submit_task(
        &self,
        py: Python<'_>,
        name: String,
        function: &[u8],
        args: &[u8],
        dependencies: Vec<String>,
        contained: Vec<String>,
        resources: BTreeMap<String, f64>,
        max_retries: u32,
        retry_exceptions: bool,
        num_returns: u32,
        env_vars: BTreeMap<String, String>,
        strategy: StrategyArg,
        streaming: bool,
    ) -> PyResult<Vec<String>> {
        let resources =
            oxray_types::ResourceSet::try_from(resources).map_err(|e| PyValueError::new_err(e.to_string()))?;
        let submitter = py.detach(|| self.submitter())?;
        self.take_results_in_store(py);
        let (function, args) = (function.to_vec(), args.to_vec());
        let route = Route::Lease(resources, env_vars, parse_strategy(strategy)?);
        let spec = TaskSpec {
            name,
            function,
            args,
            dependencies,
            contained,
            route,
            max_retries,
            retry_exceptions,
            num_returns,
            streaming,
        };
        Ok(submitter.submit(self.runtime.handle(), spec))
    }

    /// Creates an actor (`actor_id` chosen by the caller) without waiting for a node: it is
    /// placed, and its creation call sent, in the background; calls wait for it. Returns
    /// the creation call's object. With `ends_with_handles`, the actor ends once that
    /// object goes: when no handle to it is left in any process. `namespace`: the one it is
    /// made in.
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (actor_id, name, class, args, dependencies, contained, resources, env_vars, strategy, detached, max_restarts, max_task_retries, ends_with_handles, namespace=String::new()))]
    fn create_actor(
        &self,
        py: Python<'_>,
        actor_id: String,
        name: String,
        class: &[u8],
        args: &[u8],
        dependencies: Vec<String>,
        contained: Vec<String>,
        resources: BTreeMap<String, f64>,
        env_vars: BTreeMap<String, String>,
        strategy: StrategyArg,
        detached: bool,
        max_restarts: i64,
        max_task_retries: i64,
        ends_with_handles: bool,
        namespace: String,
    ) -> PyResult<String> {
        let resources =
            oxray_types::ResourceSet::try_from(resources).map_err(|e| PyValueError::new_err(e.to_string()))?;
        let strategy = parse_strategy(strategy)?;
        let submitter = py.detach(|| self.submitter())?;
        // The agent tells this process's object server when the actor's worker dies.
        self.owner_address(py)?;
        let plan = RestartPlan { resources, env: env_vars, strategy, detached, restarts_left: max_restarts };
        let call = actor_call(&actor_id, "", None, String::new(), true, max_task_retries);
        let spec = TaskSpec::actor(name, class.to_vec(), args.to_vec(), dependencies, contained, call);
        let created = submitter.create_actor(self.runtime.handle(), &actor_id, spec, plan, &namespace);
        if ends_with_handles {
            let (owner, runtime) = (Arc::downgrade(&submitter), self.runtime.handle().clone());
            let end = move || {
                if let Some(submitter) = owner.upgrade() {
                    runtime.spawn(submitter.end_out_of_scope(actor_id));
                }
            };
            self.objects.on_free(&created, Box::new(end));
        }
        Ok(created)
    }

    /// `(worker_address, lease_id, agent_address)` of an actor this process created, once
    /// it is placed; an error if it never can be.
    fn actor_placement(&self, py: Python<'_>, actor_id: String) -> PyResult<(String, String, String)> {
        let submitter = py.detach(|| self.submitter())?;
        waiting::wait_for(py, &self.runtime, None, submitter.actor_placement(&actor_id))?
            .map_err(PyRuntimeError::new_err)
    }

    /// Ends the actors this process created that do not outlive it.
    fn end_owned_actors(&self, py: Python<'_>) -> PyResult<()> {
        let submitter = py.detach(|| self.submitter())?;
        py.detach(|| self.runtime.block_on(submitter.end_owned_actors()));
        Ok(())
    }

    /// Calls a method; calls from this process run in the order they are made. `owner` is
    /// the creator's object server when another process created the actor. Returns the
    /// ids of its `num_returns` results.
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (actor_id, address, owner, method, args, dependencies, contained, max_task_retries=0, num_returns=1, streaming=false))]
    fn call_actor(
        &self,
        py: Python<'_>,
        actor_id: String,
        address: String,
        owner: Option<String>,
        method: String,
        args: &[u8],
        dependencies: Vec<String>,
        contained: Vec<String>,
        max_task_retries: i64,
        num_returns: u32,
        streaming: bool,
    ) -> PyResult<Vec<String>> {
        let submitter = py.detach(|| self.submitter())?;
        self.take_results_in_store(py);
        let call = actor_call(&actor_id, &address, owner, method.clone(), false, max_task_retries);
        let spec = TaskSpec {
            num_returns,
            streaming,
            ..TaskSpec::actor(method, Vec::new(), args.to_vec(), dependencies, contained, call)
        };
        Ok(submitter.submit(self.runtime.handle(), spec))
    }

    /// Records a named actor in the head's directory; fails if the name is taken.
    #[allow(clippy::too_many_arguments)]
    fn register_actor(
        &self,
        py: Python<'_>,
        name: String,
        namespace: String,
        actor_id: String,
        worker_address: String,
        agent_address: String,
        lease_id: String,
        class_name: String,
        methods: Vec<String>,
        detached: bool,
        max_task_retries: i64,
    ) -> PyResult<()> {
        let owner = self.owner_address(py)?;
        let actor = oxray_worker::NamedActor {
            name,
            namespace,
            actor_id,
            worker_address,
            agent_address,
            lease_id,
            class_name,
            methods,
            detached,
            owner,
            max_task_retries,
        };
        py.detach(|| self.cluster.register_actor(actor)).map_err(|s| match s.code() {
            tonic::Code::AlreadyExists => PyValueError::new_err(s.message().to_string()),
            _ => PyConnectionError::new_err(s.message().to_string()),
        })
    }

    /// `(actor_id, worker_address, agent_address, lease_id, class_name, methods, owner)` of a
    /// named actor.
    #[allow(clippy::type_complexity)]
    fn get_actor(
        &self,
        py: Python<'_>,
        name: String,
        namespace: String,
    ) -> PyResult<(String, String, String, String, String, Vec<String>, String, i64)> {
        let a = py.detach(|| self.cluster.get_actor(&name, &namespace)).map_err(|s| match s.code() {
            tonic::Code::NotFound => PyValueError::new_err(s.message().to_string()),
            _ => PyConnectionError::new_err(s.message().to_string()),
        })?;
        Ok((
            a.actor_id,
            a.worker_address,
            a.agent_address,
            a.lease_id,
            a.class_name,
            a.methods,
            a.owner,
            a.max_task_retries,
        ))
    }

    /// `(name, namespace)` of the named actors of `namespace` (of every one when empty).
    fn list_actors(&self, py: Python<'_>, namespace: String) -> PyResult<Vec<(String, String)>> {
        let actors = py.detach(|| self.cluster.list_actors(&namespace)).map_err(status_error)?;
        Ok(actors.into_iter().map(|a| (a.name, a.namespace)).collect())
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
        py.detach(|| self.cluster.report_metrics(reporter, metrics))
            .map_err(|s| PyConnectionError::new_err(s.message().to_string()))
    }

    fn remove_actor(&self, py: Python<'_>, name: String, namespace: String) -> PyResult<()> {
        py.detach(|| self.cluster.remove_actor(&name, &namespace))
            .map_err(|s| PyConnectionError::new_err(s.message().to_string()))
    }

    /// Retires an actor's worker through the agent that leased it (an actor whose owner is
    /// not known).
    fn kill_actor_at(&self, py: Python<'_>, agent_address: String, lease_id: String) -> PyResult<()> {
        let submitter = py.detach(|| self.submitter())?;
        py.detach(|| self.runtime.block_on(submitter.retire(&agent_address, &lease_id)))
            .map_err(PyRuntimeError::new_err)
    }

    /// Cancels the task that makes this object; see `Submitter::cancel`.
    fn cancel(&self, py: Python<'_>, object_id: String, force: bool) -> PyResult<bool> {
        let submitter = py.detach(|| self.submitter())?;
        Ok(py.detach(|| self.runtime.block_on(submitter.cancel(&object_id, force))))
    }

    /// Ends an actor through its owner (this process, or the one named by `owner`); with
    /// `no_restart` it stays dead.
    #[pyo3(signature = (actor_id, address, owner, no_restart=true))]
    fn kill_actor(
        &self,
        py: Python<'_>,
        actor_id: String,
        address: String,
        owner: Option<String>,
        no_restart: bool,
    ) -> PyResult<()> {
        let submitter = py.detach(|| self.submitter())?;
        py.detach(|| {
            // An actor first seen here is known by its owner, which ends it; one still
            // waiting for its worker (here or there) is ended without waiting for it.
            submitter.know_actor(&actor_id, &address, owner.as_deref());
            self.runtime.block_on(submitter.kill_actor(&actor_id, no_restart))
        })
        .map_err(PyRuntimeError::new_err)
    }

    /// Borrows the bytes from Python and copies them once; `contained` are the ObjectRefs
    /// inside the value.
    #[pyo3(signature = (data, contained=Vec::new()))]
    fn put(&self, data: &[u8], contained: Vec<String>) -> String {
        self.objects.put(data.to_vec(), &contained)
    }

    /// Where other processes fetch the objects this one owns (its object server, started
    /// on first use).
    fn owner_address(&self, py: Python<'_>) -> PyResult<String> {
        let mut slot = self.object_address.lock().expect("object address lock");
        if let Some(address) = slot.as_ref() {
            return Ok(address.clone());
        }
        let node = py.detach(|| self.local_node())?;
        let actors: Arc<dyn oxray_worker::ActorOwner> = Arc::new(py.detach(|| self.submitter())?);
        let serving = oxray_worker::serve_objects(self.objects.clone(), actors, self.token.clone());
        let port = py.detach(|| self.runtime.block_on(serving)).map_err(PyRuntimeError::new_err)?;
        let address = format!("{}:{port}", node.ip);
        py.detach(|| self.submitter())?.set_object_address(address.clone());
        self.runtime.spawn(self.cluster.announce_process(&address, &node.id, &node.ip));
        *slot = Some(address.clone());
        Ok(address)
    }

    /// A new file in the node's object store for a value of `size` bytes (on disk with
    /// `spill`): `(object_id, path)`, or None when this process has no store (then the value
    /// stays in its memory).
    #[pyo3(signature = (size, spill=false))]
    fn store_create(&self, py: Python<'_>, size: u64, spill: bool) -> PyResult<Option<(String, String)>> {
        let Some(store) = py.detach(|| self.node_store()) else { return Ok(None) };
        let id = oxray_worker::new_id();
        let file = store.create(&id, size, spill).map_err(|e| PyRuntimeError::new_err(format!("object store: {e}")))?;
        self.creating.lock().expect("creating lock").insert(id.clone(), file.clone());
        Ok(Some((id, file.path.display().to_string())))
    }

    /// The node store's shared-memory directory, which names it; None without a store.
    fn store_dir(&self, py: Python<'_>) -> Option<String> {
        py.detach(|| self.node_store()).map(|s| s.dir().display().to_string())
    }

    /// Gives up a file from `store_create`, now written, to the caller of the task whose
    /// result it holds: that process owns and removes it.
    fn store_give(&self, id: &str) {
        self.creating.lock().expect("creating lock").remove(id);
    }

    /// The value of a file from `store_create`, now written: readers get `data` (where it
    /// is); the file goes with the object. With `data` None the file is discarded.
    #[pyo3(signature = (id, data, contained=Vec::new()))]
    fn store_seal(&self, id: String, data: Option<Vec<u8>>, contained: Vec<String>) -> PyResult<Option<String>> {
        let file = self.creating.lock().expect("creating lock").remove(&id);
        let file = file.ok_or_else(|| PyValueError::new_err(format!("no object {id} is being written")))?;
        match data {
            Some(data) => Ok(Some(self.objects.put_stored(id, data, file, &contained))),
            None => {
                if let Some(store) = self.objects.store() {
                    store.delete(&file);
                }
                Ok(None)
            }
        }
    }

    /// The content of an object its owner keeps in its node's store (for a reader on
    /// another machine).
    fn fetch_stored<'py>(&self, py: Python<'py>, owner: String, id: String) -> PyResult<Bound<'py, PyBytes>> {
        let data = py
            .detach(|| self.runtime.block_on(self.links.fetch_content(&id, &owner)))
            .map_err(pyo3::exceptions::PyKeyError::new_err)?;
        Ok(PyBytes::new(py, &data))
    }

    /// Bytes of the node's shared memory that objects use now (0 without a store).
    fn object_store_used(&self, py: Python<'_>) -> u64 {
        py.detach(|| self.node_store()).map_or(0, |s| s.used())
    }

    /// Whether `owner` is this process's object server.
    fn is_owner(&self, owner: &str) -> bool {
        self.object_address.lock().expect("object address lock").as_deref() == Some(owner)
    }

    /// Takes a reference to an object read from bytes: 0 when this process owns it, 1 when
    /// it is borrowed, 2 when borrowed for the first time here (its owner must be told).
    fn hold(&self, id: &str, owner: &str) -> u8 {
        if self.is_owner(owner) {
            self.objects.add_ref(id);
            0
        } else if self.objects.borrow(id, owner) {
            2
        } else {
            1
        }
    }

    /// `hold` for every ref a value held, in one call (a value may hold thousands); true
    /// when one of them is borrowed here for the first time.
    fn hold_many(&self, py: Python<'_>, ids: Vec<String>, owners: Vec<String>) -> bool {
        let mine = self.object_address.lock().expect("object address lock").clone();
        py.detach(|| {
            let mut new = false;
            for (id, owner) in ids.iter().zip(&owners) {
                if mine.as_deref() == Some(owner.as_str()) {
                    self.objects.add_ref(id);
                } else if self.objects.borrow(id, owner) {
                    new = true;
                }
            }
            new
        })
    }

    /// Tells owners of the objects newly borrowed here, and waits until they know. A process
    /// that borrows before it owns anything starts its object server now, so the state API
    /// lists what it holds.
    fn announce_borrows(&self, py: Python<'_>) {
        if self.object_address.lock().expect("object address lock").is_none() {
            if let Err(e) = self.owner_address(py) {
                tracing::debug!("this process's references will not be listed: {e}");
            }
        }
        py.detach(|| self.runtime.block_on(self.objects.announce()));
    }

    /// Takes a reference to each object on behalf of a task's caller, which receives them
    /// inside the task's result; returns each object's owner.
    fn hold_for_caller(&self, py: Python<'_>, ids: Vec<String>) -> PyResult<Vec<(String, String)>> {
        let mut out = Vec::with_capacity(ids.len());
        let mut remote: HashMap<String, Vec<(String, i32)>> = HashMap::new();
        for id in ids {
            let owner = match self.objects.owner_of(&id) {
                Some(owner) => {
                    remote.entry(owner.clone()).or_default().push((id.clone(), 1));
                    owner
                }
                None => {
                    self.objects.add_ref(&id);
                    self.owner_address(py)?
                }
            };
            out.push((id, owner));
        }
        py.detach(|| {
            self.runtime.block_on(async {
                for (owner, changes) in remote {
                    oxray_worker::Owners::update(self.links.as_ref(), owner, changes).await;
                }
            })
        });
        Ok(out)
    }

    /// `(data, outcome)` for each id: outcome 0 is a value, 1 a task's exception, 2 a
    /// system failure whose data is a message.
    #[pyo3(signature = (ids, timeout=None))]
    fn get<'py>(
        &self,
        py: Python<'py>,
        ids: Vec<String>,
        timeout: Option<f64>,
    ) -> PyResult<Vec<(Bound<'py, PyBytes>, u8)>> {
        let ready =
            waiting::wait_for(py, &self.runtime, self.blocked_notice(), self.objects.get(&ids, deadline(timeout)))?
                .map_err(get_error)?;
        // The values' own references are taken by Python as it reads them.
        Ok(ready.into_iter().map(|r| (PyBytes::new(py, &r.data), r.outcome as u8)).collect())
    }

    /// Where the first `num_returns` ready objects are in `ids`, once that many are ready
    /// (or fewer at the timeout).
    #[pyo3(signature = (ids, num_returns, timeout=None))]
    fn wait(
        &self,
        py: Python<'_>,
        ids: &Bound<'_, pyo3::types::PyList>,
        num_returns: usize,
        timeout: Option<f64>,
    ) -> PyResult<Vec<usize>> {
        // Mostly enough are ready already (the first of a thousand refs, say): the ids are
        // looked at where they are, and only as far as needed.
        let mut bad = None;
        let looked_at = ids.iter().map_while(|id| id.extract::<String>().map_err(|e| bad = Some(e)).ok());
        let now = {
            let _inside = self.runtime.enter();
            self.objects.ready_now(looked_at, num_returns).map_err(get_error)?
        };
        if let Some(e) = bad {
            return Err(e);
        }
        if let Some(ready) = now {
            return Ok(ready);
        }
        let ids: Vec<String> = ids.extract()?;
        let waited = self.objects.wait(&ids, num_returns, deadline(timeout));
        let ready = waiting::wait_for(py, &self.runtime, self.blocked_notice(), waited)?.map_err(get_error)?;
        Ok(ready.iter().enumerate().filter(|(_, r)| **r).map(|(at, _)| at).take(num_returns).collect())
    }

    /// The id of the `index`-th value the streaming task `task_id` yielded, waiting for it
    /// (its reference is the caller's to hold); `None` once the task ended without it.
    #[pyo3(signature = (task_id, index, timeout=None))]
    fn stream_next(
        &self,
        py: Python<'_>,
        task_id: String,
        index: usize,
        timeout: Option<f64>,
    ) -> PyResult<Option<String>> {
        let submitter = py.detach(|| self.submitter())?;
        let next = submitter.next_item(&task_id, index, deadline(timeout));
        waiting::wait_for(py, &self.runtime, self.blocked_notice(), next)?.map_err(get_error)
    }

    /// The generator of a streaming task let go of it.
    fn stream_drop(&self, py: Python<'_>, task_id: String) -> PyResult<()> {
        py.detach(|| self.submitter())?.drop_items(&task_id);
        Ok(())
    }

    /// How many objects this process holds (owned and borrowed): for tests and debugging.
    fn object_count(&self) -> usize {
        self.objects.len()
    }

    fn add_ref(&self, id: &str) {
        self.objects.add_ref(id);
    }

    fn release(&self, id: &str) {
        self.objects.release(id);
    }

    /// Asks the head for a placement group; returns its id at once (it is placed later).
    #[allow(clippy::too_many_arguments)]
    fn create_placement_group(
        &self,
        py: Python<'_>,
        bundles: Vec<BTreeMap<String, f64>>,
        strategy: String,
        name: String,
        namespace: String,
        detached: bool,
        label_selectors: Vec<BTreeMap<String, String>>,
    ) -> PyResult<String> {
        let strategy = pg::parse_strategy(&strategy).map_err(PyValueError::new_err)?;
        let bundles = bundles
            .into_iter()
            .map(oxray_types::ResourceSet::try_from)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
        let owner = if detached { String::new() } else { self.owner_address(py)? };
        let request = pg::create_request(&bundles, &label_selectors, strategy, &name, &namespace, detached, &owner);
        let id = request.placement_group_id.clone();
        if name.is_empty() && !detached {
            // Nothing left for the head to refuse (the bundles were checked here), and the
            // group ends with this process anyway: the request goes on its own, later calls
            // about the group wait for it.
            self.cluster.groups().start(self.runtime.handle(), self.cluster.head(), request);
            return Ok(id);
        }
        py.detach(|| self.cluster.call(|head| async move { pg::create(&head, request).await }))
            .map_err(status_error)?;
        Ok(id)
    }

    /// Removes a group; returns at once (as Ray's removal does): later calls about the
    /// group, and `shutdown`, wait for the removal to land.
    fn remove_placement_group(&self, id: String) {
        self.cluster.groups().remove(self.runtime.handle(), self.cluster.head(), id);
    }

    /// One group as JSON, by id or by name in a namespace.
    fn placement_group_json(&self, py: Python<'_>, id: String, name: String, namespace: String) -> PyResult<String> {
        let group = py
            .detach(|| {
                let (id, name, namespace) = (id.as_str(), name.as_str(), namespace.as_str());
                self.cluster.read_about_group(id, |head| async move { pg::get(&head, id, name, namespace).await })
            })
            .map_err(status_error)?;
        Ok(pg::to_json(&group).to_string())
    }

    /// Every group the head knows, as a JSON list.
    fn placement_groups_json(&self, py: Python<'_>) -> PyResult<String> {
        let creations = self.cluster.groups();
        let groups = py
            .detach(|| {
                let creations = &creations;
                self.cluster.read(|head| async move {
                    creations.all_settled().await;
                    pg::list(&head).await
                })
            })
            .map_err(status_error)?;
        Ok(serde_json::Value::Array(groups.iter().map(pg::to_json).collect()).to_string())
    }

    /// Whether the group is created, waiting up to `timeout` seconds (forever: None).
    #[pyo3(signature = (id, timeout=None))]
    fn wait_placement_group(&self, py: Python<'_>, id: String, timeout: Option<f64>) -> PyResult<bool> {
        let group = py
            .detach(|| {
                let (id, until) = (id.as_str(), deadline(timeout));
                self.cluster.read_about_group(id, |head| async move { pg::wait(&head, id, until).await })
            })
            .map_err(status_error)?;
        Ok(group.state == oxray_worker::PlacementGroupState::Created as i32)
    }

    /// An object that becomes `value` once the group is created (lost if it is removed
    /// first): what `PlacementGroup.ready()` returns.
    fn placement_group_ready(&self, id: String, value: Vec<u8>) -> String {
        let object = self.objects.pending();
        let (objects, head, target) = (self.objects.clone(), self.cluster.head(), object.clone());
        let groups = self.cluster.groups().clone();
        self.runtime.spawn(async move {
            let waited = match groups.settled(&id).await {
                Ok(()) => pg::wait(&head, &id, None).await,
                Err(refused) => Err(refused),
            };
            let (data, outcome) = match waited {
                Ok(g) if g.state == oxray_worker::PlacementGroupState::Created as i32 => (value, Outcome::Value),
                Ok(_) => (format!("placement group {id} was removed before it was ready").into_bytes(), Outcome::Lost),
                Err(s) => (format!("placement group {id}: {}", s.message()).into_bytes(), Outcome::Lost),
            };
            objects.fulfil(&target, data, outcome, Vec::new());
        });
        object
    }

    /// Stops the private cluster, if this client started one.
    fn shutdown(&self, py: Python<'_>) {
        // Removals of groups still on their way reach the head before this process ends.
        let groups = self.cluster.groups().clone();
        let settled = async move { tokio::time::timeout(GROUP_CHANGES_AT_EXIT, groups.all_settled()).await };
        let _ = py.detach(|| self.cluster.call(|_| settled));
        let submitter = self.submitter.lock().expect("submitter lock").clone();
        if let Some(submitter) = submitter {
            let flushed = async move { tokio::time::timeout(EVENTS_AT_EXIT, submitter.flush_events()).await };
            let _ = py.detach(|| self.runtime.block_on(flushed));
        }
        if let Some(Some(store)) = self.store.lock().expect("store lock").as_ref() {
            store.release_kept();
        }
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
        let node = nodes.iter().find(|n| format!("{}:{}", n.node_ip, n.agent_port) == agent)?;
        let (memory, spill) = oxray_config::paths::object_store_dirs(node.agent_port);
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
        let found = LocalNode {
            agent: format!("{}:{}", node.node_ip, node.agent_port),
            ip: node.node_ip.clone(),
            id: node.node_id.hex(),
        };
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
        let submitter = Arc::new(
            Submitter::new(
                self.objects.clone(),
                &agent,
                self.token.clone(),
                self.python.clone(),
                Some(self.cluster.head()),
                self.cluster.groups().clone(),
                self.links.clone(),
            )
            .map_err(PyRuntimeError::new_err)?,
        );
        *slot = Some(submitter.clone());
        Ok(submitter)
    }
}

/// The task loop's side of a worker process.
#[pyclass(module = "oxray._native")]
struct TaskExecutor {
    runtime: Arc<oxray_worker::SharedDriver>,
    executor: Arc<Executor>,
}

/// `(task_id, name, function, args, [(object_id, data)], actor_creation, actor_method,
/// num_returns, result_store, streaming, gpu_ids, restarts)`; `gpu_ids` is "0,1" for the
/// lease's GPUs; `restarts` how often an actor being created was restarted before.
type TaskTuple<'py> = (
    String,
    String,
    Bound<'py, PyBytes>,
    Bound<'py, PyBytes>,
    Vec<(String, Bound<'py, PyBytes>)>,
    bool,
    String,
    u32,
    String,
    bool,
    String,
    u32,
);

fn task_tuple(py: Python<'_>, task: oxray_worker::Incoming) -> TaskTuple<'_> {
    let deps = task.dependencies.iter().map(|(id, data)| (id.clone(), PyBytes::new(py, data))).collect();
    let (function, args) = (PyBytes::new(py, &task.function), PyBytes::new(py, &task.args));
    let t = task;
    (
        t.task_id,
        t.name,
        function,
        args,
        deps,
        t.actor_creation,
        t.actor_method,
        t.num_returns,
        t.result_store,
        t.streaming,
        t.gpu_ids.iter().map(u32::to_string).collect::<Vec<_>>().join(","),
        t.restarts,
    )
}

#[pymethods]
impl TaskExecutor {
    #[new]
    fn new(py: Python<'_>, agent: String, worker_id: String, token: String) -> PyResult<Self> {
        let token = parse_token(&token)?;
        py.detach(|| {
            let runtime = oxray_worker::SharedDriver::new().map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
            let executor =
                runtime.block_on(Executor::start(&agent, &worker_id, token)).map_err(PyConnectionError::new_err)?;
            // The worker's stdout and stderr are its log files: they rotate at their size cap.
            oxray_config::log_rotation::watch_stdout_and_stderr();
            // SIGINT to the thread that runs tasks (this one, the worker's main thread): Python
            // raises KeyboardInterrupt there, even out of a blocking sleep or read.
            let main = nix::sys::pthread::pthread_self();
            executor.on_interrupt(Box::new(move || {
                let _ = nix::sys::pthread::pthread_kill(main, nix::sys::signal::Signal::SIGINT);
            }));
            Ok(Self { runtime, executor })
        })
    }

    /// The next task, or None: `(task_id, name, function, args, [(object_id, data)], actor_creation,
    /// actor_method, num_returns)`. `concurrent`: taken by one of a threaded actor's threads,
    /// so not the one task that `cancel` interrupts.
    #[pyo3(signature = (concurrent=false))]
    fn next_task<'py>(&self, py: Python<'py>, concurrent: bool) -> Option<TaskTuple<'py>> {
        let task = py.detach(|| {
            if concurrent {
                self.runtime.block_on(self.executor.next_concurrent())
            } else {
                self.runtime.block_on(self.executor.next())
            }
        })?;
        Some(task_tuple(py, task))
    }

    /// A waiting task (as `next_task`) or None, without waiting; EOFError once no more can
    /// come. For a Python event loop that watches `fd`: a byte is written to it whenever
    /// tasks arrive (see `notify_fd`).
    fn try_next_task<'py>(&self, py: Python<'py>) -> PyResult<Option<TaskTuple<'py>>> {
        match self.executor.try_next() {
            Ok(task) => Ok(Some(task_tuple(py, task))),
            Err(tokio::sync::mpsc::error::TryRecvError::Empty) => Ok(None),
            Err(_) => Err(pyo3::exceptions::PyEOFError::new_err("the worker is shutting down")),
        }
    }

    /// Writes a byte to `fd` (non-blocking, owned by the caller) whenever tasks arrive.
    fn notify_fd(&self, fd: i32) {
        self.executor.on_arrival(Box::new(move || {
            // SAFETY: the caller keeps the descriptor open for the worker's life.
            let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
            // A full pipe already holds a wake-up.
            let _ = nix::unistd::write(fd, &[1]);
        }));
    }

    /// Sends the `index`-th value a streaming task yielded, with the refs inside it as
    /// `(object_id, owner)`.
    fn report_item(&self, task_id: &str, index: u64, data: &[u8], contained: Vec<(String, String)>) {
        let contained = contained
            .into_iter()
            .map(|(object_id, owner)| oxray_worker::ContainedRef { object_id, owner, return_index: 0 })
            .collect();
        let reply = oxray_worker::PushTaskReply { result: data.to_vec(), contained, ..Default::default() };
        self.executor.item(task_id, index, reply);
    }

    /// `contained`: `(object_id, owner, return_index)` of the ObjectRefs inside the results,
    /// each already held at its owner for the caller.
    /// `exits`: this process ends after the reply (`max_calls`).
    /// `error_text`: with `is_error`, the error as text, for the state API.
    /// `log_offsets`: where the task's output lies in this worker's log files.
    #[pyo3(signature = (task_id, result, is_error, returns=Vec::new(), output=String::new(), contained=Vec::new(), exits=false, error_text=String::new(), log_offsets=Vec::new()))]
    #[allow(clippy::too_many_arguments)]
    fn finish(
        &self,
        task_id: &str,
        result: &[u8],
        is_error: bool,
        returns: Vec<Vec<u8>>,
        output: String,
        contained: Vec<(String, String, u32)>,
        exits: bool,
        error_text: String,
        log_offsets: Vec<u64>,
    ) {
        let contained = contained
            .into_iter()
            .map(|(object_id, owner, return_index)| oxray_worker::ContainedRef { object_id, owner, return_index })
            .collect();
        let reply = oxray_worker::PushTaskReply {
            result: result.to_vec(),
            is_error,
            returns,
            output,
            contained,
            worker_exits: exits,
            error_text,
            log_offsets,
            ..Default::default()
        };
        self.executor.finish(task_id, reply);
    }
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Client>()?;
    m.add_class::<TaskExecutor>()?;
    m.add_function(wrap_pyfunction!(connect, m)?)?;
    m.add_function(wrap_pyfunction!(private_cluster_token, m)?)?;
    m.add_function(wrap_pyfunction!(selector_matches, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
