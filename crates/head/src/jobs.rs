//! The job manager: the durable job table, the first-come queue, dispatch to node agents,
//! and the statuses agents report back.

use crate::agents::Agents;
use crate::drivers::Drivers;
use crate::events::Events;
use crate::job_log_copies::{copy_notice, followed_then_copy, LogCopies};
use crate::membership::Membership;
use crate::packages::Packages;
use crate::store::{off_thread, Store};
use futures_util::StreamExt;
use oxray_api_types::{new_submission_id, not_found, ApiError, JobDetails, SubmitRequest};
use oxray_http::ByteStream;
use oxray_proto::v1;
use oxray_rpc::{AgentClient, AgentJobs, Token};
use oxray_types::{error_types, now_ms, JobRecord, JobStatus, NodeId, NodeInfo};
use round::Dispatch;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{watch, Notify};
use tokio_util::sync::CancellationToken;

mod pending;
mod round;

#[derive(Default)]
struct Table {
    records: HashMap<String, JobRecord>,
    /// Submission order.
    order: Vec<String>,
    /// Jobs whose start was sent (and not refused as unreachable) since this head started.
    dispatched: HashSet<String>,
    /// Nodes are added for waiting work: a job no node can hold waits for one.
    autoscaling: bool,
}

enum Named {
    Submission(String),
    Driver(oxray_types::JobId),
    Unknown,
}

/// The table in memory shows only what the database holds: a change is written first
/// (off the async threads, one writer at a time, so writes land in the order they are
/// shown), then shown.
pub struct JobManager {
    table: Mutex<Table>,
    writer: tokio::sync::Mutex<()>,
    store: Arc<Store>,
    membership: Arc<Membership>,
    events: Arc<Events>,
    packages: Packages,
    agents: Arc<Agents>,
    drivers: Arc<Drivers>,
    /// The head's copies of the driver logs, for when their node is gone.
    log_copies: Arc<LogCopies>,
    /// Where jobs are started and stopped: the node agents' services.
    starts: Arc<dyn AgentJobs>,
    wake: Notify,
    /// Bumped on every status change, for waiters.
    changed: watch::Sender<u64>,
}

/// Ends a job as stopped on purpose; false when it had ended already.
fn stopped(job: &mut JobRecord) -> bool {
    job.finish(JobStatus::Stopped, "Job was intentionally stopped.".into(), None, now_ms())
}

fn internal(e: impl std::fmt::Display) -> ApiError {
    tracing::error!("{e}");
    ApiError::Internal(e.to_string())
}

impl JobManager {
    pub fn open(
        store: Arc<Store>,
        membership: Arc<Membership>,
        events: Arc<Events>,
        packages: Packages,
        token: Token,
        starts: Arc<dyn AgentJobs>,
        log_copies: LogCopies,
    ) -> Result<Self, crate::StoreError> {
        let mut records = store.load_jobs()?;
        records.sort_by(|a, b| (a.start_time, &a.submission_id).cmp(&(b.start_time, &b.submission_id)));
        let order = records.iter().map(|j| j.submission_id.clone()).collect();
        let records = records.into_iter().map(|j| (j.submission_id.clone(), j)).collect();
        let agents = Arc::new(Agents::new(membership.clone(), token));
        let drivers = Arc::new(Drivers::open(store.clone())?);
        Ok(Self {
            table: Mutex::new(Table { records, order, dispatched: HashSet::new(), autoscaling: false }),
            writer: tokio::sync::Mutex::new(()),
            store,
            membership,
            events,
            packages,
            agents,
            drivers,
            log_copies: Arc::new(log_copies),
            starts,
            wake: Notify::new(),
            changed: watch::channel(0).0,
        })
    }

    /// The drivers connected to the cluster, with their job ids.
    pub fn drivers(&self) -> &Arc<Drivers> {
        &self.drivers
    }

    pub fn packages(&self) -> &Packages {
        &self.packages
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().expect("job table lock")
    }

    fn ended(&self, job: &JobRecord) {
        tracing::info!(job = %job.submission_id, status = job.status.as_str(), "job ended");
        let severity = match job.status {
            JobStatus::Failed => "ERROR",
            JobStatus::Stopped => "WARNING",
            _ => "INFO",
        };
        let message = format!("Job {} {}", job.submission_id, job.status.as_str().to_lowercase());
        self.events.record(severity, "job_finished", message);
    }

