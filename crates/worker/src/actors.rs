//! Actors this process calls: where each one's worker is now and whether it lives, and, for
//! the actors this process created (it owns them), how to restart one whose worker died,
//! up to its `max_restarts`. Callers in other processes ask the owner (`ActorFailed` on its
//! object server) when a call breaks.

use crate::tasks::{Env, Lease, Strategy, Submitter};
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

struct Record {
    address: String,
    life: Life,
    lease: Option<Lease>,
    /// Set for actors this process owns.
    plan: Option<RestartPlan>,
    creation: Option<v1::PushTaskRequest>,
    /// The owner's object server, for actors created elsewhere.
    owner: Option<String>,
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

    /// An actor this process just created on `lease`.
    pub fn adopt(&self, actor_id: &str, lease: Lease, plan: RestartPlan) {
        let record = Record {
            address: lease.reply.worker_address.clone(),
            life: Life::Alive,
            lease: Some(lease),
            plan: Some(plan),
            creation: None,
            owner: None,
        };
        self.lock().insert(actor_id.to_string(), record);
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
        let record = records.entry(actor_id.to_string()).or_insert_with(|| Record {
            address: hint.to_string(),
            life: Life::Alive,
            lease: None,
            plan: None,
            creation: None,
            owner: owner.filter(|o| !o.is_empty()).map(str::to_string),
        });
        match &record.life {
            Life::Alive => Some(Ok(record.address.clone())),
            Life::Dead(reason) => Some(Err(reason.clone())),
            Life::Restarting => None,
        }
    }

    fn set_address(&self, actor_id: &str, address: &str) {
        if let Some(r) = self.lock().get_mut(actor_id) {
            r.address = address.to_string();
            r.life = Life::Alive;
        }
        self.notify();
    }

    fn set_dead(&self, actor_id: &str, reason: String) -> Option<Lease> {
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
    async fn kill(&self, actor_id: &str, no_restart: bool) -> Result<(), String>;
    /// Cancels a task this process submitted (see `Submitter::cancel`).
    async fn cancel(&self, task_id: &str, force: bool) -> bool;
}

impl Submitter {
    /// An actor whose creation call could not be sent: it is dead, and its worker (holding
    /// the calls sent to it meanwhile) is ended.
    pub(crate) async fn creation_failed(&self, actor_id: &str, reason: String) {
        if let Some(lease) = self.actors.set_dead(actor_id, reason) {
            let _ = self.give_back(&lease, true).await;
        }
    }

    /// Records an actor this process created on `lease`, to restart by `plan`.
    pub fn adopt_actor(&self, actor_id: &str, lease: Lease, plan: RestartPlan) {
        self.actors.adopt(actor_id, lease, plan);
    }

    /// Where the actor runs now (see `ActorDirectory::address`).
    pub async fn actor_address(&self, actor_id: &str, hint: &str, owner: Option<&str>) -> Result<String, String> {
        self.actors.address(actor_id, hint, owner).await
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
            Some(Some(owner)) => {
                let request = v1::ActorFailedRequest { actor_id: actor_id.to_string(), address: address.to_string() };
                let reply = match self.links.client(&owner) {
                    Ok(mut c) => c.actor_failed(request).await.map(|r| r.into_inner()),
                    Err(e) => return Err(format!("{}: {e}", died())),
                };
                match reply {
                    Ok(r) if !r.address.is_empty() => {
                        self.actors.set_address(actor_id, &r.address);
                        Ok(r.address)
                    }
                    Ok(r) => Err(r.dead_reason),
                    // The owner is gone, and with it the actor (unless detached: not restarted).
                    Err(s) => Err(format!("{} and its owner is unreachable: {}", died(), s.message())),
                }
            }
        }
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
        let Some((old, Some(mut plan), Some(creation))) = taken else { return };
        if let Some(old) = old {
            let _ = self.give_back(&old, true).await;
        }
        loop {
            if plan.restarts_left == 0 {
                let reason = format!("the actor {actor_id} died and every restart failed (max_restarts)");
                self.actors.set_dead(&actor_id, reason);
                return;
            }
            plan.restarts_left -= 1;
            if let Some(r) = self.actors.lock().get_mut(&actor_id) {
                r.plan = Some(plan.clone());
            }
            let holder = crate::tasks::LeaseFor::Actor { detached: plan.detached };
            let lease = match self.lease_patiently(&plan.resources, &plan.env, &plan.strategy, holder, true).await {
                Ok(lease) => lease,
                Err(e) => {
                    self.actors.set_dead(&actor_id, format!("the actor {actor_id} died and cannot be restarted: {e}"));
                    return;
                }
            };
            let address = lease.reply.worker_address.clone();
            let mut push = creation.clone();
            push.task_id = crate::objects::new_id();
            let created = match self.pushes.place(&address) {
                Ok(place) => self.pushes.push(&address, Some(place), push).await,
                Err(e) => Err(e),
            };
            match created {
                Ok(reply) if !reply.is_error => {
                    tracing::info!(actor = %actor_id, %address, "actor restarted");
                    if let Some(r) = self.actors.lock().get_mut(&actor_id) {
                        r.lease = Some(lease);
                    }
                    self.actors.set_address(&actor_id, &address);
                    return;
                }
                Ok(_) => {
                    let _ = self.give_back(&lease, true).await;
                    let reason = format!("the actor {actor_id} died and its constructor raised when it was restarted");
                    self.actors.set_dead(&actor_id, reason);
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
    pub async fn kill_actor(self: &Arc<Self>, actor_id: &str, no_restart: bool) -> Result<(), String> {
        let (owned, owner) = {
            let records = self.actors.lock();
            let r = records.get(actor_id);
            (r.is_some_and(|r| r.plan.is_some()), r.and_then(|r| r.owner.clone()))
        };
        if !owned {
            let Some(owner) = owner else { return Err(format!("actor {actor_id} is not known here")) };
            let request = v1::KillActorRequest { actor_id: actor_id.to_string(), no_restart };
            let mut client = self.links.client(&owner)?;
            return client.kill_actor(request).await.map(|_| ()).map_err(|s| s.message().to_string());
        }
        let lease = if no_restart {
            self.actors.set_dead(actor_id, format!("the actor {actor_id} was killed"))
        } else {
            self.actors.lock().get_mut(actor_id).and_then(|r| r.lease.take())
        };
        match lease {
            Some(lease) => self.give_back(&lease, true).await,
            None => Ok(()),
        }
    }
}

#[tonic::async_trait]
impl ActorOwner for Arc<Submitter> {
    async fn failed(&self, actor_id: &str, address: &str) -> Result<String, String> {
        self.restart_owned(actor_id, address).await
    }

    async fn kill(&self, actor_id: &str, no_restart: bool) -> Result<(), String> {
        self.kill_actor(actor_id, no_restart).await
    }

    async fn cancel(&self, task_id: &str, force: bool) -> bool {
        Submitter::cancel(self, task_id, force).await
    }
}
