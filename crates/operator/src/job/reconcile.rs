//! Carries a RayJob through its stages: cluster, submission, tracking, clean-up.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use kube::api::{Api, DeleteParams, ObjectMeta, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::finalizer::{finalizer, Event as Finalizer};
use kube::{Resource, ResourceExt};

use super::stages;
use crate::cluster::reconcile::now;
use crate::context::Context;
use crate::crd::job::{RayJob, RayJobStatus, SubmissionMode};
use crate::crd::RayCluster;
use crate::error::{Error, Result};
use crate::head::Head;
use crate::names::*;

pub async fn reconcile(job: Arc<RayJob>, ctx: Arc<Context>) -> Result<Action> {
    if !crate::cluster::reconcile::managed_here(&job.spec.managed_by) {
        return Ok(Action::await_change());
    }
    let namespace = job.namespace().unwrap_or_else(|| "default".into());
    let api = Api::<RayJob>::namespaced(ctx.client.clone(), &namespace);
    finalizer(&api, JOB_FINALIZER, job, |event| async {
        match event {
            Finalizer::Apply(job) => apply(&job, &ctx, &namespace).await,
            Finalizer::Cleanup(job) => cleanup(&job, &ctx, &namespace).await,
        }
    })
    .await
    .map_err(|e| match e {
        kube::runtime::finalizer::Error::ApplyFailed(e) | kube::runtime::finalizer::Error::CleanupFailed(e) => e,
        other => Error::Spec(other.to_string()),
    })
}

async fn apply(job: &RayJob, ctx: &Context, namespace: &str) -> Result<Action> {
    let mut st = job.status.clone().unwrap_or_default();
    let before = st.clone();
    let action = step(job, ctx, namespace, &mut st).await?;
    crate::status_patch::write(&ctx.client, job, job.status.as_ref(), &st).await?;
    if st.job_deployment_status != before.job_deployment_status {
        tracing::info!(
            rayjob = job.name_any(),
            stage = st.job_deployment_status,
            job_status = st.job_status,
            "RayJob moved on"
        );
    }
    Ok(action)
}

