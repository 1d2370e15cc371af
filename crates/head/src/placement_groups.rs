//! Placement groups: the head keeps the table, places waiting groups' bundles on alive
//! nodes by strategy and has those nodes' agents reserve them, all of a round's bundles on
//! a node at once. A group whose node dies gets those bundles placed again.

use crate::membership::Membership;
use crate::store::{off_thread, Store, StoreError};
use oxray_proto::convert::resources_to_proto;
use oxray_proto::v1::{self, PlacementGroupState as State};
use oxray_rpc::Leases;
use oxray_scheduler::bundles::Strategy;
use oxray_types::{NodeInfo, ResourceSet, Selector};
use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{watch, Notify};
use tokio_util::sync::CancellationToken;

mod round;

/// Removed groups kept for `placement_group_table`, newest last.
const REMOVED_KEPT: usize = 1000;
const RETRY: Duration = Duration::from_millis(500);
/// How often the creators of groups that end with them are checked.
const OWNER_CHECK: Duration = Duration::from_secs(2);

#[derive(Debug, thiserror::Error)]
pub enum GroupError {
    #[error("{0}")]
    Invalid(String),
    #[error("placement group {0} does not exist")]
    Missing(String),
    #[error("a placement group named {0:?} already exists in namespace {1:?}")]
    Exists(String, String),
}

#[derive(Clone)]
struct Group {
    id: String,
    name: String,
    namespace: String,
    bundles: Vec<ResourceSet>,
    /// Per bundle: the labels its node must have (empty: any node).
    selectors: Vec<Selector>,
    strategy: Strategy,
    state: State,
    /// Per bundle: `(node id, agent address)` once reserved there.
    nodes: Vec<Option<(String, String)>>,
    detached: bool,
    /// The creator's object server, for a group that ends with its creator.
    owner: Option<String>,
    created_at_ms: u64,
    creator_job_id: String,
}

impl Group {
    /// Bundle `i` as the agents and clients see it.
    fn bundle(&self, i: usize) -> v1::Bundle {
        v1::Bundle {
            resources: resources_to_proto(&self.bundles[i]),
            label_selector: self.selectors[i].clone().into_iter().collect(),
        }
    }

    fn to_proto(&self) -> v1::PlacementGroup {
        let strategy = match self.strategy {
            Strategy::Pack => v1::PlacementStrategy::Pack,
            Strategy::Spread => v1::PlacementStrategy::Spread,
            Strategy::StrictPack => v1::PlacementStrategy::StrictPack,
            Strategy::StrictSpread => v1::PlacementStrategy::StrictSpread,
        };
        let at = |f: fn(&(String, String)) -> &String| -> Vec<String> {
            self.nodes.iter().map(|n| n.as_ref().map(f).cloned().unwrap_or_default()).collect()
        };
        v1::PlacementGroup {
            placement_group_id: self.id.clone(),
            name: self.name.clone(),
            namespace: self.namespace.clone(),
            bundles: (0..self.bundles.len()).map(|i| self.bundle(i)).collect(),
            strategy: strategy as i32,
            state: self.state as i32,
            bundle_nodes: at(|n| &n.0),
            bundle_agents: at(|n| &n.1),
            detached: self.detached,
            created_at_ms: self.created_at_ms,
            owner: self.owner.clone().unwrap_or_default(),
            creator_job_id: self.creator_job_id.clone(),
        }
    }

    /// A group as the database kept it.
    fn from_proto(p: v1::PlacementGroup) -> Result<Self, String> {
        let selectors = p.bundles.iter().map(|b| b.label_selector.clone().into_iter().collect()).collect();
        let bundles = p
            .bundles
            .into_iter()
            .map(|b| oxray_proto::convert::resources_from_proto(b.resources).map_err(|e| e.to_string()))
            .collect::<Result<Vec<_>, _>>()?;
        let strategy = strategy_from(p.strategy).ok_or_else(|| format!("unknown strategy {}", p.strategy))?;
        let state = State::try_from(p.state).map_err(|e| e.to_string())?;
        let nodes = (0..bundles.len())
            .map(|i| match (p.bundle_nodes.get(i), p.bundle_agents.get(i)) {
                (Some(n), Some(a)) if !n.is_empty() => Some((n.clone(), a.clone())),
                _ => None,
            })
            .collect();
        Ok(Self {
            id: p.placement_group_id,
            name: p.name,
            namespace: p.namespace,
            bundles,
            selectors,
            strategy,
            state,
            nodes,
            detached: p.detached,
            owner: Some(p.owner).filter(|o| !o.is_empty()),
            created_at_ms: p.created_at_ms,
            creator_job_id: p.creator_job_id,
        })
    }
}

