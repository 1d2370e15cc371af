//! In-tree autoscaling of worker groups (`enableInTreeAutoscaling`), as pure decisions: from
//! the spec, the pods, the work waiting for room and how long each node has been idle, to the
//! replicas each group should have and the idle pods to remove (`scaleStrategy.workersToDelete`,
//! as Ray's autoscaler writes them for KubeRay).
//!
//! Up: each shape of waiting work goes into the room of pods on their way or of idle ones,
//! else into a new pod of the first group (in spec order) whose pods can hold it, have the
//! labels it selects, and that is below its max. Down: a pod whose node has held nothing for the idle timeout, and whose room
//! no waiting work was given, goes while its group stays at or above its min; a busy pod
//! never does. A pod that never joins is no room, and goes as an idle one does.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use crate::crd::cluster::{RayClusterSpec, UpscalingMode, WorkerGroupSpec};
pub use crate::head::Waiting;
use crate::params;
use crate::quantity;

/// Ray's default: a worker idle this long goes.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// A worker pod of the cluster as the autoscaler sees it.
#[derive(Clone, Debug)]
pub struct WorkerPod {
    pub name: String,
    pub group: String,
    /// Its node has registered with the head.
    pub joined: bool,
    /// Seconds its node has held nothing; None while it holds something.
    pub idle_s: Option<f64>,
    /// Seconds since the pod was made.
    pub age_s: f64,
}

/// A pod not joined this long after it was made (its worker's own wait for the head) is
/// stuck (not scheduled for want of room, an image that does not pull, a head it cannot
/// reach): it is no room for waiting work, and goes as an idle pod does.
pub const STUCK_AFTER: Duration = Duration::from_secs(600);

impl WorkerPod {
    fn stuck(&self) -> bool {
        !self.joined && self.age_s >= STUCK_AFTER.as_secs_f64()
    }
}

/// A group's new replicas and the pods to remove.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Scaled {
    pub replicas: i32,
    pub workers_to_delete: Vec<String>,
}

/// What a pod of `group` offers, as its node will register it. A CPU or memory amount the
/// spec does not fix (the node detects it) is left out, and taken to fit; GPUs and custom
/// resources it does not name are none.
pub fn pod_shape(group: &WorkerGroupSpec) -> BTreeMap<String, f64> {
    let mut shape = BTreeMap::new();
    let container = group.template.spec.as_ref().and_then(|s| s.containers.first());
    let limit = |name: &str| {
        let resources = container?.resources.as_ref()?;
        let amount =
            resources.limits.as_ref().and_then(|l| l.get(name)).or_else(|| resources.requests.as_ref()?.get(name))?;
        quantity::ceil_units(&amount.0).map(|units| units as f64)
    };
    let param =
        |name: &str| params::param(&group.ray_start_params, name).and_then(|v| params::unquote(v).parse::<f64>().ok());
    for (resource, flag, from_container) in
        [("CPU", "num-cpus", "cpu"), ("GPU", "num-gpus", "nvidia.com/gpu"), ("memory", "memory", "memory")]
    {
        if let Some(amount) = param(flag).or_else(|| limit(from_container)) {
            shape.insert(resource.to_string(), amount);
        }
    }
    shape.extend(params::node_resources(&group.ray_start_params, &group.resources).unwrap_or_default());
    shape
}

/// The labels a pod of `group` gives its node: those of its `rayStartParams` and its
/// `labels`.
pub fn pod_labels(group: &WorkerGroupSpec) -> BTreeMap<String, String> {
    // A group whose labels do not parse makes no pod, so none of its labels count.
    params::node_labels(&group.ray_start_params, &group.labels).unwrap_or_default()
}

/// Room for waiting work in a pod (the pod, when it exists): what is free, and its labels.
type Room<'a> = (Option<&'a str>, BTreeMap<String, f64>, &'a BTreeMap<String, String>);

/// Whether a pod of this shape and these labels can take one unit of waiting work.
fn takes(want: &Waiting, room: &BTreeMap<String, f64>, labels: &BTreeMap<String, String>) -> bool {
    fits(&want.resources, room)
        && oxray_types::selector_matches(&want.label_selector, |key| labels.get(key).map(String::as_str))
}

fn fits(want: &BTreeMap<String, f64>, room: &BTreeMap<String, f64>) -> bool {
    want.iter().filter(|(_, amount)| **amount > 0.0).all(|(name, amount)| match room.get(name) {
        Some(free) => *amount <= free + 1e-9,
        None => name == "CPU" || name == "memory",
    })
}

fn take(want: &BTreeMap<String, f64>, room: &mut BTreeMap<String, f64>) {
    for (name, amount) in want {
        if let Some(free) = room.get_mut(name) {
            *free -= amount;
        }
    }
}

