//! Taking leases back: from owners that are gone, from actors whose worker died, and from the newest work when the node runs out of memory.

use super::*;

impl WorkerPool {
    /// Looks at the node's memory every `refresh` until the pool is dropped.
    pub fn watch_memory(self: &Arc<Self>, config: memory::MonitorConfig) {
        let Some(refresh) = config.refresh else { return };
        let pool = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(refresh);
            loop {
                tick.tick().await;
                let Some(pool) = pool.upgrade() else { return };
                let over = |usage: &memory::Usage| usage.over(config.threshold);
                if memory::read_usage().as_ref().is_some_and(over) {
                    pool.end_one_for_memory(|| memory::read_usage().filter(over).map(|u| u.describe(config.threshold)));
                }
            }
        });
    }

    /// Takes back the leases of actors whose worker died; returns the owners to tell,
    /// with `(owner, actor id, worker address)`.
    fn reap_dead_actors(&self) -> Vec<(String, String, String)> {
        let dead: Vec<(String, String, String, String)> = self
            .lock()
            .leases
            .iter_mut()
            .filter_map(|(id, l)| {
                let owner = l.notify.clone()?;
                let exited = !matches!(l.worker.child.try_wait(), Ok(None));
                exited.then(|| (id.clone(), l.actor_id.clone(), l.worker.address.clone(), owner))
            })
            .collect();
        let mut owners = Vec::with_capacity(dead.len());
        for (lease_id, actor_id, address, owner) in dead {
            tracing::info!(actor = %actor_id, lease = %lease_id, "an actor's worker died; telling its owner");
            self.give_back(&lease_id, true, (ExitType::SystemError, "the actor's worker died"));
            owners.push((owner, actor_id, address));
        }
        owners
    }

    /// Tells the owners of actors whose worker died, all at once, each within `OWNER_WAIT`
    /// (an owner that does not answer learns of it when its next call breaks).
    async fn tell_owners(&self, owners: Vec<(String, String, String)>) {
        let token = &self.env.token;
        let told = owners.into_iter().map(|(owner, actor_id, address)| async move {
            match tokio::time::timeout(OWNER_WAIT, tell_owner(&owner, token, actor_id, address)).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::debug!(owner, "the actor's owner was not told: {e}"),
                Err(_) => tracing::debug!(owner, "the actor's owner did not answer in {OWNER_WAIT:?}"),
            }
        });
        futures_util::future::join_all(told).await;
    }

    /// Forgets idle workers that died and retires warm ones that waited too long.
    fn retire_idle(&self) {
        let now = worker_records::now_ms();
        let mut state = self.lock();
        let State { idle, records, .. } = &mut *state;
        idle.retain_mut(|w| {
            let exit = exited(&mut w.child).or_else(|| {
                let stale = w.kind.keeps_warm() && w.since.elapsed() > WARM_IDLE;
                stale.then(|| (ExitType::IntendedSystemExit, "an idle warm worker was retired".to_string()))
            });
            let keep = exit.is_none();
            if let Some(exit) = exit {
                records.ended(&w.id, exit, now);
            }
            keep
        });
    }

    /// Takes back the leases whose owner on this machine has died, and retires warm workers
    /// that waited too long (and idle ones that died).
    pub async fn reap(&self) {
        let owners = self.reap_dead_actors();
        self.retire_idle();
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
            self.give_back(&id, true, (ExitType::IntendedSystemExit, "the process that held its lease died"));
        }
        self.tell_owners(owners).await;
    }

    /// Ends the worker of the newest task lease (else actor lease) when `over` (read now)
    /// says why the node's memory is short, unless a worker ended so is still exiting: its
    /// memory is not free yet, and the reading would blame the next worker for it.
    pub fn end_one_for_memory(&self, over: impl FnOnce() -> Option<String>) {
        let mut state = self.lock();
        state.ending.retain_mut(|child| matches!(child.try_wait(), Ok(None)));
        let exiting = !state.ending.is_empty()
            || state
                .leases
                .values_mut()
                .any(|l| l.ended_for.is_some() && matches!(l.worker.child.try_wait(), Ok(None)));
        if exiting {
            return;
        }
        // Read under the lock, after the exits above: a reading taken before them may count
        // a worker that has since gone, and end the retry that took its place.
        let Some(why) = over() else { return };
        let candidates: Vec<memory::Candidate> = state
            .leases
            .iter()
            .filter(|(_, l)| l.ended_for.is_none())
            .map(|(id, l)| memory::Candidate { lease_id: id.clone(), is_actor: l.notify.is_some(), granted: l.granted })
            .collect();
        let Some(victim) = memory::pick(&candidates).map(|c| c.lease_id.clone()) else { return };
        let Some(lease) = state.leases.get_mut(&victim) else { return };
        let what = if lease.notify.is_some() { format!("actor {}", lease.actor_id) } else { "task".to_string() };
        tracing::warn!(worker = %lease.worker.id, "ending the worker of a {what}: {why}");
        let _ = lease.worker.child.start_kill();
        lease.ended_for = Some(format!(
            "the worker running the {what} (at {}) was ended to free memory: {why}",
            lease.worker.address
        ));
    }
}

/// How long an actor's owner is given to hear that its worker died.
const OWNER_WAIT: Duration = Duration::from_secs(3);

/// Tells an actor's owner that its worker died (the owner restarts it, or records it dead).
async fn tell_owner(owner: &str, token: &str, actor_id: String, address: String) -> Result<(), String> {
    let token = oxray_rpc::Token::parse(token).map_err(|e| e.to_string())?;
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{owner}"))
        .map_err(|e| e.to_string())?
        .connect_timeout(Duration::from_secs(3))
        .connect()
        .await
        .map_err(|e| e.to_string())?;
    let mut client =
        v1::object_service_client::ObjectServiceClient::with_interceptor(channel, oxray_rpc::ClientAuth::new(&token));
    client.actor_failed(v1::ActorFailedRequest { actor_id, address }).await.map_err(|s| s.message().to_string())?;
    Ok(())
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
                Some(p) => p.reap().await,
                None => return,
            }
        }
    });
}