    /// Nodes joined, left or died: time for a scheduling round.
    pub fn nodes_changed(&self) {
        self.wake.notify_one();
    }

    fn notify_change(&self) {
        self.changed.send_modify(|v| *v += 1);
        self.wake.notify_one();
    }

    fn agent(&self, node: &NodeInfo) -> Result<AgentClient, ApiError> {
        self.agents.client(node)
    }

    /// The node agents, for what the state API reads from them.
    pub fn agents(&self) -> &Arc<Agents> {
        &self.agents
    }

    pub async fn submit(&self, request: SubmitRequest) -> Result<String, ApiError> {
        for uri in request.parsed_env.working_dir.iter().chain(&request.parsed_env.py_modules) {
            if let Some(name) = oxray_runtime_env::package_name(uri) {
                if !self.packages.exists(name) {
                    return Err(ApiError::BadRequest(format!(
                        "package {uri} was not uploaded; upload it before submitting"
                    )));
                }
            }
        }
        let id = request.submission_id.clone().unwrap_or_else(new_submission_id);
        let job = JobRecord {
            metadata: request.metadata,
            runtime_env: request.runtime_env,
            resources: request.resources,
            ..JobRecord::pending(id.clone(), request.entrypoint, now_ms())
        };
        let _writing = self.writer.lock().await;
        if self.lock().records.contains_key(&id) {
            return Err(ApiError::BadRequest(format!(
                "Job with submission_id {id} already exists. Please use a different submission_id."
            )));
        }
        self.write(vec![job.clone()]).await?;
        tracing::info!(job = %id, entrypoint = %job.entrypoint, "job submitted");
        self.events.record("INFO", "job_submitted", format!("Job {id} submitted: {}", job.entrypoint));
        {
            let mut table = self.lock();
            table.order.push(id.clone());
            table.records.insert(id.clone(), job);
        }
        self.notify_change();
        Ok(id)
    }

    /// The end of a node agent's own log.
    pub async fn agent_log(&self, node_id: &NodeId, max_bytes: u64) -> Result<String, ApiError> {
        let node =
            self.membership.get(node_id).ok_or_else(|| ApiError::NotFound(format!("Node {node_id} does not exist")))?;
        let mut agent = self.agent(&node)?;
        let reply = agent
            .read_agent_log(v1::ReadAgentLogRequest { max_bytes })
            .await
            .map_err(|s| ApiError::Internal(format!("cannot read the log of node {node_id}: {}", s.message())))?;
        Ok(reply.into_inner().text)
    }

    /// A job by submission id, or by job id (a submission's, or a driver's of its own).
    pub fn details(&self, id: &str) -> Option<JobDetails> {
        match self.named(id) {
            Named::Submission(submission) => {
                let job = self.lock().records.get(&submission).cloned()?;
                Some(self.to_details(&job))
            }
            Named::Driver(job) => self.drivers.row(job),
            Named::Unknown => None,
        }
    }

    /// What `id` names: a submission (by its id, or by the job id of its driver), or a
    /// driver's own job.
    fn named(&self, id: &str) -> Named {
        if self.lock().records.contains_key(id) {
            return Named::Submission(id.to_string());
        }
        let Some(job) = oxray_types::JobId::parse(id) else { return Named::Unknown };
        match self.drivers.submission_of(job) {
            Some(submission) => Named::Submission(submission),
            None if self.drivers.row(job).is_some() => Named::Driver(job),
            None => Named::Unknown,
        }
    }

    fn to_details(&self, job: &JobRecord) -> JobDetails {
        let ip = job.driver_node_id.as_ref().and_then(|n| self.membership.get(n)).map(|n| n.node_ip);
        let job_id = self.drivers.job_of_submission(&job.submission_id);
        JobDetails::new(job, ip.as_deref(), job_id.map(|j| j.hex()))
    }

    /// The submission `id` names: a submission id, or the job id of a submission's driver. A
    /// driver of its own has no entrypoint here to stop, delete or read, as Ray answers.
    fn submission_named(&self, id: &str, what: &str) -> Result<String, ApiError> {
        match self.named(id) {
            Named::Submission(submission) => Ok(submission),
            Named::Driver(_) => {
                Err(ApiError::BadRequest(format!("Can only {what} submission type jobs; {id} is a driver's job.")))
            }
            // Not found, as the caller then says.
            Named::Unknown => Ok(id.to_string()),
        }
    }

