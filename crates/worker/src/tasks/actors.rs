//! Actors this process calls: where each one's worker is now and whether it lives, and, for
//! the actors this process created (it owns them), how to restart one whose worker died,
//! up to its `max_restarts`. Callers in other processes ask the owner (`ActorFailed` on its
//! object server) when a call breaks.

use super::{Env, Lease, Strategy, Submitter};
use crate::WorkerError;
use oxray_proto::v1;
use oxray_types::ResourceSet;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::watch;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Life {
    Alive,
    Restarting,
    Dead(String),
}

/// How an owned actor comes back: where it may run and its creation call.
#[derive(Clone)]
pub struct RestartPlan {
    pub resources: ResourceSet,
    pub env: Env,
    pub strategy: Strategy,
    pub detached: bool,
    /// Restarts left; negative: without limit.
    pub restarts_left: i64,
}

/// Where an owned actor runs: its worker, its lease, and the agent that granted it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActorPlacement {
    pub worker_address: String,
    pub lease_id: String,
    pub agent_address: String,
}

pub(crate) struct Facts {
    pub resources: ResourceSet,
    pub strategy: Strategy,
    pub detached: bool,
    pub lease: Option<v1::LeaseReply>,
}

struct Record {
    address: String,
    life: Life,
    lease: Option<Lease>,
    /// Set for actors this process owns.
    plan: Option<RestartPlan>,
    creation: Option<v1::PushTaskRequest>,
    /// The owner's object server, for actors created elsewhere.
    owner: Option<String>,
    /// For an actor known here by id alone (a handle passed on before the actor was placed):
    /// whether its owner was asked where it runs.
    looked_up: bool,
}

#[derive(Default)]
pub struct ActorDirectory {
    records: Mutex<HashMap<String, Record>>,
    changed: watch::Sender<u64>,
}

impl ActorDirectory {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Record>> {
        self.records.lock().expect("actor directory lock")
    }

    fn notify(&self) {
        self.changed.send_modify(|v| *v += 1);
    }

    /// An actor this process creates, not placed yet: its calls wait until it is.
    pub fn expect(&self, actor_id: &str, plan: RestartPlan) {
        let record = Record {
            address: String::new(),
            life: Life::Restarting,
            lease: None,
            plan: Some(plan),
            creation: None,
            owner: None,
            looked_up: true,
        };
        self.lock().insert(actor_id.to_string(), record);
    }

    /// What the state API shows of an actor this process owns.
    pub(crate) fn facts(&self, actor_id: &str) -> Option<Facts> {
        let records = self.lock();
        let record = records.get(actor_id)?;
        let plan = record.plan.as_ref()?;
        Some(Facts {
            resources: plan.resources.clone(),
            strategy: plan.strategy.clone(),
            detached: plan.detached,
            lease: record.lease.as_ref().map(|l| l.reply.clone()),
        })
    }

    fn plan(&self, actor_id: &str) -> Option<RestartPlan> {
        self.lock().get(actor_id).and_then(|r| r.plan.clone())
    }

    /// The actor got its worker; gives the lease back when it was killed meanwhile.
    fn placed(&self, actor_id: &str, lease: Lease) -> Result<(), (Box<Lease>, String)> {
        let address = lease.reply.worker_address.clone();
        {
            let mut records = self.lock();
            let Some(record) = records.get_mut(actor_id) else {
                return Err((Box::new(lease), format!("the actor {actor_id} is not known here")));
            };
            if let Life::Dead(reason) = &record.life {
                return Err((Box::new(lease), reason.clone()));
            }
            record.lease = Some(lease);
        }
        self.set_address(actor_id, &address);
        Ok(())
    }

