//! Runs job entrypoints: `/bin/sh -c` in a process group of its own, output in one log file
//! per job, stop by SIGTERM then SIGKILL, the outcome reported to the head.

use super::reporter::Reporter;
use crate::envs::{EnvCache, Prepared};
use crate::gpus::SharedGpus;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use oxray_proto::v1;
use oxray_runtime_env::RuntimeEnv;
use oxray_types::error_types;
use std::collections::HashMap;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncSeekExt, AsyncWriteExt};
use tokio::sync::watch;

/// How long a stopped entrypoint gets between SIGTERM and SIGKILL (Ray's default).
const STOP_GRACE: Duration = Duration::from_secs(3);
/// Ray keeps this much of the log's end in a failed job's message.
const TAIL_CHARS: usize = 20_000;

pub struct JobHandle {
    pid: AtomicU32,
    stop_requested: AtomicBool,
    finished: watch::Sender<bool>,
}

impl JobHandle {
    pub fn is_finished(&self) -> bool {
        *self.finished.borrow()
    }

    pub fn subscribe(&self) -> watch::Receiver<bool> {
        self.finished.subscribe()
    }
}

/// What every entrypoint gets in its environment besides the runtime_env's.
#[derive(Clone)]
pub struct JobContext {
    pub head_address: String,
    pub token: String,
    pub node_id: Arc<Mutex<String>>,
    pub dashboard_url: Arc<Mutex<String>>,
}

/// How long a job's start waits for the head to take its RUNNING report.
const REPORT_PATIENCE: std::time::Duration = std::time::Duration::from_secs(2);

pub struct Runner {
    jobs: Mutex<HashMap<String, Arc<JobHandle>>>,
    logs: PathBuf,
    cache: Arc<EnvCache>,
    reporter: Reporter,
    context: JobContext,
    gpus: SharedGpus,
}

fn report(ctx: &JobContext, id: &str, phase: v1::JobPhase) -> v1::JobReport {
    v1::JobReport {
        submission_id: id.to_string(),
        node_id: ctx.node_id.lock().expect("node id lock").clone(),
        phase: phase as i32,
        ..Default::default()
    }
}

impl Runner {
    pub fn new(logs: PathBuf, cache: Arc<EnvCache>, reporter: Reporter, context: JobContext, gpus: SharedGpus) -> Self {
        Self { jobs: Mutex::new(HashMap::new()), logs, cache, reporter, context, gpus }
    }

    pub fn log_path(&self, id: &str) -> PathBuf {
        self.logs.join(format!("job-driver-{id}.log"))
    }

    pub fn handle(&self, id: &str) -> Option<Arc<JobHandle>> {
        self.jobs.lock().expect("jobs lock").get(id).cloned()
    }

    /// Accepts a job (again, idempotently) and runs it in the background.
    pub fn start(self: &Arc<Self>, request: v1::StartJobRequest) -> Result<(), String> {
        let env: serde_json::Map<String, serde_json::Value> = serde_json::from_str(&request.runtime_env_json)
            .map_err(|e| format!("runtime_env is not a JSON object: {e}"))?;
        let spec = RuntimeEnv::parse(&env).map_err(|e| e.to_string())?;
        let handle = {
            let mut jobs = self.jobs.lock().expect("jobs lock");
            if jobs.contains_key(&request.submission_id) {
                return Ok(());
            }
            let handle = Arc::new(JobHandle {
                pid: AtomicU32::new(0),
                stop_requested: AtomicBool::new(false),
                finished: watch::channel(false).0,
            });
            jobs.insert(request.submission_id.clone(), handle.clone());
            handle
        };
        let gpus = request.resources.get("GPU").copied().unwrap_or(0.0).ceil() as u32;
        let (id, log) = (request.submission_id.clone(), self.log_path(&request.submission_id));
        tokio::spawn(super::log_copy::follow(self.reporter.head(), log, id, handle.subscribe()));
        tokio::spawn(self.clone().run(request, spec, gpus, handle));
        Ok(())
    }