    /// Submissions and drivers of their own, oldest first.
    pub fn list(&self) -> Vec<JobDetails> {
        let jobs: Vec<JobRecord> = {
            let table = self.lock();
            table.order.iter().filter_map(|id| table.records.get(id).cloned()).collect()
        };
        let mut rows: Vec<JobDetails> = jobs.iter().map(|j| self.to_details(j)).collect();
        rows.extend(self.drivers.rows());
        rows.sort_by_key(|r| r.start_time);
        rows
    }

    /// Writes job records to the database. Called holding `writer`.
    async fn write(&self, records: Vec<JobRecord>) -> Result<(), ApiError> {
        off_thread(&self.store, move |store| store.put_jobs(&records)).await.map_err(internal)
    }

    /// Applies `change` to a live job and persists it; false when the job is gone or ended.
    async fn update(&self, id: &str, change: impl FnOnce(&mut JobRecord) -> bool + Send) -> Result<bool, ApiError> {
        let _writing = self.writer.lock().await;
        let Some(mut next) = self.lock().records.get(id).cloned() else { return Ok(false) };
        if !change(&mut next) {
            return Ok(false);
        }
        self.write(vec![next.clone()]).await?;
        if next.status.is_terminal() {
            self.ended(&next);
        }
        self.lock().records.insert(id.to_string(), next);
        self.notify_change();
        Ok(true)
    }

    pub async fn stop(&self, id: &str) -> Result<bool, ApiError> {
        // A job not placed yet just leaves the queue: nothing runs. Decided as the change is
        // written, so a round that placed it meanwhile is seen.
        if self.update(id, |j| j.driver_node_id.is_none() && stopped(j)).await? {
            return Ok(true);
        }
        let job = self.lock().records.get(id).cloned().ok_or_else(|| not_found(id))?;
        let Some(node_id) = job.driver_node_id.clone().filter(|_| !job.status.is_terminal()) else {
            return Ok(false);
        };
        self.update(id, |j| {
            j.stop_requested = true;
            true
        })
        .await?;
        let node = self.membership.get(&node_id);
        let result = match node {
            Some(node) if node.is_alive() => {
                let request = v1::StopJobRequest { submission_id: id.to_string() };
                self.starts.stop_job(&node.agent_address(), request).await
            }
            _ => Ok(false),
        };
        match result {
            // The agent never started it (or it just ended and its report is on the way).
            Ok(false) if job.status == JobStatus::Pending => {
                self.update(id, stopped).await?;
            }
            Ok(_) => {}
            Err(status) => tracing::warn!(job = %id, "stop request to node {node_id} failed: {}", status.message()),
        }
        Ok(true)
    }

    pub async fn delete(&self, id: &str) -> Result<(), ApiError> {
        let _writing = self.writer.lock().await;
        let status = self.lock().records.get(id).map(|j| j.status).ok_or_else(|| not_found(id))?;
        if !status.is_terminal() {
            return Err(ApiError::Internal(format!(
                "Attempted to delete job '{id}', but it is in a non-terminal state {}.",
                status.as_str()
            )));
        }
        let key = id.to_string();
        off_thread(&self.store, move |store| store.delete_job(&key)).await.map_err(internal)?;
        self.drivers.forget_submission(id);
        {
            let mut table = self.lock();
            table.records.remove(id);
            table.order.retain(|j| j != id);
            table.dispatched.remove(id);
        }
        // After the record: a piece of the log on its way now is refused.
        self.log_copies.remove(id).await;
        Ok(())
    }

