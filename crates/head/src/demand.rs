//! What the cluster lacks, for an autoscaler: the work that waits for room (as the agents
//! report it, one count per asker and shape however many agents it asked), placement groups
//! not yet placed and jobs waiting for their entrypoint's resources; and how long each
//! node has held nothing.

use oxray_api_types::PendingResources;
use oxray_proto::convert::resources_from_proto;
use oxray_proto::v1;
use oxray_types::ResourceSet;
use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Whether a node holds nothing an autoscaler may take away with it: no work runs there
/// (`busy`: a leased worker, a job's entrypoint), every resource it offers is free, and its
/// object store (memory and spill) is empty: objects there may be the only copies, as Ray
/// keeps a node with objects from going idle.
pub fn holds_nothing(busy: bool, total: &ResourceSet, available: &ResourceSet, usage: Option<&v1::NodeUsage>) -> bool {
    let objects = usage.is_some_and(|u| u.object_store_used > 0 || u.object_store_spilled > 0);
    !busy && !objects && total.fits_in(available)
}

#[derive(Default)]
pub struct Demand {
    nodes: Mutex<HashMap<String, NodeDemand>>,
}

#[derive(Default)]
struct NodeDemand {
    waiting: Vec<v1::ResourceDemand>,
    /// Since when the node holds nothing (no resource taken); None while it does.
    idle_since: Option<Instant>,
}

impl Demand {
    /// A node's heartbeat: what waits at its agent, and whether it holds anything.
    pub fn report(&self, node: &str, waiting: Vec<v1::ResourceDemand>, idle: bool, now: Instant) {
        let mut nodes = self.nodes.lock().expect("demand lock");
        let entry = nodes.entry(node.to_string()).or_default();
        entry.waiting = waiting;
        entry.idle_since = match (idle, entry.idle_since) {
            (false, _) => None,
            (true, since) => Some(since.unwrap_or(now)),
        };
    }

    /// Keeps the reports of the nodes `alive` says are: a dead node's work asks elsewhere.
    pub fn keep(&self, alive: impl Fn(&str) -> bool) {
        self.nodes.lock().expect("demand lock").retain(|id, _| alive(id));
    }

    /// How long each node has held nothing, by node id.
    pub fn idle(&self, now: Instant) -> HashMap<String, Duration> {
        let nodes = self.nodes.lock().expect("demand lock");
        nodes.iter().filter_map(|(id, n)| Some((id.clone(), now.duration_since(n.idle_since?)))).collect()
    }

    /// The waiting work of every node, counted once per asker, shape and label selector
    /// (the largest backlog seen), by shape. An agent the asker was sent on to reports it
    /// without its selector: where another agent reported one for the same asker and shape,
    /// that report stands for it.
    pub fn waiting(&self) -> Vec<PendingResources> {
        let nodes = self.nodes.lock().expect("demand lock");
        let mut by_asker: BTreeMap<(String, String), BTreeMap<BTreeMap<String, String>, PendingResources>> =
            BTreeMap::new();
        for demand in nodes.values().flat_map(|n| n.waiting.iter()) {
            let Ok(resources) = resources_from_proto(demand.resources.clone()) else { continue };
            let resources = PendingResources::of(&resources, 0).resources;
            let selector: BTreeMap<String, String> = demand.label_selector.clone().into_iter().collect();
            let shapes = by_asker.entry((demand.asker.clone(), format!("{resources:?}"))).or_default();
            let seen = shapes.entry(selector.clone()).or_insert(PendingResources {
                resources,
                count: 0,
                label_selector: selector,
            });
            seen.count = seen.count.max(demand.count);
        }
        merged(by_asker.into_values().flat_map(|mut shapes| {
            if shapes.len() > 1 {
                shapes.remove(&BTreeMap::new());
            }
            shapes.into_values()
        }))
    }
}

/// Everything that waits for room, for `oxray status` and the HTTP API.
pub struct Pending<'a> {
    pub demand: &'a Demand,
    pub jobs: &'a crate::jobs::JobManager,
    pub groups: &'a crate::placement_groups::PlacementGroups,
    pub membership: &'a crate::membership::Membership,
}

