//! Carries out a cluster's plan against the API server.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Secret, Service};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};

use super::autoscale::{self, WorkerPod};
use super::objects;
use super::plan::{self, Busy, PodAction, PodView};
use super::pods::{self, ClusterRef};
use super::status::{self, Observed};
use crate::context::Context;
use crate::crd::cluster::{RayCluster, RayClusterSpec, StorageBackend};
use crate::error::{Error, Result};
use crate::head::{Demand, Head};
use crate::names::*;

/// The operators whose resources these are: a RayCluster managed by anything else is left alone.
pub fn managed_here(managed_by: &Option<String>) -> bool {
    managed_by
        .as_deref()
        .is_none_or(|m| m.is_empty() || m == "oxray.io/oxray-operator" || m == "ray.io/kuberay-operator")
}

pub async fn reconcile(cluster: Arc<RayCluster>, ctx: Arc<Context>) -> Result<Action> {
    if !managed_here(&cluster.spec.managed_by) || cluster.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let namespace = cluster.namespace().unwrap_or_else(|| "default".into());
    let owner = cluster.controller_owner_ref(&()).expect("a stored resource has a name and uid");
    let spec = autoscaled(&ctx, &cluster, &namespace).await?;
    let status = converge(
        &ctx,
        &namespace,
        &cluster.name_any(),
        owner,
        &spec,
        cluster.status.as_ref(),
        cluster.metadata.generation,
    )
    .await;
    let (status, error) = match status {
        Ok(status) => (status, None),
        Err(Error::Spec(message)) => {
            ctx.event(cluster.as_ref(), true, "InvalidSpec", message.clone()).await;
            let pods = list_pods(&ctx, &namespace, &cluster.name_any()).await?;
            let observed = Observed {
                spec: &cluster.spec,
                generation: cluster.metadata.generation,
                pods: &pods,
                head_service: None,
                error: Some(message.clone()),
                previous: cluster.status.as_ref(),
                now: now(),
            };
            (status::status(&observed), Some(message))
        }
        Err(e) => return Err(e),
    };
    crate::status_patch::write(&ctx.client, cluster.as_ref(), cluster.status.as_ref(), &status).await?;
    if error.is_some() {
        return Ok(Action::await_change());
    }
    if cluster.annotations().get(ANNOTATION_SERVE_SERVICE).is_some_and(|v| v == "true") {
        serve_service(&ctx, &cluster, &namespace).await?;
    }
    let settled = status.state.as_deref() == Some("ready") || status.state.as_deref() == Some("suspended");
    let watching_demand = spec.enable_in_tree_autoscaling == Some(true);
    Ok(Action::requeue(if settled && !watching_demand { Duration::from_secs(30) } else { AUTOSCALE_PERIOD }))
}

/// `<cluster>-serve-svc` for a bare RayCluster annotated `ray.io/enable-serve-service=true`,
/// as a RayService has: the Serve port of the pods whose proxy the head reports healthy.
/// Nothing while the head cannot say.
async fn serve_service(ctx: &Context, cluster: &RayCluster, namespace: &str) -> Result<()> {
    let name = cluster.name_any();
    let Some(head) = Head::of_cluster(ctx, namespace, &name).await? else { return Ok(()) };
    let details = match head.serve_details().await {
        Ok(details) => details,
        Err(e) => {
            tracing::debug!(cluster = name, error = %e, "no Serve details yet");
            return Ok(());
        }
    };
    crate::service::label_serve_pods(ctx, namespace, &name, &details, false).await?;
    let port = crate::service::plan::serve_port_in_force(&details, &serde_json::Value::Null);
    let owner = cluster.controller_owner_ref(&()).expect("a stored resource has a name and uid");
    crate::service::ensure_serve_service(ctx, owner, &format!("{name}-serve-svc"), namespace, &name, port).await
}

/// How often an autoscaled cluster's demand is read (and an unsettled cluster looked at).
const AUTOSCALE_PERIOD: Duration = Duration::from_secs(3);

