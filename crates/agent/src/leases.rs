//! The lease service, on the agent's port: grants leases on this node's workers, or, from its
//! view of the cluster, names the agent to ask instead (Ray's spillback), so drivers ask
//! their local agent only and the head stays off the task path.

use crate::cluster_view::SharedView;
use crate::demand::{self, Demand};
use crate::worker_records::ExitType;
use crate::workers::{InBundle, WorkerKind, WorkerPool};
use oxray_proto::convert::resources_from_proto;
use oxray_proto::v1::{self, lease_service_server};
use oxray_scheduler::{route, Decision, NodeView, Strategy};
use oxray_types::ResourceSet;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tonic::{Request, Response, Status};

/// How long a lease nothing can take now waits for the cluster to change before the asker
/// hears so (and asks again), when it did not say how long it waits.
const NOTHING_YET: Duration = Duration::from_millis(500);

/// How long a lease pinned to a node this agent's view lacks waits for the view to show it:
/// the driver may have learnt of a node that just joined before the head's push got here.
const JOIN_GRACE: Duration = Duration::from_secs(1);

/// This node as the cluster view shows it.
pub struct LocalNode {
    /// Changes when the node rejoins under a new id.
    pub node_id: Arc<Mutex<String>>,
    /// `ip:port`, as other nodes' views name this agent.
    pub agent: String,
    pub labels: BTreeMap<String, String>,
}

pub struct LeaseService {
    pool: Arc<WorkerPool>,
    view: Arc<SharedView>,
    local: LocalNode,
    demand: Arc<Demand>,
    /// SPREAD's rotation over the nodes.
    turn: AtomicU64,
}

impl LeaseService {
    pub fn new(pool: Arc<WorkerPool>, view: Arc<SharedView>, local: LocalNode, demand: Arc<Demand>) -> Self {
        Self { pool, view, local, demand, turn: AtomicU64::new(0) }
    }

    fn snapshot(&self) -> (String, Vec<NodeView>) {
        let node_id = self.local.node_id.lock().expect("node id lock").clone();
        let mut labels = self.local.labels.clone();
        labels.insert("ray.io/node_id".into(), node_id.clone());
        let me = NodeView {
            node_id: node_id.clone(),
            agent: self.local.agent.clone(),
            total: self.pool.total(),
            available: self.pool.available(),
            labels,
        };
        (node_id, self.view.snapshot(me))
    }

    fn route(&self, strategy: &Strategy, resources: &ResourceSet, busy_here: bool) -> Decision {
        // The common case, decided as `route` would without copying the view: a DEFAULT
        // lease this node could hold is tried here first.
        if *strategy == Strategy::Default && !busy_here && resources.fits_in(&self.pool.total()) {
            return Decision::Here;
        }
        if !self.view.synced() {
            return Decision::Wait;
        }
        let (local, nodes) = self.snapshot();
        let turn = self.turn.fetch_add(1, Ordering::Relaxed) as usize;
        route(strategy, resources, &local, &nodes, turn, busy_here)
    }

    /// Grants the lease here, or sends the asker where the strategy says it goes.
    async fn schedule(
        &self,
        strategy: Strategy,
        resources: ResourceSet,
        kind: WorkerKind,
        grant: Grant,
        wait: Option<Duration>,
    ) -> Result<v1::LeaseReply, Status> {
        let mut decision = self.route(&strategy, &resources, false);
        let grace = tokio::time::Instant::now() + JOIN_GRACE;
        while matches!(decision, Decision::Never(_))
            && matches!(strategy, Strategy::Node { soft: false, .. })
            && tokio::time::Instant::now() < grace
        {
            let _ = tokio::time::timeout_at(grace, self.view.changed()).await;
            decision = self.route(&strategy, &resources, false);
        }
        // A node that could hold it may be added, unless the lease wants one that died.
        let may_come = self.demand.autoscaling() && !matches!(strategy, Strategy::Node { soft: false, .. });
        match decision {
            Decision::Here => {}
            Decision::There(agent) => {
                // Asked there now; that agent counts it if it has no room either.
                self.demand.granted(&grant.asker, &resources);
                return Ok(retry_at(agent));
            }
            Decision::Never(why) if !may_come => return Err(Status::invalid_argument(why)),
            Decision::Never(_) | Decision::Wait => {
                let selector = first_selector(&strategy);
                self.demand.record(&grant.asker, &resources, &selector, grant.backlog, Instant::now());
                let _ = tokio::time::timeout(wait.unwrap_or(NOTHING_YET), self.view.changed()).await;
                return Err(Status::resource_exhausted(format!(
                    "no node of the cluster has room for {} yet",
                    resources.describe()
                )));
            }
        }
        let asker = grant.asker.clone();
        match self.pool.lease(resources.clone(), kind, grant.owner, None, grant.notify, wait).await {
            Err(busy) if busy.code() == tonic::Code::ResourceExhausted => match self.route(&strategy, &resources, true)
            {
                Decision::There(agent) => Ok(retry_at(agent)),
                _ => {
                    self.demand.record(&asker, &resources, &first_selector(&strategy), grant.backlog, Instant::now());
                    Err(busy)
                }
            },
            granted => {
                if granted.is_ok() {
                    self.demand.granted(&asker, &resources);
                }
                granted
            }
        }
    }
}

/// Who holds a lease and who hears when its worker dies; who asked, and how many tasks of
/// the shape wait behind the request.
struct Grant {
    owner: Option<v1::ProcessIdentity>,
    notify: Option<(String, String)>,
    asker: String,
    backlog: u32,
}

