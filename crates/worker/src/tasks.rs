//! Submitting tasks: lease a worker from the local node agent, push the task straight to
//! that worker, record the result as an object this process owns, give the lease back.

use crate::channels::Authed;
use crate::objects::{ObjectTable, Outcome, Use};
use oxray_proto::v1::{self, worker_service_client::WorkerServiceClient};
use oxray_rpc::Token;
use oxray_types::ResourceSet;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

mod actor_calls;
mod actors;
mod cancel;
mod items;
mod leasing;
mod shapes;
mod states;

pub use actors::{ActorOwner, ActorPlacement, Life, RestartPlan};
pub use leasing::{Lease, LeaseFor};
pub use oxray_types::Selector;

/// What a task is, as the Python side serialized it.
pub struct TaskSpec {
    pub name: String,
    pub function: Vec<u8>,
    pub args: Vec<u8>,
    /// ObjectRefs among the arguments: resolved here before the task is sent.
    pub dependencies: Vec<String>,
    /// ObjectRefs nested inside the arguments: kept alive here until the task has ended, by
    /// which time the worker has told their owners it holds them if it still does.
    pub contained: Vec<String>,
    pub route: Route,
    /// How often a task whose worker died runs again (Ray's max_retries).
    pub max_retries: u32,
    /// Whether an exception the task raised counts as a reason to retry too.
    pub retry_exceptions: bool,
    /// How many values the function returns, each its own object.
    pub num_returns: u32,
    /// The function yields values, each its own object as it comes (`next_item`); its one
    /// result tells when it ended, or how it failed.
    pub streaming: bool,
    /// The job it belongs to: this process's when it was submitted (set by `submit`).
    pub job: oxray_types::JobId,
}

impl TaskSpec {
    /// An actor's creation call or a method call: sent once, one return value (resent
    /// after a restart only as the call's `max_task_retries` allows).
    pub fn actor(
        name: String,
        function: Vec<u8>,
        args: Vec<u8>,
        dependencies: Vec<String>,
        contained: Vec<String>,
        call: ActorCall,
    ) -> Self {
        let route = Route::Actor(call);
        Self {
            name,
            function,
            args,
            dependencies,
            contained,
            route,
            max_retries: 0,
            retry_exceptions: false,
            num_returns: 1,
            streaming: false,
            job: oxray_types::JobId::default(),
        }
    }
}

/// runtime_env variables of a task's worker; the rest of its runtime_env (JSON) rides under
/// `RUNTIME_ENV_KEY`, which no variable name can be.
pub type Env = std::collections::BTreeMap<String, String>;

pub const RUNTIME_ENV_KEY: &str = "=runtime_env";

/// Ray's scheduling strategies for where a lease is asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Strategy {
    /// This process's node; another one only when this one can never hold the task.
    Default,
    /// Round the alive nodes that could hold the task.
    Spread,
    /// That node; with `soft`, anywhere when it is gone.
    Node { node_id: String, soft: bool },
    /// Inside a placement group's bundle (any bundle when the index is negative), once the
    /// group is created.
    Bundle { group: String, index: i32 },
    /// On a node the first of these label selectors any alive node matches picks (Ray's
    /// `label_selector` then its `fallback_strategy`), waiting while none does.
    Labels(Vec<Selector>),
}

/// Where a task goes.
pub enum Route {
    /// A worker leased for this task, holding these resources while it runs, with these
    /// runtime_env variables.
    Lease(ResourceSet, Env, Strategy),
    /// An actor's worker.
    Actor(ActorCall),
}

pub struct ActorCall {
    pub actor_id: String,
    /// Where the caller last knew the actor's worker to be.
    pub address: String,
    /// The object server of the actor's creator, when that is another process.
    pub owner: Option<String>,
    /// Empty for the creation call.
    pub method: String,
    pub creation: bool,
    /// How often a call broken by the actor's death is sent again to the restarted actor
    /// (Ray's max_task_retries; negative: without limit).
    pub max_task_retries: i64,
    /// Set by the submitter: the call's place in this process's order to that worker, or
    /// why the actor cannot take it.
    pub place: Option<crate::push::Place>,
    pub dead: Option<String>,
    /// The creation call: the GPUs of the actor's lease.
    pub gpu_ids: Vec<u32>,
}

