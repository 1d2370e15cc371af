//! Placement groups: the head keeps the table, places waiting groups' bundles on alive
//! nodes by strategy and has those nodes' agents reserve them, all of a round's bundles on
//! a node at once. A group whose node dies gets those bundles placed again.

use crate::membership::Membership;
use crate::store::{Store, StoreError};
use oxray_proto::convert::resources_to_proto;
use oxray_proto::v1::{self, PlacementGroupState as State};
use oxray_rpc::{connect_leases_lazy, LeaseClient, Token};
use oxray_scheduler::bundles::{self, Candidate, Strategy};
use oxray_types::{NodeInfo, ResourceSet, Selector};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{watch, Notify};
use tokio_util::sync::CancellationToken;

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
    token: Token,
    agents: Mutex<HashMap<String, LeaseClient>>,
    wake: Notify,
    changed: watch::Sender<u64>,
}

fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

impl PlacementGroups {
    /// The table as the database has it; groups placed before a head restart keep their
    /// nodes (whose agents kept the reservations).
    pub fn open(membership: Arc<Membership>, token: Token, store: Arc<Store>) -> Result<Arc<Self>, StoreError> {
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
            token,
            agents: Mutex::new(HashMap::new()),
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
    fn flush(&self) {
        let changed: Vec<(String, Option<v1::PlacementGroup>)> =
            self.dirty.lock().expect("dirty groups lock").drain().collect();
        if changed.is_empty() {
            return;
        }
        if let Err(e) = self.store.put_groups(&changed) {
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
        let agents: std::collections::BTreeSet<String> = group.nodes.iter().flatten().map(|n| n.1.clone()).collect();
        // As in Ray, removal does not wait for the nodes to end the group's workers.
        for agent in agents {
            if let Ok(client) = self.agent(&agent) {
                tokio::spawn(release(client, agent, id.to_string(), Vec::new()));
            }
        }
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
            self.place_waiting().await;
            self.flush();
            tokio::select! {
                _ = shutdown.cancelled() => return self.flush(),
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
        let waiting: Vec<Group> = {
            let table = self.lock();
            let mut w: Vec<Group> =
                table.live.values().filter(|g| g.nodes.iter().any(Option::is_none)).cloned().collect();
            w.sort_by_key(|g| g.created_at_ms);
            w
        };
        if waiting.is_empty() {
            return;
        }
        let nodes = self.alive();
        let mut free: Vec<Candidate> = nodes
            .iter()
            .map(|n| Candidate { node: n.node_id.hex(), free: self.unreserved(n), labels: n.labels.clone() })
            .collect();
        let mut chosen_for = Vec::new();
        for group in waiting {
            let placed: Vec<Option<String>> = group.nodes.iter().map(|n| n.as_ref().map(|n| n.0.clone())).collect();
            let Some(chosen) = bundles::place(group.strategy, &group.bundles, &group.selectors, &placed, &free) else {
                continue;
            };
            // Counted as taken for this round even if the node then refuses: the groups
            // after it wait for the next round rather than overbook.
            for (i, node) in chosen.iter().enumerate() {
                if placed[i].is_none() {
                    if let Some(c) = free.iter_mut().find(|c| c.node == *node) {
                        c.free = c.free.iter().map(|(k, v)| (k.to_string(), v - group.bundles[i].get(k))).collect();
                    }
                }
            }
            chosen_for.push((group, chosen));
        }
        // The nodes are asked for all of them at once: one round trip per round, not per group.
        let reserving = chosen_for.iter().map(|(group, chosen)| self.reserve(group, chosen, &nodes));
        futures_util::future::join_all(reserving).await;
    }

    /// A node's total less the bundles placed on it.
    fn unreserved(&self, node: &NodeInfo) -> ResourceSet {
        let id = node.node_id.hex();
        let mut reserved = ResourceSet::new();
        for g in self.lock().live.values() {
            for (b, slot) in g.bundles.iter().zip(&g.nodes) {
                if slot.as_ref().is_some_and(|(n, _)| *n == id) {
                    reserved.add(b);
                }
            }
        }
        node.resources_total.iter().map(|(k, v)| (k.to_string(), v - reserved.get(k))).collect()
    }

    /// Has the agents reserve the group's new bundles; all or none.
    async fn reserve(&self, group: &Group, chosen: &[String], nodes: &[NodeInfo]) -> bool {
        let mut per_node: BTreeMap<String, BTreeMap<u32, v1::Bundle>> = BTreeMap::new();
        for (i, node) in chosen.iter().enumerate() {
            if group.nodes[i].is_none() {
                per_node.entry(node.clone()).or_default().insert(i as u32, group.bundle(i));
            }
        }
        let agent_of =
            |id: &str| nodes.iter().find(|n| n.node_id.hex() == id).map(|n| format!("{}:{}", n.node_ip, n.agent_port));
        let mut done: Vec<(String, Vec<u32>)> = Vec::new();
        let mut ok = true;
        for (node, bundles) in &per_node {
            let Some(agent) = agent_of(node) else {
                ok = false;
                break;
            };
            let indexes: Vec<u32> = bundles.keys().copied().collect();
            let request = v1::ReserveBundlesRequest {
                placement_group_id: group.id.clone(),
                bundles: bundles.clone().into_iter().collect(),
            };
            match self.agent(&agent).map(|mut c| async move { c.reserve_bundles(request).await }) {
                Ok(call) => match call.await {
                    Ok(_) => done.push((agent, indexes)),
                    Err(s) => {
                        tracing::debug!(group = %group.id, node, "bundles not reserved now: {}", s.message());
                        ok = false;
                    }
                },
                Err(_) => ok = false,
            }
            if !ok {
                break;
            }
        }
        let committed = ok && {
            let mut table = self.lock();
            match table.live.get_mut(&group.id) {
                Some(current) => {
                    for (node, bundles) in &per_node {
                        let agent = agent_of(node).unwrap_or_default();
                        for i in bundles.keys() {
                            current.nodes[*i as usize] = Some((node.clone(), agent.clone()));
                        }
                    }
                    current.state = State::Created;
                    self.persist(&group.id, Some(current));
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
        for (agent, indexes) in done {
            self.release(&agent, &group.id, indexes).await;
        }
        false
    }

    async fn release(&self, agent: &str, group: &str, indexes: Vec<u32>) {
        if let Ok(client) = self.agent(agent) {
            release(client, agent.to_string(), group.to_string(), indexes).await;
        }
    }

    fn agent(&self, address: &str) -> Result<LeaseClient, String> {
        let mut agents = self.agents.lock().expect("agent clients lock");
        if let Some(c) = agents.get(address) {
            return Ok(c.clone());
        }
        let client = connect_leases_lazy(address, &self.token, Duration::from_secs(10)).map_err(|e| e.to_string())?;
        agents.insert(address.to_string(), client.clone());
        Ok(client)
    }
}

/// Frees bundles of a group on a node (all of them when `indexes` is empty).
async fn release(mut client: LeaseClient, agent: String, group: String, indexes: Vec<u32>) {
    let request = v1::ReleaseBundlesRequest { placement_group_id: group.clone(), bundle_indexes: indexes };
    if let Err(s) = client.release_bundles(request).await {
        tracing::warn!(group, agent, "could not free bundles: {}", s.message());
    }
}