    /// Actors this process owns that end with it (not detached) and still live.
    fn owned_to_end(&self) -> Vec<String> {
        self.lock()
            .iter()
            .filter(|(_, r)| r.plan.as_ref().is_some_and(|p| !p.detached) && !matches!(r.life, Life::Dead(_)))
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// The owner to ask where an actor known here by id alone runs, the first time only.
    fn claim_lookup(&self, actor_id: &str) -> Option<String> {
        let mut records = self.lock();
        let record = records.get_mut(actor_id)?;
        if record.looked_up || record.life != Life::Restarting {
            return None;
        }
        record.looked_up = true;
        record.owner.clone()
    }

    /// Keeps the creation call, to send again on a restart.
    pub fn remember_creation(&self, actor_id: &str, push: &v1::PushTaskRequest) {
        if let Some(r) = self.lock().get_mut(actor_id) {
            r.creation = Some(push.clone());
        }
    }

    /// Where to send a call now: waits while the actor restarts; `Err` once it is dead.
    /// An actor first seen here (a handle from elsewhere) starts at the handle's address.
    pub async fn address(&self, actor_id: &str, hint: &str, owner: Option<&str>) -> Result<String, String> {
        let mut rx = self.changed.subscribe();
        loop {
            if let Some(known) = self.address_now(actor_id, hint, owner) {
                return known;
            }
            let _ = rx.changed().await;
        }
    }

    /// As `address`, without waiting: `None` while the actor restarts.
    pub fn address_now(&self, actor_id: &str, hint: &str, owner: Option<&str>) -> Option<Result<String, String>> {
        let mut records = self.lock();
        // A handle passed on before its actor was placed has no address: the owner has it.
        let life = if hint.is_empty() { Life::Restarting } else { Life::Alive };
        let record = records.entry(actor_id.to_string()).or_insert_with(|| Record {
            address: hint.to_string(),
            life,
            lease: None,
            plan: None,
            creation: None,
            owner: owner.filter(|o| !o.is_empty()).map(str::to_string),
            looked_up: !hint.is_empty(),
        });
        match &record.life {
            Life::Alive => Some(Ok(record.address.clone())),
            Life::Dead(reason) => Some(Err(reason.clone())),
            Life::Restarting => None,
        }
    }

    /// The actor lives at `address`: unless it died meanwhile (a dead actor stays dead).
    fn set_address(&self, actor_id: &str, address: &str) {
        if let Some(r) = self.lock().get_mut(actor_id).filter(|r| !matches!(r.life, Life::Dead(_))) {
            r.address = address.to_string();
            r.life = Life::Alive;
        }
        self.notify();
    }

    /// The actor is being ended: should its worker die meanwhile, it is not restarted.
    pub fn end_for_good(&self, actor_id: &str) {
        if let Some(plan) = self.lock().get_mut(actor_id).and_then(|r| r.plan.as_mut()) {
            plan.restarts_left = 0;
        }
    }

    /// Waits until the actor's worker is gone here (the actor dead, restarting or unknown),
    /// at most until `deadline`; whether it is.
    pub async fn gone_by(&self, actor_id: &str, deadline: tokio::time::Instant) -> bool {
        let mut rx = self.changed.subscribe();
        loop {
            if !matches!(self.lock().get(actor_id).map(|r| &r.life), Some(Life::Alive)) {
                return true;
            }
            if !matches!(tokio::time::timeout_at(deadline, rx.changed()).await, Ok(Ok(()))) {
                return false;
            }
        }
    }

    pub(crate) fn set_dead(&self, actor_id: &str, reason: String) -> Option<Lease> {
        let lease = self.lock().get_mut(actor_id).and_then(|r| {
            r.life = Life::Dead(reason);
            r.lease.take()
        });
        self.notify();
        lease
    }
}

/// What the owner of an actor answers to other processes.
#[tonic::async_trait]
pub trait ActorOwner: Send + Sync + 'static {
    async fn failed(&self, actor_id: &str, address: &str) -> Result<String, String>;
    async fn kill(&self, actor_id: &str, no_restart: bool) -> Result<(), WorkerError>;
    /// Cancels a task this process submitted (see `Submitter::cancel`).
    async fn cancel(&self, task_id: &str, force: bool) -> bool;
}

impl Submitter {
    /// An actor whose creation call could not be sent: it is dead, and its worker (holding
    /// the calls sent to it meanwhile) is ended.
    pub(crate) async fn creation_failed(&self, actor_id: &str, reason: String) {
        if let Some(lease) = self.actor_died(actor_id, reason) {
            let _ = self.give_back(&lease, true).await;
        }
    }