pub struct Submitter {
    objects: Arc<ObjectTable>,
    /// The node agents' lease services, the local one first asked.
    leases: Arc<dyn oxray_rpc::Leases>,
    /// Where placement groups' bundles are, asked when not known.
    head: Option<oxray_rpc::HeadClient>,
    /// The agents holding each placement group's bundles, by group, once the head said.
    bundle_places: Mutex<HashMap<String, Vec<String>>>,
    /// Placement groups this process is creating: a lease in one waits until the head has it.
    groups: Arc<crate::placement_groups::Creations>,
    /// Other processes' object servers (actor owners among them).
    pub(crate) links: Arc<crate::OwnerLinks>,
    local_agent: String,
    /// Turns over the agents of a placement group's bundles.
    spread_turn: std::sync::atomic::AtomicU64,
    /// Sent with every lease request, so an agent on this machine can take leases back if
    /// this process dies without returning them.
    owner: v1::ProcessIdentity,
    token: Token,
    python: String,
    workers: Mutex<HashMap<String, WorkerServiceClient<Authed>>>,
    pub(crate) pushes: Arc<crate::push::Pushes>,
    /// Tasks waiting for a worker, by resource shape.
    shapes: Mutex<HashMap<String, Shape>>,
    /// Tasks running now, by id: the worker each runs on.
    running: Mutex<HashMap<String, String>>,
    /// The leases task workers are held by now, by lease id: given back when this process
    /// disconnects, even if it lives on (`close`).
    task_leases: Mutex<HashMap<String, Lease>>,
    /// Set by `close`: no task is queued or leased for any more.
    closing: std::sync::atomic::AtomicBool,
    /// What streaming tasks yielded, by task id, until their generator lets go.
    streams: Mutex<HashMap<String, Arc<crate::streams::Yielded>>>,
    /// Cancelled tasks: never retried.
    cancelled: Mutex<std::collections::HashSet<String>>,
    /// Leased tasks submitted here that have not ended: those `cancel` can end.
    unfinished: Mutex<std::collections::HashSet<String>>,
    /// Calls waiting to be sent, per actor.
    actor_queues: Mutex<HashMap<String, Arc<actor_calls::ActorQueue>>>,
    pub(crate) actors: actors::ActorDirectory,
    object_address: std::sync::OnceLock<String>,
    /// What `result_store` names, once it can.
    result_store: std::sync::OnceLock<String>,
    /// The state API's view of this process's tasks and actors; `None` when not reported.
    events: Option<Arc<crate::state_events::Reporter>>,
}

type Reply = Result<v1::PushTaskReply, NoReply>;

/// Why a queued task got no reply from a worker.
#[derive(Debug)]
enum NoReply {
    /// No worker, a broken connection, a cancel: the message says which.
    Failed(String),
    /// The agent ended the worker to free the node's memory: the message is its reason.
    OutOfMemory(String),
    /// The task was cancelled while it waited for a worker.
    Cancelled,
    /// No worker could start in the task's runtime_env: the message says why.
    RuntimeEnv(String),
}

impl From<String> for NoReply {
    fn from(message: String) -> Self {
        Self::Failed(message)
    }
}

impl From<&str> for NoReply {
    fn from(message: &str) -> Self {
        Self::Failed(message.to_string())
    }
}

/// How a value written to a node store file starts (see the Python `serialization`).
const STORED_AT: &[u8] = b"OXRAYREF";

/// A store marker naming the object `id`: a worker knows only its task's first return id,
/// so the caller names each return's own (readers on other machines fetch it by that id).
fn stored_at(mut place: serde_json::Value, id: &str) -> Vec<u8> {
    place["id"] = serde_json::Value::String(id.to_string());
    let mut out = STORED_AT.to_vec();
    out.extend_from_slice(place.to_string().as_bytes());
    out
}

/// A submitted task and the objects that will hold its results.
pub(crate) struct Job {
    pub(crate) spec: TaskSpec,
    ids: Vec<String>,
    /// Its arguments and the refs inside them, held for it until it ends.
    held: Vec<String>,
}

struct Queued {
    push: v1::PushTaskRequest,
    reply: tokio::sync::oneshot::Sender<Reply>,
}

/// Tasks of one resource shape share leases: a leased worker runs queued tasks one after
/// another and is returned only when none is left. At most one lease request per shape is
/// outstanding, and another is made only while tasks still wait.
#[derive(Default)]
struct Shape {
    waiting: VecDeque<Queued>,
    requesting: bool,
    /// Drives holding a lease with nothing to run for a moment (see `linger`), and how a new
    /// task wakes one of them.
    idle: usize,
    wake: Arc<tokio::sync::Notify>,
}

