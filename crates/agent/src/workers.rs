//! The node's pool of Python worker processes and the leases drivers hold on them: a lease
//! holds the task's resources on this node until the driver returns it.

use oxray_proto::v1::{self, lease_service_server};
use oxray_types::ResourceSet;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{oneshot, Notify};
use tonic::{Request, Response, Status};

const REGISTER_TIMEOUT: Duration = Duration::from_secs(30);

/// What a worker process needs to know about its surroundings.
#[derive(Clone)]
pub struct WorkerEnv {
    pub head_address: String,
    pub token: String,
    pub node_id: Arc<Mutex<String>>,
    pub logs: PathBuf,
    /// Where other machines reach this node's workers.
    pub node_ip: String,
    /// Where this agent's services listen, filled in once bound.
    pub agent_address: Arc<Mutex<String>>,
}

/// What makes workers interchangeable: the interpreter and the runtime_env variables.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerKind {
    pub python: String,
    pub env_vars: Vec<(String, String)>,
}

struct Worker {
    id: String,
    kind: WorkerKind,
    address: String,
    child: tokio::process::Child,
}

struct Lease {
    worker: Worker,
    resources: ResourceSet,
    /// Taken back when this process is gone (a driver killed before it returned its leases).
    owner: Option<v1::ProcessIdentity>,
}

#[derive(Default)]
struct State {
    used: ResourceSet,
    idle: Vec<Worker>,
    leases: HashMap<String, Lease>,
    starting: HashMap<String, oneshot::Sender<(u16, u32)>>,
}

pub struct WorkerPool {
    total: ResourceSet,
    state: Mutex<State>,
    freed: Notify,
    env: WorkerEnv,
}

fn fits(request: &ResourceSet, free: impl Fn(&str) -> f64) -> bool {
    request.iter().all(|(name, amount)| amount <= 0.0 || free(name) + 1e-9 >= amount)
}

fn random_id() -> String {
    let mut bytes = [0u8; 8];
    getrandom::fill(&mut bytes).expect("the operating system has no random source");
    hex::encode(bytes)
}

impl WorkerPool {
    pub fn new(total: ResourceSet, env: WorkerEnv) -> Self {
        Self { total, state: Mutex::new(State::default()), freed: Notify::new(), env }
    }

    /// What is not leased out now, for the heartbeat.
    pub fn available(&self) -> ResourceSet {
        let used = self.lock().used.clone();
        self.total.iter().map(|(k, v)| (k.to_string(), (v - used.get(k)).max(0.0))).collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().expect("worker pool lock")
    }

    /// Waits for the resources, then hands out an idle worker of the same interpreter or a
    /// new one.
    async fn lease(
        &self,
        resources: ResourceSet,
        kind: WorkerKind,
        owner: Option<v1::ProcessIdentity>,
    ) -> Result<v1::LeaseReply, Status> {
        if !fits(&resources, |r| self.total.get(r)) {
            return Err(Status::invalid_argument(format!(
                "this node can never hold the task's resources {:?}; it has {:?}",
                resources.as_map(),
                self.total.as_map()
            )));
        }
        loop {
            let freed = self.freed.notified();
            {
                let mut state = self.lock();
                if fits(&resources, |r| self.total.get(r) - state.used.get(r)) {
                    state.used.add(&resources);
                    break;
                }
            }
            freed.await;
        }
        let idle = {
            let mut state = self.lock();
            let at = state.idle.iter().position(|w| w.kind == kind);
            at.map(|i| state.idle.swap_remove(i))
        };
        let worker = match idle {
            Some(w) => Ok(w),
            None => self.spawn(&kind).await,
        };
        let worker = match worker {
            Ok(w) => w,
            Err(e) => {
                self.release(&resources);
                return Err(e);
            }
        };
        let lease_id = random_id();
        let reply = v1::LeaseReply {
            lease_id: lease_id.clone(),
            worker_address: worker.address.clone(),
            worker_id: worker.id.clone(),
        };
        self.lock().leases.insert(lease_id, Lease { worker, resources, owner });
        Ok(reply)
    }

    fn release(&self, resources: &ResourceSet) {
        let mut state = self.lock();
        let used: ResourceSet =
            state.used.iter().map(|(k, v)| (k.to_string(), (v - resources.get(k)).max(0.0))).collect();
        state.used = used;
        drop(state);
        self.freed.notify_waiters();
    }

    /// Takes back the leases whose owner on this machine has died.
    pub fn reap(&self) {
        let here = oxray_config::procs::identity();
        let orphaned: Vec<String> = self
            .lock()
            .leases
            .iter()
            .filter(|(_, l)| l.owner.as_ref().is_some_and(|o| owner_is_gone(o, &here)))
            .map(|(id, _)| id.clone())
            .collect();
        for id in orphaned {
            tracing::info!(lease = %id, "the lease's owner died; taking the worker back");
            self.give_back(&id, true);
        }
    }