    /// A status report from the agent that runs the job; idempotent.
    pub async fn report(&self, report: v1::JobReport) -> Result<(), ApiError> {
        let id = report.submission_id.clone();
        match report.phase() {
            v1::JobPhase::Running => {
                self.update(&id, |j| {
                    let pid = Some(report.pid).filter(|p| *p != 0);
                    match j.status {
                        JobStatus::Pending => {
                            j.status = JobStatus::Running;
                            j.message = None;
                            j.driver_pid = pid;
                            true
                        }
                        // The pid, reported once the entrypoint started.
                        JobStatus::Running if pid.is_some() && j.driver_pid != pid => {
                            j.driver_pid = pid;
                            true
                        }
                        _ => false,
                    }
                })
                .await?;
            }
            v1::JobPhase::Finished => {
                self.update(&id, |j| {
                    if report.pid != 0 {
                        j.driver_pid = Some(report.pid);
                    }
                    if report.stopped {
                        return stopped(j);
                    }
                    j.driver_exit_code = report.exit_code;
                    if report.exit_code == Some(0) {
                        return j.finish(JobStatus::Succeeded, "Job finished successfully.".into(), None, now_ms());
                    }
                    let error_type = Some(report.error_type.as_str())
                        .filter(|t| !t.is_empty())
                        .unwrap_or(error_types::COMMAND_ERROR);
                    j.finish(JobStatus::Failed, report.message.clone(), Some(error_type), now_ms())
                })
                .await?;
            }
            v1::JobPhase::Unspecified => return Err(ApiError::BadRequest("job report without a phase".into())),
        }
        Ok(())
    }

    /// One round (see `round::plan`): its changes are written, then shown; the starts it
    /// decided are returned for sending. A round whose changes cannot be written does
    /// nothing: a job is never started on a node the database does not name.
    async fn round(&self) -> Vec<Dispatch> {
        let _writing = self.writer.lock().await;
        let nodes = self.membership.snapshot();
        let round = round::plan(&self.lock(), &nodes, now_ms());
        if !round.changed.is_empty() {
            if let Err(e) = self.write(round.changed.values().cloned().collect()).await {
                tracing::error!("cannot record job changes; the round is tried again: {e}");
                return Vec::new();
            }
        }
        {
            let mut table = self.lock();
            table.dispatched.extend(round.dispatches.iter().map(|d| d.id.clone()));
            for (id, job) in &round.changed {
                table.records.insert(id.clone(), job.clone());
            }
        }
        if !round.changed.is_empty() {
            for job in round.changed.values().filter(|j| j.status.is_terminal()) {
                self.ended(job);
            }
            self.changed.send_modify(|v| *v += 1);
        }
        round.dispatches
    }

    async fn dispatch(self: Arc<Self>, d: Dispatch) {
        let Err(status) = self.starts.start_job(&d.node.agent_address(), d.request).await else { return };
        tracing::warn!(job = %d.id, node = %d.node.node_id, "starting the job failed: {}", status.message());
        match status.code() {
            // The node may come back (or be declared dead); try again next round.
            tonic::Code::Unavailable
            | tonic::Code::DeadlineExceeded
            | tonic::Code::Cancelled
            | tonic::Code::Unknown => {
                self.lock().dispatched.remove(&d.id);
            }
            _ => {
                let message = format!("The node agent could not start the job: {}", status.message());
                let failed =
                    |j: &mut JobRecord| j.finish(JobStatus::Failed, message, Some(error_types::START_ERROR), now_ms());
                let _ = self.update(&d.id, failed).await;
            }
        }
    }

