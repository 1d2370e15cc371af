//! The node's pool of Python worker processes and the leases drivers hold on them: a lease
//! holds the task's resources on this node until the driver returns it.

use crate::memory;
use crate::worker_records::{self, ExitType, WorkerRecord, WorkerRecords};
use oxray_proto::v1;
use oxray_scheduler::{BundleKey, BundleRefusal, BundleWant, Ledger};
use oxray_types::ResourceSet;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{oneshot, Notify};
use tonic::Status;

mod process;
mod processes;
mod reaping;
mod zygote;

use process::Process;

pub use reaping::reap_periodically;

const REGISTER_TIMEOUT: Duration = Duration::from_secs(30);
/// The variable by which a library (Train) names the modules its workers load at start.
const PRELOAD: &str = "OXRAY_WORKER_PRELOAD";
/// Idle workers of a kind that preloads modules (they hold hundreds of MB), and the zygote
/// of such a kind once none of its workers is left, go after this long unused: a run that
/// ended leaves nothing behind.
const PRELOADED_IDLE: Duration = Duration::from_secs(120);

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

/// What makes workers interchangeable: the interpreter, the runtime_env variables and the
/// rest of the runtime_env (JSON, empty when there is none).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct WorkerKind {
    pub python: String,
    pub env_vars: Vec<(String, String)>,
    pub runtime_env: String,
}

impl WorkerKind {
    /// Whether its workers are forked by a zygote that loaded the modules once.
    fn preloads(&self) -> bool {
        self.env_vars.iter().any(|(k, v)| k == PRELOAD && !v.is_empty())
    }
}

struct Worker {
    id: String,
    kind: WorkerKind,
    address: String,
    child: Process,
    /// When it last became idle.
    since: std::time::Instant,
}

struct Lease {
    worker: Worker,
    resources: ResourceSet,
    /// The placement group bundle the resources came from, if any.
    bundle: Option<BundleKey>,
    /// Taken back when this process is gone (a driver killed before it returned its leases).
    owner: Option<v1::ProcessIdentity>,
    /// The object server to tell when the worker dies (an actor's owner), and the actor.
    notify: Option<String>,
    actor_id: String,
    /// The worker waits in `get`/`wait`: its CPUs are back in the pool meanwhile.
    blocked: bool,
    /// The node's GPUs it holds.
    gpu_ids: Vec<u32>,
    /// When it was granted, as a count of grants: larger is newer.
    granted: u64,
    /// Why the agent ended its worker (the memory monitor), told to whoever returns it.
    ended_for: Option<String>,
}

impl Lease {
    /// What the lease holds of the node (or its bundle) now.
    fn holding(&self) -> ResourceSet {
        if self.blocked {
            self.resources.minus(&cpus_of(&self.resources))
        } else {
            self.resources.clone()
        }
    }
}

/// The CPUs of a request, alone.
fn cpus_of(resources: &ResourceSet) -> ResourceSet {
    resources.iter().filter(|(name, _)| *name == "CPU").map(|(k, v)| (k.to_string(), v)).collect()
}

#[derive(Default)]
struct State {
    /// What leases and bundles hold of the node.
    ledger: Ledger,
    idle: Vec<Worker>,
    leases: HashMap<String, Lease>,
    starting: HashMap<String, oneshot::Sender<(u16, u32)>>,
    /// The zygote of each kind that preloads modules.
    zygotes: HashMap<WorkerKind, Arc<zygote::Zygote>>,
    grants: u64,
    /// Workers the memory monitor ended whose leases were returned before they finished
    /// exiting: their memory is not free yet.
    ending: Vec<Process>,
    /// Workers ended with their lease, with why, until they are reaped: one may have been
    /// exiting on its own (a broken call is often its death, seen before its exit), and its
    /// own status then says why it ended.
    retiring: Vec<(String, Process, (ExitType, String))>,
    records: WorkerRecords,
}

impl Default for WorkerRecords {
    fn default() -> Self {
        WorkerRecords::new(worker_records::ENDED_KEPT)
    }
}

