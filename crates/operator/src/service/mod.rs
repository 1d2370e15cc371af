//! `RayService`: Serve applications on a RayCluster of its own, kept running across changes.
//!
//! - The cluster that serves is the active one; `serveConfigV2` goes to its head's Serve REST
//!   API, and a change to it is applied in place.
//! - A change to `rayClusterConfig` (beyond scale and worker groups added at the end, which
//!   are applied in place) starts a pending cluster (`upgrade`). Once every application runs
//!   there and a pod of it serves, it becomes the active one; the old one is deleted after
//!   `rayClusterDeletionDelaySeconds`.
//! - The Serve Service `<name>-serve-svc` leads to the active cluster's pods labelled
//!   `ray.io/serve=true` (those whose Serve proxy is up, as KubeRay labels them), and the
//!   head Service `<name>-head-svc` to its head: both names stay across upgrades.
//! - The status reports each cluster's applications as its head does.

mod objects;
pub mod plan;
pub mod upgrade;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};
use serde_json::Value;

use crate::context::Context;
use crate::crd::service::{AppStatus, RayService, RayServiceStatus, ServiceStatusDetail};
use crate::crd::{Condition, RayCluster};
use crate::error::Result;
use crate::head::Head;
use crate::names::{random_suffix, LABEL_ORIGIN_KIND, LABEL_ORIGIN_NAME};
pub use objects::{ensure_serve_service, label_serve_pods};
use plan::Readiness;
use upgrade::{Named, Plan, Sweep};

/// How often Serve's progress is looked at (KubeRay's period).
const POLL: Duration = Duration::from_secs(2);

/// What one cluster's head says of Serve.
#[derive(Default)]
struct Seen<'a> {
    head: Option<Head<'a>>,
    details: Option<Value>,
    statuses: BTreeMap<String, AppStatus>,
    endpoints: i32,
    /// Why the head could not be asked.
    unreachable: Option<String>,
}

