//! Starting worker processes in their runtime_env, and their registration.

use super::*;

impl WorkerPool {
    /// The runtime_env of a kind of worker, ready on this node.
    async fn prepare(&self, kind: &WorkerKind) -> Result<Option<crate::envs::Prepared>, Status> {
        if kind.runtime_env.is_empty() {
            return Ok(None);
        }
        let fail = |e: String| {
            let message = format!("runtime_env setup failed: {e}");
            let details = tonic::codegen::Bytes::from_static(oxray_proto::RUNTIME_ENV_SETUP_FAILED);
            Status::with_details(tonic::Code::FailedPrecondition, message, details)
        };
        let map: serde_json::Map<String, serde_json::Value> =
            serde_json::from_str(&kind.runtime_env).map_err(|e| fail(format!("not a JSON object: {e}")))?;
        let spec = oxray_runtime_env::RuntimeEnv::parse(&map).map_err(|e| fail(e.to_string()))?;
        let log_path = self.env.logs.join("runtime_env_setup.log");
        let mut log = tokio::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .await
            .map_err(|e| fail(format!("cannot open {}: {e}", log_path.display())))?;
        self.envs.prepare(&spec, &kind.python, &mut log).await.map(Some).map_err(fail)
    }

    /// Starts a worker process: forked by its kind's zygote when the kind preloads modules
    /// (started as any other when the zygote cannot fork).
    pub(super) async fn spawn(&self, kind: &WorkerKind) -> Result<Worker, Status> {
        let prepared = self.prepare(kind).await?;
        let id = random_id();
        let (tx, rx) = oneshot::channel();
        {
            let mut state = self.lock();
            state.starting.insert(id.clone(), tx);
            state.records.launched(&id, worker_records::now_ms());
        }
        let launch = Launch { pool: self, id: &id };
        let started = self.start_process(kind, &id, prepared.as_ref(), rx).await;
        // Finished, well or not: recorded below rather than as abandoned.
        std::mem::forget(launch);
        let mut state = self.lock();
        state.starting.remove(&id);
        match &started {
            Ok(w) => state.records.started(&id, w.child.id().unwrap_or(0), worker_records::now_ms()),
            Err(e) => {
                state.records.ended(&id, (ExitType::SystemError, e.message().to_string()), worker_records::now_ms())
            }
        }
        started
    }

