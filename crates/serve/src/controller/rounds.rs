//! The controller's rounds: each pass decides with `plan` what every deployment needs,
//! then carries the steps out through the `ActorHost` (replica starts, stops, health checks,
//! load readings, reconfigures) and records their outcomes.

use super::*;

impl Controller {
    /// Runs until `shutdown`: every tick (or change) moves each deployment a step toward its
    /// target.
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        loop {
            self.reconcile();
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(TICK) => {}
                _ = self.changed.notified() => {}
            }
        }
    }

    /// One pass: starts what is missing, stops what is too much, checks health, applies
    /// user_config changes, and forgets deleted applications once their replicas are gone.
    pub fn reconcile(self: &Arc<Self>) {
        let mut work: Vec<Work> = Vec::new();
        let mut gone: Vec<String> = Vec::new();
        let mut changed: Vec<String> = Vec::new();
        {
            let mut state = self.lock();
            for (name, app) in state.apps.iter_mut() {
                let before = (app.status(), app.deployments.len());
                let deleting = app.deleting;
                for d in app.deployments.values_mut() {
                    let failed = d.status() == DeploymentStatus::DeployFailed;
                    for step in plan::steps(d.target(deleting), &d.spec.version, &d.replicas, failed) {
                        match step {
                            Step::Start => {
                                let id = new_replica_id();
                                d.replicas.push(Replica {
                                    replica_id: id.clone(),
                                    actor_id: String::new(),
                                    actor_name: format!("SERVE_REPLICA::{name}#{}#{id}", d.spec.name),
                                    version: d.spec.version.clone(),
                                    state: ReplicaState::Starting,
                                    worker_address: String::new(),
                                    node_id: String::new(),
                                    pid: 0,
                                    start_time_s: now_s(),
                                    health_failures: 0,
                                    user_config: d.spec.user_config.clone(),
                                });
                                d.busy.insert(id.clone());
                                work.push(Work::Start {
                                    app: name.clone(),
                                    spec: app.spec.clone(),
                                    deployment: d.spec.clone(),
                                    replica: id,
                                });
                            }
                            Step::Stop(id) => {
                                if let Some(r) = d.replica_mut(&id) {
                                    r.state = ReplicaState::Stopping;
                                }
                                // A stop waits for nothing else the replica is doing.
                                d.busy.insert(id.clone());
                                work.push(Work::Stop { app: name.clone(), deployment: d.spec.clone(), replica: id });
                            }
                        }
                        changed.push(name.clone());
                    }
                    let unplaced = d
                        .replicas
                        .iter()
                        .filter(|r| r.state == ReplicaState::Starting && r.actor_id.is_empty())
                        .filter(|r| now_s() - r.start_time_s > UNPLACED_S)
                        .count();
                    if unplaced > 0 && d.failures == 0 {
                        d.message = format!(
                            "Deployment '{}' has {unplaced} replicas that have taken more than {UNPLACED_S}s to be scheduled: no node has the resources each needs free now ({}).",
                            d.spec.name,
                            serde_json::to_string(&d.spec.resources).unwrap_or_default()
                        );
                    }
                    let now = Instant::now();
                    let period = Duration::from_secs_f64(d.spec.health_check_period_s);
                    for r in d.replicas.iter().filter(|r| r.state == ReplicaState::Running) {
                        if d.busy.contains(&r.replica_id) {
                            continue;
                        }
                        if r.version == d.spec.version && r.user_config != d.spec.user_config {
                            d.busy.insert(r.replica_id.clone());
                            work.push(Work::Reconfigure {
                                app: name.clone(),
                                deployment: d.spec.clone(),
                                replica: r.clone(),
                            });
                        } else if d.checked.get(&r.replica_id).is_none_or(|at| now.duration_since(*at) >= period) {
                            d.busy.insert(r.replica_id.clone());
                            d.checked.insert(r.replica_id.clone(), now);
                            work.push(Work::Check {
                                app: name.clone(),
                                deployment: d.spec.clone(),
                                replica: r.clone(),
                            });
                        }
                    }
                    if let Some(policy) = d.spec.autoscaling_config.as_ref().filter(|_| !deleting && !d.removed) {
                        let at = now_s();
                        if d.load.last_asked.is_none_or(|t| at - t >= policy.measure_every_s()) {
                            d.load.last_asked = Some(at);
                            let running =
                                d.replicas.iter().filter(|r| r.state == ReplicaState::Running).cloned().collect();
                            let ingress = d.spec.name == app.spec.ingress;
                            work.push(Work::Measure {
                                app: name.clone(),
                                deployment: d.spec.name.clone(),
                                replicas: running,
                                ingress,
                            });
                        }
                    }
                    if d.status() == DeploymentStatus::Healthy {
                        d.was_healthy = true;
                    }
                }
                app.deployments.retain(|_, d| !(d.removed && d.replicas.is_empty()));
                if app.status() == AppStatus::Running {
                    app.was_running = true;
                }
                if deleting && app.deployments.values().all(|d| d.replicas.is_empty()) {
                    gone.push(name.clone());
                } else if before != (app.status(), app.deployments.len()) {
                    changed.push(name.clone());
                }
            }
            for name in &gone {
                state.apps.remove(name);
            }
            changed.sort();
            changed.dedup();
            for name in changed.iter().filter(|n| !gone.contains(n)) {
                if let Some(app) = state.apps.get(name) {
                    self.persist(name, app);
                }
            }
        }
        for name in &gone {
            if let Err(e) = self.store.delete_app(name) {
                tracing::error!("cannot forget Serve application {name:?}: {e}");
            }
        }
        if !gone.is_empty() || !changed.is_empty() {
            self.routes_changed.send_modify(|v| *v += 1);
        }
        for w in work {
            let this = self.clone();
            tokio::spawn(async move { this.carry_out(w).await });
        }
    }

    /// Applies `change` to replica `id` of `app`/`deployment` and records the result.
    fn update(&self, app: &str, deployment: &str, id: &str, change: impl FnOnce(&mut Deployment, &str)) {
        self.change_deployment(app, deployment, |d| {
            d.busy.remove(id);
            change(d, id);
        });
    }

    /// Applies `change` to `app`/`deployment`; records and announces it if it changed anything.
    fn change_deployment(&self, app: &str, deployment: &str, change: impl FnOnce(&mut Deployment)) {
        let mut state = self.lock();
        let Some(a) = state.apps.get_mut(app) else { return };
        let before = serde_json::to_vec(&*a).expect("serve state serializes");
        let Some(d) = a.deployments.get_mut(deployment) else { return };
        change(d);
        if d.status() == DeploymentStatus::Healthy {
            d.was_healthy = true;
        }
        if a.status() == AppStatus::Running {
            a.was_running = true;
        }
        // Most outcomes (a passed health check) change nothing: no write, no wake-up.
        let after = serde_json::to_vec(&*a).expect("serve state serializes");
        if after == before {
            return;
        }
        if let Err(e) = self.store.save_app(app, &after) {
            tracing::error!("cannot record Serve application {app:?}: {e}");
        }
        drop(state);
        self.touched();
    }

    async fn carry_out(&self, work: Work) {
        match work {
            Work::Start { app, spec, deployment, replica } => self.start(&app, &spec, &deployment, &replica).await,
            Work::Stop { app, deployment, replica } => self.stop(&app, &deployment, &replica).await,
            Work::Check { app, deployment, replica } => self.check(&app, &deployment, &replica).await,
            Work::Reconfigure { app, deployment, replica } => self.reconfigure(&app, &deployment, &replica).await,
            Work::Measure { app, deployment, replicas, ingress } => {
                self.measure(&app, &deployment, &replicas, ingress).await
            }
        }
    }

    async fn start(&self, app: &str, spec: &AppSpec, d: &DeploymentSpec, id: &str) {
        let name = format!("SERVE_REPLICA::{app}#{}#{id}", d.name);
        let identity = serde_json::json!({
            "app": app,
            "deployment": d.name,
            "replica_id": id,
            "user_config": d.user_config,
            "max_ongoing_requests": d.max_ongoing_requests,
        });
        let definition = match d.definition_bytes() {
            Ok(bytes) => bytes,
            Err(e) => return self.start_failed(app, &d.name, id, e),
        };
        let new = NewReplica {
            name: name.clone(),
            class: wire::REPLICA_CLASS,
            methods: wire::REPLICA_METHODS,
            class_name: format!("ServeReplica:{app}:{}", d.name),
            python: spec.python.clone(),
            resources: d.resources.clone(),
            env: d.env.clone(),
            // Room for control calls (health, stop) beside a full load of requests.
            max_concurrency: d.max_ongoing_requests + 4,
            args: wire::args(vec![Arg::Bytes(definition), Arg::Str(identity.to_string())]),
        };
        let placed = match self.host.create(new).await {
            Ok(placed) => placed,
            Err(e) => return self.start_failed(app, &d.name, id, e),
        };
        let placed_at = placed.clone();
        self.update(app, &d.name, id, |dep, id| {
            if let Some(r) = dep.replica_mut(id) {
                r.actor_id = placed_at.actor_id.clone();
                r.worker_address = placed_at.worker_address.clone();
                r.node_id = placed_at.node_id.clone();
            }
            dep.busy.insert(id.to_string());
        });
        let ready =
            self.host.call(&placed.actor_id, &placed.worker_address, "__serve_ready__", wire::args(vec![])).await;
        let outcome = ready.map_err(|e| e.to_string()).and_then(|data| wire::json_reply(&data));
        match outcome {
            Ok(reply) if reply["ok"] == true => {
                let pid = reply["pid"].as_u64().unwrap_or(0) as u32;
                let mut stale = false;
                self.update(app, &d.name, id, |dep, id| {
                    dep.failures = 0;
                    dep.message.clear();
                    match dep.replica_mut(id) {
                        Some(r) if r.state == ReplicaState::Starting => {
                            r.state = ReplicaState::Running;
                            r.pid = pid;
                        }
                        // Stopped (or forgotten) while it started.
                        _ => stale = true,
                    }
                });
                if stale {
                    self.host.kill(&placed.actor_id, &placed.worker_address, &name).await;
                }
            }
            Ok(reply) => {
                let error = reply["error"].as_str().unwrap_or("the constructor failed").to_string();
                self.host.kill(&placed.actor_id, &placed.worker_address, &name).await;
                self.start_failed(app, &d.name, id, error);
            }
            Err(e) => {
                self.host.kill(&placed.actor_id, &placed.worker_address, &name).await;
                self.start_failed(app, &d.name, id, e);
            }
        }
    }

    fn start_failed(&self, app: &str, deployment: &str, id: &str, error: String) {
        tracing::warn!("a replica of {app}/{deployment} failed to start: {error}");
        self.update(app, deployment, id, |d, id| {
            // A replica stopped while it started failed for that reason alone.
            let starting = d.replicas.iter().any(|r| r.replica_id == id && r.state == ReplicaState::Starting);
            d.replicas.retain(|r| r.replica_id != id);
            if !starting {
                return;
            }
            d.failures += 1;
            d.message = format!(
                "The deployment failed to start {} times in a row. This may be due to a problem with its constructor or initial health check failing. See controller logs for details. Error:\n{error}",
                d.failures
            );
        });
    }

    async fn stop(&self, app: &str, d: &DeploymentSpec, id: &str) {
        let replica = {
            let state = self.lock();
            state
                .apps
                .get(app)
                .and_then(|a| a.deployments.get(&d.name))
                .and_then(|dep| dep.replicas.iter().find(|r| r.replica_id == id).cloned())
        };
        let Some(r) = replica else { return };
        // A replica still starting has no actor yet; its start sees it stopped and ends it.
        if !r.actor_id.is_empty() {
            let args = wire::args(vec![
                Arg::Float(d.graceful_shutdown_wait_loop_s),
                Arg::Float(d.graceful_shutdown_timeout_s),
            ]);
            let grace = Duration::from_secs_f64(d.graceful_shutdown_timeout_s + 5.0);
            let _ = tokio::time::timeout(grace, self.host.call(&r.actor_id, &r.worker_address, "__serve_stop__", args))
                .await;
            self.host.kill(&r.actor_id, &r.worker_address, &r.actor_name).await;
        }
        self.update(app, &d.name, id, |dep, id| {
            dep.replicas.retain(|r| r.replica_id != id);
            dep.checked.remove(id);
        });
    }

    async fn check(&self, app: &str, d: &DeploymentSpec, r: &Replica) {
        let timeout = Duration::from_secs_f64(d.health_check_timeout_s);
        let call = self.host.call(&r.actor_id, &r.worker_address, "__serve_health__", wire::args(vec![]));
        let verdict = match tokio::time::timeout(timeout, call).await {
            Err(_) => Err(format!("the health check did not answer within {}s", d.health_check_timeout_s)),
            Ok(Err(CallError::Died(e))) => {
                tracing::warn!("replica {} of {app}/{} died: {e}", r.replica_id, d.name);
                self.update(app, &d.name, &r.replica_id, |dep, id| dep.replicas.retain(|x| x.replica_id != id));
                // Unreachable is not always dead: make sure it does not run on unseen.
                self.host.kill(&r.actor_id, &r.worker_address, &r.actor_name).await;
                return;
            }
            Ok(Err(CallError::Failed(e))) => Err(e),
            Ok(Ok(data)) => match wire::json_reply(&data) {
                Ok(reply) if reply["ok"] == true => Ok(()),
                Ok(reply) => Err(reply["error"].as_str().unwrap_or("the health check failed").to_string()),
                Err(e) => Err(e),
            },
        };
        let mut replace = false;
        self.update(app, &d.name, &r.replica_id, |dep, id| {
            let Some(x) = dep.replica_mut(id) else { return };
            match &verdict {
                Ok(()) => x.health_failures = 0,
                Err(e) => {
                    x.health_failures += 1;
                    replace = x.health_failures >= HEALTH_FAILURES;
                    dep.message = format!("A replica's health check failed: {e}");
                }
            }
            if replace {
                dep.replicas.retain(|x| x.replica_id != id);
            }
        });
        if replace {
            tracing::warn!(
                "replica {} of {app}/{} failed {HEALTH_FAILURES} health checks: replacing it",
                r.replica_id,
                d.name
            );
            self.host.kill(&r.actor_id, &r.worker_address, &r.actor_name).await;
        }
    }

    /// Asks the replicas how many requests they run, adds those the proxy holds for the
    /// application (its ingress only), and lets the autoscaler decide.
    async fn measure(&self, app: &str, deployment: &str, replicas: &[Replica], ingress: bool) {
        let asks = replicas.iter().map(|r| async move {
            let call = self.host.call(&r.actor_id, &r.worker_address, "__serve_metrics__", wire::args(vec![]));
            match tokio::time::timeout(METRICS_TIMEOUT, call).await {
                Ok(Ok(data)) => wire::json_reply(&data).ok().map(|v| v["in_flight"].as_f64().unwrap_or(0.0)),
                _ => None,
            }
        });
        let answers: Vec<f64> = futures_util::future::join_all(asks).await.into_iter().flatten().collect();
        // With no replica answering, what waits still counts (a saturated deployment's
        // replicas are the slowest to answer), but metrics_health shows the replicas' load
        // is not fresh.
        let fresh = !answers.is_empty() || replicas.is_empty();
        let running: f64 = answers.iter().sum();
        let queued = if ingress { self.queued.lock().expect("queue lock").get(app).copied().unwrap_or(0) } else { 0 };
        let in_handles =
            self.handle_queued.lock().expect("handle queues lock").total(app, deployment, std::time::Instant::now());
        let total = running + (queued.max(0) + in_handles) as f64;
        self.change_deployment(app, deployment, |d| {
            let Some(policy) = d.spec.autoscaling_config.clone() else { return };
            let now = now_s();
            d.load.record(now, total, &policy, fresh);
            let current = d.wanted();
            let next = d.load.decide(&policy, current, now);
            if next != current {
                tracing::info!("autoscaling {app}/{deployment} from {current} to {next} replicas (load {total:.1})");
                d.autoscaled = Some(next);
                d.was_healthy = false;
            }
        });
    }

    async fn reconfigure(&self, app: &str, d: &DeploymentSpec, r: &Replica) {
        let config = d.user_config.clone().unwrap_or(serde_json::Value::Null);
        let args = wire::args(vec![Arg::Str(config.to_string())]);
        let reply = self.host.call(&r.actor_id, &r.worker_address, "__serve_reconfigure__", args).await;
        let outcome = reply.map_err(|e| e.to_string()).and_then(|data| wire::json_reply(&data));
        let failed = !matches!(&outcome, Ok(reply) if reply["ok"] == true);
        self.update(app, &d.name, &r.replica_id, |dep, id| match outcome {
            Ok(reply) if reply["ok"] == true => {
                if let Some(x) = dep.replica_mut(id) {
                    x.user_config = d.user_config.clone();
                }
            }
            Ok(reply) => {
                // As a failed constructor: the replica is replaced and the failure counted.
                dep.message = format!("reconfigure failed: {}", reply["error"].as_str().unwrap_or(""));
                dep.failures += 1;
                dep.replicas.retain(|x| x.replica_id != id);
            }
            Err(e) => {
                dep.message = format!("reconfigure failed: {e}");
                dep.replicas.retain(|x| x.replica_id != id);
            }
        });
        if failed {
            // Forgotten by the deployment: it must not keep running (and holding its
            // resources) unseen.
            self.host.kill(&r.actor_id, &r.worker_address, &r.actor_name).await;
        }
    }
}

pub(super) enum Work {
    Measure { app: String, deployment: String, replicas: Vec<Replica>, ingress: bool },
    Start { app: String, spec: AppSpec, deployment: DeploymentSpec, replica: String },
    Stop { app: String, deployment: DeploymentSpec, replica: String },
    Check { app: String, deployment: DeploymentSpec, replica: Replica },
    Reconfigure { app: String, deployment: DeploymentSpec, replica: Replica },
}
