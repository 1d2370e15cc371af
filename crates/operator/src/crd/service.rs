//! `RayService`: a cluster running Serve applications, with KubeRay's field names.

use std::collections::BTreeMap;

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::cluster::{RayClusterSpec, RayClusterStatus};
use super::Condition;

#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, Default, JsonSchema)]
#[kube(
    group = "oxray.io",
    version = "v1",
    kind = "RayService",
    namespaced,
    status = "RayServiceStatus",
    category = "all",
    printcolumn = r#"{"name":"service status","type":"string","jsonPath":".status.serviceStatus"}"#,
    printcolumn = r#"{"name":"num serve endpoints","type":"integer","jsonPath":".status.numServeEndpoints"}"#,
    printcolumn = r#"{"name":"age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct RayServiceSpec {
    /// Serve's multi-application config (YAML), applied through the head's Serve REST API.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serve_config_v2: Option<String>,
    pub ray_cluster_config: RayClusterSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exclude_head_pod_from_serve_svc: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspend: Option<bool>,
    /// What a change to `rayClusterConfig` does (beyond scale and added worker groups).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upgrade_strategy: Option<ServiceUpgradeStrategy>,
    /// How long a cluster that no longer serves is kept before it is deleted (60 s unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub ray_cluster_deletion_delay_seconds: Option<i32>,
}

#[derive(Deserialize, Serialize, Clone, Debug, Default, JsonSchema)]
pub struct ServiceUpgradeStrategy {
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub type_: Option<ServiceUpgradeType>,
}

#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum ServiceUpgradeType {
    /// Start a cluster of the new config, move the Services to it once Serve runs there,
    /// then delete the old one: no request finds no cluster.
    #[default]
    NewCluster,
    /// Leave the running cluster as it is.
    None,
}

#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RayServiceStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_status: Option<String>,
    #[serde(default)]
    pub num_serve_endpoints: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_service_status: Option<ServiceStatusDetail>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_service_status: Option<ServiceStatusDetail>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServiceStatusDetail {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ray_cluster_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ray_cluster_status: Option<RayClusterStatus>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub application_statuses: BTreeMap<String, AppStatus>,
}

/// A Serve application's status, as the head reports it.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AppStatus {
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub serve_deployment_statuses: BTreeMap<String, DeploymentStatus>,
}

#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeploymentStatus {
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}
