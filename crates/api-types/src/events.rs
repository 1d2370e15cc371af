use serde::{Deserialize, Serialize};

/// Something that happened in the cluster, for people watching it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    pub seq: u64,
    pub time_ms: u64,
    /// INFO, WARNING or ERROR.
    pub severity: String,
    /// node_joined, node_left, node_dead, job_submitted, job_finished.
    pub kind: String,
    pub message: String,
}

/// One page of jobs for the dashboard, newest first, with counts over all jobs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JobPage {
    pub total: usize,
    pub by_status: std::collections::BTreeMap<String, usize>,
    pub jobs: Vec<crate::JobDetails>,
}