/// How a worker that is no longer running ended, if it did.
fn exited(child: &mut Process) -> Option<(ExitType, String)> {
    use std::os::unix::process::ExitStatusExt;
    let status = child.try_wait().ok()??;
    Some(worker_records::exit_of(status.code(), status.signal()))
}

/// A worker's log files on its node: `worker-<id>.out` (stdout) and `.err` (stderr).
pub fn log_name(worker: &WorkerRecord, suffix: &str) -> String {
    format!("worker-{}.{suffix}", worker.id)
}

pub struct WorkerPool {
    state: Mutex<State>,
    freed: Notify,
    /// The node's free resources changed: the heartbeat reports them early.
    changed: Notify,
    env: WorkerEnv,
    /// Prepares runtime_envs (packages, virtualenvs), cached on this node.
    envs: Arc<crate::envs::EnvCache>,
    gpus: crate::gpus::SharedGpus,
    /// The processes that own actors, told when an actor's worker dies.
    owners: Arc<dyn oxray_rpc::Owners>,
}

/// The refusal of a lease that waited its time for this node's free resources: the asker
/// looks for room elsewhere (how a lease queued behind a long-held resource is not stuck here).
fn busy(resources: &ResourceSet, waited: Duration) -> Status {
    Status::resource_exhausted(format!("this node had no room for {} within {waited:?}", resources.describe()))
}

/// Where a lease's resources come from: the node's free resources, or a bundle.
#[derive(Debug, Clone)]
pub struct InBundle {
    pub group: String,
    /// Negative: any bundle of the group on this node that can hold the request.
    pub index: i32,
}

fn random_id() -> String {
    let mut bytes = [0u8; 8];
    getrandom::fill(&mut bytes).expect("the operating system has no random source");
    hex::encode(bytes)
}

/// Resources taken for a lease being made: released when dropped before `keep`.
struct Taken<'a> {
    pool: &'a WorkerPool,
    resources: &'a ResourceSet,
    bundle: Option<&'a BundleKey>,
    kept: bool,
}

impl Taken<'_> {
    fn keep(mut self) {
        self.kept = true;
    }
}

impl Drop for Taken<'_> {
    fn drop(&mut self) {
        if !self.kept {
            self.pool.release(self.resources, self.bundle);
        }
    }
}

impl WorkerPool {
    pub fn new(
        total: ResourceSet,
        env: WorkerEnv,
        envs: Arc<crate::envs::EnvCache>,
        gpus: crate::gpus::SharedGpus,
        owners: Arc<dyn oxray_rpc::Owners>,
    ) -> Self {
        Self {
            state: Mutex::new(State { ledger: Ledger::new(total), ..Default::default() }),
            freed: Notify::new(),
            changed: Notify::new(),
            env,
            envs,
            gpus,
            owners,
        }
    }

    /// Workers leased out now.
    pub fn leased(&self) -> u32 {
        self.lock().leases.len() as u32
    }

    /// The workers this node started, alive and ended.
    pub fn worker_records(&self) -> Vec<WorkerRecord> {
        self.lock().records.list()
    }

    pub fn worker_by_pid(&self, pid: u32) -> Option<WorkerRecord> {
        self.lock().records.by_pid(pid).cloned()
    }

    /// What the node has for leases.
    pub fn total(&self) -> ResourceSet {
        self.lock().ledger.total().clone()
    }

    /// What is not leased out or reserved now, for the heartbeat.
    pub fn available(&self) -> ResourceSet {
        self.lock().ledger.free()
    }

    /// Resolves once the free resources changed since the last call (a stored permit when
    /// nobody was waiting).
    pub async fn changed(&self) {
        self.changed.notified().await
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().expect("worker pool lock")
    }