/// With in-tree autoscaling on, the spec with the replicas the demand asks for, written back
/// to the RayCluster as Ray's autoscaler does for KubeRay (only if nobody changed it since it
/// was read); else, or while the head cannot say, the spec as it is.
async fn autoscaled(ctx: &Context, cluster: &RayCluster, namespace: &str) -> Result<RayClusterSpec> {
    let spec = &cluster.spec;
    let name = cluster.name_any();
    if spec.suspend == Some(true) {
        return Ok(spec.clone());
    }
    let Some(head) = Head::of_cluster(ctx, namespace, &name).await? else { return Ok(spec.clone()) };
    if spec.enable_in_tree_autoscaling != Some(true) {
        // Turned off on a live cluster: its head stops letting work wait for nodes.
        if let Ok(Some(true)) = head.autoscaling().await {
            head.set_autoscaling(false).await?;
            tracing::info!(cluster = name, "turned the head's autoscaling off");
        }
        return Ok(spec.clone());
    }
    let Demand { idle: nodes, waiting, autoscaling } = match head.demand().await {
        Ok(found) => found,
        Err(e) => {
            tracing::warn!(cluster = name, error = %e, "could not read the cluster's demand; its groups keep their size");
            return Ok(spec.clone());
        }
    };
    if autoscaling == Some(false) {
        // Turned on on a live cluster (its head pod was made without OXRAY_AUTOSCALING).
        head.set_autoscaling(true).await?;
        tracing::info!(cluster = name, "turned the head's autoscaling on");
    }
    let now = k8s_openapi::jiff::Timestamp::now();
    let workers: Vec<WorkerPod> = list_pods(ctx, namespace, &name)
        .await?
        .iter()
        .map(|pod| (PodView::of(pod), pod.metadata.creation_timestamp.as_ref()))
        .filter(|(p, _)| !p.head && !p.terminating)
        .map(|(p, made)| WorkerPod {
            joined: nodes.contains_key(&p.name),
            idle_s: nodes.get(&p.name).copied().flatten(),
            age_s: made.map_or(0.0, |t| now.duration_since(t.0).as_secs_f64().max(0.0)),
            name: p.name,
            group: p.group,
        })
        .collect();
    let scaled = autoscale::autoscale(spec, &workers, &waiting);
    let Some(new) = autoscale::applied(spec, &scaled) else { return Ok(spec.clone()) };
    let changes: Vec<String> = new
        .worker_group_specs
        .iter()
        .zip(&spec.worker_group_specs)
        .filter(|(after, before)| after.replicas != before.replicas)
        .map(|(after, before)| {
            let removed = scaled.get(&after.group_name).map(|s| s.workers_to_delete.join(", ")).unwrap_or_default();
            let removed = if removed.is_empty() { String::new() } else { format!(" (removing idle {removed})") };
            format!(
                "{}: {} -> {}{removed}",
                after.group_name,
                before.replicas.unwrap_or(0),
                after.replicas.unwrap_or(0)
            )
        })
        .collect();
    let patch = autoscale::patch(spec, &new, cluster.resource_version().as_deref());
    let patch: json_patch::Patch = match serde_json::from_value(patch) {
        Ok(patch) => patch,
        Err(e) => {
            tracing::error!(cluster = name, error = %e, "the autoscaler's patch is not a JSON patch; nothing is scaled");
            return Ok(spec.clone());
        }
    };
    let clusters = Api::<RayCluster>::namespaced(ctx.client.clone(), namespace);
    clusters.patch(&name, &PatchParams::default(), &Patch::Json::<()>(patch)).await?;
    if !changes.is_empty() {
        tracing::info!(cluster = name, "autoscaled {}", changes.join("; "));
        ctx.event(cluster, false, "Autoscaled", format!("worker groups {}", changes.join("; "))).await;
    }
    Ok(new)
}

