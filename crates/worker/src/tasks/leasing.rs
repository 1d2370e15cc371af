//! Getting worker leases: the driver asks its local agent only, which grants the lease or
//! names the agent to ask instead; a placement group's bundle is asked of the agent holding
//! it, found once through the head.

use super::{Env, Strategy, Submitter, RUNTIME_ENV_KEY};
use oxray_proto::convert::resources_to_proto;
use oxray_proto::v1::{self, lease_service_client::LeaseServiceClient};
use oxray_rpc::ClientAuth;
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
#[derive(Clone)]
pub struct Lease {
    pub reply: v1::LeaseReply,
    agent: LeaseServiceClient<super::Authed>,
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
            let agent = self.agent(&address)?;
            match agent.clone().request_worker_lease(request.clone()).await {
                Ok(reply) => return Ok(Lease { reply: reply.into_inner(), agent, agent_address: address }),
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
        let agent = self.agent(address)?;
        match agent.clone().request_worker_lease(request.clone()).await {
            Ok(reply) => {
                let reply = reply.into_inner();
                if !reply.retry_at.is_empty() {
                    return Ok(Answer::Elsewhere(reply.retry_at));
                }
                Ok(Answer::Granted(Box::new(Lease { reply, agent, agent_address: address.to_string() })))
            }
            Err(s) if s.code() == tonic::Code::ResourceExhausted => Ok(Answer::Busy),
            Err(s) => Err(s.into()),
        }
    }

    fn agent(&self, address: &str) -> Result<LeaseServiceClient<super::Authed>, String> {
        if address == self.local_agent {
            return Ok(self.leases.clone());
        }
        let mut agents = self.remote_agents.lock().expect("agents lock");
        if let Some(client) = agents.get(address) {
            return Ok(client.clone());
        }
        let client = LeaseServiceClient::with_interceptor(super::channel(address)?, ClientAuth::new(&self.token));
        agents.insert(address.to_string(), client.clone());
        Ok(client)
    }

    /// Retires a worker by its lease, from any process: how a named actor is killed.
    pub async fn retire(&self, agent_address: &str, lease_id: &str) -> Result<(), String> {
        let request = v1::ReturnWorkerRequest { lease_id: lease_id.to_string(), disconnect: true };
        self.agent(agent_address)?.return_worker(request).await.map(|_| ()).map_err(|s| s.message().to_string())
    }

    /// Gives a worker back; `disconnect` retires it (its process is killed). Returns why the
    /// agent ended the worker, if it did (empty when it did not).
    pub async fn give_back(&self, lease: &Lease, disconnect: bool) -> Result<String, String> {
        let request = v1::ReturnWorkerRequest { lease_id: lease.reply.lease_id.clone(), disconnect };
        let reply = lease.agent.clone().return_worker(request).await.map_err(|s| s.message().to_string())?;
        Ok(reply.into_inner().exit_reason)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