impl Pending<'_> {
    /// Tasks, actors and placement groups, by shape.
    fn work(&self) -> Vec<PendingResources> {
        let alive: std::collections::HashSet<String> =
            self.membership.snapshot().iter().filter(|n| n.is_alive()).map(|n| n.node_id.hex()).collect();
        self.demand.keep(|node| alive.contains(node));
        merged(self.demand.waiting().into_iter().chain(of_groups(&self.groups.list())))
    }

    /// One line per waiting job, then per shape of other waiting work.
    pub fn lines(&self) -> Vec<String> {
        let mut lines = self.jobs.pending_demands();
        lines.extend(self.work().iter().map(|p| p.describe("tasks, actors and placement groups")));
        lines
    }

    /// All of it by shape, and how long each idle node has held nothing (seconds).
    pub fn shapes(&self) -> (Vec<PendingResources>, HashMap<String, f64>) {
        let all = merged(self.work().into_iter().chain(self.jobs.pending_resources()));
        let idle = self.demand.idle(Instant::now()).into_iter().map(|(id, d)| (id, d.as_secs_f64())).collect();
        (all, idle)
    }
}

/// Equal shapes (with equal label selectors) summed, in a stable order.
pub fn merged(demand: impl IntoIterator<Item = PendingResources>) -> Vec<PendingResources> {
    let mut by_shape: BTreeMap<String, PendingResources> = BTreeMap::new();
    for d in demand.into_iter().filter(|d| d.count > 0 && !d.resources.is_empty()) {
        let key = format!("{:?} {:?}", d.resources, d.label_selector);
        by_shape.entry(key).and_modify(|seen| seen.count += d.count).or_insert(d);
    }
    by_shape.into_values().collect()
}