/// Brings a cluster's objects to its spec and gives the status that results. Shared with
/// RayJob and RayService, whose clusters are RayClusters of their own.
pub async fn converge(
    ctx: &Context,
    namespace: &str,
    name: &str,
    owner: k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference,
    spec: &RayClusterSpec,
    previous: Option<&crate::crd::RayClusterStatus>,
    generation: Option<i64>,
) -> Result<crate::crd::RayClusterStatus> {
    let cluster = cluster_ref(ctx, namespace, name, owner, spec)?;
    // Validate every pod before creating anything, so a bad group never half-forms a cluster.
    let head_pod =
        pods::head_pod(&cluster, &spec.head_group_spec).map_err(|e| Error::Spec(format!("headGroupSpec: {e}")))?;
    let mut hashes = BTreeMap::from([(
        HEAD_GROUP.to_string(),
        pods::template_hash(&spec.head_group_spec.template, &spec.head_group_spec.ray_start_params),
    )]);
    let mut worker_pods = BTreeMap::new();
    for group in &spec.worker_group_specs {
        let pod = pods::worker_pod(&cluster, group, &spec.head_group_spec.ray_start_params)
            .map_err(|e| Error::Spec(format!("workerGroupSpecs[{}]: {e}", group.group_name)))?;
        worker_pods.insert(group.group_name.clone(), pod);
        hashes.insert(group.group_name.clone(), pods::template_hash(&group.template, &group.ray_start_params));
    }

    let token = ensure_token(ctx, &cluster, spec).await?;
    if let (Some(storage), Some((claim, _))) = (storage_spec(spec), &cluster.head_claim) {
        if storage.claim_name.is_none() {
            let pvc = objects::head_claim(&cluster, storage);
            create_if_absent(Api::<PersistentVolumeClaim>::namespaced(ctx.client.clone(), namespace), claim, &pvc)
                .await?;
        }
    }
    let service = objects::head_service(&cluster, spec, &head_pod);
    let services = Api::<Service>::namespaced(ctx.client.clone(), namespace);
    let service =
        services.patch(&head_service(name), &PatchParams::apply(MANAGER).force(), &Patch::Apply(&service)).await?;

    let pods = list_pods(ctx, namespace, name).await?;
    let views: Vec<PodView> = pods.iter().map(PodView::of).collect();
    let busy = busy_nodes(ctx, spec, &views, &token).await;
    let pod_api = Api::<Pod>::namespaced(ctx.client.clone(), namespace);
    for action in plan::plan(spec, &views, &hashes, &busy) {
        match action {
            PodAction::CreateHead => {
                create_if_absent(pod_api.clone(), &crate::names::head_pod(name), &head_pod).await?;
                tracing::info!(cluster = name, "created the head pod");
            }
            PodAction::CreateWorker { group } => {
                let created = pod_api.create(&PostParams::default(), &worker_pods[&group]).await?;
                tracing::info!(cluster = name, group, pod = created.name_any(), "created a worker pod");
            }
            PodAction::Delete { name: pod, reason } => match pod_api.delete(&pod, &DeleteParams::default()).await {
                Ok(_) => tracing::info!(cluster = name, pod, reason, "deleted a pod"),
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(e) => return Err(e.into()),
            },
        }
    }
    let pods = list_pods(ctx, namespace, name).await?;
    let service_ip = service.spec.as_ref().and_then(|s| s.cluster_ip.clone()).filter(|ip| ip != "None");
    let observed = Observed {
        spec,
        generation,
        pods: &pods,
        head_service: Some((head_service(name), service_ip)),
        error: None,
        previous,
        now: now(),
    };
    Ok(status::status(&observed))
}

fn storage_spec(spec: &RayClusterSpec) -> Option<&crate::crd::cluster::HeadStorage> {
    spec.gcs_fault_tolerance_options.as_ref().and_then(|o| o.storage.as_ref())
}

