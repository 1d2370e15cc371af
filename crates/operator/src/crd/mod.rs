//! The custom resources in group `oxray.io/v1`, shaped as KubeRay's `ray.io/v1` so that a
//! KubeRay manifest ports by changing its `apiVersion`.

pub mod cluster;
pub mod job;
mod schema;
pub mod service;

use kube::CustomResourceExt;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use cluster::{RayCluster, RayClusterSpec, RayClusterStatus};
pub use job::{RayJob, RayJobSpec, RayJobStatus};
pub use service::{RayService, RayServiceSpec, RayServiceStatus};

/// A status condition, as `metav1.Condition`.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    #[serde(rename = "type")]
    pub type_: String,
    /// "True", "False" or "Unknown".
    pub status: String,
    #[serde(default)]
    pub reason: String,
    #[serde(default)]
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// The three CRDs as one multi-document YAML, as `oxray operator crd` prints them.
pub fn crds_yaml() -> String {
    let crds = [RayCluster::crd(), RayJob::crd(), RayService::crd()];
    crds.iter()
        .map(|crd| serde_norway::to_string(crd).expect("a CRD always serializes"))
        .collect::<Vec<_>>()
        .join("---\n")
}