impl Submitter {
    /// `agent` is the local node agent's address; `python` the interpreter workers run.
    pub fn new(
        objects: Arc<ObjectTable>,
        agent: &str,
        token: Token,
        python: String,
        head: Option<oxray_rpc::HeadClient>,
        groups: Arc<crate::placement_groups::Creations>,
        links: Arc<crate::OwnerLinks>,
    ) -> Self {
        let leases = Arc::new(oxray_rpc::LeaseClients::new(token.clone(), None));
        let events = head.clone().and_then(crate::state_events::Reporter::start);
        let pushes = Arc::new(crate::push::Pushes::new(token.clone(), crate::objects::new_id(), head.clone()));
        Self {
            events,
            objects,
            leases,
            head,
            groups,
            links,
            local_agent: agent.to_string(),
            bundle_places: Mutex::new(HashMap::new()),
            spread_turn: std::sync::atomic::AtomicU64::new(0),
            owner: {
                let me = oxray_config::procs::identity();
                v1::ProcessIdentity {
                    boot_id: me.boot_id,
                    pid_namespace: me.pid_namespace,
                    pid: me.pid,
                    start_ticks: me.start_ticks,
                }
            },
            pushes,
            token,
            python,
            workers: Mutex::new(HashMap::new()),
            shapes: Mutex::new(HashMap::new()),
            running: Mutex::new(HashMap::new()),
            task_leases: Mutex::new(HashMap::new()),
            closing: std::sync::atomic::AtomicBool::new(false),
            cancelled: Mutex::new(Default::default()),
            streams: Mutex::new(HashMap::new()),
            unfinished: Mutex::new(Default::default()),
            actor_queues: Mutex::new(HashMap::new()),
            actors: Default::default(),
            object_address: std::sync::OnceLock::new(),
            result_store: std::sync::OnceLock::new(),
        }
    }

    pub(crate) fn worker(&self, address: &str) -> Result<WorkerServiceClient<Authed>, String> {
        let mut workers = self.workers.lock().expect("worker clients lock");
        if let Some(c) = workers.get(address) {
            return Ok(c.clone());
        }
        let client = crate::push::client(address, &self.token)?;
        workers.insert(address.to_string(), client.clone());
        Ok(client)
    }

    /// Returns the ids of the objects that will hold the task's results.
    pub fn submit(self: &Arc<Self>, runtime: &tokio::runtime::Handle, mut spec: TaskSpec) -> Vec<String> {
        let ids: Vec<String> = (0..spec.num_returns.max(1)).map(|_| self.objects.pending()).collect();
        spec.job = crate::job::current();
        // The arguments (and the refs inside them) stay alive until the task ends, even if
        // the caller lets go, as in Ray: a retry reads them again.
        let mut held = std::mem::take(&mut spec.contained);
        held.extend(spec.dependencies.iter().cloned());
        for id in &held {
            self.objects.add_use(id, Use::PendingTask);
        }
        if spec.streaming {
            self.expect_items(&ids[0]);
        }
        let job = Job { spec, ids: ids.clone(), held };
        // Recorded where it costs the caller least: an actor call on its way out (`call`),
        // a task on the core's runtime, off the caller's thread.
        match &job.spec.route {
            Route::Actor(call) if !call.creation => self.call(runtime, job),
            Route::Lease(..) => {
                self.unfinished.lock().expect("unfinished lock").insert(ids[0].clone());
                let this = self.clone();
                runtime.spawn(async move {
                    this.note_submitted(&job.ids[0], &job.spec);
                    this.execute(job, None).await
                });
            }
            Route::Actor(_) => {
                self.note_submitted(&ids[0], &job.spec);
                runtime.spawn(self.clone().place_actor(job));
            }
        }
        ids
    }

    /// Runs a task or call and records its outcome; `_slot` is held until it ends.
    pub(crate) async fn execute(self: Arc<Self>, job: Job, _slot: Option<tokio::sync::OwnedSemaphorePermit>) {
        let Job { spec, ids, held } = job;
        let actor = matches!(spec.route, Route::Actor(_));
        let created = match &spec.route {
            Route::Actor(call) if call.creation => Some(call.actor_id.clone()),
            _ => None,
        };
        let outcome = self.run(&ids[0], spec).await;
        match (&outcome, created) {
            (Err(Failure::Dependency(_)), Some(actor_id)) => {
                let reason = format!("the actor {actor_id} was never created: an argument of its creation failed");
                self.creation_failed(&actor_id, reason).await;
            }
            (Ok(reply), Some(actor_id)) if !reply.is_error => self.note_actor(&actor_id, "ALIVE", |_| {}),
            (Ok(_), Some(actor_id)) => self.note_actor(&actor_id, "DEAD", |e| {
                e.death_cause = format!("the actor {actor_id}'s constructor raised an exception");
            }),
            _ => {}
        }
        self.conclude(&ids, &held, actor, outcome);
    }