    /// Waits for the resources, then hands out an idle worker of the same interpreter or a
    /// new one.
    pub(crate) async fn lease(
        self: &Arc<Self>,
        resources: ResourceSet,
        kind: WorkerKind,
        owner: Option<v1::ProcessIdentity>,
        bundle: Option<InBundle>,
        notify: Option<(String, String)>,
        wait: Option<Duration>,
    ) -> Result<v1::LeaseReply, Status> {
        let bundle = match bundle {
            None => {
                let take = self.take_free(&resources);
                match wait {
                    Some(wait) => tokio::time::timeout(wait, take).await.map_err(|_| busy(&resources, wait))??,
                    None => take.await?,
                }
                None
            }
            Some(b) => Some(self.take_from_bundle(&resources, &b).await?),
        };
        // Given back unless the lease is made: the caller may go away (its request is then
        // dropped) while a worker starts for it.
        let taken = Taken { pool: self, resources: &resources, bundle: bundle.as_ref(), kept: false };
        let idle = {
            let mut state = self.lock();
            let at = state.idle.iter().position(|w| w.kind == kind);
            at.map(|i| state.idle.swap_remove(i))
        };
        let worker = match idle {
            Some(w) => Ok(w),
            None => self.spawn(&kind).await,
        };
        let worker = worker?;
        taken.keep();
        let lease_id = random_id();
        let gpu_ids = self.gpus.lock().expect("gpu lock").take_amount(resources.get("GPU")).unwrap_or_default();
        let reply = v1::LeaseReply {
            lease_id: lease_id.clone(),
            worker_address: worker.address.clone(),
            worker_id: worker.id.clone(),
            gpu_ids: gpu_ids.clone(),
            node_id: self.env.node_id.lock().expect("node id lock").clone(),
            worker_pid: worker.child.id().unwrap_or(0),
            retry_at: String::new(),
        };
        let (notify, actor_id) = match notify {
            Some((owner, actor)) => (Some(owner), actor),
            None => (None, String::new()),
        };
        let mut state = self.lock();
        state.grants += 1;
        let granted = state.grants;
        let lease = Lease {
            worker,
            resources,
            bundle,
            owner,
            notify,
            actor_id,
            blocked: false,
            gpu_ids,
            granted,
            ended_for: None,
        };
        state.leases.insert(lease_id, lease);
        Ok(reply)
    }

    /// Waits until the node's free resources hold the request, and takes them.
    async fn take_free(&self, resources: &ResourceSet) -> Result<(), Status> {
        let total = self.total();
        if !resources.fits_in(&total) {
            return Err(Status::invalid_argument(format!(
                "this node can never hold the task's resources {}; it has {}",
                resources.describe(),
                total.describe()
            )));
        }
        loop {
            let freed = self.freed.notified();
            if self.lock().ledger.take(resources) {
                self.changed.notify_one();
                return Ok(());
            }
            freed.await;
        }
    }

    /// Waits until a bundle of the group on this node holds the request, and takes it from
    /// there. Fails when the group has no such bundle here (or it goes away meanwhile).
    async fn take_from_bundle(&self, resources: &ResourceSet, want: &InBundle) -> Result<BundleKey, Status> {
        let index = u32::try_from(want.index).ok();
        let bundles = BundleWant { group: &want.group, index };
        loop {
            let freed = self.freed.notified();
            match self.lock().ledger.take_from_bundle(resources, &bundles) {
                Ok(Some(key)) => return Ok(key),
                Ok(None) => {}
                Err(BundleRefusal::NotHere) => {
                    return Err(Status::not_found(format!(
                        "placement group {} has no bundle{} on this node (removed, or placed elsewhere)",
                        want.group,
                        index.map(|i| format!(" {i}")).unwrap_or_default()
                    )))
                }
                Err(BundleRefusal::NeverFits) => {
                    return Err(Status::invalid_argument(format!(
                        "the bundle of placement group {} can never hold {}",
                        want.group,
                        resources.describe()
                    )))
                }
            }
            freed.await;
        }
    }

