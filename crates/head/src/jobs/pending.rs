//! What the jobs waiting for their entrypoint's resources ask for: lines for `oxray status`,
//! shapes for autoscalers.

use super::JobManager;
use oxray_api_types::PendingResources;
use oxray_types::{JobRecord, JobStatus};

impl JobManager {
    /// What the jobs waiting for their entrypoint's resources ask for, in queue order.
    fn waiting<R>(&self, each: impl Fn(&JobRecord, PendingResources) -> R) -> Vec<R> {
        let table = self.lock();
        table
            .order
            .iter()
            .filter_map(|id| table.records.get(id))
            .filter(|j| j.status == JobStatus::Pending && j.driver_node_id.is_none())
            .map(|j| each(j, PendingResources::of(&j.resources, 1)))
            .collect()
    }

    /// Jobs no node can hold wait for one an autoscaler adds, rather than failing. The
    /// cluster's one record of whether it is autoscaled: agents follow it at each heartbeat.
    pub fn set_autoscaling(&self, on: bool) {
        self.lock().autoscaling = on;
    }

    pub fn autoscaling(&self) -> bool {
        self.lock().autoscaling
    }

    /// One line per job waiting for resources, in queue order.
    pub fn pending_demands(&self) -> Vec<String> {
        self.waiting(|job, wants| {
            let wants: Vec<String> = wants.resources.iter().map(|(k, v)| format!("{k}: {v}")).collect();
            format!("{{{}}} for job {}", wants.join(", "), job.submission_id)
        })
    }

    /// The same, as shapes.
    pub fn pending_resources(&self) -> Vec<PendingResources> {
        self.waiting(|_, shape| shape)
    }
}
