//! The operator process: one controller per kind (and per watched namespace), a health and
//! metrics endpoint, and optional leader election.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use futures_util::stream::{BoxStream, StreamExt};
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use kube::{Client, CustomResourceExt, Resource};

use crate::context::Context;
use crate::crd::{RayCluster, RayJob, RayService};
use crate::error::Error;
use crate::names::{LABEL_CLUSTER, MANAGER};
use crate::{cluster, job, metrics::Metrics, service};

pub struct Options {
    /// Namespaces to watch; all when empty.
    pub namespaces: Vec<String>,
    pub health_addr: SocketAddr,
    pub cluster_domain: String,
    pub install_crds: bool,
    pub leader_elect: bool,
}

pub async fn run(options: Options) -> anyhow::Result<()> {
    let client = Client::try_default()
        .await
        .map_err(|e| anyhow::anyhow!("cannot reach the Kubernetes API (in-cluster config or KUBECONFIG): {e}"))?;
    let metrics = Arc::new(Metrics::default());
    let health = crate::health::serve(options.health_addr, metrics.clone()).await?;
    if options.install_crds {
        install_crds(&client).await?;
    }
    if options.leader_elect {
        crate::leader::acquire(&client, &options.namespaces).await?;
    }
    let ctx = Arc::new(Context::new(client.clone(), options.cluster_domain.clone()));
    let scopes: Vec<Option<String>> =
        if options.namespaces.is_empty() { vec![None] } else { options.namespaces.iter().cloned().map(Some).collect() };
    let mut streams: Vec<BoxStream<'static, ()>> = Vec::new();
    for scope in scopes {
        streams.push(clusters(&client, &scope, ctx.clone(), metrics.clone()));
        streams.push(jobs(&client, &scope, ctx.clone(), metrics.clone()));
        streams.push(services(&client, &scope, ctx.clone(), metrics.clone()));
    }
    tracing::info!(namespaces = ?options.namespaces, "operator running");
    futures_util::stream::select_all(streams).for_each(|_| async {}).await;
    health.abort();
    tracing::info!("operator stopped");
    Ok(())
}

fn api<K>(client: &Client, scope: &Option<String>) -> Api<K>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
{
    match scope {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

fn owned() -> watcher::Config {
    watcher::Config::default().labels(LABEL_CLUSTER)
}

fn clusters(
    client: &Client,
    scope: &Option<String>,
    ctx: Arc<Context>,
    metrics: Arc<Metrics>,
) -> BoxStream<'static, ()> {
    Controller::new(api::<RayCluster>(client, scope), watcher::Config::default())
        .owns(api::<Pod>(client, scope), owned())
        .owns(api::<Service>(client, scope), owned())
        .shutdown_on_signal()
        .run(cluster::reconcile::reconcile, error_policy, ctx)
        .map(move |result| metrics.record("RayCluster", result.err().map(|e| e.to_string())))
        .boxed()
}

fn jobs(client: &Client, scope: &Option<String>, ctx: Arc<Context>, metrics: Arc<Metrics>) -> BoxStream<'static, ()> {
    Controller::new(api::<RayJob>(client, scope), watcher::Config::default())
        .owns(api::<RayCluster>(client, scope), watcher::Config::default())
        .shutdown_on_signal()
        .run(job::reconcile::reconcile, error_policy, ctx)
        .map(move |result| metrics.record("RayJob", result.err().map(|e| e.to_string())))
        .boxed()
}

fn services(
    client: &Client,
    scope: &Option<String>,
    ctx: Arc<Context>,
    metrics: Arc<Metrics>,
) -> BoxStream<'static, ()> {
    Controller::new(api::<RayService>(client, scope), watcher::Config::default())
        .owns(api::<RayCluster>(client, scope), watcher::Config::default())
        .shutdown_on_signal()
        .run(service::reconcile, error_policy, ctx)
        .map(move |result| metrics.record("RayService", result.err().map(|e| e.to_string())))
        .boxed()
}

fn error_policy<K>(_object: Arc<K>, error: &Error, _ctx: Arc<Context>) -> Action {
    tracing::warn!(%error, "reconcile failed; retrying");
    Action::requeue(Duration::from_secs(5))
}

/// Server-side applies the CRDs, so the operator can install what it serves.
async fn install_crds(client: &Client) -> anyhow::Result<()> {
    let api = Api::<CustomResourceDefinition>::all(client.clone());
    for crd in [RayCluster::crd(), RayJob::crd(), RayService::crd()] {
        let name = crd.metadata.name.clone().unwrap_or_default();
        api.patch(&name, &PatchParams::apply(MANAGER).force(), &Patch::Apply(&crd))
            .await
            .map_err(|e| anyhow::anyhow!("installing CRD {name}: {e}"))?;
        tracing::info!(crd = name, "CRD installed");
    }
    Ok(())
}
