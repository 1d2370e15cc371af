//! Getting worker leases: the driver asks its local agent only, which grants the lease or
//! names the agent to ask instead; a placement group's bundle is asked of the agent holding
//! it, found once through the head.

use super::{Env, Strategy, Submitter, RUNTIME_ENV_KEY};
use oxray_proto::convert::resources_to_proto;
use oxray_proto::v1;
use oxray_types::ResourceSet;
use std::time::Duration;

/// What a lease is for: a task (returned when the shape's queue is empty) or an actor's life.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseFor {
    Task,
    /// `detached`: the lease outlives this process.
    Actor {
        detached: bool,
        actor_id: String,
    },
}

/// How long a lease waits at a node without room before the choice is made again.
const BUSY_WAIT: Duration = Duration::from_millis(200);

/// How long a lease is asked for again while agents cannot be reached.
const LEASE_PATIENCE: Duration = Duration::from_secs(30);

/// Most placement groups whose bundles' agents are remembered.
const GROUPS_KEPT: usize = 1024;

/// Why no lease was granted; `transient` when the agent (or head) could not be reached,
/// as opposed to a refusal.
#[derive(Debug)]
pub struct LeaseError {
    pub message: String,
    pub transient: bool,
    /// The agent could not prepare the lease's runtime_env.
    pub runtime_env: bool,
}

impl std::fmt::Display for LeaseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl From<String> for LeaseError {
    fn from(message: String) -> Self {
        Self { message, transient: false, runtime_env: false }
    }
}

impl From<tonic::Status> for LeaseError {
    fn from(status: tonic::Status) -> Self {
        use tonic::Code;
        let transient =
            matches!(status.code(), Code::Unavailable | Code::Unknown | Code::Cancelled | Code::DeadlineExceeded);
        let message = if transient { oxray_rpc::root_cause(&status) } else { status.message().to_string() };
        let runtime_env = status.details() == oxray_proto::RUNTIME_ENV_SETUP_FAILED;
        Self { message, transient, runtime_env }
    }
}

/// A worker lease and the agent that granted it.
#[derive(Clone, Debug)]
pub struct Lease {
    pub reply: v1::LeaseReply,
    pub agent_address: String,
}

/// What an agent said to a lease request.
enum Answer {
    Granted(Box<Lease>),
    /// Ask that agent instead.
    Elsewhere(String),
    /// No room in time (or nothing can take it yet): choose again.
    Busy,
}

/// The strategy as the agent reads it; None for a bundle's lease, which is not scheduled.
fn scheduling_of(strategy: &Strategy) -> Option<v1::Scheduling> {
    use v1::scheduling::Kind;
    let plain = |kind: Kind| v1::Scheduling { kind: kind as i32, ..Default::default() };
    Some(match strategy {
        Strategy::Default => plain(Kind::Default),
        Strategy::Spread => plain(Kind::Spread),
        Strategy::Node { node_id, soft } => {
            v1::Scheduling { node_id: node_id.clone(), soft: *soft, ..plain(Kind::NodeAffinity) }
        }
        Strategy::Labels(selectors) => v1::Scheduling {
            label_selectors: selectors
                .iter()
                .map(|s| v1::LabelSelector { terms: s.clone().into_iter().collect() })
                .collect(),
            ..plain(Kind::Labels)
        },
        Strategy::Bundle { .. } => return None,
    })
}