fn cluster_ref(
    ctx: &Context,
    namespace: &str,
    name: &str,
    owner: k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference,
    spec: &RayClusterSpec,
) -> Result<ClusterRef> {
    if let Some(options) = &spec.gcs_fault_tolerance_options {
        if options.backend == Some(StorageBackend::Redis) || options.redis_address.is_some() {
            return Err(Error::Spec(
                "gcsFaultToleranceOptions: the head keeps its state in its own database and needs no Redis; \
                 set gcsFaultToleranceOptions.storage to keep it on a persistent volume"
                    .into(),
            ));
        }
    }
    let head_claim = storage_spec(spec)
        .map(|s| (s.claim_name.clone().unwrap_or_else(|| head_storage_claim(name)), s.sub_path.clone()));
    let token_secret = spec
        .auth_options
        .as_ref()
        .and_then(|a| a.secret_name.clone())
        .unwrap_or_else(|| crate::names::token_secret(name));
    Ok(ClusterRef {
        name: name.into(),
        namespace: namespace.into(),
        owner,
        cluster_domain: ctx.cluster_domain.clone(),
        token_secret,
        head_claim,
        autoscaling: spec.enable_in_tree_autoscaling == Some(true),
    })
}

/// The cluster token: from the user's Secret, or from the one the operator made (made once).
async fn ensure_token(ctx: &Context, cluster: &ClusterRef, spec: &RayClusterSpec) -> Result<String> {
    let secrets = Api::<Secret>::namespaced(ctx.client.clone(), &cluster.namespace);
    let user_secret = spec.auth_options.as_ref().and_then(|a| a.secret_name.as_ref()).is_some();
    let secret = match secrets.get_opt(&cluster.token_secret).await? {
        Some(secret) => secret,
        None if user_secret => {
            return Err(Error::Spec(format!("authOptions.secretName: Secret {} does not exist", cluster.token_secret)))
        }
        None => create_if_absent(secrets, &cluster.token_secret, &objects::token_secret(cluster)).await?,
    };
    crate::head::secret_token(&secret)
        .ok_or_else(|| Error::Spec(format!("Secret {} has no key \"token\"", cluster.token_secret)))
}

/// Creates the object unless one of that name exists; either way gives the stored one.
async fn create_if_absent<K>(api: Api<K>, name: &str, object: &K) -> Result<K>
where
    K: Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    match api.create(&PostParams::default(), object).await {
        Ok(created) => Ok(created),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(api.get(name).await?),
        Err(e) => Err(e.into()),
    }
}

pub async fn list_pods(ctx: &Context, namespace: &str, cluster: &str) -> Result<Vec<Pod>> {
    let api = Api::<Pod>::namespaced(ctx.client.clone(), namespace);
    Ok(api.list(&ListParams::default().labels(&format!("{LABEL_CLUSTER}={cluster}"))).await?.items)
}

/// Asked only when a running worker may have to go: the head knows which nodes run work.
async fn busy_nodes(ctx: &Context, spec: &RayClusterSpec, pods: &[PodView], token: &str) -> Busy {
    let live_workers = pods.iter().filter(|p| !p.head && !p.terminating).count() as i32;
    let wanted: i32 = spec.worker_group_specs.iter().map(plan::desired_workers).sum();
    if live_workers <= wanted && spec.suspend != Some(true) {
        return None;
    }
    let head = pods.iter().find(|p| p.head && p.ready)?;
    let url = format!(
        "http://{}:{}",
        head.ip.as_ref()?,
        crate::params::dashboard_port(&spec.head_group_spec.ray_start_params).ok()?
    );
    let head = Head { http: &ctx.http, url, token: token.into() };
    match head.busy_nodes().await {
        Ok(busy) => Some(busy),
        Err(e) => {
            tracing::warn!(error = %e, "could not ask the head which nodes are busy; no running worker is removed");
            None
        }
    }
}

pub fn now() -> String {
    humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()
}
