//! What a RayService's Services select: the `ray.io/serve` label of each pod, the Serve
//! Service `<name>-serve-svc` and the head Service `<name>-head-svc`, which lead to the
//! cluster that serves and move with it on an upgrade.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Pod, Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{Api, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::ResourceExt;

use super::plan as service_plan;
use crate::context::Context;
use crate::error::Result;
use crate::names::{head_service, LABEL_CLUSTER, LABEL_NODE_TYPE, LABEL_SERVE, MANAGER};

/// Sets each pod's `ray.io/serve` label from the proxies the head reports; returns how many
/// pods serve (the Serve Service's endpoints).
pub async fn label_serve_pods(
    ctx: &Context,
    namespace: &str,
    cluster: &str,
    details: &serde_json::Value,
    exclude_head: bool,
) -> Result<i32> {
    let pods = Api::<Pod>::namespaced(ctx.client.clone(), namespace);
    let listed = pods.list(&ListParams::default().labels(&format!("{LABEL_CLUSTER}={cluster}"))).await?;
    let label_of = |pod: &Pod, key: &str| pod.metadata.labels.as_ref().and_then(|l| l.get(key)).cloned();
    let facts: Vec<(String, String, bool)> = listed
        .items
        .iter()
        .filter(|pod| pod.metadata.deletion_timestamp.is_none())
        .map(|pod| {
            let ip = pod.status.as_ref().and_then(|s| s.pod_ip.clone()).unwrap_or_default();
            (pod.name_any(), ip, label_of(pod, LABEL_NODE_TYPE).as_deref() == Some("head"))
        })
        .collect();
    let views: Vec<service_plan::ServePod> =
        facts.iter().map(|(name, ip, head)| service_plan::ServePod { name, ip, head: *head }).collect();
    let wanted = service_plan::serve_labels(&views, details, exclude_head);
    for (pod, value) in &wanted {
        let now = listed.items.iter().find(|p| p.name_any() == *pod).and_then(|p| label_of(p, LABEL_SERVE));
        if now.as_deref() != Some(*value) {
            let patch = serde_json::json!({"metadata": {"labels": {LABEL_SERVE: value}}});
            match pods.patch(pod, &PatchParams::default(), &Patch::Merge(&patch)).await {
                // Deleted since it was listed.
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
    Ok(service_plan::endpoints(&views, &wanted))
}

/// `name` (`<owner>-serve-svc`): the Serve port of the cluster's pods that serve, kept to
/// the port and selector wanted now.
pub async fn ensure_serve_service(
    ctx: &Context,
    owner: k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference,
    name: &str,
    namespace: &str,
    cluster: &str,
    port: i32,
) -> Result<()> {
    let services = Api::<Service>::namespaced(ctx.client.clone(), namespace);
    let selector =
        BTreeMap::from([(LABEL_CLUSTER.to_string(), cluster.to_string()), (LABEL_SERVE.to_string(), "true".into())]);
    if let Some(existing) = services.get_opt(name).await? {
        let spec = serde_json::to_value(existing.spec.unwrap_or_default()).unwrap_or_default();
        if let Some(patch) = service_plan::serve_service_patch(&spec, &selector, port) {
            services.patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await?;
        }
        return Ok(());
    }
    let svc = Service {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(namespace.to_string()),
            owner_references: Some(vec![owner]),
            ..Default::default()
        },
        spec: Some(ServiceSpec {
            selector: Some(selector),
            ports: Some(vec![ServicePort {
                name: Some("serve".into()),
                port,
                target_port: Some(IntOrString::Int(port)),
                protocol: Some("TCP".into()),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        status: None,
    };
    services.create(&PostParams::default(), &svc).await?;
    Ok(())
}

/// `name` (`<service>-head-svc`): the head Service of `cluster`, under a name that stays the
/// same across upgrades. Nothing until the cluster's own head Service exists.
pub async fn ensure_head_service(
    ctx: &Context,
    owner: OwnerReference,
    name: &str,
    namespace: &str,
    cluster: &str,
) -> Result<()> {
    let services = Api::<Service>::namespaced(ctx.client.clone(), namespace);
    let Some(source) = services.get_opt(&head_service(cluster)).await? else { return Ok(()) };
    let wanted = stable_head_service(&source, name, cluster, owner);
    let now = services.get_opt(name).await?;
    if now.as_ref().is_some_and(|now| same_routing(now, &wanted)) {
        return Ok(());
    }
    services.patch(name, &PatchParams::apply(MANAGER).force(), &Patch::Apply(&wanted)).await?;
    Ok(())
}

/// Whether the head Service `now` leads as `wanted` does: selector, type and ports, whatever
/// node ports the API server gave it, with the annotations wanted (others, a load balancer
/// controller's say, may be there too).
fn same_routing(now: &Service, wanted: &Service) -> bool {
    let routing = |s: &Service| {
        let spec = s.spec.clone().unwrap_or_default();
        let ports: Vec<ServicePort> =
            spec.ports.unwrap_or_default().into_iter().map(|p| ServicePort { node_port: None, ..p }).collect();
        (spec.selector, ports, spec.type_)
    };
    let has = now.metadata.annotations.clone().unwrap_or_default();
    let annotated = wanted.metadata.annotations.iter().flatten().all(|(k, v)| has.get(k) == Some(v));
    annotated && routing(now) == routing(wanted)
}

/// The head Service of `cluster` (`source`) renamed and owned by the RayService, with its
/// annotations (a load balancer's kind, say). What the API server gives each Service (its
/// address, node ports) is left for it to give again, and what only one Service may hold
/// (a load balancer's or external address) stays the cluster's own Service's.
pub fn stable_head_service(source: &Service, name: &str, cluster: &str, owner: OwnerReference) -> Service {
    let mut spec = source.spec.clone().unwrap_or_default();
    spec.selector = Some(BTreeMap::from([
        (LABEL_CLUSTER.to_string(), cluster.to_string()),
        (LABEL_NODE_TYPE.to_string(), "head".to_string()),
    ]));
    if spec.cluster_ip.as_deref() != Some("None") {
        spec.cluster_ip = None;
    }
    spec.cluster_ips = None;
    spec.health_check_node_port = None;
    spec.load_balancer_ip = None;
    spec.external_ips = None;
    for port in spec.ports.iter_mut().flatten() {
        port.node_port = None;
    }
    Service {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: source.metadata.namespace.clone(),
            owner_references: Some(vec![owner]),
            annotations: source.metadata.annotations.clone(),
            ..Default::default()
        },
        spec: Some(spec),
        status: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stable_head_service_selects_the_cluster_s_head_and_leaves_addresses_to_the_api() {
        let source: Service = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "svc-raycluster-abcde-head-svc", "namespace": "ns",
                         "labels": {"ray.io/cluster": "svc-raycluster-abcde"},
                         "annotations": {"cloud.example/load-balancer": "internal"}},
            "spec": {"type": "NodePort", "clusterIP": "10.0.0.9", "clusterIPs": ["10.0.0.9"],
                     "healthCheckNodePort": 32000, "loadBalancerIP": "1.2.3.4", "externalIPs": ["5.6.7.8"],
                     "selector": {"ray.io/cluster": "svc-raycluster-abcde", "ray.io/node-type": "head"},
                     "ports": [{"name": "dashboard", "port": 8265, "nodePort": 31000}]}
        }))
        .unwrap();
        let owner = OwnerReference { name: "svc".into(), kind: "RayService".into(), ..Default::default() };
        let out = stable_head_service(&source, "svc-head-svc", "svc-raycluster-fghij", owner);
        assert_eq!(out.metadata.name.as_deref(), Some("svc-head-svc"));
        assert_eq!(out.metadata.labels, None, "the cluster's controller does not own it");
        assert_eq!(out.metadata.annotations.as_ref().unwrap()["cloud.example/load-balancer"], "internal");
        let mut given = out.clone();
        given.spec.as_mut().unwrap().ports.as_mut().unwrap()[0].node_port = Some(31555);
        assert!(same_routing(&given, &out), "node ports the API server gave are no change");
        given.metadata.annotations.as_mut().unwrap().insert("lb.example/status".into(), "x".into());
        assert!(same_routing(&given, &out), "nor annotations another controller adds");
        given.metadata.annotations.as_mut().unwrap().remove("cloud.example/load-balancer");
        assert!(!same_routing(&given, &out), "an annotation wanted and missing is");
        let spec = out.spec.unwrap();
        assert_eq!((spec.health_check_node_port, spec.load_balancer_ip, spec.external_ips), (None, None, None));
        assert_eq!(spec.selector.unwrap()["ray.io/cluster"], "svc-raycluster-fghij");
        assert_eq!((spec.cluster_ip, spec.cluster_ips), (None, None));
        assert_eq!(spec.ports.unwrap()[0].node_port, None);
        assert_eq!(spec.type_.as_deref(), Some("NodePort"));
        let mut headless = source.clone();
        headless.spec.as_mut().unwrap().cluster_ip = Some("None".into());
        let out = stable_head_service(&headless, "svc-head-svc", "c", OwnerReference::default());
        assert_eq!(out.spec.unwrap().cluster_ip.as_deref(), Some("None"));
    }
}
