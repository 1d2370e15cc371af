use super::runner::Runner;
use crate::logs::{self, LogStream};
use crate::workers::WorkerPool;
use oxray_proto::v1::{self, agent_service_server};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncReadExt;
use tonic::{Request, Response, Status};

/// How often a job that is not here yet is looked for.
const LOG_POLL: Duration = Duration::from_millis(100);
/// How long a followed job that is not here yet may take to arrive.
const JOB_ARRIVAL: Duration = Duration::from_secs(30);

pub struct AgentService {
    runner: Arc<Runner>,
    pool: Arc<WorkerPool>,
    /// The node's log directory.
    logs: PathBuf,
}

impl AgentService {
    pub fn new(runner: Arc<Runner>, pool: Arc<WorkerPool>, logs: PathBuf) -> Self {
        Self { runner, pool, logs }
    }
}

#[tonic::async_trait]
impl agent_service_server::AgentService for AgentService {
    type ReadJobLogsStream = LogStream;
    type ReadLogStream = LogStream;

    async fn read_agent_log(
        &self,
        request: Request<v1::ReadAgentLogRequest>,
    ) -> Result<Response<v1::AgentLog>, Status> {
        let max = request.into_inner().max_bytes.clamp(1, 4 << 20);
        // Launched by `oxray start`, the agent's stderr is its log file.
        let path = std::fs::read_link("/proc/self/fd/2").map_err(|e| Status::internal(e.to_string()))?;
        if !path.is_file() {
            return Err(Status::failed_precondition(format!("this agent logs to {}, not to a file", path.display())));
        }
        let mut file = tokio::fs::File::open(&path).await.map_err(|e| Status::internal(e.to_string()))?;
        let len = file.metadata().await.map_err(|e| Status::internal(e.to_string()))?.len();
        use tokio::io::AsyncSeekExt;
        file.seek(std::io::SeekFrom::Start(len.saturating_sub(max)))
            .await
            .map_err(|e| Status::internal(e.to_string()))?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes).await.map_err(|e| Status::internal(e.to_string()))?;
        Ok(Response::new(v1::AgentLog {
            text: String::from_utf8_lossy(&bytes).into_owned(),
            path: path.display().to_string(),
        }))
    }

    async fn start_job(&self, request: Request<v1::StartJobRequest>) -> Result<Response<v1::StartJobReply>, Status> {
        self.runner.start(request.into_inner()).map_err(Status::invalid_argument)?;
        Ok(Response::new(v1::StartJobReply {}))
    }

    async fn stop_job(&self, request: Request<v1::StopJobRequest>) -> Result<Response<v1::StopJobReply>, Status> {
        let was_running = self.runner.stop(&request.into_inner().submission_id);
        Ok(Response::new(v1::StopJobReply { was_running }))
    }

    async fn read_job_logs(&self, request: Request<v1::ReadJobLogsRequest>) -> Result<Response<LogStream>, Status> {
        let request = request.into_inner();
        let path = self.runner.log_path(&request.submission_id);
        // The head may ask right after it sent the start: give the job a moment to arrive.
        let mut handle = self.runner.handle(&request.submission_id);
        let deadline = tokio::time::Instant::now() + JOB_ARRIVAL;
        while request.follow && handle.is_none() && !path.exists() && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(LOG_POLL).await;
            handle = self.runner.handle(&request.submission_id);
        }
        if handle.is_none() && !path.exists() {
            return if request.follow {
                Err(Status::not_found(format!("job {} never reached this node", request.submission_id)))
            } else {
                Ok(Response::new(Box::pin(futures_util::stream::empty())))
            };
        }
        let follow = match handle {
            Some(h) if request.follow => logs::Follow::While(Box::new(move || !h.is_finished())),
            _ => logs::Follow::No,
        };
        Ok(Response::new(logs::stream(path, request.offset, None, follow)))
    }

    async fn list_logs(&self, request: Request<v1::ListLogsRequest>) -> Result<Response<v1::ListLogsReply>, Status> {
        let files = logs::list(&self.logs, &request.into_inner().glob).map_err(Status::invalid_argument)?;
        Ok(Response::new(v1::ListLogsReply { files }))
    }

    async fn read_log(&self, request: Request<v1::ReadLogRequest>) -> Result<Response<LogStream>, Status> {
        let request = request.into_inner();
        let name = if request.filename.is_empty() && request.pid > 0 {
            let worker = self
                .pool
                .worker_by_pid(request.pid)
                .ok_or_else(|| Status::not_found(format!("no worker with pid {} ran on this node", request.pid)))?;
            let suffix = if request.suffix == "err" { "err" } else { "out" };
            crate::workers::log_name(&worker, suffix)
        } else {
            logs::checked_name(&request.filename).map_err(Status::invalid_argument)?.to_string()
        };
        let path = self.logs.join(name);
        let start = logs::start_of(&path, &request)?;
        let end = (request.end_offset > 0).then_some(request.end_offset);
        let follow = if request.follow { logs::Follow::Always } else { logs::Follow::No };
        Ok(Response::new(logs::stream(path, start, end, follow)))
    }

    async fn list_workers(
        &self,
        _request: Request<v1::ListWorkersRequest>,
    ) -> Result<Response<v1::ListWorkersReply>, Status> {
        let workers = self.pool.worker_records().into_iter().map(worker_state).collect();
        Ok(Response::new(v1::ListWorkersReply { workers }))
    }
}

fn worker_state(r: crate::worker_records::WorkerRecord) -> v1::WorkerState {
    let is_alive = r.is_alive();
    let (exit_type, exit_detail) = r.exit.map(|(t, d)| (t.as_str().to_string(), d)).unwrap_or_default();
    v1::WorkerState {
        is_alive,
        worker_id: r.id,
        pid: r.pid,
        launch_time_ms: r.launch_ms,
        start_time_ms: r.start_ms.unwrap_or(0),
        end_time_ms: r.end_ms.unwrap_or(0),
        exit_type,
        exit_detail,
    }
}