async fn step(job: &RayJob, ctx: &Context, namespace: &str, st: &mut RayJobStatus) -> Result<Action> {
    let spec = &job.spec;
    let name = job.name_any();
    st.observed_generation = job.metadata.generation;
    if st.job_deployment_status == "ValidationFailed" {
        return Ok(Action::await_change());
    }
    if stages::deployment_finished(&st.job_deployment_status) {
        if stages::retry(spec, st) {
            delete_own_cluster(job, ctx, namespace, st).await?;
            *st = RayJobStatus { failed: st.failed, job_deployment_status: "Retrying".into(), ..Default::default() };
            return Ok(Action::requeue(Duration::from_millis(200)));
        }
        return finished(job, ctx, namespace, st).await;
    }
    if st.job_deployment_status.is_empty() || st.job_deployment_status == "Retrying" {
        if let Err(message) = stages::validate(spec) {
            ctx.event(job, true, "ValidationFailed", message.clone()).await;
            st.job_deployment_status = "ValidationFailed".into();
            st.reason = Some("ValidationFailed".into());
            st.message = Some(message);
            return Ok(Action::await_change());
        }
        // Names are fixed before anything is made, so a repeated reconcile never makes two.
        st.job_id = Some(spec.job_id.clone().unwrap_or_else(|| format!("{name}-{}", random_suffix())));
        st.ray_cluster_name = Some(match spec.cluster_selector.get(LABEL_CLUSTER) {
            Some(selected) => selected.clone(),
            None => format!("{name}-{}", random_suffix()),
        });
        st.start_time = Some(now());
        st.job_deployment_status = "Initializing".into();
        return Ok(Action::requeue(Duration::from_millis(100)));
    }
    if spec.suspend {
        delete_own_cluster(job, ctx, namespace, st).await?;
        st.job_deployment_status = "Suspended".into();
        return Ok(Action::await_change());
    }
    if st.job_deployment_status == "Suspended" {
        let failed = st.failed;
        *st = RayJobStatus { failed, ..Default::default() };
        return Ok(Action::requeue(Duration::from_millis(100)));
    }
    let elapsed = seconds_since(st.start_time.as_deref());
    if let Some((reason, message)) = stages::deadline_passed(spec, st, elapsed) {
        if let Some(head) = head(ctx, namespace, st).await? {
            let _ = head.stop(st.job_id.as_deref().unwrap_or_default()).await;
        }
        return fail(job, ctx, st, reason, message).await;
    }

    let cluster_name = st.ray_cluster_name.clone().unwrap_or_default();
    let clusters = Api::<RayCluster>::namespaced(ctx.client.clone(), namespace);
    let cluster = match (&spec.ray_cluster_spec, clusters.get_opt(&cluster_name).await?) {
        (_, Some(cluster)) => cluster,
        (Some(cluster_spec), None) if st.job_deployment_status == "Initializing" => {
            let mut labels = std::collections::BTreeMap::new();
            labels.insert(LABEL_ORIGIN_NAME.to_string(), name.clone());
            labels.insert(LABEL_ORIGIN_KIND.to_string(), "RayJob".to_string());
            let cluster = RayCluster {
                metadata: ObjectMeta {
                    name: Some(cluster_name.clone()),
                    namespace: Some(namespace.into()),
                    labels: Some(labels),
                    owner_references: Some(vec![job.controller_owner_ref(&()).expect("stored")]),
                    ..Default::default()
                },
                spec: cluster_spec.clone(),
                status: None,
            };
            match clusters.create(&PostParams::default(), &cluster).await {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 409 => {}
                Err(e) => return Err(e.into()),
            }
            ctx.event(job, false, "CreatedRayCluster", format!("created RayCluster {cluster_name}")).await;
            return Ok(Action::requeue(Duration::from_secs(1)));
        }
        (None, None) => {
            st.ray_cluster_status = None;
            st.message = Some(format!("waiting for RayCluster {cluster_name}"));
            return Ok(Action::requeue(Duration::from_secs(3)));
        }
        (Some(_), None) => {
            return fail(
                job,
                ctx,
                st,
                "ClusterLost",
                format!("RayCluster {cluster_name} was deleted while the job ran"),
            )
            .await;
        }
    };
    st.ray_cluster_status = cluster.status.clone();
    let ready = cluster.status.as_ref().and_then(|s| s.state.as_deref()) == Some("ready");

    match st.job_deployment_status.as_str() {
        "Initializing" => {
            if !ready {
                return Ok(Action::requeue(Duration::from_secs(2)));
            }
            let port =
                crate::params::dashboard_port(&cluster.spec.head_group_spec.ray_start_params).unwrap_or(PORT_DASHBOARD);
            st.dashboard_url = Some(format!("{}:{port}", head_fqdn(&cluster_name, namespace, &ctx.cluster_domain)));
            if spec.submission_mode == Some(SubmissionMode::InteractiveMode) {
                st.job_deployment_status = "Waiting".into();
                return Ok(Action::requeue(Duration::from_secs(2)));
            }
            let Some(head) = head(ctx, namespace, st).await? else {
                return Ok(Action::requeue(Duration::from_secs(2)));
            };
            let id = st.job_id.clone().unwrap_or_default();
            let body = stages::submission(spec, &id).map_err(Error::Spec)?;
            head.submit(&body).await?;
            ctx.event(job, false, "Submitted", format!("submitted job {id} to RayCluster {cluster_name}")).await;
            st.job_deployment_status = "Running".into();
            st.job_status = "PENDING".into();
            st.message = None;
            Ok(Action::requeue(Duration::from_secs(1)))
        }
        "Waiting" => {
            if let Some(id) = &spec.job_id {
                st.job_id = Some(id.clone());
                st.job_deployment_status = "Running".into();
            }
            Ok(Action::requeue(Duration::from_secs(2)))
        }
        _ => track(job, ctx, namespace, st).await,
    }
}