fn retry_at(agent: String) -> v1::LeaseReply {
    v1::LeaseReply { retry_at: agent, ..Default::default() }
}

/// The labels a node must have for the work: a label strategy's first selector (its
/// fallbacks are for when no node matches, which an autoscaler is to change).
fn first_selector(strategy: &Strategy) -> std::collections::BTreeMap<String, String> {
    match strategy {
        Strategy::Labels(selectors) => selectors.first().cloned().unwrap_or_default(),
        _ => Default::default(),
    }
}

/// The strategy a request carries, if it is to be scheduled rather than granted here.
fn strategy_of(scheduling: v1::Scheduling) -> Strategy {
    use v1::scheduling::Kind;
    match scheduling.kind() {
        Kind::Default => Strategy::Default,
        Kind::Spread => Strategy::Spread,
        Kind::NodeAffinity => Strategy::Node { node_id: scheduling.node_id, soft: scheduling.soft },
        Kind::Labels => {
            Strategy::Labels(scheduling.label_selectors.into_iter().map(|s| s.terms.into_iter().collect()).collect())
        }
    }
}

#[tonic::async_trait]
impl lease_service_server::LeaseService for LeaseService {
    async fn request_worker_lease(
        &self,
        request: Request<v1::LeaseRequest>,
    ) -> Result<Response<v1::LeaseReply>, Status> {
        let request = request.into_inner();
        let resources = resources_from_proto(request.resources).map_err(|e| Status::invalid_argument(e.to_string()))?;
        let python = if request.python.is_empty() { crate::detect::default_python() } else { request.python };
        let mut env_vars: Vec<(String, String)> = request.env_vars.into_iter().collect();
        env_vars.sort();
        let asker = demand::asker(request.owner.as_ref(), &request.actor_id);
        let owner = request.owner.filter(|_| !request.detached);
        let notify = Some(request.notify_on_exit).filter(|n| !n.is_empty()).map(|n| (n, request.actor_id));
        let kind = WorkerKind { python, env_vars, runtime_env: request.runtime_env_json };
        let wait = (request.wait_ms > 0).then(|| Duration::from_millis(request.wait_ms.into()));
        let grant = Grant { owner, notify, asker, backlog: request.backlog };
        if !request.placement_group_id.is_empty() {
            let bundle = InBundle { group: request.placement_group_id, index: request.bundle_index };
            return self
                .pool
                .lease(resources, kind, grant.owner, Some(bundle), grant.notify, wait)
                .await
                .map(Response::new);
        }
        let reply = match request.scheduling {
            Some(scheduling) => self.schedule(strategy_of(scheduling), resources, kind, grant, wait).await,
            // Sent here by another agent: out of room in time, the asker chooses again, and
            // meanwhile the cluster lacks room for it.
            None => {
                let (asker, backlog) = (grant.asker.clone(), grant.backlog);
                let reply = self.pool.lease(resources.clone(), kind, grant.owner, None, grant.notify, wait).await;
                match &reply {
                    Err(busy) if busy.code() == tonic::Code::ResourceExhausted => {
                        self.demand.record(&asker, &resources, &Default::default(), backlog, Instant::now())
                    }
                    Ok(_) => self.demand.granted(&asker, &resources),
                    Err(_) => {}
                }
                reply
            }
        };
        reply.map(Response::new)
    }

    async fn reserve_bundles(
        &self,
        request: Request<v1::ReserveBundlesRequest>,
    ) -> Result<Response<v1::ReserveBundlesReply>, Status> {
        let request = request.into_inner();
        let mut bundles = Vec::with_capacity(request.bundles.len());
        for (index, bundle) in request.bundles {
            let resources =
                resources_from_proto(bundle.resources).map_err(|e| Status::invalid_argument(e.to_string()))?;
            bundles.push((index, resources));
        }
        self.pool.reserve_bundles(&request.placement_group_id, bundles)?;
        Ok(Response::new(v1::ReserveBundlesReply {}))
    }

    async fn release_bundles(
        &self,
        request: Request<v1::ReleaseBundlesRequest>,
    ) -> Result<Response<v1::ReleaseBundlesReply>, Status> {
        let request = request.into_inner();
        self.pool.release_bundles(&request.placement_group_id, &request.bundle_indexes);
        Ok(Response::new(v1::ReleaseBundlesReply {}))
    }

    async fn return_worker(
        &self,
        request: Request<v1::ReturnWorkerRequest>,
    ) -> Result<Response<v1::ReturnWorkerReply>, Status> {
        let request = request.into_inner();
        let why = (ExitType::IntendedSystemExit, "the owner of its lease ended it");
        let exit_reason = self.pool.give_back(&request.lease_id, request.disconnect, why).unwrap_or_default();
        Ok(Response::new(v1::ReturnWorkerReply { exit_reason }))
    }

    async fn worker_blocked(
        &self,
        request: Request<v1::WorkerBlockedRequest>,
    ) -> Result<Response<v1::WorkerBlockedReply>, Status> {
        let request = request.into_inner();
        self.pool.worker_blocked(&request.worker_id, request.blocked);
        Ok(Response::new(v1::WorkerBlockedReply {}))
    }

    async fn register_worker(
        &self,
        request: Request<v1::RegisterWorkerRequest>,
    ) -> Result<Response<v1::RegisterWorkerReply>, Status> {
        let request = request.into_inner();
        if self.pool.worker_registered(&request.worker_id, request.port as u16, request.pid) {
            Ok(Response::new(v1::RegisterWorkerReply {}))
        } else {
            Err(Status::not_found(format!("no worker {} is starting here", request.worker_id)))
        }
    }
}
