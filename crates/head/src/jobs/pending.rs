//! What the jobs waiting for their entrypoint's resources ask for: lines for `oxray status`,
//! shapes for autoscalers.

use super::JobManager;
use oxray_types::{JobRecord, JobStatus};
use std::collections::BTreeMap;

impl JobManager {
    /// What the jobs waiting for their entrypoint's resources ask for, in queue order.
    fn waiting<R>(&self, each: impl Fn(&JobRecord, BTreeMap<String, f64>) -> R) -> Vec<R> {
        let table = self.lock();
        table
            .order
            .iter()
            .filter_map(|id| table.records.get(id))
            .filter(|j| j.status == JobStatus::Pending && j.driver_node_id.is_none())
            .map(|j| each(j, j.resources.iter().filter(|(_, v)| *v > 0.0).map(|(k, v)| (k.to_string(), v)).collect()))
            .collect()
    }

    /// Jobs no node can hold wait for one an autoscaler adds, rather than failing.
    pub fn set_autoscaling(&self, on: bool) {
        self.lock().autoscaling = on;
    }

    /// One line per job waiting for resources, in queue order.
    pub fn pending_demands(&self) -> Vec<String> {
        self.waiting(|job, wants| {
            let wants: Vec<String> = wants.iter().map(|(k, v)| format!("{k}: {v}")).collect();
            format!("{{{}}} for job {}", wants.join(", "), job.submission_id)
        })
    }

    /// The same, as shapes.
    pub fn pending_resources(&self) -> Vec<oxray_api_types::PendingResources> {
        self.waiting(|_, resources| oxray_api_types::PendingResources { resources, count: 1 })
    }
}
