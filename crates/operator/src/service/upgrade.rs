//! A RayService's clusters, without IO: which cluster serves (active), which one is being
//! prepared (pending), and what a change to `rayClusterConfig` does.
//!
//! As KubeRay does, a cluster carries the hash of the config it was made from, leaving out
//! what scales (replicas, min/max, workers to delete) and what external controllers inject
//! (tolerations, scheduling gates). A config whose hash differs starts a new cluster; the
//! Services move to it once Serve runs there, and the old one is deleted after a delay. Scale
//! fields and worker groups added at the end are applied to the running cluster in place.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::crd::cluster::RayClusterSpec;
use crate::crd::service::ServiceUpgradeType;

/// The hash of the config a cluster was made from, KubeRay's annotation.
pub const ANNOTATION_SPEC_HASH: &str = "ray.io/hash-without-replicas-and-workers-to-delete";
/// How many worker groups that config had, to tell groups added at the end.
pub const ANNOTATION_WORKER_GROUPS: &str = "ray.io/num-worker-groups";
/// On a cluster that no longer serves: when it is deleted (RFC 3339).
pub const ANNOTATION_DELETE_AFTER: &str = "oxray.io/delete-after";
pub const DEFAULT_DELETION_DELAY: Duration = Duration::from_secs(60);

/// The hash of `spec` without what may change in place, over its first `groups` worker
/// groups (all when None).
pub fn spec_hash(spec: &RayClusterSpec, groups: Option<usize>) -> String {
    let mut value = serde_json::to_value(spec).unwrap_or_default();
    if let Some(obj) = value.as_object_mut() {
        for key in ["suspend", "upgradeStrategy"] {
            obj.remove(key);
        }
    }
    unset(value.pointer_mut("/headGroupSpec/template/spec"), &["tolerations", "schedulingGates"]);
    if let Some(list) = value.get_mut("workerGroupSpecs").and_then(Value::as_array_mut) {
        list.truncate(groups.unwrap_or(usize::MAX));
        for group in list.iter_mut() {
            unset(group.pointer_mut("/scaleStrategy"), &["workersToDelete"]);
            if group.get("scaleStrategy").and_then(Value::as_object).is_some_and(|s| s.is_empty()) {
                unset(Some(&mut *group), &["scaleStrategy"]);
            }
            unset(group.pointer_mut("/template/spec"), &["tolerations", "schedulingGates"]);
            unset(Some(group), &["replicas", "minReplicas", "maxReplicas"]);
        }
    }
    // An empty list is left out, as a spec without worker groups serializes.
    if value.get("workerGroupSpecs").and_then(Value::as_array).is_some_and(|l| l.is_empty()) {
        unset(Some(&mut value), &["workerGroupSpecs"]);
    }
    // serde_json's maps are sorted, so the text is canonical.
    hex::encode(&Sha256::digest(value.to_string().as_bytes())[..16])
}

/// Leaves `keys` out of an object (indexing would add the object where there is none).
fn unset(value: Option<&mut Value>, keys: &[&str]) {
    if let Some(obj) = value.and_then(Value::as_object_mut) {
        for key in keys {
            obj.remove(*key);
        }
    }
}

/// The annotations that record what a cluster was made from.
pub fn marks(spec: &RayClusterSpec) -> BTreeMap<String, String> {
    BTreeMap::from([
        (ANNOTATION_SPEC_HASH.to_string(), spec_hash(spec, None)),
        (ANNOTATION_WORKER_GROUPS.to_string(), spec.worker_group_specs.len().to_string()),
    ])
}

/// How a cluster stands against the wanted config.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fit {
    Same,
    /// The same, but for worker groups added at the end: updated in place.
    Extended,
    Different,
    /// Made before clusters carried their config's hash: taken as it is, and marked.
    Unmarked,
}

pub fn fit(goal: &RayClusterSpec, annotations: &BTreeMap<String, String>) -> Fit {
    let Some(hash) = annotations.get(ANNOTATION_SPEC_HASH) else { return Fit::Unmarked };
    if *hash == spec_hash(goal, None) {
        return Fit::Same;
    }
    let groups = annotations.get(ANNOTATION_WORKER_GROUPS).and_then(|n| n.parse::<usize>().ok());
    match groups {
        Some(n) if n < goal.worker_group_specs.len() && *hash == spec_hash(goal, Some(n)) => Fit::Extended,
        _ => Fit::Different,
    }
}

/// A cluster the status names, with how it fits; `fit` is None when it does not exist.
#[derive(Clone, Debug, PartialEq)]
pub struct Named {
    pub name: String,
    pub fit: Option<Fit>,
}

/// What to do with the clusters in this pass.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    /// The names the status holds after this pass.
    pub active: Option<String>,
    pub pending: Option<String>,
    /// A cluster to make from the wanted config.
    pub create: Option<String>,
    /// A cluster to bring to the wanted config in place (see `in_place`).
    pub update: Option<InPlace>,
    /// A cluster to mark with its config's hash, taken as it is.
    pub mark: Option<String>,
    /// The cluster whose Serve gets `serveConfigV2`.
    pub serve: Option<String>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct InPlace {
    pub name: String,
    /// With the worker groups added at the end of the config.
    pub extend: bool,
}

