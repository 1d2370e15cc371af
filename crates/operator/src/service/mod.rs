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
    let (mut active_name, pending_name) = (name_of(&last.active_service_status), name_of(&last.pending_service_status));
    if active_name.is_none() && pending_name.is_none() && !owned.is_empty() {
        active_name = adopted(&ctx, &service, &namespace, &owned).await?;
    }
    let strategy = service.spec.upgrade_strategy.as_ref().and_then(|s| s.type_).unwrap_or_default();
    let mut plan = upgrade::plan(
        named(active_name),
        named(pending_name.clone()),
        strategy,
        format!("{}-raycluster-{}", service.name_any(), random_suffix()),
    );
    // Status writes are checked against the version read: one pass at a time decides.
    let mut written: Option<RayService> = None;
    if let Some(new) = &plan.create {
        if pending_name.as_ref() != Some(new) {
            // The name is recorded before the cluster is made, so a pass cut short in
            // between makes it under the same name next time.
            let mut named_first = last.clone();
            named_first.pending_service_status =
                Some(ServiceStatusDetail { ray_cluster_name: Some(new.clone()), ..Default::default() });
            written = write_status(&ctx, &service, &named_first).await?;
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
    let serving_pending = plan.serve.is_some() && plan.serve == plan.pending;
    let (problem, sent) = match &config {
        Err(problem) => (Some(problem.clone()), false),
        Ok(config) => {
            send_config(&ctx, &service, config, if serving_pending { &mut pending } else { &mut active }).await
        }
    };
    // Statuses read before a config was sent are not of that config: promotion waits a pass.
    if let (Some(name), Ok(config), None, false) = (plan.pending.clone(), &config, &problem, sent) {
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

    // The Services lead to the active cluster before the status says it serves.
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
    let detail = |name: &Option<String>, seen: &Seen, kept: &Option<ServiceStatusDetail>| {
        name.as_ref().map(|n| ServiceStatusDetail {
            ray_cluster_name: Some(n.clone()),
            ray_cluster_status: cluster_status(n),
            application_statuses: match (&seen.details, kept) {
                (Some(_), _) => seen.statuses.clone(),
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
        active_service_status: detail(&plan.active, &active, &last.active_service_status),
        pending_service_status: detail(&plan.pending, &pending, &last.pending_service_status),
        observed_generation: service.metadata.generation,
    };
    write_status(&ctx, written.as_ref().unwrap_or(&service), &status).await?;
    // Only clusters the written status names neither active nor pending go.

    sweep(&ctx, &service, &clusters, &owned, &plan).await?;
    Ok(Action::requeue(POLL))
}

/// `status` as the service's, if nothing changed the service since `read` was read.
async fn write_status(ctx: &Context, read: &RayService, status: &RayServiceStatus) -> Result<Option<RayService>> {
    Ok(crate::status_patch::write_checked(&ctx.client, read, read.status.as_ref(), status).await?)
}

/// The cluster to take as active for a service whose status names none (see
/// `upgrade::adopt`).
async fn adopted(ctx: &Context, service: &RayService, namespace: &str, owned: &[RayCluster]) -> Result<Option<String>> {
    let services = Api::<k8s_openapi::api::core::v1::Service>::namespaced(ctx.client.clone(), namespace);
    let selected = services
        .get_opt(&format!("{}-serve-svc", service.name_any()))
        .await?
        .and_then(|s| s.spec?.selector?.get(crate::names::LABEL_CLUSTER).cloned());
    let mut by_age: Vec<&RayCluster> = owned.iter().filter(|c| c.metadata.deletion_timestamp.is_none()).collect();
    by_age.sort_by_key(|c| c.metadata.creation_timestamp.as_ref().map(|t| t.0));
    let seen: Vec<(String, upgrade::Fit, bool)> = by_age
        .iter()
        .map(|c| {
            let fit = upgrade::fit(&service.spec.ray_cluster_config, c.annotations());
            (c.name_any(), fit, selected.as_deref() == Some(c.name_any().as_str()))
        })
        .collect();
    let found = upgrade::adopt(&seen);
    if let Some(name) = &found {
        tracing::info!(service = %service.name_any(), cluster = name, "the status names no cluster: taking this one as active");
    }
    Ok(found)
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

/// Sends `serveConfigV2` to the cluster's head unless it runs exactly that. Returns what
/// keeps it from running there (as a condition's reason and message), and whether it was
/// sent now.
async fn send_config(
    ctx: &Context,
    service: &RayService,
    config: &Value,
    seen: &mut Seen<'_>,
) -> (Option<(&'static str, String)>, bool) {
    let (Some(head), Some(details)) = (&seen.head, &seen.details) else {
        return (Some(("Initializing", seen.unreachable.clone().unwrap_or_default())), false);
    };
    if !plan::needs_put(config, details) {
        return (None, false);
    }
    match head.put_serve_config(config).await {
        Ok(Ok(())) => {
            tracing::info!(service = %service.name_any(), "sent serveConfigV2 to the head");
            (None, true)
        }
        Ok(Err(refused)) => {
            let why = format!("the head refused serveConfigV2: {refused}");
            ctx.event(service, true, "InvalidServeConfig", why.clone()).await;
            (Some(("InvalidServeConfig", why)), false)
        }
        Err(e) => (Some(("Initializing", e.to_string())), false),
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
        // Its version changed: an update waits for the next pass, which reads it again.
        return Ok(());
    }
    let Some(update) = &plan.update else { return Ok(()) };
    let Some(live) = find(&update.name) else { return Ok(()) };
    let Some(spec) = upgrade::in_place(&live.spec, &service.spec.ray_cluster_config, update.extend) else {
        return Ok(());
    };
    let mut new = live.clone();
    // Marked as made from the wanted config: edits made to the cluster itself stay its own.
    new.annotations_mut().extend(upgrade::marks(&service.spec.ray_cluster_config));
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
            Sweep::Unmark { name } => {
                let patch = serde_json::json!({"metadata": {"annotations": {upgrade::ANNOTATION_DELETE_AFTER: null}}});
                clusters.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await?;
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