fn strategy_from(value: i32) -> Option<Strategy> {
    match v1::PlacementStrategy::try_from(value).ok()? {
        v1::PlacementStrategy::Pack => Some(Strategy::Pack),
        v1::PlacementStrategy::Spread => Some(Strategy::Spread),
        v1::PlacementStrategy::StrictPack => Some(Strategy::StrictPack),
        v1::PlacementStrategy::StrictSpread => Some(Strategy::StrictSpread),
    }
}

#[derive(Default)]
struct Table {
    live: HashMap<String, Group>,
    removed: VecDeque<Group>,
}

pub struct PlacementGroups {
    table: Mutex<Table>,
    store: Arc<Store>,
    /// Groups changed since they were last written, by id (`None`: removed).
    dirty: Mutex<HashMap<String, Option<v1::PlacementGroup>>>,
    membership: Arc<Membership>,
    leases: Arc<dyn Leases>,
    /// Bundles to free on their nodes, `(agent, group, indexes)` (all of the group's when
    /// empty), sent by the next round.
    releases: Mutex<Vec<(String, String, Vec<u32>)>>,
    wake: Notify,
    changed: watch::Sender<u64>,
}

fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

impl PlacementGroups {
    /// The table as the database has it; groups placed before a head restart keep their
    /// nodes (whose agents kept the reservations).
    pub fn open(
        membership: Arc<Membership>,
        leases: Arc<dyn Leases>,
        store: Arc<Store>,
    ) -> Result<Arc<Self>, StoreError> {
        let mut table = Table::default();
        for kept in store.load_groups()? {
            match Group::from_proto(kept) {
                Ok(group) => {
                    table.live.insert(group.id.clone(), group);
                }
                Err(e) => tracing::warn!("a placement group in the database is unreadable: {e}"),
            }
        }
        Ok(Arc::new(Self {
            table: Mutex::new(table),
            store,
            dirty: Mutex::new(HashMap::new()),
            membership,
            leases,
            releases: Mutex::new(Vec::new()),
            wake: Notify::new(),
            changed: watch::channel(0).0,
        }))
    }

    /// Notes a group's new state (or, `None`, its removal) for the next `flush`.
    fn persist(&self, id: &str, group: Option<&Group>) {
        self.dirty.lock().expect("dirty groups lock").insert(id.to_string(), group.map(Group::to_proto));
    }