impl Submitter {
    /// A lease, asked for again (choosing anew) for up to `LEASE_PATIENCE` while agents
    /// cannot be reached (a node that just died may still look alive for a moment), and
    /// with `refusals` also while no node can hold it (one may come back).
    pub(crate) async fn lease_patiently(
        &self,
        resources: &ResourceSet,
        env: &Env,
        strategy: &Strategy,
        holder: LeaseFor,
        refusals: bool,
    ) -> Result<Lease, LeaseError> {
        let give_up = tokio::time::Instant::now() + LEASE_PATIENCE;
        loop {
            match self.lease_with(resources.clone(), env.clone(), strategy, holder.clone()).await {
                Err(e) if (e.transient || (refusals && !e.runtime_env)) && tokio::time::Instant::now() < give_up => {
                    tracing::debug!("no lease yet: {e}");
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
                other => return other,
            }
        }
    }

    fn request(&self, resources: &ResourceSet, mut env: Env, holder: LeaseFor) -> v1::LeaseRequest {
        let runtime_env_json = env.remove(RUNTIME_ENV_KEY).unwrap_or_default();
        let (detached, notify_on_exit) = match holder {
            LeaseFor::Task => (false, String::new()),
            LeaseFor::Actor { detached, .. } => (detached, self.object_address.get().cloned().unwrap_or_default()),
        };
        let actor_id = match holder {
            LeaseFor::Actor { actor_id, .. } => actor_id,
            LeaseFor::Task => String::new(),
        };
        v1::LeaseRequest {
            resources: resources_to_proto(resources),
            python: self.python.clone(),
            env_vars: env.into_iter().collect(),
            owner: Some(self.owner.clone()),
            detached,
            notify_on_exit,
            actor_id,
            runtime_env_json,
            ..Default::default()
        }
    }

    /// A lease placed by a scheduling strategy. `detached`: the lease outlives this process
    /// (a detached actor's).
    ///
    /// The local agent decides from its view of the cluster: it grants the lease, or names
    /// the agent to ask (which grants it or, out of room in time, sends the driver back to
    /// choose again). A lease never waits long at a node without room (`BUSY_WAIT`), as
    /// Ray's raylets spill queued leases back, so a lease queued behind resources held for
    /// long (a training worker's CPU) goes where room is instead of waiting for them.
    pub async fn lease_with(
        &self,
        resources: ResourceSet,
        env: Env,
        strategy: &Strategy,
        holder: LeaseFor,
    ) -> Result<Lease, LeaseError> {
        // Only tasks queue behind a lease; an actor's is its own.
        let shape = matches!(holder, LeaseFor::Task).then(|| super::shapes::shape_key(&resources, &env, strategy));
        let mut request = self.request(&resources, env, holder.clone());
        if let Strategy::Bundle { group, index } = strategy {
            return self.lease_in_bundle(request, group, *index).await;
        }
        // A hard node-affine lease waits at its node for as long as it takes.
        let pinned = matches!(strategy, Strategy::Node { soft: false, .. });
        request.wait_ms = if pinned { 0 } else { BUSY_WAIT.as_millis() as u32 };
        request.scheduling = scheduling_of(strategy);
        let mut there = request.clone();
        there.scheduling = None;
        loop {
            if let (Strategy::Labels(_), LeaseFor::Actor { actor_id, .. }) = (strategy, &holder) {
                if self.actor_is_dead(actor_id) {
                    return Err(
                        format!("the actor {actor_id} was killed before a node matched its label selector").into()
                    );
                }
            }
            // What waits behind this request: its shape's queued tasks, or the one actor.
            request.backlog = shape.as_deref().map_or(1, |shape| self.backlog(shape));
            there.backlog = request.backlog;
            let address = match self.ask(&self.local_agent, &request).await? {
                Answer::Granted(lease) => return Ok(*lease),
                Answer::Busy => continue,
                Answer::Elsewhere(address) => address,
            };
            if let Answer::Granted(lease) = self.ask(&address, &there).await? {
                return Ok(*lease);
            }
        }
    }

    /// A lease inside a placement group's bundle: waits until the group is created, then
    /// asks the agent of the bundle's node (in turn among the group's nodes for any bundle).
    /// Where the bundles are is asked of the head once per group, and again only when an
    /// agent no longer has the bundle (its node died, the group was removed).
    async fn lease_in_bundle(
        &self,
        mut request: v1::LeaseRequest,
        group: &str,
        index: i32,
    ) -> Result<Lease, LeaseError> {
        request.placement_group_id = group.to_string();
        request.bundle_index = index;
        self.groups.settled(group).await.map_err(LeaseError::from)?;
        loop {
            let agents = self.bundle_agents(group, index).await?;
            if agents.is_empty() {
                continue;
            }
            let turn = self.spread_turn.fetch_add(1, std::sync::atomic::Ordering::Relaxed) as usize;
            let address = agents[turn % agents.len()].clone();
            match self.leases.request_lease(&address, request.clone()).await {
                Ok(reply) => return Ok(Lease { reply, agent_address: address }),
                Err(s) => {
                    // The bundle moved (its node died: NotFound, or the agent is unreachable)
                    // or the group went: the head says where it is now.
                    self.bundle_places.lock().expect("bundle places lock").remove(group);
                    if s.code() != tonic::Code::NotFound {
                        return Err(s.into());
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }

    /// The agents holding the bundle `index` of `group` (every bundle when negative), as
    /// remembered or, once the group is placed, as the head says.
    async fn bundle_agents(&self, group: &str, index: i32) -> Result<Vec<String>, LeaseError> {
        let known = self.bundle_places.lock().expect("bundle places lock").get(group).cloned();
        let all = match known {
            Some(all) => all,
            None => {
                let Some(head) = &self.head else {
                    return Err("placement groups need the cluster's head".to_string().into());
                };
                let wait = v1::WaitPlacementGroupRequest { placement_group_id: group.to_string(), timeout_s: 5.0 };
                let pg = head.clone().wait_placement_group(wait).await.map_err(LeaseError::from)?.into_inner();
                if pg.state == v1::PlacementGroupState::Removed as i32 {
                    return Err(format!("placement group {group} was removed").into());
                }
                if pg.bundle_agents.iter().all(|a| !a.is_empty()) {
                    let mut places = self.bundle_places.lock().expect("bundle places lock");
                    if places.len() >= GROUPS_KEPT {
                        places.clear();
                    }
                    places.insert(group.to_string(), pg.bundle_agents.clone());
                }
                pg.bundle_agents
            }
        };
        if index >= 0 && index as usize >= all.len() {
            let count = all.len();
            return Err(
                format!("bundle index {index} is out of range: placement group {group} has {count} bundles").into()
            );
        }
        let mut agents: Vec<String> = if index >= 0 { vec![all[index as usize].clone()] } else { all };
        agents.retain(|a| !a.is_empty());
        agents.dedup();
        Ok(agents)
    }

    /// What the agent at `address` answers.
    async fn ask(&self, address: &str, request: &v1::LeaseRequest) -> Result<Answer, LeaseError> {
        match self.leases.request_lease(address, request.clone()).await {
            Ok(reply) => {
                if !reply.retry_at.is_empty() {
                    return Ok(Answer::Elsewhere(reply.retry_at));
                }
                Ok(Answer::Granted(Box::new(Lease { reply, agent_address: address.to_string() })))
            }
            Err(s) if s.code() == tonic::Code::ResourceExhausted => Ok(Answer::Busy),
            Err(s) => Err(s.into()),
        }
    }

    /// Retires a worker by its lease, from any process: how a named actor is killed.
    pub async fn retire(&self, agent_address: &str, lease_id: &str) -> Result<(), crate::WorkerError> {
        let request = v1::ReturnWorkerRequest { lease_id: lease_id.to_string(), disconnect: true };
        Ok(self.leases.return_worker(agent_address, request).await.map(|_| ())?)
    }

    /// Gives a worker back; `disconnect` retires it (its process is killed). Returns why the
    /// agent ended the worker, if it did (empty when it did not).
    pub async fn give_back(&self, lease: &Lease, disconnect: bool) -> Result<String, crate::WorkerError> {
        self.task_leases.lock().expect("task leases lock").remove(&lease.reply.lease_id);
        let request = v1::ReturnWorkerRequest { lease_id: lease.reply.lease_id.clone(), disconnect };
        // An agent cut off by the network never answers: what waits on the return (a retry)
        // must not wait with it.
        let leases = self.leases.clone();
        let agent = lease.agent_address.clone();
        let returned = async move {
            tokio::time::timeout(RETURN_PATIENCE, leases.return_worker(&agent, request)).await.map_err(|_| {
                crate::WorkerError::Unreachable(format!(
                    "the agent at {agent} did not take its worker back in {RETURN_PATIENCE:?}"
                ))
            })
        };
        if self.pushes.is_dead(&lease.reply.node_id) {
            // Told in the background: the agent ends what its dead node ran once it learns so.
            tokio::spawn(returned);
            return Ok(String::new());
        }
        Ok(returned.await??.exit_reason)
    }
}

/// How long an agent may take to answer a worker's return.
const RETURN_PATIENCE: std::time::Duration = std::time::Duration::from_secs(10);

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{HashMap, VecDeque};
    use std::sync::{Arc, Mutex};
    use tonic::Status;

    #[test]
    fn strategies_reach_the_agent_as_ray_names_them() {
        use v1::scheduling::Kind;
        assert_eq!(scheduling_of(&Strategy::Spread).unwrap().kind(), Kind::Spread);
        let node = scheduling_of(&Strategy::Node { node_id: "n".into(), soft: true }).unwrap();
        assert_eq!((node.kind(), node.node_id.as_str(), node.soft), (Kind::NodeAffinity, "n", true));
        let zone = [("zone".to_string(), "a".to_string())].into_iter().collect();
        let labels = scheduling_of(&Strategy::Labels(vec![zone])).unwrap();
        assert_eq!(labels.label_selectors[0].terms["zone"], "a");
        assert!(scheduling_of(&Strategy::Bundle { group: "g".into(), index: -1 }).is_none());
    }

    /// Agents that answer from a script, each address its answers in turn, and note what
    /// they were asked.
    #[derive(Default)]
    struct ScriptedAgents {
        answers: Mutex<HashMap<String, VecDeque<Result<v1::LeaseReply, Status>>>>,
        asked: Mutex<Vec<(String, v1::LeaseRequest)>>,
        returned: Mutex<Vec<String>>,
    }

    impl ScriptedAgents {
        fn answer(&self, agent: &str, answer: Result<v1::LeaseReply, Status>) {
            self.answers.lock().unwrap().entry(agent.to_string()).or_default().push_back(answer);
        }
    }

    #[tonic::async_trait]
    impl oxray_rpc::Leases for ScriptedAgents {
        async fn request_lease(&self, agent: &str, request: v1::LeaseRequest) -> Result<v1::LeaseReply, Status> {
            self.asked.lock().unwrap().push((agent.to_string(), request));
            let next = self.answers.lock().unwrap().get_mut(agent).and_then(VecDeque::pop_front);
            next.unwrap_or_else(|| Err(Status::unavailable(format!("nothing scripted for {agent}"))))
        }
        async fn return_worker(
            &self,
            agent: &str,
            request: v1::ReturnWorkerRequest,
        ) -> Result<v1::ReturnWorkerReply, Status> {
            self.returned.lock().unwrap().push(format!("{agent} {}", request.lease_id));
            Ok(v1::ReturnWorkerReply::default())
        }
        async fn reserve_bundles(&self, _: &str, _: v1::ReserveBundlesRequest) -> Result<(), Status> {
            Err(Status::unimplemented("drivers reserve no bundles"))
        }
        async fn release_bundles(&self, _: &str, _: v1::ReleaseBundlesRequest) -> Result<(), Status> {
            Err(Status::unimplemented("drivers release no bundles"))
        }
    }

    const LOCAL: &str = "127.0.0.1:7001";

    fn submitter(agents: &Arc<ScriptedAgents>) -> Submitter {
        let token = oxray_rpc::Token::generate();
        let links = crate::OwnerLinks::new(token.clone(), tokio::runtime::Handle::current());
        let objects = Arc::new(crate::ObjectTable::default());
        let mut submitter = Submitter::new(objects, LOCAL, token, "python3".into(), None, Arc::default(), links);
        submitter.leases = agents.clone();
        submitter
    }

    fn granted(lease_id: &str) -> Result<v1::LeaseReply, Status> {
        Ok(v1::LeaseReply { lease_id: lease_id.into(), ..Default::default() })
    }

    async fn lease(submitter: &Submitter, strategy: Strategy) -> Result<Lease, LeaseError> {
        submitter.lease_with(ResourceSet::new(), Env::new(), &strategy, LeaseFor::Task).await
    }

    #[tokio::test]
    async fn a_lease_sent_elsewhere_is_asked_there_without_its_strategy_and_given_back_there() {
        let agents = Arc::new(ScriptedAgents::default());
        agents.answer(LOCAL, Ok(v1::LeaseReply { retry_at: "10.0.0.2:7001".into(), ..Default::default() }));
        agents.answer("10.0.0.2:7001", granted("L"));
        let submitter = submitter(&agents);
        let lease = lease(&submitter, Strategy::Spread).await.unwrap();
        assert_eq!((lease.agent_address.as_str(), lease.reply.lease_id.as_str()), ("10.0.0.2:7001", "L"));
        let asked = agents.asked.lock().unwrap().clone();
        assert_eq!(asked.iter().map(|(a, _)| a.as_str()).collect::<Vec<_>>(), vec![LOCAL, "10.0.0.2:7001"]);
        assert_eq!(asked[0].1.scheduling.as_ref().unwrap().kind(), v1::scheduling::Kind::Spread);
        assert!(asked[1].1.scheduling.is_none(), "the agent named grants it or sends it back");
        submitter.give_back(&lease, false).await.unwrap();
        assert_eq!(*agents.returned.lock().unwrap(), vec!["10.0.0.2:7001 L"]);
    }

    #[tokio::test]
    async fn a_busy_node_sends_the_lease_back_to_be_placed_again_and_only_a_pinned_one_waits() {
        let agents = Arc::new(ScriptedAgents::default());
        agents.answer(LOCAL, Err(Status::resource_exhausted("no room in time")));
        agents.answer(LOCAL, granted("L"));
        agents.answer(LOCAL, granted("P"));
        let submitter = submitter(&agents);
        assert_eq!(lease(&submitter, Strategy::Default).await.unwrap().reply.lease_id, "L");
        let pinned = Strategy::Node { node_id: "n".into(), soft: false };
        assert_eq!(lease(&submitter, pinned).await.unwrap().reply.lease_id, "P");
        let waits: Vec<u32> = agents.asked.lock().unwrap().iter().map(|(_, r)| r.wait_ms).collect();
        let busy = BUSY_WAIT.as_millis() as u32;
        assert_eq!(waits, vec![busy, busy, 0]);
    }

    #[tokio::test]
    async fn refusals_are_told_apart_from_agents_out_of_reach() {
        let agents = Arc::new(ScriptedAgents::default());
        let env_failed = Status::with_details(
            tonic::Code::FailedPrecondition,
            "pip install failed",
            oxray_proto::RUNTIME_ENV_SETUP_FAILED.to_vec().into(),
        );
        agents.answer(LOCAL, Err(env_failed));
        agents.answer(LOCAL, Err(Status::invalid_argument("no such resource")));
        let submitter = submitter(&agents);
        let env = lease(&submitter, Strategy::Default).await.unwrap_err();
        assert!(env.runtime_env && !env.transient, "{env:?}");
        let refused = lease(&submitter, Strategy::Default).await.unwrap_err();
        assert!(!refused.runtime_env && !refused.transient, "{refused:?}");
        let unreachable = lease(&submitter, Strategy::Default).await.unwrap_err();
        assert!(unreachable.transient && unreachable.message.contains("nothing scripted"), "{unreachable:?}");
    }
}
