use super::runner::Runner;
use oxray_proto::v1::{self, agent_service_server};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncReadExt;
use tonic::{Request, Response, Status};

const LOG_CHUNK: usize = 64 * 1024;
/// How often a followed log that reached its end is checked for more.
const LOG_POLL: Duration = Duration::from_millis(100);
/// How long a followed job that is not here yet may take to arrive.
const JOB_ARRIVAL: Duration = Duration::from_secs(30);

pub struct AgentService {
    runner: Arc<Runner>,
}

impl AgentService {
    pub fn new(runner: Arc<Runner>) -> Self {
        Self { runner }
    }
}

type LogStream = Pin<Box<dyn futures_util::Stream<Item = Result<v1::LogChunk, Status>> + Send>>;

#[tonic::async_trait]
impl agent_service_server::AgentService for AgentService {
    type ReadJobLogsStream = LogStream;

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
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        tokio::spawn(async move {
            let mut offset = request.offset;
            let mut buf = vec![0u8; LOG_CHUNK];
            let mut file: Option<tokio::fs::File> = None;
            let mut drained = false;
            loop {
                if file.is_none() {
                    file = open_at(&path, offset).await;
                }
                let read = match file.as_mut() {
                    Some(f) => f.read(&mut buf).await.unwrap_or(0),
                    None => 0,
                };
                if read > 0 {
                    offset += read as u64;
                    if tx.send(Ok(v1::LogChunk { data: buf[..read].to_vec() })).await.is_err() {
                        return;
                    }
                    continue;
                }
                if !request.follow {
                    return;
                }
                // At the end of what is written. Once the job has ended, read once more (it
                // may have written between our read and its exit), then stop.
                if handle.as_ref().is_none_or(|h| h.is_finished()) {
                    if drained {
                        return;
                    }
                    drained = true;
                    continue;
                }
                tokio::time::sleep(LOG_POLL).await;
            }
        });
        Ok(Response::new(Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx))))
    }
}

async fn open_at(path: &std::path::Path, offset: u64) -> Option<tokio::fs::File> {
    use tokio::io::AsyncSeekExt;
    let mut file = tokio::fs::File::open(path).await.ok()?;
    file.seek(std::io::SeekFrom::Start(offset)).await.ok()?;
    Some(file)
}