    /// Writes the groups changed since the last flush, in one durable transaction: groups
    /// change hundreds of times a second, the disk is asked once a round.
    async fn flush(&self) {
        let changed: Vec<(String, Option<v1::PlacementGroup>)> =
            self.dirty.lock().expect("dirty groups lock").drain().collect();
        if changed.is_empty() {
            return;
        }
        let written = changed.clone();
        if let Err(e) = off_thread(&self.store, move |store| store.put_groups(&written)).await {
            tracing::error!("cannot record placement groups: {e}");
            let mut dirty = self.dirty.lock().expect("dirty groups lock");
            for (id, group) in changed {
                dirty.entry(id).or_insert(group);
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().expect("placement group table lock")
    }

    pub fn create(&self, request: v1::CreatePlacementGroupRequest) -> Result<v1::PlacementGroup, GroupError> {
        if request.bundles.is_empty() {
            return Err(GroupError::Invalid("a placement group needs at least one bundle".into()));
        }
        let mut bundles = Vec::with_capacity(request.bundles.len());
        let mut selectors = Vec::with_capacity(request.bundles.len());
        for (i, b) in request.bundles.into_iter().enumerate() {
            selectors.push(b.label_selector.into_iter().collect());
            let resources = oxray_proto::convert::resources_from_proto(b.resources)
                .map_err(|e| GroupError::Invalid(format!("bundle {i}: {e}")))?;
            if resources.iter().all(|(_, v)| v <= 0.0) {
                return Err(GroupError::Invalid(format!("bundle {i} asks for no resources: bundles cannot be empty")));
            }
            bundles.push(resources);
        }
        let strategy = strategy_from(request.strategy)
            .ok_or_else(|| GroupError::Invalid(format!("unknown strategy {}", request.strategy)))?;
        let id = match request.placement_group_id {
            given if given.is_empty() => oxray_types::new_placement_group_id(),
            given if oxray_types::is_placement_group_id(&given) => given,
            given => return Err(GroupError::Invalid(format!("{given:?} is not a placement group id"))),
        };
        let mut table = self.lock();
        if !request.name.is_empty()
            && table.live.values().any(|g| g.name == request.name && g.namespace == request.namespace)
        {
            return Err(GroupError::Exists(request.name, request.namespace));
        }
        if table.live.contains_key(&id) || table.removed.iter().any(|g| g.id == id) {
            return Err(GroupError::Invalid(format!("placement group id {id} is taken")));
        }
        let group = Group {
            id,
            name: request.name,
            namespace: request.namespace,
            nodes: vec![None; bundles.len()],
            bundles,
            selectors,
            strategy,
            state: State::Pending,
            owner: Some(request.owner).filter(|o| !o.is_empty() && !request.detached),
            detached: request.detached,
            created_at_ms: now_ms(),
            creator_job_id: request.job_id,
        };
        let reply = group.to_proto();
        self.persist(&group.id, Some(&group));
        table.live.insert(group.id.clone(), group);
        drop(table);
        self.wake.notify_one();
        Ok(reply)
    }

    /// By id, or by name in a namespace (live groups only).
    pub fn get(&self, r: &v1::PlacementGroupRef) -> Result<v1::PlacementGroup, GroupError> {
        let table = self.lock();
        let found = if r.placement_group_id.is_empty() {
            table.live.values().find(|g| g.name == r.name && g.namespace == r.namespace)
        } else {
            table
                .live
                .get(&r.placement_group_id)
                .or_else(|| table.removed.iter().find(|g| g.id == r.placement_group_id))
        };
        let missing = || if r.placement_group_id.is_empty() { r.name.clone() } else { r.placement_group_id.clone() };
        found.map(Group::to_proto).ok_or_else(|| GroupError::Missing(missing()))
    }

    pub fn list(&self) -> Vec<v1::PlacementGroup> {
        let table = self.lock();
        let mut all: Vec<v1::PlacementGroup> =
            table.removed.iter().chain(table.live.values()).map(Group::to_proto).collect();
        all.sort_by_key(|g| g.created_at_ms);
        all
    }

    /// Marks the group removed and frees its bundles on their nodes.
    pub async fn remove(&self, id: &str) -> Result<(), GroupError> {
        let group = {
            let mut table = self.lock();
            let mut group = table.live.remove(id).ok_or_else(|| GroupError::Missing(id.to_string()))?;
            group.state = State::Removed;
            table.removed.push_back(group.clone());
            if table.removed.len() > REMOVED_KEPT {
                table.removed.pop_front();
            }
            group
        };
        self.persist(id, None);
        self.changed.send_modify(|v| *v += 1);
        let agents: BTreeSet<String> = group.nodes.iter().flatten().map(|n| n.1.clone()).collect();
        // As in Ray, removal does not wait for the nodes to end the group's workers.
        let mut releases = self.releases.lock().expect("bundle releases lock");
        releases.extend(agents.into_iter().map(|agent| (agent, id.to_string(), Vec::new())));
        drop(releases);
        self.wake.notify_one();
        Ok(())
    }

    /// The group once it is created or removed, or as it is at the timeout.
    pub async fn wait(&self, id: &str, timeout: Duration) -> Result<v1::PlacementGroup, GroupError> {
        let mut rx = self.changed.subscribe();
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let group =
                self.get(&v1::PlacementGroupRef { placement_group_id: id.to_string(), ..Default::default() })?;
            let settled = group.state == State::Created as i32 || group.state == State::Removed as i32;
            if settled || tokio::time::timeout_at(deadline, rx.changed()).await.is_err() {
                return Ok(group);
            }
        }
    }

    /// Nodes joined or died: bundles on dead nodes are placed again.
    pub fn nodes_changed(&self) {
        self.wake.notify_one();
    }

    /// Places waiting groups until `shutdown`, and removes those whose creator is gone.
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        let mut owners_checked = tokio::time::Instant::now();
        loop {
            if owners_checked.elapsed() >= OWNER_CHECK {
                owners_checked = tokio::time::Instant::now();
                self.remove_orphans().await;
            }
            self.forget_dead_nodes();
            // Bundles given back are freed while others are reserved: an agent slow to
            // answer holds up neither.
            tokio::join!(self.place_waiting(), self.send_releases());
            self.flush().await;
            tokio::select! {
                _ = shutdown.cancelled() => return self.flush().await,
                _ = self.wake.notified() => {}
                _ = tokio::time::sleep(RETRY) => {}
            }
        }
    }