    /// Creates an actor this process owns, placed by `plan`, without waiting for a node:
    /// `creation` is its creation call, sent once the actor has a worker; calls made
    /// meanwhile wait for it. Returns the creation call's object. An actor no node could
    /// ever hold is dead with the reason, which its calls raise. `namespace` is the one it
    /// was made in, for the state API.
    pub fn create_actor(
        self: &Arc<Self>,
        runtime: &tokio::runtime::Handle,
        actor_id: &str,
        creation: crate::TaskSpec,
        plan: RestartPlan,
        namespace: &str,
    ) -> String {
        self.actors.expect(actor_id, plan);
        let state = if creation.dependencies.is_empty() { "PENDING_CREATION" } else { "DEPENDENCIES_UNREADY" };
        self.note_actor(actor_id, state, |e| {
            e.class_name.clone_from(&creation.name);
            e.namespace = namespace.to_string();
        });
        self.submit(runtime, creation).swap_remove(0)
    }

    /// Leases the worker of a new actor, then sends its creation call.
    pub(crate) async fn place_actor(self: Arc<Self>, mut job: super::Job) {
        let super::Route::Actor(call) = &mut job.spec.route else { unreachable!("an actor's creation") };
        let actor_id = call.actor_id.clone();
        let placed = match self.actors.plan(&actor_id) {
            Some(plan) => {
                let holder = super::LeaseFor::Actor { detached: plan.detached, actor_id: actor_id.clone() };
                self.lease_patiently(&plan.resources, &plan.env, &plan.strategy, holder, false)
                    .await
                    .map_err(|e| format!("the actor {actor_id} ({}) cannot be placed: {e}", job.spec.name))
            }
            None => Err(format!("the actor {actor_id} is not known here")),
        };
        let placed = placed.and_then(|lease| {
            let address = lease.reply.worker_address.clone();
            // The creation call takes its place before any call can.
            let gpu_ids = lease.reply.gpu_ids.clone();
            self.pushes.on_node(&address, &lease.reply.node_id);
            let place = self.pushes.place(&address).map(|place| (place, gpu_ids));
            match self.actors.placed(&actor_id, lease) {
                Ok(()) => Ok((address, place)),
                Err((lease, reason)) => {
                    let this = self.clone();
                    tokio::spawn(async move { this.give_back(&lease, true).await });
                    Err(reason)
                }
            }
        });
        match placed {
            Ok((address, Ok((place, gpu_ids)))) => {
                call.address = address;
                call.place = Some(place);
                call.gpu_ids = gpu_ids;
            }
            Ok((_, Err(reason))) | Err(reason) => {
                self.actor_died(&actor_id, reason.clone());
                call.dead = Some(reason);
            }
        }
        self.execute(job, None).await;
    }

    /// Where the actor runs now (see `ActorDirectory::address`). An actor known here by id
    /// alone is looked up at its owner first.
    pub async fn actor_address(&self, actor_id: &str, hint: &str, owner: Option<&str>) -> Result<String, String> {
        let _ = self.actors.address_now(actor_id, hint, owner);
        if let Some(owner) = self.actors.claim_lookup(actor_id) {
            match self.ask_owner(&owner, actor_id, "").await {
                Ok(r) if !r.address.is_empty() => self.actors.set_address(actor_id, &r.address),
                Ok(r) => drop(self.actor_died(actor_id, r.dead_reason)),
                Err(e) => drop(self.actor_died(actor_id, format!("the owner of actor {actor_id} is unreachable: {e}"))),
            }
        }
        self.actors.address(actor_id, hint, owner).await
    }

    /// Makes an actor known here by what its handle carries (where it was last seen, its
    /// owner), without waiting for it to be placed: enough to reach its owner.
    pub fn know_actor(&self, actor_id: &str, hint: &str, owner: Option<&str>) {
        let _ = self.actors.address_now(actor_id, hint, owner);
    }

    /// Whether an actor known here is dead (killed while it waited for its worker, say).
    pub(crate) fn actor_is_dead(&self, actor_id: &str) -> bool {
        self.actors.lock().get(actor_id).is_some_and(|r| matches!(r.life, Life::Dead(_)))
    }

    /// Where an actor this process owns was placed, waiting until it is; why it never will be.
    pub async fn actor_placement(&self, actor_id: &str) -> Result<ActorPlacement, WorkerError> {
        let worker_address = self.actors.address(actor_id, "", None).await.map_err(WorkerError::ActorDead)?;
        let records = self.actors.lock();
        let lease = records.get(actor_id).and_then(|r| r.lease.as_ref());
        let lease = lease.ok_or_else(|| WorkerError::NotFound(format!("the actor {actor_id} is not owned here")))?;
        Ok(ActorPlacement {
            worker_address,
            lease_id: lease.reply.lease_id.clone(),
            agent_address: lease.agent_address.clone(),
        })
    }

