//! `RayService`: its cluster is a RayCluster owned by the RayService. Serve applications are
//! not available in this version; the status says so rather than pretending.

use std::sync::Arc;

use kube::api::{Api, ObjectMeta, PostParams};
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};

use crate::context::Context;
use crate::crd::service::{RayService, RayServiceStatus, ServiceStatusDetail};
use crate::crd::{Condition, RayCluster};
use crate::error::Result;

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
    let serve_wanted = service.spec.serve_config_v2.as_deref().is_some_and(|c| !c.trim().is_empty());
    let status = RayServiceStatus {
        conditions: vec![Condition {
            type_: "Ready".into(),
            status: "False".into(),
            reason: if serve_wanted { "ServeUnavailable".into() } else { "Initializing".into() },
            message: if serve_wanted {
                "serveConfigV2 cannot be applied: this oxray version has no Serve".into()
            } else {
                String::new()
            },
            last_transition_time: None,
            observed_generation: service.metadata.generation,
        }],
        active_service_status: Some(ServiceStatusDetail {
            ray_cluster_name: Some(name),
            ray_cluster_status: cluster.status.clone(),
        }),
        observed_generation: service.metadata.generation,
        ..Default::default()
    };
    crate::status_patch::write(&ctx.client, service.as_ref(), service.status.as_ref(), &status).await?;
    Ok(Action::requeue(std::time::Duration::from_secs(30)))
}