    async fn run(self: Arc<Self>, request: v1::StartJobRequest, spec: RuntimeEnv, gpus: u32, handle: Arc<JobHandle>) {
        let id = request.submission_id.clone();
        let gpu_ids = self.gpus.lock().expect("gpu lock").take(gpus);
        let outcome = self.execute(&request, &spec, gpu_ids.as_deref(), &handle).await;
        if let Some(ids) = gpu_ids {
            self.gpus.lock().expect("gpu lock").give_back(&ids);
        }
        let mut done = report(&self.context, &id, v1::JobPhase::Finished);
        done.pid = handle.pid.load(Ordering::SeqCst);
        match outcome {
            Outcome::Exited(_) | Outcome::Signalled(_) if handle.stop_requested.load(Ordering::SeqCst) => {
                done.stopped = true
            }
            Outcome::Exited(0) => done.exit_code = Some(0),
            Outcome::Exited(code) | Outcome::Signalled(code) => {
                done.exit_code = Some(code);
                done.error_type = error_types::COMMAND_ERROR.into();
                done.message = failure_message(code, &self.log_path(&id)).await;
            }
            Outcome::Failed { error_type, message } => {
                done.stopped = handle.stop_requested.load(Ordering::SeqCst);
                done.error_type = error_type.into();
                done.message = message;
            }
        }
        tracing::info!(job = %id, stopped = done.stopped, exit_code = ?done.exit_code, "job finished");
        self.reporter.send(done);
        handle.finished.send_replace(true);
    }

    async fn execute(
        &self,
        request: &v1::StartJobRequest,
        spec: &RuntimeEnv,
        gpus: Option<&[u32]>,
        handle: &JobHandle,
    ) -> Outcome {
        let id = &request.submission_id;
        let log_path = self.log_path(id);
        let mut log = match open_log(&log_path).await {
            Ok(f) => f,
            Err(e) => {
                return Outcome::Failed {
                    error_type: error_types::START_ERROR,
                    message: format!("cannot open the job log {}: {e}", log_path.display()),
                }
            }
        };
        let prepared = match self.cache.prepare(spec, "python3", &mut log).await {
            Ok(p) => p,
            Err(e) => {
                let message = format!("runtime_env setup failed: {e}");
                let _ = log.write_all(format!("{message}\n").as_bytes()).await;
                return Outcome::Failed { error_type: error_types::RUNTIME_ENV_SETUP_FAILURE, message };
            }
        };
        if handle.stop_requested.load(Ordering::SeqCst) {
            return Outcome::Failed { error_type: "", message: "Job was intentionally stopped.".into() };
        }
        let _ = log.write_all(format!("Running entrypoint for job {id}: {}\n", request.entrypoint).as_bytes()).await;
        // RUNNING before the entrypoint can print: a client that sees its first line sees
        // the job running (the pid follows once it is known).
        self.reporter.send_and_wait(report(&self.context, id, v1::JobPhase::Running), REPORT_PATIENCE).await;
        let mut child =
            match self.command(&request.entrypoint, id, &prepared, &request.runtime_env_json, gpus, &log).await {
                Ok(c) => c,
                Err(e) => {
                    let message = format!("Job entrypoint command failed to start: {e}");
                    let _ = log.write_all(format!("{message}\n").as_bytes()).await;
                    return Outcome::Failed { error_type: error_types::START_ERROR, message };
                }
            };
        let pid = child.id().unwrap_or(0);
        handle.pid.store(pid, Ordering::SeqCst);
        let mut running = report(&self.context, id, v1::JobPhase::Running);
        running.pid = pid;
        self.reporter.send(running);
        // A stop that arrived before the pid was known.
        if handle.stop_requested.load(Ordering::SeqCst) {
            signal_job(pid, Signal::SIGTERM);
        }
        match child.wait().await {
            Ok(status) => match (status.code(), status.signal()) {
                (Some(code), _) => Outcome::Exited(code),
                (None, Some(sig)) => Outcome::Signalled(-sig),
                _ => Outcome::Exited(-1),
            },
            Err(e) => Outcome::Failed {
                error_type: error_types::COMMAND_ERROR,
                message: format!("lost track of the entrypoint: {e}"),
            },
        }
    }

