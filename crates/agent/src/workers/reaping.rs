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
                let exited = !l.worker.child.running();
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

    /// Forgets idle workers that died, retires preloading ones (and zygotes) unused too
    /// long, and notes how workers ended with their lease exited.
    fn retire_idle(&self) {
        use std::os::unix::process::ExitStatusExt;
        let now = worker_records::now_ms();
        let mut state = self.lock();
        let State { idle, records, retiring, zygotes, .. } = &mut *state;
        zygotes.retain(|_, zygote| !zygote.retires(PRELOADED_IDLE));
        retiring.retain_mut(|(id, child, why)| {
            let Ok(Some(status)) = child.try_wait() else { return true };
            records.ended(id, retired_exit(status.code(), status.signal(), why), now);
            false
        });
        idle.retain_mut(|w| {
            let exit = exited(&mut w.child).or_else(|| {
                let stale = w.kind.preloads() && w.since.elapsed() > PRELOADED_IDLE;
                stale.then(|| {
                    (ExitType::IntendedSystemExit, "an idle worker with preloaded modules was retired".to_string())
                })
            });
            let keep = exit.is_none();
            if let Some(exit) = exit {
                records.ended(&w.id, exit, now);
            }
            keep
        });
    }

    /// Takes back the leases whose owner on this machine has died, and retires preloading
    /// workers unused too long (and idle ones that died). Returns the owners of actors whose
    /// worker died, to tell (`tell_owner`).
    pub fn reap(&self) -> Vec<(String, String, String)> {
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
        owners
    }

    /// Ends every worker and frees every bundle: the head declared this node dead, so what
    /// ran here was failed or given to other nodes and must not go on beside it (a task
    /// would run twice, an actor live twice).
    pub fn end_all(&self, why: &str) {
        let leases: Vec<String> = self.lock().leases.keys().cloned().collect();
        for id in leases {
            self.give_back(&id, true, (ExitType::SystemError, why));
        }
        let now = worker_records::now_ms();
        let mut state = self.lock();
        let State { idle, records, ledger, .. } = &mut *state;
        // Dropping an idle worker kills it (kill_on_drop).
        for worker in idle.drain(..) {
            records.ended(&worker.id, (ExitType::SystemError, why.to_string()), now);
        }
        *ledger = Ledger::new(ledger.total().clone());
        drop(state);
        self.freed.notify_waiters();
        self.changed.notify_one();
    }

    /// Ends the worker of the newest task lease (else actor lease) when `over` (read now)
    /// says why the node's memory is short, unless a worker ended so is still exiting: its
    /// memory is not free yet, and the reading would blame the next worker for it.
    pub fn end_one_for_memory(&self, over: impl FnOnce() -> Option<String>) {
        let mut state = self.lock();
        state.ending.retain_mut(Process::running);
        let exiting = !state.ending.is_empty()
            || state.leases.values_mut().any(|l| l.ended_for.is_some() && l.worker.child.running());
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

/// How a worker ended with its lease exited: killed here, it was still running and `why`
/// says why it ended; else it was exiting on its own (a SIGKILL does not change the status
/// of a process already exiting) and its status says why.
fn retired_exit(code: Option<i32>, signal: Option<i32>, why: &(ExitType, String)) -> (ExitType, String) {
    if signal == Some(nix::sys::signal::Signal::SIGKILL as i32) {
        why.clone()
    } else {
        worker_records::exit_of(code, signal)
    }
}

/// Whether `owner` ran on this machine, in this pid space, and is no more.
fn owner_is_gone(owner: &v1::ProcessIdentity, here: &oxray_config::procs::Identity) -> bool {
    if owner.boot_id != here.boot_id || owner.pid_namespace != here.pid_namespace || owner.pid == 0 {
        return false;
    }
    oxray_config::procs::start_ticks(owner.pid) != Some(owner.start_ticks)
}

/// Tells an actor's owner that its worker died (`(owner, actor id, worker address)`); the
/// owner answers once it restarted the actor, which may take a while.
async fn tell_owner(owners: Arc<dyn oxray_rpc::Owners>, (owner, actor_id, address): (String, String, String)) {
    let request = v1::ActorFailedRequest { actor_id, address };
    if let Err(s) = owners.actor_failed(&owner, request).await {
        tracing::debug!(owner, "the actor's owner was not told: {}", s.message());
    }
}

/// Checks for dead lease owners until the pool is dropped. Owners are told by tasks the
/// loop owns, beside it: a restart an owner makes before answering holds nothing up.
pub fn reap_periodically(pool: &Arc<WorkerPool>) {
    let pool = Arc::downgrade(pool);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        let mut telling = tokio::task::JoinSet::new();
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                Some(_) = telling.join_next(), if !telling.is_empty() => continue,
            }
            let Some(pool) = pool.upgrade() else { return };
            for owner in pool.reap() {
                telling.spawn(tell_owner(pool.owners.clone(), owner));
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::Status;

    /// Owners that note what they are told.
    #[derive(Default)]
    struct FakeOwners {
        told: Mutex<Vec<String>>,
    }

    #[tonic::async_trait]
    impl oxray_rpc::Owners for FakeOwners {
        async fn actor_failed(&self, owner: &str, r: v1::ActorFailedRequest) -> Result<(), Status> {
            self.told.lock().unwrap().push(format!("{owner} {} {}", r.actor_id, r.address));
            Ok(())
        }
    }

    fn pool(owners: Arc<FakeOwners>, dir: &std::path::Path) -> WorkerPool {
        let token = oxray_rpc::Token::generate();
        let head = oxray_rpc::connect_head_lazy("127.0.0.1:1", &token, Duration::from_secs(1)).unwrap();
        let env = WorkerEnv {
            head_address: "127.0.0.1:1".into(),
            token: token.as_str().to_string(),
            node_id: Default::default(),
            logs: dir.join("logs"),
            node_ip: "127.0.0.1".into(),
            agent_address: Default::default(),
        };
        let envs = Arc::new(crate::envs::EnvCache::new(dir.join("envs"), head));
        let gpus = Arc::new(Mutex::new(crate::gpus::GpuPool::new(0)));
        WorkerPool::new(ResourceSet::new(), env, envs, gpus, owners)
    }

    /// An actor's lease whose worker is the process `command` runs.
    fn actor_lease(command: &[&str], owner: &str) -> Lease {
        let worker = Worker {
            id: "w1".into(),
            kind: WorkerKind { python: "python3".into(), env_vars: Vec::new(), runtime_env: String::new() },
            address: "127.0.0.1:4000".into(),
            child: Process::Spawned(
                tokio::process::Command::new(command[0]).args(&command[1..]).kill_on_drop(true).spawn().unwrap(),
            ),
            since: std::time::Instant::now(),
        };
        Lease {
            worker,
            resources: ResourceSet::new(),
            bundle: None,
            owner: None,
            notify: Some(owner.into()),
            actor_id: "actor-1".into(),
            blocked: false,
            gpu_ids: Vec::new(),
            granted: 1,
            ended_for: None,
        }
    }

    #[tokio::test]
    async fn a_node_declared_dead_ends_every_worker_and_frees_its_resources() {
        let dir = tempfile::tempdir().unwrap();
        let pool = pool(Arc::new(FakeOwners::default()), dir.path());
        pool.lock().leases.insert("a".into(), actor_lease(&["sleep", "30"], "10.0.0.9:5000"));
        let pid = pool.lock().leases.get_mut("a").unwrap().worker.child.id().unwrap();
        pool.end_all("declared dead");
        assert!(pool.lock().leases.is_empty());
        assert_eq!(pool.available(), pool.total());
        let gone = async {
            // Gone, or a zombie until tokio reaps it.
            while std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| !s.contains(") Z ")) {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(10), gone).await.expect("the worker is killed");
    }

    #[test]
    fn a_worker_ended_with_its_lease_keeps_its_own_exit_unless_killed_here() {
        let why = (ExitType::IntendedUserExit, "its placement group was removed".to_string());
        assert_eq!(retired_exit(None, Some(9), &why), why);
        let own = retired_exit(Some(3), None, &why);
        assert_eq!(own.0, ExitType::SystemError);
        assert!(own.1.contains("code 3"), "{own:?}");
    }

    #[tokio::test]
    async fn a_worker_given_back_while_it_runs_is_killed_and_noted_with_the_reason_once_reaped() {
        let dir = tempfile::tempdir().unwrap();
        let pool = pool(Arc::new(FakeOwners::default()), dir.path());
        let mut lease = actor_lease(&["sleep", "30"], "10.0.0.9:5000");
        lease.notify = None;
        pool.lock().records.launched(&lease.worker.id, 1);
        pool.lock().leases.insert("l".into(), lease);
        pool.give_back("l", true, (ExitType::IntendedUserExit, "its placement group was removed"));
        let ended = async {
            loop {
                pool.retire_idle();
                if let Some(exit) = pool.worker_records().pop().and_then(|r| r.exit) {
                    return exit;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        };
        let exit = tokio::time::timeout(Duration::from_secs(10), ended).await.expect("reaped");
        assert_eq!(exit, (ExitType::IntendedUserExit, "its placement group was removed".into()));
    }

    #[tokio::test]
    async fn the_owner_of_an_actor_whose_worker_died_is_told_once_and_the_lease_taken_back() {
        let dir = tempfile::tempdir().unwrap();
        let owners = Arc::new(FakeOwners::default());
        let pool = pool(owners.clone(), dir.path());
        pool.lock().leases.insert("dead".into(), actor_lease(&["true"], "10.0.0.9:5000"));
        pool.lock().leases.insert("alive".into(), actor_lease(&["sleep", "30"], "10.0.0.9:5000"));
        let exited = async {
            while pool.lock().leases.get_mut("dead").unwrap().worker.child.try_wait().unwrap().is_none() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(10), exited).await.expect("`true` exits");
        for told in [pool.reap(), pool.reap()].into_iter().flatten() {
            tell_owner(pool.owners.clone(), told).await;
        }
        assert_eq!(*owners.told.lock().unwrap(), vec!["10.0.0.9:5000 actor-1 127.0.0.1:4000"]);
        let leases: Vec<String> = pool.lock().leases.keys().cloned().collect();
        assert_eq!(leases, vec!["alive"], "the live actor keeps its lease");
    }
}
