//! What to do with a cluster's pods: a pure function from the spec and the pods seen to
//! the pods to create and delete.

use std::collections::{BTreeMap, HashSet};

use k8s_openapi::api::core::v1::Pod;

use crate::crd::cluster::{ClusterUpgradeType, RayClusterSpec, WorkerGroupSpec};
use crate::names::*;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Phase {
    Pending,
    Running,
    Ended,
}

/// The facts about one pod the decisions use.
#[derive(Clone, Debug)]
pub struct PodView {
    pub name: String,
    pub head: bool,
    pub group: String,
    pub phase: Phase,
    pub ready: bool,
    pub terminating: bool,
    pub template_hash: Option<String>,
    pub ip: Option<String>,
}

impl PodView {
    pub fn of(pod: &Pod) -> PodView {
        let labels = pod.metadata.labels.clone().unwrap_or_default();
        let status = pod.status.clone().unwrap_or_default();
        let phase = match status.phase.as_deref() {
            Some("Running") => Phase::Running,
            Some("Succeeded") | Some("Failed") => Phase::Ended,
            _ => Phase::Pending,
        };
        let ready = status.conditions.unwrap_or_default().iter().any(|c| c.type_ == "Ready" && c.status == "True");
        PodView {
            name: pod.metadata.name.clone().unwrap_or_default(),
            head: labels.get(LABEL_NODE_TYPE).is_some_and(|t| t == "head"),
            group: labels.get(LABEL_GROUP).cloned().unwrap_or_default(),
            phase,
            ready: ready && status.phase.as_deref() == Some("Running"),
            terminating: pod.metadata.deletion_timestamp.is_some(),
            template_hash: pod.metadata.annotations.as_ref().and_then(|a| a.get(ANNOTATION_TEMPLATE_HASH).cloned()),
            ip: status.pod_ip,
        }
    }
}

/// Which worker pods run work now, by pod name (= node name). None when the head could not
/// be asked: then no running worker is removed.
pub type Busy = Option<HashSet<String>>;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PodAction {
    CreateHead,
    CreateWorker { group: String },
    Delete { name: String, reason: String },
}

/// Pods a group should have: its replicas within [min, max], times its hosts per replica.
pub fn desired_workers(group: &WorkerGroupSpec) -> i32 {
    if group.suspend == Some(true) {
        return 0;
    }
    let min = group.min_replicas.unwrap_or(0).max(0);
    let max = group.max_replicas.unwrap_or(i32::MAX).max(min);
    let replicas = group.replicas.unwrap_or(min).clamp(min, max);
    replicas.saturating_mul(group.num_of_hosts.unwrap_or(1).max(1))
}

/// `hashes` holds the current template hash of the head (key `headgroup`) and of each group.
pub fn plan(spec: &RayClusterSpec, pods: &[PodView], hashes: &BTreeMap<String, String>, busy: &Busy) -> Vec<PodAction> {
    let live: Vec<&PodView> = pods.iter().filter(|p| !p.terminating).collect();
    let delete = |p: &PodView, reason: &str| PodAction::Delete { name: p.name.clone(), reason: reason.into() };
    if spec.suspend == Some(true) {
        return live.iter().map(|p| delete(p, "the cluster is suspended")).collect();
    }
    let recreate = spec.upgrade_strategy.as_ref().and_then(|s| s.type_) == Some(ClusterUpgradeType::Recreate);
    let outdated = |p: &PodView, group: &str| recreate && p.template_hash.as_ref() != hashes.get(group);
    let mut actions = Vec::new();

    let heads: Vec<&&PodView> = live.iter().filter(|p| p.head).collect();
    let mut head_alive = false;
    for head in &heads {
        if head.phase == Phase::Ended {
            actions.push(delete(head, "the head pod ended"));
        } else if outdated(head, HEAD_GROUP) {
            actions.push(delete(head, "the head group's template changed"));
        } else if head_alive {
            actions.push(delete(head, "a second head pod"));
        } else {
            head_alive = true;
        }
    }
    // The head pod has a fixed name: a new one waits until the old one is gone.
    if heads.is_empty() && !pods.iter().any(|p| p.head) {
        actions.push(PodAction::CreateHead);
    }

    let groups: HashSet<&str> = spec.worker_group_specs.iter().map(|g| g.group_name.as_str()).collect();
    for group in &spec.worker_group_specs {
        let to_delete: HashSet<&str> = group
            .scale_strategy
            .as_ref()
            .map(|s| s.workers_to_delete.iter().map(String::as_str).collect())
            .unwrap_or_default();
        let mut keep: Vec<&PodView> = Vec::new();
        for pod in live.iter().filter(|p| !p.head && p.group == group.group_name) {
            if pod.phase == Phase::Ended {
                actions.push(delete(pod, "the worker pod ended"));
            } else if to_delete.contains(pod.name.as_str()) {
                actions.push(delete(pod, "listed in scaleStrategy.workersToDelete"));
            } else if outdated(pod, &group.group_name) {
                actions.push(delete(pod, "the worker group's template changed"));
            } else {
                keep.push(pod);
            }
        }
        let desired = desired_workers(group).max(0) as usize;
        if keep.len() < desired {
            for _ in keep.len()..desired {
                actions.push(PodAction::CreateWorker { group: group.group_name.clone() });
            }
        } else if keep.len() > desired {
            let surplus = keep.len() - desired;
            for pod in removable(&keep, busy).into_iter().take(surplus) {
                actions.push(delete(pod, "the worker group has more pods than replicas"));
            }
        }
    }
    // Pods of groups taken out of the spec go once they run nothing.
    let orphans: Vec<&PodView> =
        live.iter().filter(|p| !p.head && !groups.contains(p.group.as_str())).copied().collect();
    for pod in removable(&orphans, busy) {
        actions.push(delete(pod, "its worker group is no longer in the spec"));
    }
    actions
}

