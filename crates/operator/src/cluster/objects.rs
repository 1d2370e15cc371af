//! The head Service, the token Secret and the head's storage claim of a cluster.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    PersistentVolumeClaim, PersistentVolumeClaimSpec, Pod, Secret, Service, ServicePort, VolumeResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::pods::ClusterRef;
use crate::crd::cluster::{HeadStorage, RayClusterSpec, ServiceType};
use crate::names::*;

/// The head's Service: headless for ClusterIP (workers then reach the head pod itself, before
/// it is ready), or NodePort / LoadBalancer for reaching the dashboard from outside.
pub fn head_service(cluster: &ClusterRef, spec: &RayClusterSpec, head: &Pod) -> Service {
    let mut service = spec.head_group_spec.head_service.clone().unwrap_or_default();
    let mut labels = service.metadata.labels.take().unwrap_or_default();
    labels.extend(cluster.labels("head", HEAD_GROUP));
    let mut meta = cluster.meta(Some(crate::names::head_service(&cluster.name)), labels);
    let mut annotations = service.metadata.annotations.take().unwrap_or_default();
    annotations.extend(spec.head_service_annotations.clone().unwrap_or_default());
    meta.annotations = Some(annotations).filter(|a| !a.is_empty());
    service.metadata = meta;

    let kind = spec.head_group_spec.service_type.unwrap_or_default();
    let mut svc_spec = service.spec.take().unwrap_or_default();
    svc_spec.selector = Some(BTreeMap::from([
        (LABEL_CLUSTER.to_string(), cluster.name.clone()),
        (LABEL_NODE_TYPE.to_string(), "head".to_string()),
    ]));
    svc_spec.type_ = Some(kind.as_str().into());
    if kind == ServiceType::ClusterIP {
        svc_spec.cluster_ip = Some("None".into());
        svc_spec.publish_not_ready_addresses = Some(true);
    }
    svc_spec.ports = Some(head_ports(head));
    service.spec = Some(svc_spec);
    service.status = None;
    service
}

/// The head container's named ports, sorted by name, and `metrics` (which oxray serves on
/// the dashboard port) when the container does not name one.
fn head_ports(head: &Pod) -> Vec<ServicePort> {
    let container = head.spec.as_ref().and_then(|s| s.containers.first());
    let mut ports: Vec<ServicePort> = container
        .and_then(|c| c.ports.clone())
        .unwrap_or_default()
        .into_iter()
        .filter_map(|p| {
            let name = p.name?;
            Some(ServicePort {
                name: Some(name),
                port: p.container_port,
                target_port: Some(IntOrString::Int(p.container_port)),
                protocol: Some(p.protocol.unwrap_or_else(|| "TCP".into())),
                app_protocol: Some("tcp".into()),
                ..Default::default()
            })
        })
        .collect();
    if !ports.iter().any(|p| p.name.as_deref() == Some("metrics")) {
        let dashboard =
            ports.iter().find(|p| p.name.as_deref() == Some("dashboard")).map(|p| p.port).unwrap_or(PORT_DASHBOARD);
        ports.push(ServicePort {
            name: Some("metrics".into()),
            port: PORT_METRICS,
            target_port: Some(IntOrString::Int(dashboard)),
            protocol: Some("TCP".into()),
            app_protocol: Some("tcp".into()),
            ..Default::default()
        });
    }
    ports.sort_by(|a, b| a.name.cmp(&b.name));
    ports
}

/// A new random token. Created once: the pods of a running cluster hold it.
pub fn token_secret(cluster: &ClusterRef) -> Secret {
    let mut bytes = [0u8; 24];
    getrandom::fill(&mut bytes).expect("the OS random source works");
    Secret {
        metadata: cluster.meta(Some(cluster.token_secret.clone()), cluster.labels("token", HEAD_GROUP)),
        string_data: Some(BTreeMap::from([("token".to_string(), hex::encode(bytes))])),
        type_: Some("Opaque".into()),
        ..Default::default()
    }
}

/// The claim the operator creates for the head's database, owned by the cluster unless
/// its deletion policy is `Retain`.
pub fn head_claim(cluster: &ClusterRef, storage: &HeadStorage) -> PersistentVolumeClaim {
    use crate::crd::cluster::DeletionPolicy;
    let mut meta = cluster.meta(Some(head_storage_claim(&cluster.name)), cluster.labels("head", HEAD_GROUP));
    if storage.deletion_policy == Some(DeletionPolicy::Retain) {
        meta.owner_references = None;
    }
    let modes =
        if storage.access_modes.is_empty() { vec!["ReadWriteOnce".to_string()] } else { storage.access_modes.clone() };
    PersistentVolumeClaim {
        metadata: meta,
        spec: Some(PersistentVolumeClaimSpec {
            access_modes: Some(modes),
            storage_class_name: storage.storage_class_name.clone(),
            resources: Some(VolumeResourceRequirements {
                requests: Some(BTreeMap::from([(
                    "storage".to_string(),
                    Quantity(storage.size.clone().unwrap_or_else(|| "1Gi".into())),
                )])),
                limits: None,
            }),
            ..Default::default()
        }),
        status: None,
    }
}
