//! A cluster's status from its spec and pods.

use k8s_openapi::api::core::v1::Pod;

use super::plan::{desired_workers, Phase, PodView};
use crate::crd::cluster::{RayClusterSpec, RayClusterStatus};
use crate::crd::Condition;
use crate::quantity;

/// What the status says besides the pods: an error that stops the cluster from forming.
pub struct Observed<'a> {
    pub spec: &'a RayClusterSpec,
    pub generation: Option<i64>,
    pub pods: &'a [Pod],
    pub head_service: Option<(String, Option<String>)>,
    pub error: Option<String>,
    pub previous: Option<&'a RayClusterStatus>,
    pub now: String,
}

pub fn status(o: &Observed) -> RayClusterStatus {
    let views: Vec<PodView> = o.pods.iter().map(PodView::of).filter(|p| !p.terminating).collect();
    let workers: Vec<&PodView> = views.iter().filter(|p| !p.head).collect();
    let head = views.iter().find(|p| p.head && p.phase != Phase::Ended);
    let groups = &o.spec.worker_group_specs;
    let desired: i32 = groups.iter().map(desired_workers).sum();
    let hosts = |g: &crate::crd::cluster::WorkerGroupSpec| g.num_of_hosts.unwrap_or(1).max(1);
    let suspended = o.spec.suspend == Some(true);
    let ready_workers = workers.iter().filter(|p| p.ready).count() as i32;
    let head_ready = head.is_some_and(|h| h.ready);

    let (cpu, memory, gpu) = desired_amounts(o.spec);
    let mut status = RayClusterStatus {
        ready_worker_replicas: ready_workers,
        available_worker_replicas: workers.iter().filter(|p| p.phase == Phase::Running).count() as i32,
        desired_worker_replicas: desired,
        min_worker_replicas: groups.iter().map(|g| g.min_replicas.unwrap_or(0).saturating_mul(hosts(g))).sum(),
        max_worker_replicas: groups
            .iter()
            .map(|g| g.max_replicas.unwrap_or(i32::MAX).saturating_mul(hosts(g)))
            .fold(0i32, |a, b| a.saturating_add(b)),
        desired_cpu: Some(quantity::format_cpu(cpu)),
        desired_memory: Some(quantity::format_bytes(memory)),
        desired_gpu: Some(quantity::format_cpu(gpu)),
        observed_generation: o.generation,
        reason: o.error.clone(),
        ..Default::default()
    };
    if let Some(head) = head {
        status.head = Some(crate::crd::cluster::HeadInfo {
            pod_ip: head.ip.clone(),
            pod_name: Some(head.name.clone()),
            service_name: o.head_service.as_ref().map(|s| s.0.clone()),
            service_ip: o.head_service.as_ref().and_then(|s| s.1.clone()),
        });
    }
    if let Some(head_pod) = o.pods.iter().find(|p| PodView::of(p).head) {
        status.endpoints = head_pod
            .spec
            .as_ref()
            .and_then(|s| s.containers.first())
            .and_then(|c| c.ports.clone())
            .unwrap_or_default()
            .into_iter()
            .filter_map(|p| Some((p.name?, p.container_port.to_string())))
            .collect();
    }
    let all_ready = head_ready && ready_workers >= desired;
    status.state = if suspended {
        Some("suspended".into())
    } else if all_ready {
        Some("ready".into())
    } else {
        o.previous.and_then(|p| p.state.clone()).filter(|s| s == "ready" && head_ready)
    };

    let previous = |type_: &str| o.previous.and_then(|p| p.conditions.iter().find(|c| c.type_ == type_));
    let provisioned_before = previous("RayClusterProvisioned").is_some_and(|c| c.status == "True");
    let mut set = |type_: &str, ok: bool, reason: &str, message: &str| {
        let flag = if ok { "True" } else { "False" };
        let since = previous(type_).filter(|c| c.status == flag).and_then(|c| c.last_transition_time.clone());
        status.conditions.push(Condition {
            type_: type_.into(),
            status: flag.into(),
            reason: reason.into(),
            message: message.into(),
            last_transition_time: Some(since.unwrap_or_else(|| o.now.clone())),
            observed_generation: o.generation,
        });
    };
    match head {
        Some(h) if h.ready => set("HeadPodReady", true, "HeadPodRunningAndReady", ""),
        Some(_) => set("HeadPodReady", false, "HeadPodNotReady", "the head pod is not ready yet"),
        None => set("HeadPodReady", false, "HeadPodNotFound", "the head pod does not exist"),
    }
    // Latches: once every pod was ready, the cluster counts as provisioned.
    if provisioned_before || all_ready {
        set("RayClusterProvisioned", true, "AllPodRunningAndReadyFirstTime", "");
    } else {
        set("RayClusterProvisioned", false, "RayClusterPodsProvisioning", "pods are starting");
    }
    match &o.error {
        Some(error) => set("ReplicaFailure", true, "InvalidSpec", error),
        None => set("ReplicaFailure", false, "", ""),
    }
    set("RayClusterSuspended", suspended, if suspended { "Suspended" } else { "" }, "");
    status
}

/// CPU, memory and GPUs the spec asks for: the head and every desired worker, from the
/// containers' requests (else limits).
fn desired_amounts(spec: &RayClusterSpec) -> (f64, f64, f64) {
    let per_pod = |template: &k8s_openapi::api::core::v1::PodTemplateSpec| {
        let mut sums = (0.0, 0.0, 0.0);
        for c in template.spec.iter().flat_map(|s| s.containers.iter()) {
            let r = c.resources.clone().unwrap_or_default();
            let get = |name: &str| {
                r.requests
                    .as_ref()
                    .and_then(|m| m.get(name))
                    .or_else(|| r.limits.as_ref().and_then(|m| m.get(name)))
                    .and_then(|q| quantity::parse(&q.0))
                    .unwrap_or(0.0)
            };
            sums.0 += get("cpu");
            sums.1 += get("memory");
            sums.2 += get("nvidia.com/gpu");
        }
        sums
    };
    let mut total = per_pod(&spec.head_group_spec.template);
    for group in &spec.worker_group_specs {
        let pods = desired_workers(group) as f64;
        let one = per_pod(&group.template);
        total.0 += one.0 * pods;
        total.1 += one.1 * pods;
        total.2 += one.2 * pods;
    }
    total
}
