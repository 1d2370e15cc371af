//! What the Jobs REST API needs from the control plane.

use bytes::Bytes;
use futures_util::Stream;
use oxray_api_types::{ApiError, JobDetails, SubmitRequest};
use std::pin::Pin;
use std::time::Duration;

pub type ByteStream = Pin<Box<dyn Stream<Item = Result<Bytes, String>> + Send>>;

#[async_trait::async_trait]
pub trait JobsApi: Send + Sync + 'static {
    /// Records the job as PENDING and returns its submission id.
    async fn submit(&self, request: SubmitRequest) -> Result<String, ApiError>;
    fn job(&self, id: &str) -> Option<JobDetails>;
    /// Every job (submissions, and drivers of their own), oldest first.
    fn jobs(&self) -> Vec<JobDetails>;
    /// The `limit` newest jobs, oldest first, and how many there are in all.
    fn newest_jobs(&self, limit: usize) -> (Vec<JobDetails>, usize) {
        let all = self.jobs();
        let total = all.len();
        (all.into_iter().skip(total.saturating_sub(limit)).collect(), total)
    }
    /// Whether the job was still live and a stop was requested.
    async fn stop(&self, id: &str) -> Result<bool, ApiError>;
    /// Removes a terminal job's record (not its log).
    async fn delete(&self, id: &str) -> Result<(), ApiError>;
    /// The job's log from the node that runs it; with `follow`, until the job has ended.
    async fn logs(&self, id: &str, follow: bool) -> Result<ByteStream, ApiError>;
    /// Returns once the job is terminal, or after `timeout`.
    async fn wait_terminal(&self, id: &str, timeout: Duration);
    fn package_exists(&self, name: &str) -> bool;
    /// Stores an uploaded package; at most `limit` bytes.
    async fn put_package(&self, name: &str, body: ByteStream, limit: u64) -> Result<(), ApiError>;
}