    /// Removes the groups whose creator's object server refuses connections: the creator
    /// ended without removing them (it was killed). An unreachable one may be a network
    /// fault, so only a refusal counts.
    async fn remove_orphans(&self) {
        let owned: Vec<(String, String)> =
            self.lock().live.values().filter_map(|g| g.owner.as_ref().map(|o| (g.id.clone(), o.clone()))).collect();
        let mut gone: HashMap<String, bool> = HashMap::new();
        for (id, owner) in owned {
            let refused = match gone.get(&owner) {
                Some(refused) => *refused,
                None => {
                    let probe = tokio::time::timeout(Duration::from_secs(1), tokio::net::TcpStream::connect(&owner));
                    let refused =
                        matches!(probe.await, Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused);
                    gone.insert(owner.clone(), refused);
                    refused
                }
            };
            if refused {
                tracing::info!(group = %id, owner, "the placement group's creator is gone; removing the group");
                let _ = self.remove(&id).await;
            }
        }
    }

    fn alive(&self) -> Vec<NodeInfo> {
        self.membership.snapshot().into_iter().filter(|n| n.is_alive() && n.agent_port != 0).collect()
    }

    fn forget_dead_nodes(&self) {
        let alive: Vec<String> = self.alive().iter().map(|n| n.node_id.hex()).collect();
        let mut changed = false;
        for group in self.lock().live.values_mut() {
            let mut lost = false;
            for slot in group.nodes.iter_mut() {
                if slot.as_ref().is_some_and(|(node, _)| !alive.contains(node)) {
                    *slot = None;
                    group.state = State::Rescheduling;
                    lost = true;
                }
            }
            if lost {
                self.persist(&group.id, Some(group));
                changed = true;
            }
        }
        if changed {
            self.changed.send_modify(|v| *v += 1);
        }
    }

    async fn place_waiting(&self) {
        let groups: Vec<Group> = self.lock().live.values().cloned().collect();
        if groups.iter().all(|g| g.nodes.iter().all(Option::is_some)) {
            return;
        }
        let plan = round::plan(&groups, &self.alive());
        // The nodes are asked for all groups at once: one round trip per round, not per group.
        futures_util::future::join_all(plan.into_iter().map(|r| self.reserve(r))).await;
    }

    /// Has the agents reserve a group's new bundles; all or none.
    async fn reserve(&self, r: round::Reservation) -> bool {
        let mut done: Vec<(String, Vec<u32>)> = Vec::new();
        let mut ok = !r.asks.is_empty();
        for ask in &r.asks {
            let request = v1::ReserveBundlesRequest {
                placement_group_id: r.group.clone(),
                bundles: ask.bundles.clone().into_iter().collect(),
            };
            if let Err(s) = self.leases.reserve_bundles(&ask.agent, request).await {
                tracing::debug!(group = %r.group, node = ask.node, "bundles not reserved now: {}", s.message());
                ok = false;
                break;
            }
            done.push((ask.agent.clone(), ask.bundles.keys().copied().collect()));
        }
        let committed = ok && {
            let mut table = self.lock();
            match table.live.get_mut(&r.group) {
                Some(current) => {
                    for ask in &r.asks {
                        for i in ask.bundles.keys() {
                            current.nodes[*i as usize] = Some((ask.node.clone(), ask.agent.clone()));
                        }
                    }
                    if current.nodes.iter().all(Option::is_some) {
                        current.state = State::Created;
                    }
                    self.persist(&r.group, Some(current));
                    true
                }
                None => false,
            }
        };
        if committed {
            self.changed.send_modify(|v| *v += 1);
            return true;
        }
        // A node refused, or the group was removed meanwhile: give back what was reserved.
        let mut releases = self.releases.lock().expect("bundle releases lock");
        releases.extend(done.into_iter().map(|(agent, indexes)| (agent, r.group.clone(), indexes)));
        false
    }

    /// Frees the bundles given back since the last round, on all their nodes at once.
    /// A release that fails is sent again by a later round while its node is alive (a
    /// dead node's reservations went with it).
    async fn send_releases(&self) {
        let releases = std::mem::take(&mut *self.releases.lock().expect("bundle releases lock"));
        let sends = releases.into_iter().map(|(agent, group, indexes)| async move {
            let request =
                v1::ReleaseBundlesRequest { placement_group_id: group.clone(), bundle_indexes: indexes.clone() };
            let failed = self.leases.release_bundles(&agent, request).await.err()?;
            tracing::warn!(group, agent, "could not free bundles: {}", failed.message());
            Some((agent, group, indexes))
        });
        let failed: Vec<(String, String, Vec<u32>)> =
            futures_util::future::join_all(sends).await.into_iter().flatten().collect();
        let alive: BTreeSet<String> = self.alive().iter().map(|n| n.agent_address()).collect();
        let mut releases = self.releases.lock().expect("bundle releases lock");
        releases.extend(failed.into_iter().filter(|(agent, _, _)| alive.contains(agent)));
    }
}

#[cfg(test)]
pub(super) mod tests;