async fn track(job: &RayJob, ctx: &Context, namespace: &str, st: &mut RayJobStatus) -> Result<Action> {
    let Some(head) = head(ctx, namespace, st).await? else {
        st.message = Some("the head is not reachable; waiting for it".into());
        return Ok(Action::requeue(Duration::from_secs(2)));
    };
    let id = st.job_id.clone().unwrap_or_default();
    let info = match head.job(&id).await {
        Ok(info) => info,
        Err(e) => {
            st.message = Some(e.to_string());
            return Ok(Action::requeue(Duration::from_secs(2)));
        }
    };
    let Some(info) = info else {
        return fail(job, ctx, st, "JobNotFound", format!("the head does not know job {id}")).await;
    };
    st.job_status = info.status.clone();
    st.message = info.message.clone();
    if !stages::job_finished(&info.status) {
        return Ok(Action::requeue(Duration::from_secs(1)));
    }
    st.end_time = Some(now());
    if info.status == "SUCCEEDED" {
        st.job_deployment_status = "Complete".into();
        st.succeeded += 1;
        st.reason = None;
        ctx.event(job, false, "Completed", format!("job {id} succeeded")).await;
    } else {
        st.job_deployment_status = "Failed".into();
        st.failed += 1;
        st.reason = Some("AppFailed".into());
        ctx.event(job, true, "Failed", format!("job {id} ended {}: {}", info.status, info.message.unwrap_or_default()))
            .await;
    }
    Ok(Action::requeue(Duration::from_millis(100)))
}

async fn fail(job: &RayJob, ctx: &Context, st: &mut RayJobStatus, reason: &str, message: String) -> Result<Action> {
    ctx.event(job, true, reason, message.clone()).await;
    st.job_deployment_status = "Failed".into();
    st.reason = Some(reason.into());
    st.message = Some(message);
    st.end_time = Some(now());
    st.failed += 1;
    Ok(Action::requeue(Duration::from_millis(100)))
}

/// A finished RayJob: its cluster goes after the TTL when the spec asks.
async fn finished(job: &RayJob, ctx: &Context, namespace: &str, st: &mut RayJobStatus) -> Result<Action> {
    match stages::cluster_deletion_in(&job.spec, seconds_since(st.end_time.as_deref())) {
        Some(wait) if wait <= 0.0 => {
            delete_own_cluster(job, ctx, namespace, st).await?;
            Ok(Action::await_change())
        }
        Some(wait) => Ok(Action::requeue(Duration::from_secs_f64(wait))),
        None => Ok(Action::await_change()),
    }
}

async fn delete_own_cluster(job: &RayJob, ctx: &Context, namespace: &str, st: &mut RayJobStatus) -> Result<()> {
    let (Some(_), Some(name)) = (&job.spec.ray_cluster_spec, &st.ray_cluster_name) else {
        return Ok(());
    };
    let clusters = Api::<RayCluster>::namespaced(ctx.client.clone(), namespace);
    match clusters.delete(name, &DeleteParams::background()).await {
        Ok(_) => ctx.event(job, false, "DeletedRayCluster", format!("deleted RayCluster {name}")).await,
        Err(kube::Error::Api(e)) if e.code == 404 => {}
        Err(e) => return Err(e.into()),
    }
    Ok(())
}

/// Stops a job still running when its RayJob is deleted.
async fn cleanup(job: &RayJob, ctx: &Context, namespace: &str) -> Result<Action> {
    let st = job.status.clone().unwrap_or_default();
    if st.job_deployment_status == "Running" && !stages::job_finished(&st.job_status) {
        if let (Some(head), Some(id)) = (head(ctx, namespace, &st).await.ok().flatten(), &st.job_id) {
            if let Err(e) = head.stop(id).await {
                tracing::warn!(error = %e, job = id, "could not stop the job of a deleted RayJob");
            }
        }
    }
    Ok(Action::await_change())
}

/// The job's head, reached at its pod address with the cluster token; None until it has one.
async fn head<'a>(ctx: &'a Context, namespace: &str, st: &RayJobStatus) -> Result<Option<Head<'a>>> {
    match &st.ray_cluster_name {
        Some(name) => Head::of_cluster(ctx, namespace, name).await,
        None => Ok(None),
    }
}

fn seconds_since(time: Option<&str>) -> f64 {
    time.and_then(|t| humantime::parse_rfc3339(t).ok())
        .and_then(|t| SystemTime::now().duration_since(t).ok())
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}
