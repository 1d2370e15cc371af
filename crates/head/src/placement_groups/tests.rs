//! The placement round against in-process fake agents.

use super::*;
use crate::events::Events;
use tonic::Status;

pub use crate::membership::tests::node_with as node;

pub(in crate::placement_groups) fn group(id: &str, strategy: Strategy, cpus: &[f64]) -> Group {
    Group {
        id: id.to_string(),
        name: String::new(),
        namespace: String::new(),
        bundles: cpus.iter().map(|c| [("CPU".to_string(), *c)].into_iter().collect()).collect(),
        selectors: vec![Selector::default(); cpus.len()],
        strategy,
        state: State::Pending,
        nodes: vec![None; cpus.len()],
        detached: false,
        owner: None,
        created_at_ms: 2,
        creator_job_id: String::new(),
    }
}

/// Agents that record what they are asked, and refuse reservations on the nodes named.
#[derive(Default)]
struct FakeAgents {
    refusing: Mutex<BTreeSet<String>>,
    /// Agents that cannot be reached to free bundles.
    unreachable: Mutex<BTreeSet<String>>,
    calls: Mutex<Vec<String>>,
}

#[tonic::async_trait]
impl Leases for FakeAgents {
    async fn request_lease(&self, _: &str, _: v1::LeaseRequest) -> Result<v1::LeaseReply, Status> {
        Err(Status::unimplemented("the head asks for no leases"))
    }
    async fn return_worker(&self, _: &str, _: v1::ReturnWorkerRequest) -> Result<v1::ReturnWorkerReply, Status> {
        Err(Status::unimplemented("the head returns no workers"))
    }
    async fn reserve_bundles(&self, agent: &str, r: v1::ReserveBundlesRequest) -> Result<(), Status> {
        let indexes: BTreeSet<u32> = r.bundles.keys().copied().collect();
        self.calls.lock().unwrap().push(format!("reserve {agent} {} {indexes:?}", r.placement_group_id));
        match self.refusing.lock().unwrap().contains(agent) {
            true => Err(Status::resource_exhausted("no room")),
            false => Ok(()),
        }
    }
    async fn release_bundles(&self, agent: &str, r: v1::ReleaseBundlesRequest) -> Result<(), Status> {
        let indexes: BTreeSet<u32> = r.bundle_indexes.into_iter().collect();
        let call = format!("release {agent} {} {indexes:?}", r.placement_group_id);
        self.calls.lock().unwrap().push(call);
        match self.unreachable.lock().unwrap().contains(agent) {
            true => Err(Status::unavailable("connection refused")),
            false => Ok(()),
        }
    }
}

struct Fixture {
    _dir: tempfile::TempDir,
    membership: Arc<Membership>,
    agents: Arc<FakeAgents>,
    groups: Arc<PlacementGroups>,
}

impl Fixture {
    async fn new(nodes: &[NodeInfo]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(Store::open(&dir.path().join("db")).unwrap());
        let events = Arc::new(Events::open(store.clone()).unwrap());
        let membership = Arc::new(Membership::open(store.clone(), events, Duration::from_secs(60)).unwrap());
        for n in nodes {
            membership.register(n.clone()).await.unwrap();
        }
        let agents = Arc::new(FakeAgents::default());
        let groups = PlacementGroups::open(membership.clone(), agents.clone(), store).unwrap();
        Self { _dir: dir, membership, agents, groups }
    }

    fn create(&self, strategy: v1::PlacementStrategy, cpus: &[f64]) -> String {
        let bundles = cpus
            .iter()
            .map(|c| v1::Bundle { resources: [("CPU".to_string(), *c)].into_iter().collect(), ..Default::default() })
            .collect();
        let request = v1::CreatePlacementGroupRequest { bundles, strategy: strategy as i32, ..Default::default() };
        self.groups.create(request).unwrap().placement_group_id
    }

    /// A round as `run` makes it, with the releases it queued sent before it ends.
    async fn round(&self) {
        self.groups.forget_dead_nodes();
        self.groups.place_waiting().await;
        self.groups.send_releases().await;
    }

    fn calls(&self) -> Vec<String> {
        std::mem::take(&mut *self.agents.calls.lock().unwrap())
    }

    fn state(&self, id: &str) -> v1::PlacementGroup {
        let r = v1::PlacementGroupRef { placement_group_id: id.to_string(), ..Default::default() };
        self.groups.get(&r).unwrap()
    }
}

fn agent(port: u16) -> String {
    format!("127.0.0.1:{port}")
}

