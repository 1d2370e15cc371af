//! `RayService`: its cluster is a RayCluster owned by the RayService; once the cluster's
//! head answers, `serveConfigV2` goes to its Serve REST API (again whenever the head runs
//! something else than it says: a change to the config is applied in place), the Serve
//! Service `<name>-serve-svc` leads to the pods labelled `ray.io/serve=true` (those whose
//! Serve proxy is up, as KubeRay labels them), and the status reports each application's
//! status as the head does.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{Api, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};

use crate::context::Context;
use crate::crd::service::{RayService, RayServiceStatus, ServiceStatusDetail};
use crate::crd::{Condition, RayCluster};
use crate::error::Result;
use crate::head::Head;
use crate::names::{LABEL_CLUSTER, LABEL_NODE_TYPE, LABEL_SERVE};
use crate::service_plan;

/// How often Serve's progress is looked at (KubeRay's period).
const POLL: Duration = Duration::from_secs(2);

pub async fn reconcile(service: Arc<RayService>, ctx: Arc<Context>) -> Result<Action> {
    let namespace = service.namespace().unwrap_or_else(|| "default".into());
    let name = format!("{}-raycluster", service.name_any());
    let clusters = Api::<RayCluster>::namespaced(ctx.client.clone(), &namespace);
    let cluster = match clusters.get_opt(&name).await? {
        Some(cluster) => cluster,
        None => {
            let cluster = RayCluster {
                metadata: ObjectMeta {
                    name: Some(name.clone()),
                    namespace: Some(namespace.clone()),
                    owner_references: Some(vec![service.controller_owner_ref(&()).expect("stored")]),
                    ..Default::default()
                },
                spec: service.spec.ray_cluster_config.clone(),
                status: None,
            };
            clusters.create(&PostParams::default(), &cluster).await?
        }
    };
    let wanted = match service.spec.serve_config_v2.as_deref().filter(|c| !c.trim().is_empty()) {
        None => None,
        Some(yaml) => match service_plan::serve_config(yaml) {
            Ok(config) => Some(config),
            Err(e) => return report(&service, &ctx, &name, &cluster, not_ready("InvalidServeConfig", e), None).await,
        },
    };
    let head = Head::of_cluster(&ctx, &namespace, &name).await?;
    let (Some(config), Some(head)) = (wanted, head) else {
        return report(&service, &ctx, &name, &cluster, not_ready("Initializing", String::new()), None).await;
    };
    let details = match head.serve_details().await {
        Ok(details) => details,
        // The head is starting: its API answers soon.
        Err(e) => return report(&service, &ctx, &name, &cluster, not_ready("Initializing", e.to_string()), None).await,
    };
    // Labels first, then the Service that selects by them: it never points at no pod
    // because the labels were not set yet.
    let exclude_head = service.spec.exclude_head_pod_from_serve_svc.unwrap_or(false);
    let endpoints = label_serve_pods(&ctx, &namespace, &name, &details, exclude_head).await?;
    let port = service_plan::serve_port_in_force(&details, &config);
    let owner = service.controller_owner_ref(&()).expect("stored");
    ensure_serve_service(&ctx, owner, &format!("{}-serve-svc", service.name_any()), &namespace, &name, port).await?;
    let seen = |statuses| Some((statuses, endpoints));
    if service_plan::needs_put(&config, &details) {
        match head.put_serve_config(&config).await {
            Ok(Ok(())) => tracing::info!(service = %service.name_any(), "sent serveConfigV2 to the head"),
            Ok(Err(refused)) => {
                let why = format!("the head refused serveConfigV2: {refused}");
                ctx.event(service.as_ref(), true, "InvalidServeConfig", why.clone()).await;
                let statuses = seen(service_plan::application_statuses(&details));
                return report(&service, &ctx, &name, &cluster, not_ready("InvalidServeConfig", why), statuses).await;
            }
            Err(e) => {
                let statuses = seen(service_plan::application_statuses(&details));
                return report(&service, &ctx, &name, &cluster, not_ready("Initializing", e.to_string()), statuses)
                    .await;
            }
        }
    }
    let statuses = service_plan::application_statuses(&details);
    let condition = match (service_plan::all_running(&config, &statuses), endpoints) {
        (false, _) => not_ready("ZeroServeEndpoints", "the Serve applications are not all RUNNING".into()),
        (true, 0) => not_ready("ZeroServeEndpoints", "no pod of the cluster runs a healthy Serve proxy".into()),
        (true, _) => ready(),
    };
    report(&service, &ctx, &name, &cluster, condition, seen(statuses)).await
}

fn not_ready(reason: &str, message: String) -> Condition {
    Condition {
        type_: "Ready".into(),
        status: "False".into(),
        reason: reason.into(),
        message,
        last_transition_time: None,
        observed_generation: None,
    }
}

fn ready() -> Condition {
    Condition { status: "True".into(), ..not_ready("NonZeroServeEndpoints", String::new()) }
}

async fn report(
    service: &RayService,
    ctx: &Context,
    cluster_name: &str,
    cluster: &RayCluster,
    mut condition: Condition,
    statuses: Option<(BTreeMap<String, crate::crd::service::AppStatus>, i32)>,
) -> Result<Action> {
    let serving = condition.status == "True";
    condition.observed_generation = service.metadata.generation;
    // What the head said last stays while it cannot be asked.
    let last = service.status.as_ref().and_then(|s| s.active_service_status.as_ref());
    let (application_statuses, endpoints) = statuses.unwrap_or_else(|| {
        let kept = service.status.as_ref().map_or(0, |s| s.num_serve_endpoints);
        (last.map(|l| l.application_statuses.clone()).unwrap_or_default(), kept)
    });
    let status = RayServiceStatus {
        conditions: vec![condition],
        service_status: serving.then(|| "Running".to_string()),
        num_serve_endpoints: endpoints,
        active_service_status: Some(ServiceStatusDetail {
            ray_cluster_name: Some(cluster_name.to_string()),
            ray_cluster_status: cluster.status.clone(),
            application_statuses,
        }),
        observed_generation: service.metadata.generation,
        ..Default::default()
    };
    crate::status_patch::write(&ctx.client, service, service.status.as_ref(), &status).await?;
    Ok(Action::requeue(POLL))
}

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
        if let Some(patch) = crate::service_plan::serve_service_patch(&spec, &selector, port) {
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
