//! `RayService`: its cluster is a RayCluster owned by the RayService; once the cluster's
//! head answers, `serveConfigV2` goes to its Serve REST API (again whenever the head runs
//! something else than it says: a change to the config is applied in place), the Serve
//! Service `<name>-serve-svc` leads to the proxy, and the status reports each
//! application's status as the head does.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{Api, ObjectMeta, PostParams};
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};

use crate::context::Context;
use crate::crd::service::{RayService, RayServiceStatus, ServiceStatusDetail};
use crate::crd::{Condition, RayCluster};
use crate::error::Result;
use crate::head::Head;
use crate::names::{LABEL_CLUSTER, LABEL_NODE_TYPE};
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
    if let Some(config) = &wanted {
        ensure_serve_service(&service, &ctx, &namespace, &name, service_plan::serve_port(config)).await?;
    }
    let head = Head::of_cluster(&ctx, &namespace, &name).await?;
    let (Some(config), Some(head)) = (wanted, head) else {
        return report(&service, &ctx, &name, &cluster, not_ready("Initializing", String::new()), None).await;
    };
    let details = match head.serve_details().await {
        Ok(details) => details,
        // The head is starting: its API answers soon.
        Err(e) => return report(&service, &ctx, &name, &cluster, not_ready("Initializing", e.to_string()), None).await,
    };
    if service_plan::needs_put(&config, &details) {
        match head.put_serve_config(&config).await {
            Ok(Ok(())) => tracing::info!(service = %service.name_any(), "sent serveConfigV2 to the head"),
            Ok(Err(refused)) => {
                let why = format!("the head refused serveConfigV2: {refused}");
                ctx.event(service.as_ref(), true, "InvalidServeConfig", why.clone()).await;
                return report(&service, &ctx, &name, &cluster, not_ready("InvalidServeConfig", why), None).await;
            }
            Err(e) => {
                return report(&service, &ctx, &name, &cluster, not_ready("Initializing", e.to_string()), None).await
            }
        }
    }
    let statuses = service_plan::application_statuses(&details);
    let serving = service_plan::all_running(&config, &statuses);
    let condition = if serving {
        ready()
    } else {
        not_ready("ZeroServeEndpoints", "the Serve applications are not all RUNNING".into())
    };
    report(&service, &ctx, &name, &cluster, condition, Some(statuses)).await
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
    statuses: Option<BTreeMap<String, crate::crd::service::AppStatus>>,
) -> Result<Action> {
    let serving = condition.status == "True";
    condition.observed_generation = service.metadata.generation;
    // What the head said last stays while it cannot be asked.
    let last = service.status.as_ref().and_then(|s| s.active_service_status.as_ref());
    let application_statuses =
        statuses.unwrap_or_else(|| last.map(|l| l.application_statuses.clone()).unwrap_or_default());
    let status = RayServiceStatus {
        conditions: vec![condition],
        service_status: serving.then(|| "Running".to_string()),
        num_serve_endpoints: i32::from(serving),
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

/// `<name>-serve-svc`: the Serve port of the cluster's head, where the proxy runs.
async fn ensure_serve_service(
    service: &RayService,
    ctx: &Context,
    namespace: &str,
    cluster: &str,
    port: i32,
) -> Result<()> {
    let services = Api::<Service>::namespaced(ctx.client.clone(), namespace);
    let name = format!("{}-serve-svc", service.name_any());
    if services.get_opt(&name).await?.is_some() {
        return Ok(());
    }
    let svc = Service {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: Some(namespace.to_string()),
            owner_references: Some(vec![service.controller_owner_ref(&()).expect("stored")]),
            ..Default::default()
        },
        spec: Some(ServiceSpec {
            selector: Some(BTreeMap::from([
                (LABEL_CLUSTER.to_string(), cluster.to_string()),
                (LABEL_NODE_TYPE.to_string(), "head".to_string()),
            ])),
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