    /// Places and starts jobs until `shutdown`; runs a round on every change and at least
    /// every half second (nodes joining or dying).
    /// Starts are sent beside the rounds (an agent may take a while to answer) by tasks
    /// the loop owns: they end with it.
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        // Copies of logs of jobs deleted while a piece was on its way.
        let known: HashSet<String> = self.lock().records.keys().cloned().collect();
        self.log_copies.retain(|id| known.contains(id)).await;
        let mut sending = tokio::task::JoinSet::new();
        loop {
            for d in self.round().await {
                sending.spawn(self.clone().dispatch(d));
            }
            let ticked = tokio::time::sleep(Duration::from_millis(500));
            tokio::pin!(ticked);
            loop {
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = self.wake.notified() => break,
                    _ = &mut ticked => break,
                    Some(_) = sending.join_next(), if !sending.is_empty() => {}
                }
            }
        }
    }

    pub async fn wait_terminal(&self, id: &str, timeout: Duration) {
        let mut rx = self.changed.subscribe();
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            match self.lock().records.get(id) {
                Some(job) if !job.status.is_terminal() => {}
                _ => return,
            }
            if tokio::time::timeout_at(deadline, rx.changed()).await.is_err() {
                return;
            }
        }
    }

    /// Waits (for `follow`) until the job is placed or has ended; the node, if any.
    async fn driver_node(&self, id: &str, follow: bool) -> Result<Option<NodeId>, ApiError> {
        let mut rx = self.changed.subscribe();
        loop {
            let job = self.lock().records.get(id).cloned().ok_or_else(|| not_found(id))?;
            if job.driver_node_id.is_some() || !follow || job.status.is_terminal() {
                return Ok(job.driver_node_id);
            }
            if rx.changed().await.is_err() {
                return Ok(None);
            }
        }
    }

    /// A job's log, read from its node; from the head's copy, with a line saying so, when
    /// the node is gone or cannot be reached.
    pub async fn logs(&self, id: &str, follow: bool) -> Result<ByteStream, ApiError> {
        let Some(node_id) = self.driver_node(id, follow).await? else {
            return Ok(futures_util::stream::empty().boxed());
        };
        let node = self.membership.get(&node_id).filter(|n| n.is_alive());
        let Some(node) = node else {
            return self.log_copy(id, &format!("node {node_id}"), "is gone").await;
        };
        let request = v1::ReadJobLogsRequest { submission_id: id.to_string(), offset: 0, follow };
        let read = match self.agent(&node) {
            Ok(mut agent) => agent.read_job_logs(request).await.map_err(|s| s.message().to_string()),
            Err(e) => Err(e.to_string()),
        };
        match read {
            Ok(stream) => {
                let live =
                    stream.into_inner().map(|chunk| chunk.map(|c| c.data.into()).map_err(|s| s.message().to_string()));
                let name = format!("node {node_id} ({})", node.node_ip);
                Ok(followed_then_copy(self.log_copies.clone(), id.to_string(), name, live.boxed()))
            }
            // A follower of a live node's log is told the read failed rather than handed a
            // snapshot it would take for the end.
            Err(why) if follow => Err(ApiError::Internal(format!(
                "cannot read the logs of job {id} on node {node_id} ({}): {why}",
                node.node_ip
            ))),
            Err(why) => {
                let name = format!("node {node_id} ({})", node.node_ip);
                self.log_copy(id, &name, &format!("cannot be reached ({why})")).await
            }
        }
    }

    async fn log_copy(&self, id: &str, node: &str, why: &str) -> Result<ByteStream, ApiError> {
        let (mut text, not_kept) = self.log_copies.read(id).await.map_err(internal)?.unwrap_or_default();
        text.extend(copy_notice(node, why, not_kept).into_bytes());
        Ok(futures_util::stream::once(async move { Ok(bytes::Bytes::from(text)) }).boxed())
    }

    /// Takes a piece of a job's log from the node that runs it (see `LogCopies::append`).
    pub async fn append_log(&self, id: &str, offset: u64, data: Vec<u8>) -> Result<u64, ApiError> {
        if !self.lock().records.contains_key(id) {
            return Err(not_found(id));
        }
        self.log_copies.append(id, offset, data).await.map_err(internal)
    }
}

/// The job manager as the HTTP API sees it.
pub struct Api(pub Arc<JobManager>);

impl std::ops::Deref for Api {
    type Target = JobManager;
    fn deref(&self) -> &JobManager {
        &self.0
    }
}

#[async_trait::async_trait]
impl oxray_http::JobsApi for Api {
    async fn submit(&self, request: SubmitRequest) -> Result<String, ApiError> {
        JobManager::submit(self, request).await
    }
    fn job(&self, id: &str) -> Option<JobDetails> {
        self.details(id)
    }
    fn jobs(&self) -> Vec<JobDetails> {
        self.list()
    }
    async fn stop(&self, id: &str) -> Result<bool, ApiError> {
        JobManager::stop(self, &self.submission_named(id, "stop")?).await
    }
    async fn delete(&self, id: &str) -> Result<(), ApiError> {
        JobManager::delete(self, &self.submission_named(id, "delete")?).await
    }
    async fn logs(&self, id: &str, follow: bool) -> Result<ByteStream, ApiError> {
        JobManager::logs(self, &self.submission_named(id, "get logs of")?, follow).await
    }
    async fn wait_terminal(&self, id: &str, timeout: Duration) {
        if let Ok(id) = self.submission_named(id, "wait for") {
            JobManager::wait_terminal(self, &id, timeout).await
        }
    }
    fn package_exists(&self, name: &str) -> bool {
        self.packages.exists(name)
    }
    async fn put_package(&self, name: &str, body: ByteStream, limit: u64) -> Result<(), ApiError> {
        self.packages.put(name, body, limit).await
    }
}

#[cfg(test)]
pub(crate) mod tests;