/// Seconds a group's pods may be idle before they go.
pub fn idle_timeout(spec: &RayClusterSpec, group: &WorkerGroupSpec) -> Duration {
    let global = spec.autoscaler_options.as_ref().and_then(|o| o.idle_timeout_seconds);
    group.idle_timeout_seconds.or(global).map(|s| Duration::from_secs(s.max(0) as u64)).unwrap_or(DEFAULT_IDLE_TIMEOUT)
}

/// The replicas and removals of each autoscaled group (those of one host per replica), by
/// group name. `pods` are the live worker pods.
pub fn autoscale(spec: &RayClusterSpec, pods: &[WorkerPod], waiting: &[Waiting]) -> BTreeMap<String, Scaled> {
    let groups: Vec<&WorkerGroupSpec> = spec
        .worker_group_specs
        .iter()
        .filter(|g| g.num_of_hosts.unwrap_or(1) <= 1 && g.suspend != Some(true))
        .collect();
    let bounds = |g: &WorkerGroupSpec| {
        let min = g.min_replicas.unwrap_or(0).max(0);
        (min, g.max_replicas.unwrap_or(i32::MAX).max(min))
    };
    let mut scaled: BTreeMap<String, Scaled> = groups
        .iter()
        .map(|g| {
            let (min, max) = bounds(g);
            let listed = g.scale_strategy.as_ref().map(|s| s.workers_to_delete.clone()).unwrap_or_default();
            let live: HashSet<&str> = pods.iter().map(|p| p.name.as_str()).collect();
            let still = listed.into_iter().filter(|name| live.contains(name.as_str())).collect();
            (
                g.group_name.clone(),
                Scaled { replicas: g.replicas.unwrap_or(min).clamp(min, max), workers_to_delete: still },
            )
        })
        .collect();

    // Room the waiting work can take without a new pod: the pods on their way (created and
    // not joined, or wanted and not created), and the joined ones that hold nothing (the work
    // is on its way there, or cannot use them: then a new pod of their shape would not help
    // either). Each with the pod it is, when known.
    let labels: BTreeMap<&str, BTreeMap<String, String>> =
        groups.iter().map(|g| (g.group_name.as_str(), pod_labels(g))).collect();
    let mut room: Vec<Room> = Vec::new();
    let mut on_their_way = 0;
    for g in &groups {
        let shape = pod_shape(g);
        let own = &labels[g.group_name.as_str()];
        let leaving = &scaled[&g.group_name].workers_to_delete;
        let staying: Vec<&WorkerPod> =
            pods.iter().filter(|p| p.group == g.group_name && !leaving.contains(&p.name)).collect();
        let wanted_more = (scaled[&g.group_name].replicas - staying.len() as i32).max(0);
        let coming = |p: &&&WorkerPod| !p.joined && !p.stuck();
        for pod in staying.iter().filter(|p| coming(p) || p.idle_s.is_some()) {
            room.push((Some(pod.name.as_str()), shape.clone(), own));
        }
        on_their_way += wanted_more as usize + staying.iter().filter(coming).count();
        for _ in 0..wanted_more {
            room.push((None, shape.clone(), own));
        }
    }

    let joined = pods.iter().filter(|p| p.joined).count();
    let most_on_their_way = most_pending(spec, joined + 1);

    // The largest shapes first, so that small ones fill what is left.
    let mut units: Vec<&Waiting> =
        waiting.iter().flat_map(|w| std::iter::repeat_n(w, w.count.min(10_000) as usize)).collect();
    units.sort_by(|a, b| size(&b.resources).total_cmp(&size(&a.resources)));
    let mut grew: HashSet<String> = HashSet::new();
    let mut taken: HashSet<&str> = HashSet::new();
    for want in units {
        if let Some((pod, free, _)) = room.iter_mut().find(|(_, free, labels)| takes(want, free, labels)) {
            take(&want.resources, free);
            taken.extend(*pod);
            continue;
        }
        if on_their_way >= most_on_their_way {
            continue;
        }
        let new = groups.iter().find(|g| {
            scaled[&g.group_name].replicas < bounds(g).1 && takes(want, &pod_shape(g), &labels[g.group_name.as_str()])
        });
        if let Some(g) = new {
            on_their_way += 1;
            let mut free = pod_shape(g);
            take(&want.resources, &mut free);
            room.push((None, free, &labels[g.group_name.as_str()]));
            scaled.get_mut(&g.group_name).expect("every group is scaled").replicas += 1;
            grew.insert(g.group_name.clone());
        }
    }

    for g in &groups {
        let timeout = idle_timeout(spec, g).as_secs_f64();
        let (min, _) = bounds(g);
        let growing = grew.contains(&g.group_name);
        let entry = scaled.get_mut(&g.group_name).expect("every group is scaled");
        let mut going: Vec<&WorkerPod> = pods
            .iter()
            .filter(|p| p.group == g.group_name && !entry.workers_to_delete.contains(&p.name))
            .filter(|p| !taken.contains(p.name.as_str()))
            .filter(|p| p.stuck() || (!growing && p.joined && p.idle_s.is_some_and(|s| s >= timeout)))
            .collect();
        // Stuck pods first, then the longest idle.
        let idle_for = |p: &WorkerPod| if p.stuck() { f64::INFINITY } else { p.idle_s.unwrap_or(0.0) };
        going.sort_by(|a, b| idle_for(b).total_cmp(&idle_for(a)).then(a.name.cmp(&b.name)));
        for pod in going {
            if entry.replicas > min {
                entry.replicas -= 1;
            } else if !pod.stuck() {
                break;
            }
            // A stuck pod at the group's min goes all the same: a new one is made in its place.
            entry.workers_to_delete.push(pod.name.clone());
        }
    }
    scaled
}