    /// Records how a task or call ended in its result objects, and lets go of the refs its
    /// arguments held.
    fn conclude(&self, ids: &[String], held: &[String], actor: bool, outcome: Result<v1::PushTaskReply, Failure>) {
        if !actor {
            self.unfinished.lock().expect("unfinished lock").remove(&ids[0]);
            self.cancelled.lock().expect("cancelled lock").remove(&ids[0]);
        }
        self.pushes.forget_items(&ids[0]);
        self.note_ended(&ids[0], actor, &outcome);
        for id in held {
            self.objects.release_use(id, Use::PendingTask);
        }
        let (data, outcome) = match outcome {
            Ok(reply) => return self.record(ids, reply),
            Err(Failure::Dependency(ready)) => (ready.data.to_vec(), ready.outcome),
            Err(Failure::System(message)) if actor => (message.into_bytes(), Outcome::ActorDied),
            Err(Failure::System(message)) => (message.into_bytes(), Outcome::SystemError),
            Err(Failure::OutOfMemory(message)) => (message.into_bytes(), Outcome::OutOfMemory),
            Err(Failure::Cancelled(message)) => (message.into_bytes(), Outcome::Cancelled),
            Err(Failure::RuntimeEnv(message)) => (message.into_bytes(), Outcome::RuntimeEnvSetup),
        };
        // Every return value of a failed task carries the failure.
        for id in ids {
            self.objects.fulfil(id, data.clone(), outcome, Vec::new());
        }
    }

    /// Stores a task's reply: its value or values with the references inside them, or its
    /// error in every return.
    fn record(&self, ids: &[String], mut reply: v1::PushTaskReply) {
        show_output(&reply.output);
        let mut holds = vec![Vec::new(); ids.len()];
        let this_process = self.object_address.get().map(String::as_str);
        for c in reply.contained.drain(..) {
            let at = (c.return_index as usize).min(ids.len() - 1);
            holds[at].push(self.objects.adopt(c.object_id, c.owner, this_process));
        }
        let mut values: Vec<(Vec<u8>, Outcome)> = if reply.is_error {
            vec![(reply.result, Outcome::TaskError); ids.len()]
        } else if reply.returns.is_empty() {
            vec![(reply.result, Outcome::Value)]
        } else {
            reply.returns.into_iter().map(|v| (v, Outcome::Value)).collect()
        };
        let short = format!("the task returned {} values where {} were expected", values.len(), ids.len());
        values.resize(ids.len(), (short.into_bytes(), Outcome::SystemError));
        for ((id, (data, outcome)), holds) in ids.iter().zip(values).zip(holds) {
            let file = (outcome == Outcome::Value && holds.is_empty()).then(|| self.result_file(&data)).flatten();
            match file {
                Some((file, place)) => self.objects.fulfil_stored(id, stored_at(place, id), file),
                None => self.objects.fulfil(id, data, outcome, holds),
            }
        }
    }