    fn give_back(&self, lease_id: &str, disconnect: bool) {
        let Some(mut lease) = self.lock().leases.remove(lease_id) else { return };
        let alive = matches!(lease.worker.child.try_wait(), Ok(None));
        if alive && !disconnect {
            self.lock().idle.push(lease.worker);
        } else {
            // Dropping the child kills it (kill_on_drop).
            tracing::info!(worker = %lease.worker.id, "worker retired");
        }
        self.release(&lease.resources);
    }

    async fn spawn(&self, kind: &WorkerKind) -> Result<Worker, Status> {
        let python = kind.python.as_str();
        let id = random_id();
        let (tx, rx) = oneshot::channel();
        self.lock().starting.insert(id.clone(), tx);
        let log_path = self.env.logs.join(format!("worker-{id}.log"));
        let log = std::fs::File::create(&log_path).map_err(|e| Status::internal(e.to_string()))?;
        let err = log.try_clone().map_err(|e| Status::internal(e.to_string()))?;
        let agent_address = self.env.agent_address.lock().expect("agent address lock").clone();
        let node_id = self.env.node_id.lock().expect("node id lock").clone();
        let mut child = tokio::process::Command::new(python)
            .args(["-m", "oxray._private.worker_main"])
            .env("OXRAY_WORKER_ID", &id)
            .env("OXRAY_AGENT_ADDRESS", agent_address)
            .env("OXRAY_ADDRESS", &self.env.head_address)
            .env("OXRAY_AUTH_TOKEN", &self.env.token)
            .env("OXRAY_NODE_ID", node_id)
            .env("OXRAY_NODE_IP", &self.env.node_ip)
            .env("PYTHONUNBUFFERED", "1")
            .envs(kind.env_vars.iter().map(|(k, v)| (k, v)))
            .stdin(std::process::Stdio::null())
            .stdout(log)
            .stderr(err)
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| Status::failed_precondition(format!("cannot start a worker with {python}: {e}")))?;
        let registered = tokio::select! {
            r = tokio::time::timeout(REGISTER_TIMEOUT, rx) => r.ok().and_then(Result::ok),
            _ = child.wait() => None,
        };
        self.lock().starting.remove(&id);
        let Some((port, _pid)) = registered else {
            let log = std::fs::read_to_string(&log_path).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(5).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            return Err(Status::failed_precondition(format!("the worker process did not start: {}", tail.join(" | "))));
        };
        tracing::info!(worker = %id, port, "worker started");
        let address = format!("{}:{port}", self.env.node_ip);
        Ok(Worker { id, kind: kind.clone(), address, child })
    }
}

/// Whether `owner` ran on this machine, in this pid space, and is no more.
fn owner_is_gone(owner: &v1::ProcessIdentity, here: &oxray_config::procs::Identity) -> bool {
    if owner.boot_id != here.boot_id || owner.pid_namespace != here.pid_namespace || owner.pid == 0 {
        return false;
    }
    oxray_config::procs::start_ticks(owner.pid) != Some(owner.start_ticks)
}

/// Checks for dead lease owners until the pool is dropped.
pub fn reap_periodically(pool: &Arc<WorkerPool>) {
    let pool = Arc::downgrade(pool);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            tick.tick().await;
            match pool.upgrade() {
                Some(p) => p.reap(),
                None => return,
            }
        }
    });
}

/// The lease service, on the agent's port.
pub struct LeaseService(pub Arc<WorkerPool>);

#[tonic::async_trait]
impl lease_service_server::LeaseService for LeaseService {
    async fn request_worker_lease(
        &self,
        request: Request<v1::LeaseRequest>,
    ) -> Result<Response<v1::LeaseReply>, Status> {
        let request = request.into_inner();
        let resources = oxray_proto::convert::resources_from_proto(request.resources)
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        let python = if request.python.is_empty() { "python3".to_string() } else { request.python };
        let mut env_vars: Vec<(String, String)> = request.env_vars.into_iter().collect();
        env_vars.sort();
        let owner = request.owner.filter(|_| !request.detached);
        self.0.lease(resources, WorkerKind { python, env_vars }, owner).await.map(Response::new)
    }

    async fn return_worker(
        &self,
        request: Request<v1::ReturnWorkerRequest>,
    ) -> Result<Response<v1::ReturnWorkerReply>, Status> {
        let request = request.into_inner();
        self.0.give_back(&request.lease_id, request.disconnect);
        Ok(Response::new(v1::ReturnWorkerReply {}))
    }

    async fn register_worker(
        &self,
        request: Request<v1::RegisterWorkerRequest>,
    ) -> Result<Response<v1::RegisterWorkerReply>, Status> {
        let request = request.into_inner();
        let waiting = self.0.lock().starting.remove(&request.worker_id);
        match waiting {
            Some(tx) => {
                let _ = tx.send((request.port as u16, request.pid));
                Ok(Response::new(v1::RegisterWorkerReply {}))
            }
            None => Err(Status::not_found(format!("no worker {} is starting here", request.worker_id))),
        }
    }
}