pub async fn reconcile(service: Arc<RayService>, ctx: Arc<Context>) -> Result<Action> {
    let namespace = service.namespace().unwrap_or_else(|| "default".into());
    let clusters = Api::<RayCluster>::namespaced(ctx.client.clone(), &namespace);
    let uid = service.uid();
    let owned: Vec<RayCluster> = clusters
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|c| c.owner_references().iter().any(|o| Some(&o.uid) == uid.as_ref()))
        .collect();
    let find = |name: &str| owned.iter().find(|c| c.name_any() == name);
    let goal = &service.spec.ray_cluster_config;
    let last = service.status.clone().unwrap_or_default();
    let name_of = |d: &Option<ServiceStatusDetail>| d.as_ref().and_then(|d| d.ray_cluster_name.clone());
    let named = |name: Option<String>| {
        name.map(|name| {
            let fit = find(&name).map(|c| upgrade::fit(goal, c.annotations()));
            Named { name, fit }
        })
    };
    let strategy = service.spec.upgrade_strategy.as_ref().and_then(|s| s.type_).unwrap_or_default();
    let mut plan = upgrade::plan(
        named(name_of(&last.active_service_status)),
        named(name_of(&last.pending_service_status)),
        strategy,
        format!("{}-raycluster-{}", service.name_any(), random_suffix()),
    );
    if let Some(new) = &plan.create {
        if name_of(&last.pending_service_status).as_ref() != Some(new) {
            // The name is recorded before the cluster is made, so a pass cut short in
            // between makes it under the same name next time.
            let mut named_first = last.clone();
            named_first.pending_service_status =
                Some(ServiceStatusDetail { ray_cluster_name: Some(new.clone()), ..Default::default() });
            crate::status_patch::write(&ctx.client, service.as_ref(), service.status.as_ref(), &named_first).await?;
        }
        create_cluster(&ctx, &service, &clusters, new, plan.active.as_deref()).await?;
    }
    carry_out_in_place(&ctx, &service, &clusters, &plan, find).await?;

    let created = plan.create.clone();
    let exists =
        |name: &Option<String>| name.as_deref().is_some_and(|n| find(n).is_some() || created.as_deref() == Some(n));
    let exclude_head = service.spec.exclude_head_pod_from_serve_svc.unwrap_or(false);
    let mut active =
        if exists(&plan.active) { look(&ctx, &namespace, &plan.active, exclude_head).await? } else { Seen::default() };
    let mut pending = if exists(&plan.pending) {
        look(&ctx, &namespace, &plan.pending, exclude_head).await?
    } else {
        Seen::default()
    };
    let config = match service.spec.serve_config_v2.as_deref().filter(|c| !c.trim().is_empty()) {
        None => Err(("Initializing", "serveConfigV2 is empty".to_string())),
        Some(yaml) => plan::serve_config(yaml).map_err(|e| ("InvalidServeConfig", e)),
    };
    let had_active = exists(&plan.active);
    let problem = match &config {
        Err(problem) => Some(problem.clone()),
        Ok(config) => {
            let target = if plan.pending.is_some() { &mut pending } else { &mut active };
            send_config(&ctx, &service, config, target).await
        }
    };
    if let (Some(name), Ok(config), None) = (plan.pending.clone(), &config, &problem) {
        if upgrade::promote(plan::all_running(config, &pending.statuses), pending.endpoints, had_active) {
            let note = match plan.active.as_deref() {
                Some(old) => format!("RayCluster {name} serves now, in place of {old}"),
                None => format!("RayCluster {name} serves"),
            };
            ctx.event(service.as_ref(), false, "Promoted", note).await;
            plan = Plan { active: Some(name), pending: None, ..plan };
            active = std::mem::take(&mut pending);
        }
    }
    if exists(&plan.active) {
        let cluster = plan.active.as_deref().unwrap_or_default();
        let owner = service.controller_owner_ref(&()).expect("a stored resource has a name and uid");
        let base = service.name_any();
        objects::ensure_head_service(&ctx, owner.clone(), &format!("{base}-head-svc"), &namespace, cluster).await?;
        if let Some(details) = &active.details {
            let port = plan::serve_port_in_force(details, config.as_ref().unwrap_or(&Value::Null));
            ensure_serve_service(&ctx, owner, &format!("{base}-serve-svc"), &namespace, cluster, port).await?;
        }
    }
    sweep(&ctx, &service, &clusters, &owned, &plan).await?;

    let upgrading = plan.pending.is_some() && exists(&plan.active);
    if active.details.is_none() && plan.active == name_of(&last.active_service_status) {
        // What the head said last stays while it cannot be asked.
        active.endpoints = last.num_serve_endpoints;
    }
    let readiness = Readiness {
        problem: problem.clone().filter(|_| !upgrading),
        serving: exists(&plan.active),
        apps_running: upgrading || config.as_ref().is_ok_and(|c| plan::all_running(c, &active.statuses)),
        endpoints: active.endpoints,
    };
    let waiting = problem.map(|p| p.1).or(pending.unreachable.clone());
    let cluster_status = |name: &str| find(name).and_then(|c| c.status.clone());
    let detail = |name: &Option<String>, seen: Seen, kept: &Option<ServiceStatusDetail>| {
        name.as_ref().map(|n| ServiceStatusDetail {
            ray_cluster_name: Some(n.clone()),
            ray_cluster_status: cluster_status(n),
            application_statuses: match (seen.details, kept) {
                (Some(_), _) => seen.statuses,
                (None, Some(k)) if k.ray_cluster_name.as_ref() == Some(n) => k.application_statuses.clone(),
                _ => BTreeMap::new(),
            },
        })
    };
    let status = RayServiceStatus {
        conditions: readiness
            .conditions(plan.active.as_deref().filter(|_| exists(&plan.active)), plan.pending.as_deref(), waiting)
            .into_iter()
            .map(|c| Condition { observed_generation: service.metadata.generation, ..c })
            .collect(),
        service_status: readiness.ready().then(|| "Running".to_string()),
        num_serve_endpoints: active.endpoints,
        active_service_status: detail(&plan.active, active, &last.active_service_status),
        pending_service_status: detail(&plan.pending, pending, &last.pending_service_status),
        observed_generation: service.metadata.generation,
    };
    crate::status_patch::write(&ctx.client, service.as_ref(), service.status.as_ref(), &status).await?;
    Ok(Action::requeue(POLL))
}

/// Asks a cluster's head what Serve runs, and labels the pods that serve.
async fn look<'a>(ctx: &'a Context, namespace: &str, cluster: &Option<String>, exclude_head: bool) -> Result<Seen<'a>> {
    let cluster = cluster.as_deref().unwrap_or_default();
    let Some(head) = Head::of_cluster(ctx, namespace, cluster).await? else {
        let why = format!("the head of RayCluster {cluster} is not up yet");
        return Ok(Seen { unreachable: Some(why), ..Default::default() });
    };
    match head.serve_details().await {
        Ok(details) => {
            let endpoints = label_serve_pods(ctx, namespace, cluster, &details, exclude_head).await?;
            let statuses = plan::application_statuses(&details);
            Ok(Seen { head: Some(head), details: Some(details), statuses, endpoints, unreachable: None })
        }
        // The head is starting: its API answers soon.
        Err(e) => Ok(Seen { unreachable: Some(e.to_string()), ..Default::default() }),
    }
}