/// Pods that can go without losing work, the cheapest first: not started, not ready, then
/// running but idle. A busy pod is never among them.
fn removable<'a>(pods: &[&'a PodView], busy: &Busy) -> Vec<&'a PodView> {
    let rank = |p: &PodView| match (&p.phase, busy) {
        (Phase::Pending, _) => Some(0),
        (_, Some(busy)) if !busy.contains(&p.name) => Some(if p.ready { 2 } else { 1 }),
        _ => None,
    };
    let mut ranked: Vec<(u8, &PodView)> = pods.iter().filter_map(|p| rank(p).map(|r| (r, *p))).collect();
    ranked.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.name.cmp(&b.1.name)));
    ranked.into_iter().map(|(_, p)| p).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::cluster::{ClusterUpgradeStrategy, ScaleStrategy};

    fn group(name: &str, replicas: i32) -> WorkerGroupSpec {
        WorkerGroupSpec { group_name: name.into(), replicas: Some(replicas), ..Default::default() }
    }

    fn spec(groups: Vec<WorkerGroupSpec>) -> RayClusterSpec {
        RayClusterSpec { worker_group_specs: groups, ..Default::default() }
    }

    fn pod(name: &str, group: &str, phase: Phase, ready: bool) -> PodView {
        PodView {
            name: name.into(),
            head: group == HEAD_GROUP,
            group: group.into(),
            phase,
            ready,
            terminating: false,
            template_hash: Some(format!("{group}-hash")),
            ip: None,
        }
    }

    fn hashes() -> BTreeMap<String, String> {
        ["headgroup", "g", "h"].iter().map(|g| (g.to_string(), format!("{g}-hash"))).collect()
    }

    fn creates(actions: &[PodAction]) -> usize {
        actions.iter().filter(|a| matches!(a, PodAction::CreateWorker { .. })).count()
    }

    fn deleted(actions: &[PodAction]) -> Vec<String> {
        actions
            .iter()
            .filter_map(|a| if let PodAction::Delete { name, .. } = a { Some(name.clone()) } else { None })
            .collect()
    }

    #[test]
    fn replicas_are_clamped_and_multiplied_by_hosts() {
        let mut g = group("g", 10);
        g.max_replicas = Some(3);
        assert_eq!(desired_workers(&g), 3);
        g.min_replicas = Some(2);
        g.replicas = None;
        assert_eq!(desired_workers(&g), 2);
        g.num_of_hosts = Some(4);
        assert_eq!(desired_workers(&g), 8);
        g.suspend = Some(true);
        assert_eq!(desired_workers(&g), 0);
    }

    #[test]
    fn a_new_cluster_gets_its_head_and_workers() {
        let actions = plan(&spec(vec![group("g", 2)]), &[], &hashes(), &None);
        assert!(actions.contains(&PodAction::CreateHead));
        assert_eq!(creates(&actions), 2);
    }

    #[test]
    fn a_converged_cluster_needs_nothing_and_replaying_changes_nothing() {
        let pods = vec![pod("head", HEAD_GROUP, Phase::Running, true), pod("w1", "g", Phase::Running, true)];
        assert!(plan(&spec(vec![group("g", 1)]), &pods, &hashes(), &None).is_empty());
        assert!(plan(&spec(vec![group("g", 1)]), &pods, &hashes(), &Some(Default::default())).is_empty());
    }

    #[test]
    fn a_terminating_head_is_waited_for_and_an_ended_one_removed() {
        let mut going = pod("c-head", HEAD_GROUP, Phase::Running, true);
        going.terminating = true;
        assert!(!plan(&spec(vec![]), &[going], &hashes(), &None).contains(&PodAction::CreateHead));
        let ended = pod("c-head", HEAD_GROUP, Phase::Ended, false);
        assert_eq!(deleted(&plan(&spec(vec![]), &[ended], &hashes(), &None)), vec!["c-head"]);
    }

    #[test]
    fn ended_workers_are_replaced() {
        let pods = vec![pod("head", HEAD_GROUP, Phase::Running, true), pod("w1", "g", Phase::Ended, false)];
        let actions = plan(&spec(vec![group("g", 1)]), &pods, &hashes(), &None);
        assert_eq!(deleted(&actions), vec!["w1"]);
        assert_eq!(creates(&actions), 1);
    }

    #[test]
    fn scaling_down_never_removes_a_busy_worker() {
        let pods = vec![
            pod("head", HEAD_GROUP, Phase::Running, true),
            pod("busy", "g", Phase::Running, true),
            pod("idle", "g", Phase::Running, true),
        ];
        let busy: Busy = Some(["busy".to_string()].into());
        assert_eq!(deleted(&plan(&spec(vec![group("g", 1)]), &pods, &hashes(), &busy)), vec!["idle"]);
        assert_eq!(deleted(&plan(&spec(vec![group("g", 0)]), &pods, &hashes(), &busy)), vec!["idle"]);
        // Without word from the head, no running worker goes.
        assert!(deleted(&plan(&spec(vec![group("g", 0)]), &pods, &hashes(), &None)).is_empty());
    }

    #[test]
    fn pending_pods_go_first() {
        let pods = vec![
            pod("head", HEAD_GROUP, Phase::Running, true),
            pod("a-running", "g", Phase::Running, true),
            pod("b-pending", "g", Phase::Pending, false),
        ];
        let busy: Busy = Some(Default::default());
        assert_eq!(deleted(&plan(&spec(vec![group("g", 1)]), &pods, &hashes(), &busy)), vec!["b-pending"]);
        assert_eq!(deleted(&plan(&spec(vec![group("g", 1)]), &pods, &hashes(), &None)), vec!["b-pending"]);
    }

    #[test]
    fn workers_to_delete_and_removed_groups() {
        let pods = vec![
            pod("head", HEAD_GROUP, Phase::Running, true),
            pod("w1", "g", Phase::Running, true),
            pod("old", "gone", Phase::Running, true),
        ];
        let mut g = group("g", 0);
        g.scale_strategy = Some(ScaleStrategy { workers_to_delete: vec!["w1".into()] });
        let busy: Busy = Some(Default::default());
        let mut names = deleted(&plan(&spec(vec![g]), &pods, &hashes(), &busy));
        names.sort();
        assert_eq!(names, vec!["old", "w1"]);
    }

    #[test]
    fn recreate_replaces_outdated_pods_and_none_keeps_them() {
        let mut outdated = pod("w1", "g", Phase::Running, true);
        outdated.template_hash = Some("older".into());
        let pods = vec![pod("head", HEAD_GROUP, Phase::Running, true), outdated];
        assert!(plan(&spec(vec![group("g", 1)]), &pods, &hashes(), &None).is_empty());
        let mut s = spec(vec![group("g", 1)]);
        s.upgrade_strategy = Some(ClusterUpgradeStrategy { type_: Some(ClusterUpgradeType::Recreate) });
        let actions = plan(&s, &pods, &hashes(), &None);
        assert_eq!(deleted(&actions), vec!["w1"]);
        assert_eq!(creates(&actions), 1);
    }

    #[test]
    fn suspend_removes_every_pod() {
        let pods = vec![pod("head", HEAD_GROUP, Phase::Running, true), pod("w1", "g", Phase::Running, true)];
        let mut s = spec(vec![group("g", 1)]);
        s.suspend = Some(true);
        assert_eq!(deleted(&plan(&s, &pods, &hashes(), &None)).len(), 2);
    }
}