/// A node whose agent listens on `port`; nodes sort (and are asked) by port.
fn on_port(cpus: f64, port: u16) -> NodeInfo {
    let node_id = format!("{port:056x}").parse().unwrap();
    NodeInfo { agent_port: port, node_id, ..node(cpus) }
}

#[tokio::test]
async fn a_round_has_the_chosen_agent_reserve_the_bundles_and_the_group_is_created() {
    let f = Fixture::new(&[on_port(4.0, 7001)]).await;
    let id = f.create(v1::PlacementStrategy::Pack, &[1.0, 2.0]);
    f.round().await;
    assert_eq!(f.calls(), vec![format!("reserve {} {id} {{0, 1}}", agent(7001))]);
    let group = f.state(&id);
    assert_eq!(group.state, State::Created as i32);
    assert_eq!(group.bundle_agents, vec![agent(7001), agent(7001)]);
}

#[tokio::test]
async fn a_refusing_node_leaves_the_group_waiting_and_the_other_nodes_give_their_bundles_back() {
    let f = Fixture::new(&[on_port(2.0, 7001), on_port(2.0, 7002)]).await;
    f.agents.refusing.lock().unwrap().insert(agent(7002));
    let id = f.create(v1::PlacementStrategy::StrictSpread, &[1.0, 1.0]);
    f.round().await;
    // The node on 7001 is asked first and reserves; the one on 7002 refuses; 7001 gives back.
    let calls = f.calls();
    let granted: Vec<String> = calls
        .iter()
        .filter(|c| c.starts_with("reserve") && !c.contains(&agent(7002)))
        .map(|c| c.replacen("reserve", "release", 1))
        .collect();
    let released: Vec<String> = calls.iter().filter(|c| c.starts_with("release")).cloned().collect();
    assert_eq!(granted, released, "{calls:?}");
    assert_eq!(granted.len(), 1, "{calls:?}");
    assert!(calls.iter().any(|c| c.starts_with(&format!("reserve {}", agent(7002)))), "{calls:?}");
    assert_eq!(f.state(&id).state, State::Pending as i32);

    f.agents.refusing.lock().unwrap().clear();
    f.round().await;
    assert_eq!(f.state(&id).state, State::Created as i32);
}

#[tokio::test]
async fn removing_a_group_frees_its_bundles_on_each_of_its_nodes_once() {
    let f = Fixture::new(&[on_port(2.0, 7001), on_port(2.0, 7002)]).await;
    let id = f.create(v1::PlacementStrategy::StrictSpread, &[1.0, 1.0]);
    f.round().await;
    f.calls();
    f.groups.remove(&id).await.unwrap();
    f.round().await;
    let mut calls = f.calls();
    calls.sort();
    assert_eq!(calls, vec![format!("release {} {id} {{}}", agent(7001)), format!("release {} {id} {{}}", agent(7002))]);
    assert_eq!(f.state(&id).state, State::Removed as i32);
}

#[tokio::test]
async fn bundles_on_a_dead_node_are_placed_again_elsewhere() {
    let (a, b) = (on_port(2.0, 7001), on_port(2.0, 7002));
    let f = Fixture::new(std::slice::from_ref(&a)).await;
    let id = f.create(v1::PlacementStrategy::Pack, &[2.0]);
    f.round().await;
    f.membership.register(b).await.unwrap();
    f.membership.unregister(&a.node_id, "drained").await.unwrap();
    f.calls();
    f.round().await;
    assert_eq!(f.calls(), vec![format!("reserve {} {id} {{0}}", agent(7002))]);
    assert_eq!(f.state(&id).bundle_agents, vec![agent(7002)]);
}

#[tokio::test]
async fn a_release_that_fails_is_sent_again_while_its_node_lives() {
    let a = on_port(2.0, 7001);
    let f = Fixture::new(std::slice::from_ref(&a)).await;
    let id = f.create(v1::PlacementStrategy::Pack, &[1.0]);
    f.round().await;
    f.groups.remove(&id).await.unwrap();
    f.agents.unreachable.lock().unwrap().insert(agent(7001));
    f.calls();
    f.round().await;
    f.round().await;
    let release = format!("release {} {id} {{}}", agent(7001));
    assert_eq!(f.calls(), vec![release.clone(), release]);
    f.membership.unregister(&a.node_id, "gone").await.unwrap();
    f.round().await;
    f.round().await;
    assert_eq!(f.calls(), vec![format!("release {} {id} {{}}", agent(7001))], "sent once more, then dropped");
}