    async fn run(self: &Arc<Self>, task_id: &str, mut spec: TaskSpec) -> Result<v1::PushTaskReply, Failure> {
        let values = self.objects.get(&spec.dependencies, None).await;
        let values = values.map_err(|e| Failure::System(e.to_string()))?;
        self.note_args_ready(task_id, !spec.dependencies.is_empty());
        let mut dependencies = Vec::with_capacity(values.len());
        for (id, ready) in spec.dependencies.iter().zip(values) {
            // A failed argument fails the task with the same error, as in Ray.
            if ready.outcome != Outcome::Value {
                return Err(Failure::Dependency(ready));
            }
            dependencies.push(v1::ObjectValue { object_id: id.clone(), data: ready.data.to_vec() });
        }
        let mut push = self.push_request(task_id, &mut spec, dependencies);
        let (resources, env, strategy) = match spec.route {
            Route::Actor(mut call) => {
                actor_calls::prepare(&mut push, &mut call);
                return self.call_actor(push, call, &spec.name, None).await;
            }
            Route::Lease(resources, env, strategy) => (resources, env, strategy),
        };
        let mut attempt = 0;
        loop {
            // Cancelled while it waited for its arguments or for a retry.
            if self.is_cancelled(task_id) {
                return Err(Failure::Cancelled(format!("task {} failed: {CANCELLED}", spec.name)));
            }
            let (tx, rx) = tokio::sync::oneshot::channel();
            let queued = Queued { push: push.clone(), reply: tx };
            self.enqueue(resources.clone(), env.clone(), strategy.clone(), queued);
            let reply = rx.await.unwrap_or_else(|_| Err("the submitter stopped".into()));
            let cancelled = self.is_cancelled(task_id);
            let retry = !cancelled
                && match &reply {
                    Err(NoReply::RuntimeEnv(_)) => false,
                    Err(_) => true,
                    Ok(r) => r.is_error && spec.retry_exceptions,
                };
            if !retry || attempt >= spec.max_retries {
                // A worker ended by a forced cancel broke the call: that is the cancel.
                let name = &spec.name;
                return reply.map_err(|e| match e {
                    NoReply::Cancelled => Failure::Cancelled(format!("task {name} failed: {CANCELLED}")),
                    _ if cancelled => Failure::Cancelled(format!("task {name} failed: {CANCELLED}")),
                    NoReply::OutOfMemory(why) => Failure::OutOfMemory(format!("task {name} failed: {why}")),
                    NoReply::RuntimeEnv(why) => Failure::RuntimeEnv(format!("task {name} failed: {why}")),
                    NoReply::Failed(why) => Failure::System(format!("task {name} failed: {why}")),
                });
            }
            attempt += 1;
            self.note_retry(task_id, &reply);
            if reply.is_err() {
                // A node that just died may still look alive for a moment: do not spend
                // every retry on it at once.
                tokio::time::sleep(Duration::from_millis(250 * u64::from(attempt.min(8)))).await;
            }
        }
    }

    /// The request that sends `spec` (its function and arguments are moved into it).
    fn push_request(
        &self,
        task_id: &str,
        spec: &mut TaskSpec,
        dependencies: Vec<v1::ObjectValue>,
    ) -> v1::PushTaskRequest {
        v1::PushTaskRequest {
            task_id: task_id.to_string(),
            function: std::mem::take(&mut spec.function),
            args: std::mem::take(&mut spec.args),
            function_name: spec.name.clone(),
            dependencies,
            num_returns: spec.num_returns,
            streaming: spec.streaming,
            job: spec.job.0,
            result_store: self.result_store(),
            ..Default::default()
        }
    }

    /// Where a large result may be written for this process (see `PushTaskRequest`): only
    /// once it has a node store and serves its objects.
    fn result_store(&self) -> String {
        if let Some(named) = self.result_store.get() {
            return named.clone();
        }
        match (self.objects.store(), self.object_address.get()) {
            (Some(store), Some(address)) => self
                .result_store
                .get_or_init(|| format!("{} {} {address}", self.owner.boot_id, store.dir().display()))
                .clone(),
            _ => String::new(),
        }
    }

    /// The file of this node's store a worker wrote a result to, when `data` says so, and
    /// where the marker says it is.
    fn result_file(&self, data: &[u8]) -> Option<(oxray_object_store::StoredFile, serde_json::Value)> {
        let marker = data.strip_prefix(STORED_AT)?;
        let place: serde_json::Value = serde_json::from_slice(marker).ok()?;
        let path = std::path::Path::new(place.get("path")?.as_str()?);
        Some((self.objects.store()?.file_at(path)?, place))
    }

    /// Where this process's object server listens, once it does: agents tell it when a
    /// worker of an actor it owns dies.
    pub fn set_object_address(&self, address: String) {
        let _ = self.object_address.set(address);
    }
}

/// A task's output, already prefixed by its worker, in this process's output.
fn show_output(output: &str) {
    if !output.is_empty() {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(output.as_bytes());
        let _ = out.flush();
    }
}

/// What a lease is asked for.
#[derive(Clone)]
struct Want {
    resources: ResourceSet,
    env: Env,
    strategy: Strategy,
}

/// How long a lease with nothing left to run is kept for the next task of its shape.
const LEASE_LINGER: Duration = Duration::from_millis(10);

/// The failure message of a task cancelled before it ran (the Python side names the error).
pub const CANCELLED: &str = "the task was cancelled";

enum Failure {
    Dependency(crate::objects::Ready),
    System(String),
    /// Its worker was ended to free the node's memory.
    OutOfMemory(String),
    Cancelled(String),
    /// Its runtime_env could not be prepared (never retried).
    RuntimeEnv(String),
}