    /// A Python process of `kind` (not yet started): its interpreter, runtime_env and
    /// node, dying with this agent.
    fn python_command(&self, kind: &WorkerKind, prepared: Option<&crate::envs::Prepared>) -> tokio::process::Command {
        // A runtime_env with `pip` runs the worker with its virtualenv's interpreter.
        let venv_python = prepared.and_then(|p| p.venv.as_ref()).map(|v| v.join("bin/python").display().to_string());
        let mut command = tokio::process::Command::new(venv_python.as_deref().unwrap_or(&kind.python));
        command
            .env("OXRAY_ADDRESS", &self.env.head_address)
            .env("OXRAY_AUTH_TOKEN", &self.env.token)
            .env("OXRAY_NODE_IP", &self.env.node_ip)
            .env("PYTHONUNBUFFERED", "1")
            .envs(kind.env_vars.iter().map(|(k, v)| (k, v)))
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true);
        if let Some(prepared) = prepared {
            prepared.apply(&mut command);
        }
        // A worker dies with its agent, as it would with its machine: callers then see the
        // node's loss and run the work elsewhere, instead of talking to orphans.
        // SAFETY: the closure runs in the child between fork and exec and only makes one
        // async-signal-safe system call.
        unsafe {
            command.pre_exec(|| nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL).map_err(Into::into));
        }
        command
    }

    /// A worker forked by the zygote of its kind (started now if there is none, or if the
    /// last one was killed), or why not.
    async fn fork(
        &self,
        kind: &WorkerKind,
        prepared: Option<&crate::envs::Prepared>,
        id: &str,
        env: &[(String, String)],
        out: &std::path::Path,
        err: &std::path::Path,
    ) -> Result<zygote::Forked, String> {
        let asking = {
            // Under the lock, so that two workers asked at once share one new zygote.
            let mut state = self.lock();
            let zygote = match state.zygotes.get(kind).filter(|z| !z.gone()) {
                Some(zygote) => zygote.clone(),
                None => {
                    let mut command = self.python_command(kind, prepared);
                    let log = self.env.logs.join(format!("zygote-{}.err", random_id()));
                    let log =
                        std::fs::File::create(&log).map_err(|e| format!("cannot create {}: {e}", log.display()))?;
                    command.stderr(log);
                    let zygote = Arc::new(zygote::Zygote::start(command).map_err(|e| format!("cannot start: {e}"))?);
                    state.zygotes.insert(kind.clone(), zygote.clone());
                    zygote
                }
            };
            zygote.ask()
        };
        asking.fork(id, env, out, err).await
    }

    /// A worker process of `kind` started by this agent, writing to `out` and `err`.
    fn spawn_worker(
        &self,
        kind: &WorkerKind,
        prepared: Option<&crate::envs::Prepared>,
        env: Vec<(String, String)>,
        out: std::fs::File,
        err: std::fs::File,
    ) -> Result<tokio::process::Child, Status> {
        let mut command = self.python_command(kind, prepared);
        command.args(["-m", "oxray._private.worker_main"]).envs(env).stdout(out).stderr(err);
        let python = command.as_std().get_program().to_string_lossy().into_owned();
        command.spawn().map_err(|e| Status::failed_precondition(format!("cannot start a worker with {python}: {e}")))
    }

    async fn start_process(
        &self,
        kind: &WorkerKind,
        id: &str,
        prepared: Option<&crate::envs::Prepared>,
        rx: oneshot::Receiver<(u16, u32)>,
    ) -> Result<Worker, Status> {
        let out_path = self.env.logs.join(format!("worker-{id}.out"));
        let err_path = self.env.logs.join(format!("worker-{id}.err"));
        let create = |path: &std::path::Path| {
            std::fs::File::create(path).map_err(|e| Status::internal(format!("cannot create {}: {e}", path.display())))
        };
        let (log, err) = (create(&out_path)?, create(&err_path)?);
        let env = vec![
            ("OXRAY_WORKER_ID".to_string(), id.to_string()),
            ("OXRAY_AGENT_ADDRESS".to_string(), self.env.agent_address.lock().expect("agent address lock").clone()),
            ("OXRAY_NODE_ID".to_string(), self.env.node_id.lock().expect("node id lock").clone()),
        ];
        let forked = if kind.preloads() {
            match self.fork(kind, prepared, id, &env, &out_path, &err_path).await {
                Ok(forked) => Some(forked),
                Err(why) => {
                    tracing::info!(worker = %id, "the worker is started on its own, as its zygote cannot fork it: {why}");
                    None
                }
            }
        } else {
            None
        };
        let mut child = match forked {
            Some(forked) => Process::Forked(forked),
            None => Process::Spawned(self.spawn_worker(kind, prepared, env, log, err)?),
        };
        self.lock().records.spawned(id, child.id().unwrap_or(0));
        let registered = tokio::select! {
            r = tokio::time::timeout(REGISTER_TIMEOUT, rx) => r.ok().and_then(Result::ok),
            _ = child.wait() => None,
        };
        let Some((port, _pid)) = registered else {
            let log = std::fs::read_to_string(&err_path).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(5).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            return Err(Status::failed_precondition(format!("the worker process did not start: {}", tail.join(" | "))));
        };
        tracing::info!(worker = %id, port, "worker started");
        let address = format!("{}:{port}", self.env.node_ip);
        Ok(Worker { id: id.to_string(), kind: kind.clone(), address, child, since: std::time::Instant::now() })
    }

    /// A worker this pool started has told where it listens; false when none by that id is
    /// starting.
    pub(crate) fn worker_registered(&self, worker_id: &str, port: u16, pid: u32) -> bool {
        let waiting = self.lock().starting.remove(worker_id);
        waiting.map(|tx| tx.send((port, pid))).is_some()
    }
}

/// A worker being started: if its start is dropped midway (the lease request that wanted
/// it went away; its process is then killed), it is no longer starting and its record ends.
struct Launch<'a> {
    pool: &'a WorkerPool,
    id: &'a str,
}

impl Drop for Launch<'_> {
    fn drop(&mut self) {
        let mut state = self.pool.lock();
        state.starting.remove(self.id);
        let why = (ExitType::SystemError, "its start was abandoned: the request for it went away".to_string());
        state.records.ended(self.id, why, worker_records::now_ms());
    }
}
