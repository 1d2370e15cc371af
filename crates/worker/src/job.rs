//! The job this process works for (Ray's JobID). A driver is given one by the head when it
//! connects and keeps it; a worker takes the job of the task it runs, and an actor's worker
//! the job of the call that created it. Tasks submitted from here belong to it.

use crate::WorkerError;
use oxray_proto::v1;
use oxray_rpc::HeadClient;
use oxray_types::JobId;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

static CURRENT: AtomicU32 = AtomicU32::new(0);

/// How long a driver waits between tries to register again after its head went away.
const RETRY: Duration = Duration::from_secs(1);

pub fn current() -> JobId {
    JobId(CURRENT.load(Ordering::Relaxed))
}

pub fn set_current(job: JobId) {
    CURRENT.store(job.0, Ordering::Relaxed);
}

/// Holds this driver's job open at the head while it lives; dropping it ends the job.
pub struct DriverJob {
    keeper: tokio::task::JoinHandle<()>,
}

impl Drop for DriverJob {
    fn drop(&mut self) {
        self.keeper.abort();
        set_current(JobId::default());
    }
}

async fn open(head: &mut HeadClient, info: v1::DriverInfo) -> Result<(JobId, tonic::Streaming<v1::DriverJob>), String> {
    let mut stream = head.register_driver(info).await.map_err(|s| s.message().to_string())?.into_inner();
    let first = stream.message().await.map_err(|s| s.message().to_string())?;
    let job = first.and_then(|j| JobId::parse(&j.job_id)).ok_or("the head gave no job id")?;
    Ok((job, stream))
}

/// Registers this process as a driver and makes its job the current one. The job stays open
/// until the returned value is dropped; after a head restart the driver registers again and
/// keeps its job id. Runs inside the core's runtime.
pub async fn register_driver(mut head: HeadClient, mut info: v1::DriverInfo) -> Result<DriverJob, WorkerError> {
    let (job, mut stream) = open(&mut head, info.clone())
        .await
        .map_err(|e| WorkerError::Connect(format!("cannot register the driver: {e}")))?;
    set_current(job);
    info.job_id = job.hex();
    let keeper = tokio::spawn(async move {
        loop {
            // The head sends nothing more: the stream ends when the head does.
            while let Ok(Some(_)) = stream.message().await {}
            loop {
                tokio::time::sleep(RETRY).await;
                match open(&mut head, info.clone()).await {
                    Ok((job, again)) => {
                        // A head that lost its records gives a new id: this driver's work
                        // names it from now on.
                        if job != current() {
                            tracing::warn!("the head knew this driver's job no more: it is job {} now", job.hex());
                            set_current(job);
                            info.job_id = job.hex();
                        }
                        stream = again;
                        break;
                    }
                    Err(e) => tracing::debug!("cannot register the driver again yet: {e}"),
                }
            }
        }
    });
    Ok(DriverJob { keeper })
}