/// Sends `serveConfigV2` to the cluster's head unless it runs exactly that; what keeps it
/// from running there, as a condition's reason and message.
async fn send_config(
    ctx: &Context,
    service: &RayService,
    config: &Value,
    seen: &mut Seen<'_>,
) -> Option<(&'static str, String)> {
    let (Some(head), Some(details)) = (&seen.head, &seen.details) else {
        return Some(("Initializing", seen.unreachable.clone().unwrap_or_default()));
    };
    if !plan::needs_put(config, details) {
        return None;
    }
    match head.put_serve_config(config).await {
        Ok(Ok(())) => {
            tracing::info!(service = %service.name_any(), "sent serveConfigV2 to the head");
            None
        }
        Ok(Err(refused)) => {
            let why = format!("the head refused serveConfigV2: {refused}");
            ctx.event(service, true, "InvalidServeConfig", why.clone()).await;
            Some(("InvalidServeConfig", why))
        }
        Err(e) => Some(("Initializing", e.to_string())),
    }
}

/// Makes cluster `name` from `rayClusterConfig`, marked with the config's hash; one made
/// already (a pass cut short) is kept.
async fn create_cluster(
    ctx: &Context,
    service: &RayService,
    clusters: &Api<RayCluster>,
    name: &str,
    replacing: Option<&str>,
) -> Result<()> {
    let mut labels = service.labels().clone();
    labels.insert(LABEL_ORIGIN_NAME.into(), service.name_any());
    labels.insert(LABEL_ORIGIN_KIND.into(), "RayService".into());
    let cluster = RayCluster {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: service.namespace(),
            labels: Some(labels),
            annotations: Some(upgrade::marks(&service.spec.ray_cluster_config)),
            owner_references: Some(vec![service.controller_owner_ref(&()).expect("stored")]),
            ..Default::default()
        },
        spec: service.spec.ray_cluster_config.clone(),
        status: None,
    };
    match clusters.create(&PostParams::default(), &cluster).await {
        Ok(_) => {
            let note = match replacing {
                Some(old) => format!("created RayCluster {name} to replace {old}, which serves until it is ready"),
                None => format!("created RayCluster {name}"),
            };
            ctx.event(service, false, "CreatedRayCluster", note).await;
            Ok(())
        }
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Marks a cluster taken as it is, and brings one to the scale and worker groups asked.
async fn carry_out_in_place<'a>(
    ctx: &Context,
    service: &RayService,
    clusters: &Api<RayCluster>,
    plan: &Plan,
    find: impl Fn(&str) -> Option<&'a RayCluster>,
) -> Result<()> {
    if let Some(live) = plan.mark.as_deref().and_then(&find) {
        let patch = serde_json::json!({"metadata": {"annotations": upgrade::marks(&live.spec)}});
        clusters.patch(&live.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await?;
    }
    let Some(update) = &plan.update else { return Ok(()) };
    let Some(live) = find(&update.name) else { return Ok(()) };
    let Some(spec) = upgrade::in_place(&live.spec, &service.spec.ray_cluster_config, update.extend) else {
        return Ok(());
    };
    let mut new = live.clone();
    new.annotations_mut().extend(upgrade::marks(&spec));
    new.spec = spec;
    // With the resourceVersion read: a change made meanwhile wins, and this is done again.
    clusters.replace(&update.name, &PostParams::default(), &new).await?;
    let note = format!("updated RayCluster {} in place to the worker groups and scale asked", update.name);
    ctx.event(service, false, "UpdatedRayCluster", note).await;
    Ok(())
}

/// Marks the service's clusters that no longer serve, and deletes them once their delay is over.
async fn sweep(
    ctx: &Context,
    service: &RayService,
    clusters: &Api<RayCluster>,
    owned: &[RayCluster],
    plan: &Plan,
) -> Result<()> {
    let delay = service
        .spec
        .ray_cluster_deletion_delay_seconds
        .map(|s| Duration::from_secs(s.max(0) as u64))
        .unwrap_or(upgrade::DEFAULT_DELETION_DELAY);
    let marks: Vec<(String, Option<String>)> = owned
        .iter()
        .filter(|c| c.metadata.deletion_timestamp.is_none())
        .map(|c| (c.name_any(), c.annotations().get(upgrade::ANNOTATION_DELETE_AFTER).cloned()))
        .collect();
    for step in upgrade::sweep(&marks, plan, SystemTime::now(), delay) {
        match step {
            Sweep::Mark { name, at } => {
                let patch = serde_json::json!({"metadata": {"annotations": {upgrade::ANNOTATION_DELETE_AFTER: at}}});
                clusters.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await?;
                tracing::info!(service = %service.name_any(), cluster = name, at, "a RayCluster no longer serves; deleted after its delay");
            }
            Sweep::Delete { name } => match clusters.delete(&name, &DeleteParams::background()).await {
                Ok(_) => {
                    ctx.event(
                        service,
                        false,
                        "DeletedRayCluster",
                        format!("deleted RayCluster {name}, which no longer serves"),
                    )
                    .await
                }
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(e) => return Err(e.into()),
            },
        }
    }
    Ok(())
}
