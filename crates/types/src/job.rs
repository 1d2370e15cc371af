use crate::{NodeId, ResourceSet};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum JobStatus {
    Pending,
    Running,
    Stopped,
    Succeeded,
    Failed,
}

impl JobStatus {
    pub fn is_terminal(self) -> bool {
        matches!(self, JobStatus::Stopped | JobStatus::Succeeded | JobStatus::Failed)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            JobStatus::Pending => "PENDING",
            JobStatus::Running => "RUNNING",
            JobStatus::Stopped => "STOPPED",
            JobStatus::Succeeded => "SUCCEEDED",
            JobStatus::Failed => "FAILED",
        }
    }
}

/// Why a job failed, with Ray's names.
pub mod error_types {
    pub const RUNTIME_ENV_SETUP_FAILURE: &str = "RUNTIME_ENV_SETUP_FAILURE";
    pub const UNSCHEDULABLE: &str = "JOB_SUPERVISOR_ACTOR_UNSCHEDULABLE";
    pub const NODE_DIED: &str = "JOB_SUPERVISOR_ACTOR_DIED";
    pub const START_ERROR: &str = "JOB_ENTRYPOINT_COMMAND_START_ERROR";
    pub const COMMAND_ERROR: &str = "JOB_ENTRYPOINT_COMMAND_ERROR";
}

/// A submitted job, as the head keeps it in its database.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobRecord {
    pub submission_id: String,
    pub entrypoint: String,
    pub status: JobStatus,
    pub message: Option<String>,
    pub error_type: Option<String>,
    /// Milliseconds since the epoch.
    pub start_time: u64,
    pub end_time: Option<u64>,
    pub metadata: BTreeMap<String, String>,
    /// As submitted (after the client's rewrite of local paths to package URIs).
    pub runtime_env: serde_json::Map<String, serde_json::Value>,
    /// CPU, GPU, memory and custom resources reserved for the entrypoint.
    pub resources: ResourceSet,
    /// The node that runs (or will run) the entrypoint.
    pub driver_node_id: Option<NodeId>,
    pub driver_pid: Option<u32>,
    pub driver_exit_code: Option<i32>,
    #[serde(default)]
    pub stop_requested: bool,
}

impl JobRecord {
    /// A job just submitted: pending, with nothing reserved or recorded yet.
    pub fn pending(submission_id: String, entrypoint: String, start_time: u64) -> Self {
        Self {
            submission_id,
            entrypoint,
            status: JobStatus::Pending,
            message: None,
            error_type: None,
            start_time,
            end_time: None,
            metadata: BTreeMap::new(),
            runtime_env: serde_json::Map::new(),
            resources: ResourceSet::new(),
            driver_node_id: None,
            driver_pid: None,
            driver_exit_code: None,
            stop_requested: false,
        }
    }

    /// Moves to a terminal status once; a terminal status never changes again.
    pub fn finish(&mut self, status: JobStatus, message: String, error_type: Option<&str>, now_ms: u64) -> bool {
        if self.status.is_terminal() || !status.is_terminal() {
            return false;
        }
        self.status = status;
        self.message = Some(message);
        self.error_type = error_type.map(str::to_string);
        self.end_time = Some(now_ms);
        true
    }

    /// Ray's default message for a status.
    pub fn default_message(&self) -> String {
        match self.status {
            JobStatus::Pending => {
                let mut m = "Job has not started yet.".to_string();
                if self.resources.iter().any(|(_, v)| v > 0.0) {
                    m.push_str(
                        " It may be waiting for resources (CPUs, GPUs, memory, custom resources) to become available.",
                    );
                }
                if !self.runtime_env.is_empty() {
                    m.push_str(" It may be waiting for the runtime environment to be set up.");
                }
                m
            }
            JobStatus::Running => "Job is currently running.".into(),
            JobStatus::Stopped => "Job was intentionally stopped.".into(),
            JobStatus::Succeeded => "Job finished successfully.".into(),
            JobStatus::Failed => "Job failed.".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job() -> JobRecord {
        JobRecord::pending("s".into(), "true".into(), 1)
    }

    #[test]
    fn terminal_status_never_changes() {
        let mut j = job();
        assert!(j.finish(JobStatus::Stopped, "stopped".into(), None, 5));
        assert!(!j.finish(JobStatus::Failed, "late".into(), Some("X"), 6));
        assert_eq!((j.status, j.end_time), (JobStatus::Stopped, Some(5)));
    }

    #[test]
    fn pending_message_names_what_it_waits_for() {
        let mut j = job();
        assert_eq!(j.default_message(), "Job has not started yet.");
        j.resources.set("GPU", 1.0).unwrap();
        j.runtime_env.insert("pip".into(), serde_json::json!(["x"]));
        let m = j.default_message();
        assert!(m.contains("waiting for resources") && m.contains("runtime environment"), "{m}");
    }
}
