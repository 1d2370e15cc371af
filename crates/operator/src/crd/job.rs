//! `RayJob`: a job run on a cluster the operator creates (or an existing one), with KubeRay's
//! field names. The operator submits through the head's Jobs REST API itself: no submitter pod.

use std::collections::BTreeMap;

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::cluster::{RayClusterSpec, RayClusterStatus};

#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, Default, JsonSchema)]
#[kube(
    group = "oxray.io",
    version = "v1",
    kind = "RayJob",
    namespaced,
    status = "RayJobStatus",
    category = "all",
    printcolumn = r#"{"name":"job status","type":"string","jsonPath":".status.jobStatus"}"#,
    printcolumn = r#"{"name":"deployment status","type":"string","jsonPath":".status.jobDeploymentStatus"}"#,
    printcolumn = r#"{"name":"ray cluster name","type":"string","jsonPath":".status.rayClusterName"}"#,
    printcolumn = r#"{"name":"start time","type":"string","jsonPath":".status.startTime"}"#,
    printcolumn = r#"{"name":"end time","type":"string","jsonPath":".status.endTime"}"#,
    printcolumn = r#"{"name":"age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct RayJobSpec {
    /// The shell command the job runs.
    #[serde(default)]
    pub entrypoint: String,
    /// The job's runtime_env as a YAML document.
    #[serde(rename = "runtimeEnvYAML", default, skip_serializing_if = "Option::is_none")]
    pub runtime_env_yaml: Option<String>,
    /// The submission id; generated (`<name>-<5 characters>`) when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub submission_mode: Option<SubmissionMode>,
    /// The cluster to create for this job (named `<name>-<5 characters>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ray_cluster_spec: Option<RayClusterSpec>,
    /// Labels naming an existing cluster (`ray.io/cluster: <name>`) to run on instead.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub cluster_selector: BTreeMap<String, String>,
    /// Delete the cluster once the job ends.
    #[serde(default)]
    pub shutdown_after_job_finishes: bool,
    /// Seconds to keep the cluster after the job ends, with `shutdownAfterJobFinishes`.
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub ttl_seconds_after_finished: i32,
    /// Seconds the whole RayJob may take before it fails with `DeadlineExceeded`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub active_deadline_seconds: Option<i32>,
    /// Seconds the job may take to reach RUNNING before it fails.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub pre_running_deadline_seconds: Option<i32>,
    /// Retries of the whole RayJob, each on a new cluster.
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub backoff_limit: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.0))]
    pub entrypoint_num_cpus: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.0))]
    pub entrypoint_num_gpus: Option<f64>,
    /// Custom resources for the entrypoint as a JSON object in a string.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entrypoint_resources: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, String>,
    /// While true, the RayJob's cluster is deleted and nothing runs.
    #[serde(default)]
    pub suspend: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub managed_by: Option<String>,
}

#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum SubmissionMode {
    /// KubeRay runs a submitter Job; oxray submits through the REST API, as in HTTPMode.
    K8sJobMode,
    HTTPMode,
    /// Wait for the user to set `spec.jobId` of a job they submitted themselves.
    InteractiveMode,
}

#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RayJobStatus {
    /// The job's status as the head reports it: PENDING, RUNNING, STOPPED, SUCCEEDED, FAILED.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub job_status: String,
    /// The operator's stage: Initializing, Waiting, Running, Complete, Failed, Suspended,
    /// Retrying, ValidationFailed.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub job_deployment_status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ray_cluster_name: Option<String>,
    #[serde(rename = "dashboardURL", default, skip_serializing_if = "Option::is_none")]
    pub dashboard_url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_time: Option<String>,
    #[serde(default)]
    pub succeeded: i32,
    #[serde(default)]
    pub failed: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ray_cluster_status: Option<RayClusterStatus>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}