    /// Ends the actors this process owns that do not outlive it.
    pub async fn end_owned_actors(self: &Arc<Self>) {
        for actor_id in self.actors.owned_to_end() {
            let _ = self.kill_actor(&actor_id, true).await;
        }
    }

    /// A call to the worker at `address` broke: where the actor runs now, once restarted
    /// (by this process if it owns the actor, else by its owner), or why it is dead.
    pub async fn actor_failed(self: &Arc<Self>, actor_id: &str, address: &str) -> Result<String, String> {
        let owner = {
            let records = self.actors.lock();
            match records.get(actor_id) {
                Some(r) if r.plan.is_some() => None,
                Some(r) => Some(r.owner.clone()),
                None => Some(None),
            }
        };
        let died = || format!("the actor {actor_id} died (its worker at {address} is gone)");
        match owner {
            None => self.restart_owned(actor_id, address).await,
            Some(None) => Err(died()),
            Some(Some(owner)) => match self.ask_owner(&owner, actor_id, address).await {
                Ok(r) if !r.address.is_empty() => {
                    self.actors.set_address(actor_id, &r.address);
                    Ok(r.address)
                }
                Ok(r) => Err(r.dead_reason),
                // The owner is gone, and with it the actor (unless detached: not restarted).
                Err(e) => Err(format!("{} and its owner is unreachable: {e}", died())),
            },
        }
    }

    /// Asks an actor's owner where it runs now that `address` (empty: nowhere known yet)
    /// did not answer: once it is restarted or placed, or why it is dead.
    async fn ask_owner(&self, owner: &str, actor_id: &str, address: &str) -> Result<v1::ActorFailedReply, String> {
        let request = v1::ActorFailedRequest { actor_id: actor_id.to_string(), address: address.to_string() };
        let mut client = self.links.client(owner)?;
        client.actor_failed(request).await.map(|r| r.into_inner()).map_err(|s| s.message().to_string())
    }

    async fn restart_owned(self: &Arc<Self>, actor_id: &str, failed: &str) -> Result<String, String> {
        let mut rx = self.actors.changed.subscribe();
        loop {
            {
                let mut records = self.actors.lock();
                let Some(record) = records.get_mut(actor_id) else { return Err(format!("unknown actor {actor_id}")) };
                match &record.life {
                    Life::Dead(reason) => return Err(reason.clone()),
                    Life::Alive if record.address != failed => return Ok(record.address.clone()),
                    Life::Alive => {
                        let plan = record.plan.as_ref().expect("owned");
                        if plan.restarts_left == 0 || record.creation.is_none() {
                            let reason = format!(
                                "the actor {actor_id} died (its worker at {failed} is gone) and has no restarts left (max_restarts)"
                            );
                            record.life = Life::Dead(reason.clone());
                            drop(records);
                            self.actors.notify();
                            return Err(reason);
                        }
                        record.life = Life::Restarting;
                        drop(records);
                        self.note_actor(actor_id, "RESTARTING", |_| {});
                        tokio::spawn(self.clone().restart(actor_id.to_string()));
                    }
                    Life::Restarting => {}
                }
            }
            let _ = rx.changed().await;
        }
    }