/// How many pods may be on their way at once in a cluster of `nodes` (head included): Ray's
/// upscaling speed, 1 for `Conservative` (the cluster at most doubles while pods come), no
/// bound otherwise; never fewer than 5.
fn most_pending(spec: &RayClusterSpec, nodes: usize) -> usize {
    match spec.autoscaler_options.as_ref().and_then(|o| o.upscaling_mode) {
        Some(UpscalingMode::Conservative) => nodes.max(5),
        _ => usize::MAX,
    }
}

/// How much a shape asks for, to order the packing: its GPUs, then its CPUs, then the rest.
fn size(shape: &BTreeMap<String, f64>) -> f64 {
    shape.get("GPU").copied().unwrap_or(0.0) * 1e6 + shape.get("CPU").copied().unwrap_or(0.0) * 1e3 + shape.len() as f64
}

/// The spec with the groups' new replicas and removals; None when nothing changes.
pub fn applied(spec: &RayClusterSpec, scaled: &BTreeMap<String, Scaled>) -> Option<RayClusterSpec> {
    let mut new = spec.clone();
    for g in &mut new.worker_group_specs {
        let Some(s) = scaled.get(&g.group_name) else { continue };
        g.replicas = Some(s.replicas);
        let strategy = g.scale_strategy.get_or_insert_with(Default::default);
        strategy.workers_to_delete = s.workers_to_delete.clone();
        if strategy.workers_to_delete.is_empty() && spec_strategy_was_absent(spec, &g.group_name) {
            g.scale_strategy = None;
        }
    }
    let changed = new.worker_group_specs.iter().zip(&spec.worker_group_specs).any(|(a, b)| {
        a.replicas != b.replicas
            || a.scale_strategy.as_ref().map(|s| &s.workers_to_delete)
                != b.scale_strategy.as_ref().map(|s| &s.workers_to_delete)
    });
    changed.then_some(new)
}

/// The JSON patch that writes `new`'s replicas and removals into the RayCluster read as
/// `spec` at `resource_version`: only those fields, each behind a test of its group's name
/// and of the version, so that nothing else of the user's object is rewritten and a change
/// made meanwhile wins.
pub fn patch(spec: &RayClusterSpec, new: &RayClusterSpec, resource_version: Option<&str>) -> serde_json::Value {
    let mut ops = Vec::new();
    if let Some(version) = resource_version {
        ops.push(serde_json::json!({"op": "test", "path": "/metadata/resourceVersion", "value": version}));
    }
    for (i, (after, before)) in new.worker_group_specs.iter().zip(&spec.worker_group_specs).enumerate() {
        let removals = |g: &WorkerGroupSpec| g.scale_strategy.as_ref().map(|s| s.workers_to_delete.clone());
        if after.replicas == before.replicas && removals(after) == removals(before) {
            continue;
        }
        let at = format!("/spec/workerGroupSpecs/{i}");
        ops.push(serde_json::json!({"op": "test", "path": format!("{at}/groupName"), "value": before.group_name}));
        ops.push(serde_json::json!({"op": "add", "path": format!("{at}/replicas"), "value": after.replicas}));
        if let Some(removals) = removals(after) {
            let strategy = serde_json::json!({"workersToDelete": removals});
            ops.push(serde_json::json!({"op": "add", "path": format!("{at}/scaleStrategy"), "value": strategy}));
        }
    }
    serde_json::Value::Array(ops)
}

fn spec_strategy_was_absent(spec: &RayClusterSpec, group: &str) -> bool {
    spec.worker_group_specs.iter().any(|g| g.group_name == group && g.scale_strategy.is_none())
}

#[cfg(test)]
mod tests;