/// The clusters' plan. `new_name` names a cluster this pass would make; the pending one, once
/// named in the status, is made under that name, so a pass cut short never makes two.
pub fn plan(active: Option<Named>, pending: Option<Named>, strategy: ServiceUpgradeType, new_name: String) -> Plan {
    let active_name = active.as_ref().map(|a| a.name.clone());
    let live_active = active.and_then(|a| Some((a.name, a.fit?)));
    let preparing = |name: String, fit: Option<Fit>| Plan {
        active: active_name.clone(),
        pending: Some(name.clone()),
        create: fit.is_none().then(|| name.clone()),
        update: fit.map(|f| InPlace { name: name.clone(), extend: f == Fit::Extended }),
        mark: None,
        serve: Some(name),
    };
    // The config is the running cluster's again, or no new cluster is wanted: the pending
    // one (if any) is given up.
    let give_up = matches!(live_active, Some((_, Fit::Same))) || strategy == ServiceUpgradeType::None;
    if let Some(p) = pending {
        match p.fit {
            _ if give_up && live_active.is_some() => {}
            Some(Fit::Same | Fit::Extended) | None => return preparing(p.name, p.fit),
            _ => return preparing(new_name, None),
        }
    }
    match live_active {
        None => preparing(new_name, None),
        Some((_, Fit::Different)) if strategy == ServiceUpgradeType::NewCluster => preparing(new_name, None),
        Some((name, fit)) => Plan {
            active: Some(name.clone()),
            update: (fit != Fit::Different).then(|| InPlace { name: name.clone(), extend: fit == Fit::Extended }),
            mark: (fit == Fit::Unmarked).then(|| name.clone()),
            serve: Some(name),
            pending: None,
            create: None,
        },
    }
}

/// The service's cluster to take as active when its status names none (a status lost, or
/// restored without it): the one its Serve Service leads to, else one of the wanted config,
/// else the newest. `owned` is oldest first: (name, fit, selected by the Serve Service).
/// None when it has none: one is made.
pub fn adopt(owned: &[(String, Fit, bool)]) -> Option<String> {
    let pick = |f: &dyn Fn(&(String, Fit, bool)) -> bool| owned.iter().rev().find(|c| f(c)).map(|c| c.0.clone());
    pick(&|c| c.2).or_else(|| pick(&|c| matches!(c.1, Fit::Same | Fit::Extended))).or_else(|| pick(&|_| true))
}

/// Whether the pending cluster takes the traffic: every application runs there, and a pod of
/// it serves (unless no cluster serves yet, when it is the first one).
pub fn promote(apps_running: bool, endpoints: i32, active_exists: bool) -> bool {
    apps_running && (endpoints > 0 || !active_exists)
}

/// A live cluster brought to the wanted config in place: added worker groups (when `extend`),
/// and each group's min and max replicas, and its replicas unless an autoscaler owns them.
/// None when nothing changes.
pub fn in_place(live: &RayClusterSpec, goal: &RayClusterSpec, extend: bool) -> Option<RayClusterSpec> {
    let mut new = live.clone();
    if extend {
        let known = new.worker_group_specs.len();
        new.worker_group_specs.extend(goal.worker_group_specs.iter().skip(known).cloned());
    }
    let autoscaled = live.enable_in_tree_autoscaling == Some(true);
    for group in &mut new.worker_group_specs {
        let Some(wanted) = goal.worker_group_specs.iter().find(|g| g.group_name == group.group_name) else { continue };
        group.min_replicas = wanted.min_replicas;
        group.max_replicas = wanted.max_replicas;
        if !autoscaled {
            group.replicas = wanted.replicas;
        }
    }
    let json = |s: &RayClusterSpec| serde_json::to_value(s).unwrap_or_default();
    (json(&new) != json(live)).then_some(new)
}

/// What to do with a cluster of the service that neither serves nor is being prepared.
#[derive(Clone, Debug, PartialEq)]
pub enum Sweep {
    /// Mark it to go at this time (RFC 3339).
    Mark {
        name: String,
        at: String,
    },
    Delete {
        name: String,
    },
    /// A cluster in use again (taken back as active, say) loses its mark.
    Unmark {
        name: String,
    },
}

/// The service's other clusters: each is marked with its deletion time when first seen
/// unused, then deleted once that time has passed. The mark lives on the cluster, so an
/// operator restart keeps the delay.
pub fn sweep(owned: &[(String, Option<String>)], plan: &Plan, now: SystemTime, delay: Duration) -> Vec<Sweep> {
    let keep = [plan.active.as_deref(), plan.pending.as_deref()];
    owned
        .iter()
        .filter_map(|(name, mark)| match mark.as_deref().map(humantime::parse_rfc3339) {
            _ if keep.contains(&Some(name.as_str())) => mark.is_some().then(|| Sweep::Unmark { name: name.clone() }),
            Some(Ok(at)) if at <= now => Some(Sweep::Delete { name: name.clone() }),
            Some(Ok(_)) => None,
            // Unmarked, or a mark that does not parse: (re)marked from now.
            _ => {
                Some(Sweep::Mark { name: name.clone(), at: humantime::format_rfc3339_seconds(now + delay).to_string() })
            }
        })
        .collect()
}

#[cfg(test)]
#[path = "upgrade_tests.rs"]
mod tests;