    /// Leases a new worker and sends the creation call again, until it works or no
    /// restart is left.
    async fn restart(self: Arc<Self>, actor_id: String) {
        let taken = {
            let mut records = self.actors.lock();
            records.get_mut(&actor_id).map(|r| (r.lease.take(), r.plan.clone(), r.creation.clone()))
        };
        let Some((old, Some(mut plan), Some(mut creation))) = taken else { return };
        if let Some(old) = old {
            let _ = self.give_back(&old, true).await;
        }
        loop {
            if plan.restarts_left == 0 {
                let reason = format!("the actor {actor_id} died and every restart failed (max_restarts)");
                self.actor_died(&actor_id, reason);
                return;
            }
            plan.restarts_left -= 1;
            creation.restarts += 1;
            if let Some(r) = self.actors.lock().get_mut(&actor_id) {
                r.plan = Some(plan.clone());
                r.creation = Some(creation.clone());
            }
            let holder = super::LeaseFor::Actor { detached: plan.detached, actor_id: actor_id.clone() };
            let lease = match self.lease_patiently(&plan.resources, &plan.env, &plan.strategy, holder, true).await {
                Ok(lease) => lease,
                Err(e) => {
                    self.actor_died(&actor_id, format!("the actor {actor_id} died and cannot be restarted: {e}"));
                    return;
                }
            };
            let address = lease.reply.worker_address.clone();
            let mut push = creation.clone();
            push.task_id = crate::objects::new_id();
            push.gpu_ids = lease.reply.gpu_ids.clone();
            self.pushes.on_node(&address, &lease.reply.node_id);
            let created = match self.pushes.place(&address) {
                Ok(place) => self.pushes.push(&address, Some(place), push).await,
                Err(e) => Err(e),
            };
            match created {
                Ok(reply) if !reply.is_error => {
                    // Killed while it restarted: its new worker goes back at once.
                    if let Err((lease, _)) = self.actors.placed(&actor_id, lease) {
                        let _ = self.give_back(&lease, true).await;
                        return;
                    }
                    tracing::info!(actor = %actor_id, %address, "actor restarted");
                    self.note_actor(&actor_id, "ALIVE", |_| {});
                    return;
                }
                Ok(_) => {
                    let _ = self.give_back(&lease, true).await;
                    let reason = format!("the actor {actor_id} died and its constructor raised when it was restarted");
                    self.actor_died(&actor_id, reason);
                    return;
                }
                Err(_) => {
                    let _ = self.give_back(&lease, true).await;
                }
            }
        }
    }

    /// Ends an actor: its worker is retired; with `no_restart` it stays dead, otherwise an
    /// owned actor with restarts left comes back on the next call.
    pub async fn kill_actor(self: &Arc<Self>, actor_id: &str, no_restart: bool) -> Result<(), WorkerError> {
        let (owned, owner) = {
            let records = self.actors.lock();
            let r = records.get(actor_id);
            (r.is_some_and(|r| r.plan.is_some()), r.and_then(|r| r.owner.clone()))
        };
        if !owned {
            let Some(owner) = owner else {
                return Err(WorkerError::NotFound(format!("actor {actor_id} is not known here")));
            };
            let request = v1::KillActorRequest { actor_id: actor_id.to_string(), no_restart };
            let mut client = self.links.client(&owner).map_err(WorkerError::Unreachable)?;
            return Ok(client.kill_actor(request).await.map(|_| ())?);
        }
        let lease = if no_restart {
            self.actor_died(actor_id, format!("the actor {actor_id} was killed"))
        } else {
            self.actors.lock().get_mut(actor_id).and_then(|r| r.lease.take())
        };
        match lease {
            Some(lease) => self.give_back(&lease, true).await.map(|_| ()),
            None => Ok(()),
        }
    }
}

#[tonic::async_trait]
impl ActorOwner for Arc<Submitter> {
    async fn failed(&self, actor_id: &str, address: &str) -> Result<String, String> {
        self.restart_owned(actor_id, address).await
    }

    async fn kill(&self, actor_id: &str, no_restart: bool) -> Result<(), WorkerError> {
        self.kill_actor(actor_id, no_restart).await
    }

    async fn cancel(&self, task_id: &str, force: bool) -> bool {
        Submitter::cancel(self, task_id, force).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(restarts_left: i64) -> RestartPlan {
        let (resources, env) = (ResourceSet::new(), Env::new());
        RestartPlan { resources, env, strategy: Strategy::Default, detached: false, restarts_left }
    }

    #[test]
    fn a_dead_actor_stays_dead_and_one_ended_for_good_has_no_restart_left() {
        let actors = ActorDirectory::default();
        actors.expect("a", plan(3));
        actors.end_for_good("a");
        assert_eq!(actors.lock()["a"].plan.as_ref().map(|p| p.restarts_left), Some(0));
        actors.set_dead("a", "killed".into());
        actors.set_address("a", "10.0.0.1:5");
        assert_eq!(actors.address_now("a", "", None), Some(Err("killed".into())), "a late address does not revive it");
    }
}
