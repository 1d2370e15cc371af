//! Tasks of one resource shape share leases: a leased worker runs queued tasks one after another and is returned only when none is left, with at most one lease request per shape outstanding.

use super::*;

/// Tasks share leases when they ask for the same resources, environment and placement.
pub(super) fn shape_key(resources: &ResourceSet, env: &Env, strategy: &Strategy) -> String {
    format!("{:?} {:?} {:?}", resources.to_map(), env, strategy)
}

impl Submitter {
    /// How many tasks of the shape wait for a worker: what the cluster is told it lacks.
    pub(super) fn backlog(&self, key: &str) -> u32 {
        self.shapes().get(key).map_or(0, |shape| shape.waiting.len() as u32)
    }

    pub(super) fn shapes(&self) -> std::sync::MutexGuard<'_, HashMap<String, Shape>> {
        self.shapes.lock().expect("shapes lock")
    }

    pub(super) fn enqueue(self: &Arc<Self>, resources: ResourceSet, env: Env, strategy: Strategy, queued: Queued) {
        if self.is_closing() {
            let _ = queued.reply.send(Err(NoReply::Failed(DISCONNECTED.into())));
            return;
        }
        let key = shape_key(&resources, &env, &strategy);
        let (request, wake) = {
            let mut shapes = self.shapes();
            let shape = shapes.entry(key.clone()).or_default();
            shape.waiting.push_back(queued);
            if shape.idle > 0 {
                (false, Some(shape.wake.clone()))
            } else {
                (!std::mem::replace(&mut shape.requesting, true), None)
            }
        };
        if let Some(wake) = wake {
            wake.notify_one();
        }
        if request {
            self.spawn_drive(key, Want { resources, env, strategy });
        }
    }

    /// A plain function between the spawns keeps the recursive future's type nameable.
    fn spawn_drive(self: &Arc<Self>, key: String, want: Want) {
        tokio::spawn(self.clone().drive(key, want));
    }

    /// Gets a lease and runs waiting tasks of the shape on it until none is left.
    async fn drive(self: Arc<Self>, key: String, want: Want) {
        let lease = match self.lease_patiently(&want.resources, &want.env, &want.strategy, LeaseFor::Task, false).await
        {
            Ok(lease) => lease,
            Err(e) => {
                // The agent refused the shape (it can never fit) or is gone: fail what waits.
                let waiting: Vec<Queued> = {
                    let mut shapes = self.shapes();
                    let shape = shapes.entry(key).or_default();
                    shape.requesting = false;
                    shape.waiting.drain(..).collect()
                };
                for q in waiting {
                    let why = format!("no worker: {e}");
                    let _ =
                        q.reply.send(Err(if e.runtime_env { NoReply::RuntimeEnv(why) } else { NoReply::Failed(why) }));
                }
                return;
            }
        };
        self.task_leases.lock().expect("task leases lock").insert(lease.reply.lease_id.clone(), lease.clone());
        if self.is_closing() {
            // `close` may have looked at the leases before this one was there.
            let _ = self.give_back(&lease, false).await;
            self.fail_waiting();
            return;
        }
        let more = {
            let mut shapes = self.shapes();
            let shape = shapes.entry(key.clone()).or_default();
            shape.requesting = shape.waiting.len() > 1;
            shape.requesting
        };
        if more {
            self.spawn_drive(key.clone(), want.clone());
        }
        // Once per lease: its connection lasts as long as it does (a broken one ends it).
        self.pushes.on_node(&lease.reply.worker_address, &lease.reply.node_id);
        // SPREAD chooses a node per lease, so each of its leases runs one task: a kept lease
        // would keep the queued tasks on one node.
        let one_task = want.strategy == Strategy::Spread;
        let mut ran = false;
        loop {
            let next =
                if one_task && ran { None } else { self.shapes().get_mut(&key).and_then(|s| s.waiting.pop_front()) };
            let Some(queued) = next else {
                if !one_task && self.linger(&key).await {
                    continue;
                }
                // Losing this call only delays the worker's reuse.
                let _ = self.give_back(&lease, false).await;
                if one_task {
                    self.request_more(&key, &want);
                }
                return;
            };
            ran = true;
            let task_id = queued.push.task_id.clone();
            self.running.lock().expect("running lock").insert(task_id.clone(), lease.reply.worker_address.clone());
            let mut push = queued.push;
            push.gpu_ids = lease.reply.gpu_ids.clone();
            self.note_running(&task_id, Some(&lease.reply));
            let reply = self.pushes.push(&lease.reply.worker_address, None, push).await;
            self.running.lock().expect("running lock").remove(&task_id);
            // A broken worker, or one that ends after this reply (`max_calls`), runs nothing
            // more: its lease goes back first, and the agent says why if it ended the worker.
            let retire = reply.as_ref().map_or(true, |r| r.worker_exits);
            let ended = if retire { self.give_back(&lease, true).await.unwrap_or_default() } else { String::new() };
            let reply = reply.map_err(|cause| {
                if ended.is_empty() {
                    NoReply::Failed(format!("the worker died or broke off: {cause}"))
                } else {
                    NoReply::OutOfMemory(ended)
                }
            });
            let _ = queued.reply.send(reply);
            if retire {
                self.request_more(&key, &want);
                return;
            }
        }
    }

    /// Asks for another lease of the shape if tasks wait and none is being asked for.
    fn request_more(self: &Arc<Self>, key: &str, want: &Want) {
        let again = {
            let mut shapes = self.shapes();
            let shape = shapes.entry(key.to_string()).or_default();
            !shape.waiting.is_empty() && !std::mem::replace(&mut shape.requesting, true)
        };
        if again {
            self.spawn_drive(key.to_string(), want.clone());
        }
    }

    /// Keeps a lease whose queue ran empty for `LEASE_LINGER`: a caller running tasks one
    /// after another submits the next as soon as it has a result, and the kept lease spares
    /// that task a lease round trip. Returns whether a task came.
    async fn linger(&self, key: &str) -> bool {
        let wake = {
            let mut shapes = self.shapes();
            let Some(shape) = shapes.get_mut(key) else { return false };
            if !shape.waiting.is_empty() {
                return true;
            }
            shape.idle += 1;
            shape.wake.clone()
        };
        let _ = tokio::time::timeout(LEASE_LINGER, wake.notified()).await;
        let mut shapes = self.shapes();
        let shape = shapes.entry(key.to_string()).or_default();
        shape.idle -= 1;
        !shape.waiting.is_empty()
    }

    fn is_closing(&self) -> bool {
        self.closing.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Fails every task waiting for a worker: this process is disconnecting.
    fn fail_waiting(&self) {
        let waiting: Vec<Queued> = self.shapes().values_mut().flat_map(|s| s.waiting.drain(..)).collect();
        for q in waiting {
            let _ = q.reply.send(Err(NoReply::Failed(DISCONNECTED.into())));
        }
    }

    /// As this process disconnects (and may live on): no task is queued or leased for any
    /// more, what waits fails, and every task worker goes back, an idle one for reuse and
    /// one still running a task of this process retired (nobody waits for its result).
    pub async fn close(&self) {
        self.closing.store(true, std::sync::atomic::Ordering::SeqCst);
        self.fail_waiting();
        let leases: Vec<Lease> = self.task_leases.lock().expect("task leases lock").values().cloned().collect();
        let busy: std::collections::HashSet<String> =
            self.running.lock().expect("running lock").values().cloned().collect();
        for lease in &leases {
            if let Err(e) = self.give_back(lease, busy.contains(&lease.reply.worker_address)).await {
                tracing::debug!("cannot give a worker back: {e}");
            }
        }
    }
}

const DISCONNECTED: &str = "this process disconnected from the cluster";
