//! `RayCluster`: a head group and worker groups of pods, with KubeRay's field names.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{PodTemplateSpec, Service};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::schema::any_object;
use super::Condition;

#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, Default, JsonSchema)]
#[kube(
    group = "oxray.io",
    version = "v1",
    kind = "RayCluster",
    namespaced,
    status = "RayClusterStatus",
    category = "all",
    printcolumn = r#"{"name":"desired workers","type":"integer","jsonPath":".status.desiredWorkerReplicas"}"#,
    printcolumn = r#"{"name":"available workers","type":"integer","jsonPath":".status.availableWorkerReplicas"}"#,
    printcolumn = r#"{"name":"cpus","type":"string","jsonPath":".status.desiredCPU"}"#,
    printcolumn = r#"{"name":"memory","type":"string","jsonPath":".status.desiredMemory"}"#,
    printcolumn = r#"{"name":"gpus","type":"string","jsonPath":".status.desiredGPU"}"#,
    printcolumn = r#"{"name":"status","type":"string","jsonPath":".status.state"}"#,
    printcolumn = r#"{"name":"age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    printcolumn = r#"{"name":"head pod IP","type":"string","priority":1,"jsonPath":".status.head.podIP"}"#,
    printcolumn = r#"{"name":"head service IP","type":"string","priority":1,"jsonPath":".status.head.serviceIP"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct RayClusterSpec {
    pub head_group_spec: HeadGroupSpec,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub worker_group_specs: Vec<WorkerGroupSpec>,
    /// The Ray version the image speaks; informational.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ray_version: Option<String>,
    /// Scale worker groups between their min and max from the cluster's pending demand.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable_in_tree_autoscaling: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autoscaler_options: Option<AutoscalerOptions>,
    /// Where the head keeps its database so that a restarted head pod keeps its state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gcs_fault_tolerance_options: Option<GcsFaultToleranceOptions>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head_service_annotations: Option<BTreeMap<String, String>>,
    /// Delete every pod and keep the resource.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspend: Option<bool>,
    /// Another controller owns this resource when set to anything but the operator's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub managed_by: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upgrade_strategy: Option<ClusterUpgradeStrategy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth_options: Option<AuthOptions>,
}

#[derive(Deserialize, Serialize, Clone, Debug, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HeadGroupSpec {
    /// The head pod; the oxray container is `containers[0]`.
    #[schemars(schema_with = "any_object")]
    pub template: PodTemplateSpec,
    /// Flags of `oxray start --head`, without the leading dashes.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub ray_start_params: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_type: Option<ServiceType>,
    /// A base for the head Service; its selector and default ports are set by the operator.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_object")]
    pub head_service: Option<Service>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable_ingress: Option<bool>,
    /// Logical resources of the node; they override `rayStartParams.resources`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<BTreeMap<String, String>>,
    /// Node labels; they override `rayStartParams.labels`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<BTreeMap<String, String>>,
}

#[derive(Deserialize, Serialize, Clone, Debug, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkerGroupSpec {
    #[schemars(length(min = 1, max = 63))]
    pub group_name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub replicas: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub min_replicas: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub max_replicas: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub num_of_hosts: Option<i32>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub ray_start_params: BTreeMap<String, String>,
    #[schemars(schema_with = "any_object")]
    pub template: PodTemplateSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale_strategy: Option<ScaleStrategy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub idle_timeout_seconds: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspend: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<BTreeMap<String, String>>,
}

#[derive(Deserialize, Serialize, Clone, Debug, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScaleStrategy {
    /// Pods to remove from the group (by name), whatever its replica count says.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub workers_to_delete: Vec<String>,
}

#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum ServiceType {
    #[default]
    ClusterIP,
    NodePort,
    LoadBalancer,
}

impl ServiceType {
    pub fn as_str(self) -> &'static str {
        match self {
            ServiceType::ClusterIP => "ClusterIP",
            ServiceType::NodePort => "NodePort",
            ServiceType::LoadBalancer => "LoadBalancer",
        }
    }
}

#[derive(Deserialize, Serialize, Clone, Debug, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AutoscalerOptions {
    /// Seconds a worker stays idle before it is removed [default: 60].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub idle_timeout_seconds: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upscaling_mode: Option<UpscalingMode>,
}

#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum UpscalingMode {
    /// Add what the pending demand needs, at once.
    Default,
    /// The same as `Default`.
    Aggressive,
    /// At most as many pods on their way as the cluster has nodes (and at least 5).
    Conservative,
}

#[derive(Deserialize, Serialize, Clone, Debug, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GcsFaultToleranceOptions {
    /// Only the embedded database is supported; `rocksdb` is accepted as its KubeRay name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend: Option<StorageBackend>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage: Option<HeadStorage>,
    /// Redis is not needed: set `storage` instead. Given, the cluster reports an error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redis_address: Option<String>,
}

#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum StorageBackend {
    Embedded,
    Rocksdb,
    Redis,
}

#[derive(Deserialize, Serialize, Clone, Debug, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HeadStorage {
    /// An existing claim to use; otherwise the operator creates `<cluster>-head-storage`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_class_name: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub access_modes: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sub_path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion_policy: Option<DeletionPolicy>,
}

#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum DeletionPolicy {
    DeleteWithCluster,
    Retain,
}

#[derive(Deserialize, Serialize, Clone, Debug, Default, JsonSchema)]
pub struct ClusterUpgradeStrategy {
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub type_: Option<ClusterUpgradeType>,
}

#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum ClusterUpgradeType {
    /// Recreate the pods whose template changed.
    Recreate,
    /// Leave running pods alone; new pods use the new template.
    None,
}

#[derive(Deserialize, Serialize, Clone, Debug, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AuthOptions {
    /// A Secret (key `token`) holding the cluster token to use instead of a generated one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_name: Option<String>,
}

#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RayClusterStatus {
    /// `ready` or `suspended`; conditions say more.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(default)]
    pub ready_worker_replicas: i32,
    #[serde(default)]
    pub available_worker_replicas: i32,
    #[serde(default)]
    pub desired_worker_replicas: i32,
    #[serde(default)]
    pub min_worker_replicas: i32,
    #[serde(default)]
    pub max_worker_replicas: i32,
    #[serde(rename = "desiredCPU", default, skip_serializing_if = "Option::is_none")]
    pub desired_cpu: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub desired_memory: Option<String>,
    #[serde(rename = "desiredGPU", default, skip_serializing_if = "Option::is_none")]
    pub desired_gpu: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub endpoints: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head: Option<HeadInfo>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HeadInfo {
    #[serde(rename = "podIP", default, skip_serializing_if = "Option::is_none")]
    pub pod_ip: Option<String>,
    #[serde(rename = "serviceIP", default, skip_serializing_if = "Option::is_none")]
    pub service_ip: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_name: Option<String>,
}