    async fn command(
        &self,
        entrypoint: &str,
        id: &str,
        prepared: &Prepared,
        runtime_env_json: &str,
        gpus: Option<&[u32]>,
        log: &tokio::fs::File,
    ) -> std::io::Result<tokio::process::Child> {
        let out = log.try_clone().await?.into_std().await;
        let err = out.try_clone()?;
        let mut cmd = tokio::process::Command::new("/bin/sh");
        cmd.arg("-c")
            .arg(entrypoint)
            .stdin(std::process::Stdio::null())
            .stdout(out)
            .stderr(err)
            .process_group(0)
            .kill_on_drop(false);
        cmd.env("PYTHONUNBUFFERED", "1")
            .env("OXRAY_ADDRESS", &self.context.head_address)
            // As Ray sets them for a job's driver: scripts read them to find their cluster.
            .env("RAY_ADDRESS", &self.context.head_address)
            .env("OXRAY_AUTH_TOKEN", &self.context.token)
            .env("OXRAY_JOB_ID", id)
            .env("OXRAY_NODE_ID", self.context.node_id.lock().expect("node id lock").as_str())
            .env("OXRAY_DASHBOARD_URL", self.context.dashboard_url.lock().expect("dashboard url lock").as_str());
        if let Some(ids) = gpus {
            let list: Vec<String> = ids.iter().map(u32::to_string).collect();
            cmd.env("CUDA_VISIBLE_DEVICES", list.join(","));
        }
        // The job's tasks and actors inherit its runtime_env (merged with their own).
        cmd.env("OXRAY_JOB_RUNTIME_ENV", runtime_env_json);
        prepared.apply(&mut cmd);
        cmd.spawn()
    }

    /// Asks the job to stop; false when it is not running here.
    pub fn stop(&self, id: &str) -> bool {
        let Some(handle) = self.handle(id).filter(|h| !h.is_finished()) else { return false };
        handle.stop_requested.store(true, Ordering::SeqCst);
        let pid = handle.pid.load(Ordering::SeqCst);
        if pid != 0 {
            signal_job(pid, Signal::SIGTERM);
            tokio::spawn(async move {
                let mut finished = handle.subscribe();
                let ended = tokio::time::timeout(STOP_GRACE, finished.wait_for(|f| *f)).await;
                if ended.is_err() {
                    signal_job(handle.pid.load(Ordering::SeqCst), Signal::SIGKILL);
                }
            });
        }
        true
    }

    /// Whether an entrypoint runs here.
    pub fn any_running(&self) -> bool {
        self.jobs.lock().expect("jobs lock").values().any(|handle| !handle.is_finished())
    }

    /// Stops every running job, for the agent's own shutdown.
    pub async fn stop_all(&self) {
        let handles: Vec<(String, Arc<JobHandle>)> =
            self.jobs.lock().expect("jobs lock").iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        for (id, handle) in &handles {
            if !handle.is_finished() {
                self.stop(id);
            }
        }
        for (_, handle) in handles {
            let mut finished = handle.subscribe();
            let _ = tokio::time::timeout(STOP_GRACE + Duration::from_secs(1), finished.wait_for(|f| *f)).await;
        }
    }
}

enum Outcome {
    Exited(i32),
    Signalled(i32),
    Failed { error_type: &'static str, message: String },
}

fn signal_job(pid: u32, signal: Signal) {
    if pid != 0 {
        let _ = killpg(Pid::from_raw(pid as i32), signal);
    }
}

async fn open_log(path: &Path) -> std::io::Result<tokio::fs::File> {
    if let Some(dir) = path.parent() {
        tokio::fs::create_dir_all(dir).await?;
    }
    tokio::fs::OpenOptions::new().create(true).append(true).open(path).await
}

/// Ray's message for a command that failed, with the end of its log.
async fn failure_message(code: i32, log: &Path) -> String {
    let tail = read_tail(log, TAIL_CHARS * 4).await.unwrap_or_default();
    let tail: String = {
        let chars: Vec<char> = tail.chars().collect();
        chars[chars.len().saturating_sub(TAIL_CHARS)..].iter().collect()
    };
    if tail.trim().is_empty() {
        format!("Job entrypoint command failed with exit code {code}. No logs available.")
    } else {
        format!("Job entrypoint command failed with exit code {code}, last available logs (truncated to 20,000 chars):\n{tail}")
    }
}

async fn read_tail(path: &Path, max_bytes: usize) -> std::io::Result<String> {
    let mut file = tokio::fs::File::open(path).await?;
    let len = file.metadata().await?.len();
    file.seek(std::io::SeekFrom::Start(len.saturating_sub(max_bytes as u64))).await?;
    let mut buf = Vec::new();
    file.read_to_end(&mut buf).await?;
    Ok(String::from_utf8_lossy(&buf).into_owned())
}