    /// A task's worker waits for objects (`blocked`) or goes on: as Ray's raylet does, its
    /// CPUs go back to the node while it waits, so the tasks it waits for can run even on a
    /// node with one CPU, and are taken again when it goes on, even past the node's total
    /// for a moment. An actor keeps what it holds.
    pub fn worker_blocked(&self, worker_id: &str, blocked: bool) {
        let mut state = self.lock();
        let Some(lease) = state.leases.values_mut().find(|l| l.worker.id == worker_id) else { return };
        // Only actor leases ask to be told of their worker's exit.
        if lease.notify.is_some() || lease.blocked == blocked {
            return;
        }
        lease.blocked = blocked;
        let cpus = cpus_of(&lease.resources);
        let bundle = lease.bundle.clone();
        if blocked {
            state.ledger.release(&cpus, bundle.as_ref());
            drop(state);
            self.freed.notify_waiters();
        } else {
            state.ledger.retake(&cpus, bundle.as_ref());
        }
        self.changed.notify_one();
    }

    fn release(&self, resources: &ResourceSet, bundle: Option<&BundleKey>) {
        self.lock().ledger.release(resources, bundle);
        self.freed.notify_waiters();
        self.changed.notify_one();
    }

    /// Reserves a group's bundles here, all or none, if the free resources hold them now.
    pub fn reserve_bundles(&self, group: &str, bundles: Vec<(u32, ResourceSet)>) -> Result<(), Status> {
        self.lock().ledger.reserve(group, bundles).map_err(|sum| {
            Status::failed_precondition(format!("the free resources of this node do not hold {} now", sum.describe()))
        })?;
        self.changed.notify_one();
        Ok(())
    }

    /// Frees a group's bundles here (all when `indexes` is empty) and ends the workers
    /// leased inside them.
    pub fn release_bundles(&self, group: &str, indexes: &[u32]) {
        let chosen = |k: &BundleKey| k.0 == group && (indexes.is_empty() || indexes.contains(&k.1));
        let leases: Vec<String> = {
            let mut state = self.lock();
            state.ledger.unreserve(group, indexes);
            state
                .leases
                .iter()
                .filter(|(_, l)| l.bundle.as_ref().is_some_and(chosen))
                .map(|(id, _)| id.clone())
                .collect()
        };
        for id in leases {
            tracing::info!(lease = %id, group, "placement group removed; ending its worker");
            self.give_back(&id, true, (ExitType::IntendedUserExit, "its placement group was removed"));
        }
        self.freed.notify_waiters();
        self.changed.notify_one();
    }

    /// Takes a lease back; returns why the agent ended its worker, if it did.
    /// `why`: why the worker ends if it is still running and `disconnect` ends it.
    pub(crate) fn give_back(&self, lease_id: &str, disconnect: bool, why: (ExitType, &str)) -> Option<String> {
        let mut lease = self.lock().leases.remove(lease_id)?;
        let holding = lease.holding();
        self.gpus.lock().expect("gpu lock").give_back_amount(lease.resources.get("GPU"), &lease.gpu_ids);
        let exit = exited(&mut lease.worker.child);
        let now = worker_records::now_ms();
        if let (None, Some(reason)) = (&exit, &lease.ended_for) {
            let mut state = self.lock();
            state.records.ended(&lease.worker.id, (ExitType::SystemError, reason.clone()), now);
            state.ending.push(lease.worker.child);
        } else if exit.is_none() && !disconnect {
            lease.worker.since = std::time::Instant::now();
            self.lock().idle.push(lease.worker);
        } else {
            tracing::info!(worker = %lease.worker.id, "worker retired");
            match exit {
                Some(exit) => self.lock().records.ended(&lease.worker.id, exit, now),
                None => {
                    let _ = lease.worker.child.start_kill();
                    let why = (why.0, why.1.to_string());
                    self.lock().retiring.push((lease.worker.id, lease.worker.child, why));
                }
            }
        }
        self.release(&holding, lease.bundle.as_ref());
        lease.ended_for
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_kinds_that_preload_have_a_zygote() {
        let kind = |env: &[(&str, &str)]| WorkerKind {
            python: "python3".into(),
            env_vars: env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            runtime_env: String::new(),
        };
        assert!(!kind(&[]).preloads());
        assert!(!kind(&[(PRELOAD, "")]).preloads());
        assert!(kind(&[("A", "1"), (PRELOAD, "torch")]).preloads());
    }
}