/// What placement groups not yet (or no longer all) placed need: a STRICT_PACK group one
/// node holding all its unplaced bundles, any other group a place for each.
pub fn of_groups(groups: &[v1::PlacementGroup]) -> Vec<PendingResources> {
    use v1::PlacementGroupState::{Pending, Rescheduling};
    let mut demand = Vec::new();
    for group in groups.iter().filter(|g| g.state == Pending as i32 || g.state == Rescheduling as i32) {
        let unplaced = |i: usize| group.bundle_nodes.get(i).is_none_or(|node| node.is_empty());
        let bundles: Vec<(ResourceSet, BTreeMap<String, String>)> = group
            .bundles
            .iter()
            .enumerate()
            .filter(|(i, _)| unplaced(*i))
            .filter_map(|(_, b)| {
                let selector = b.label_selector.clone().into_iter().collect();
                Some((resources_from_proto(b.resources.clone()).ok()?, selector))
            })
            .collect();
        let with = |resources: &ResourceSet, selector: &BTreeMap<String, String>| PendingResources {
            label_selector: selector.clone(),
            ..PendingResources::of(resources, 1)
        };
        if group.strategy == v1::PlacementStrategy::StrictPack as i32 {
            // One node for all: it must have every bundle's labels.
            let mut all = ResourceSet::new();
            let mut labels = BTreeMap::new();
            for (resources, selector) in &bundles {
                all.add(resources);
                labels.extend(selector.clone());
            }
            demand.push(with(&all, &labels));
        } else {
            demand.extend(bundles.iter().map(|(resources, selector)| with(resources, selector)));
        }
    }
    demand
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wants(asker: &str, cpus: f64, count: u32) -> v1::ResourceDemand {
        v1::ResourceDemand {
            resources: [("CPU".to_string(), cpus)].into(),
            count,
            asker: asker.into(),
            ..Default::default()
        }
    }

    fn shapes(demand: &[PendingResources]) -> Vec<(f64, u32)> {
        demand.iter().map(|d| (d.resources["CPU"], d.count)).collect()
    }

    #[test]
    fn an_asker_seen_by_two_agents_counts_once_and_askers_add_up() {
        let demand = Demand::default();
        let now = Instant::now();
        demand.report("n1", vec![wants("a", 4.0, 3), wants("b", 4.0, 2)], false, now);
        demand.report("n2", vec![wants("a", 4.0, 2), wants("a", 1.0, 1), wants("c", 0.0, 1)], true, now);
        assert_eq!(shapes(&demand.waiting()), vec![(1.0, 1), (4.0, 5)]);
        demand.keep(|node| node != "n1");
        assert_eq!(shapes(&demand.waiting()), vec![(1.0, 1), (4.0, 2)]);
    }

    #[test]
    fn a_node_holds_something_while_work_runs_resources_are_taken_or_objects_are_stored() {
        let set = |cpus: f64| ResourceSet::from_iter([("CPU".to_string(), cpus)]);
        let usage = |used, spilled| v1::NodeUsage {
            object_store_used: used,
            object_store_spilled: spilled,
            ..Default::default()
        };
        assert!(holds_nothing(false, &set(2.0), &set(2.0), Some(&usage(0, 0))));
        assert!(holds_nothing(false, &set(2.0), &set(2.0), None), "no reading yet");
        assert!(!holds_nothing(true, &set(2.0), &set(2.0), None), "a zero-CPU worker or an entrypoint");
        assert!(!holds_nothing(false, &set(2.0), &set(1.0), None));
        assert!(!holds_nothing(false, &set(2.0), &set(2.0), Some(&usage(10, 0))));
        assert!(!holds_nothing(false, &set(2.0), &set(2.0), Some(&usage(0, 10))), "spilled objects");
    }

    #[test]
    fn a_node_is_idle_from_the_first_report_that_it_holds_nothing() {
        let demand = Demand::default();
        let t0 = Instant::now();
        demand.report("n", vec![], true, t0);
        demand.report("n", vec![], true, t0 + Duration::from_secs(5));
        assert_eq!(demand.idle(t0 + Duration::from_secs(7))["n"], Duration::from_secs(7));
        demand.report("n", vec![], false, t0 + Duration::from_secs(8));
        assert!(demand.idle(t0 + Duration::from_secs(9)).is_empty());
    }

    #[test]
    fn pending_groups_ask_per_bundle_or_all_at_once_when_strictly_packed() {
        let bundle = |cpus: f64| v1::Bundle { resources: [("CPU".to_string(), cpus)].into(), ..Default::default() };
        let group = |strategy: v1::PlacementStrategy, state: v1::PlacementGroupState| v1::PlacementGroup {
            bundles: vec![bundle(1.0), bundle(2.0)],
            strategy: strategy as i32,
            state: state as i32,
            ..Default::default()
        };
        let groups = [
            group(v1::PlacementStrategy::Spread, v1::PlacementGroupState::Pending),
            group(v1::PlacementStrategy::StrictPack, v1::PlacementGroupState::Pending),
            group(v1::PlacementStrategy::Pack, v1::PlacementGroupState::Created),
            v1::PlacementGroup {
                bundle_nodes: vec!["n".into(), String::new()],
                ..group(v1::PlacementStrategy::Pack, v1::PlacementGroupState::Rescheduling)
            },
        ];
        assert_eq!(shapes(&merged(of_groups(&groups))), vec![(1.0, 1), (2.0, 2), (3.0, 1)]);
    }

    #[test]
    fn the_labels_work_needs_go_with_it_and_tell_shapes_apart() {
        let labels = |v: &str| [("accelerator".to_string(), v.to_string())].into_iter().collect();
        let demand = Demand::default();
        let now = Instant::now();
        // The same asker seen by the agent that scheduled it (with its selector) and by the one
        // it was sent to (without): counted once, with the selector.
        let told = v1::ResourceDemand { label_selector: labels("A100"), ..wants("a", 1.0, 2) };
        demand.report("n1", vec![told], true, now);
        demand.report("n2", vec![wants("a", 1.0, 2), wants("b", 1.0, 1)], true, now);
        let waiting = demand.waiting();
        let found: Vec<(u32, Option<&str>)> =
            waiting.iter().map(|p| (p.count, p.label_selector.get("accelerator").map(String::as_str))).collect();
        assert_eq!(found, vec![(2, Some("A100")), (1, None)]);
        assert!(waiting[0].describe("tasks").contains("on nodes with {accelerator: A100}"));
        let bundle = |selector| v1::Bundle { resources: [("CPU".to_string(), 1.0)].into(), label_selector: selector };
        let group = v1::PlacementGroup {
            bundles: vec![bundle(labels("H100")), bundle(HashMap::new())],
            strategy: v1::PlacementStrategy::Pack as i32,
            state: v1::PlacementGroupState::Pending as i32,
            ..Default::default()
        };
        let asked = of_groups(&[group]);
        assert_eq!(asked[0].label_selector.get("accelerator").map(String::as_str), Some("H100"));
        assert!(asked[1].label_selector.is_empty());
    }
}
