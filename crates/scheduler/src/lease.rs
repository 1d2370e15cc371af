//! Where a worker lease goes, decided by the agent a driver asked, over its view of the
//! cluster: on its own node, or another agent the driver is sent to (Ray's spillback).

use oxray_types::{selector_matches, ResourceSet, Selector};
use std::collections::BTreeMap;

/// An alive node as an agent's view of the cluster has it.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeView {
    pub node_id: String,
    /// Its agent, `ip:port`: where a lease for it is asked.
    pub agent: String,
    pub total: ResourceSet,
    /// Free now, as its last report said (the asked agent's own: as it is).
    pub available: ResourceSet,
    pub labels: BTreeMap<String, String>,
}

impl NodeView {
    fn could_hold(&self, request: &ResourceSet) -> bool {
        request.fits_in(&self.total)
    }

    fn has_room(&self, request: &ResourceSet) -> bool {
        request.fits_in(&self.available)
    }
}

/// Ray's scheduling strategies, as far as the cluster view decides them (a placement group's
/// bundle is found by its group instead).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Strategy {
    /// The asked node; another only when it has no room (or can never hold the request).
    Default,
    /// Round the nodes that could hold the request.
    Spread,
    /// That node; with `soft`, as DEFAULT when it is not alive.
    Node { node_id: String, soft: bool },
    /// Among the nodes the first selector any alive node matches picks (Ray's
    /// `label_selector`, then its `fallback_strategy`), the asked one first.
    Labels(Vec<Selector>),
}

/// What the asked agent does with a lease request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Grant it here, waiting a moment for room.
    Here,
    /// Send the asker to this agent.
    There(String),
    /// Nothing can take it now, but something may later (room frees up, a node joins).
    Wait,
    /// Nothing in the cluster can ever take it: why.
    Never(String),
}

/// Where a lease goes. `nodes` are the alive nodes in a stable order, `local` the asked
/// agent's node id, `turn` a counter that moves on with every call (SPREAD's rotation), and
/// `busy_here` whether the asked node was tried already and had no room in time.
pub fn route(
    strategy: &Strategy,
    request: &ResourceSet,
    local: &str,
    nodes: &[NodeView],
    turn: usize,
    busy_here: bool,
) -> Decision {
    let here = |node: &NodeView| {
        if node.node_id == local {
            Decision::Here
        } else {
            Decision::There(node.agent.clone())
        }
    };
    match strategy {
        Strategy::Default => default(request, local, nodes, turn, busy_here),
        Strategy::Spread => {
            let ring: Vec<&NodeView> = nodes.iter().filter(|n| n.could_hold(request)).collect();
            if ring.is_empty() {
                return Decision::Never(no_node_holds(request, nodes));
            }
            if busy_here {
                // The turn's node was this one, out of room: the next in turn with room, if any.
                let others: Vec<&NodeView> = ring.into_iter().filter(|n| n.node_id != local).collect();
                return with_room(&others, request, turn).map_or(Decision::Wait, here);
            }
            here(ring[spread_pick(&ring, request, turn)])
        }
        Strategy::Node { node_id, soft } => match nodes.iter().find(|n| n.node_id == *node_id) {
            Some(node) if node.could_hold(request) || !soft => here(node),
            _ if *soft => default(request, local, nodes, turn, busy_here),
            _ => Decision::Never(format!("node {node_id} of the NodeAffinitySchedulingStrategy is not alive")),
        },
        Strategy::Labels(selectors) => {
            let Some(matching) = matching(selectors, nodes) else { return Decision::Wait };
            let ring: Vec<&NodeView> = matching.into_iter().filter(|n| n.could_hold(request)).collect();
            match ring.iter().find(|n| n.node_id == local) {
                Some(_) if !busy_here => Decision::Here,
                _ if ring.is_empty() => Decision::Wait,
                _ => here(ring[spread_pick(&ring, request, turn)]),
            }
        }
    }
}

/// DEFAULT: this node while it could ever hold the request; when it had no room in time, the
/// next other node in turn with room now; when it never could, the next one with room, else
/// any that could hold it.
fn default(request: &ResourceSet, local: &str, nodes: &[NodeView], turn: usize, busy_here: bool) -> Decision {
    let this_could = nodes.iter().any(|n| n.node_id == local && n.could_hold(request));
    if this_could && !busy_here {
        return Decision::Here;
    }
    let others: Vec<&NodeView> = nodes.iter().filter(|n| n.node_id != local && n.could_hold(request)).collect();
    if let Some(node) = with_room(&others, request, turn) {
        return Decision::There(node.agent.clone());
    }
    match others.get(turn % others.len().max(1)) {
        _ if this_could => Decision::Wait,
        Some(node) => Decision::There(node.agent.clone()),
        None => Decision::Never(no_node_holds(request, nodes)),
    }
}

fn no_node_holds(request: &ResourceSet, nodes: &[NodeView]) -> String {
    let offers: Vec<String> = nodes.iter().map(|n| n.total.describe()).collect();
    format!(
        "no node of the cluster can hold {}: the nodes offer {}, and a node can never hold more than it offers",
        request.describe(),
        if offers.is_empty() { "nothing".to_string() } else { offers.join(", ") }
    )
}

/// The first node from the turn's place in `ring` with room now, if any.
fn with_room<'a>(ring: &[&'a NodeView], request: &ResourceSet, turn: usize) -> Option<&'a NodeView> {
    (0..ring.len()).map(|step| ring[(turn + step) % ring.len()]).find(|n| n.has_room(request))
}

/// Which of `ring` (nodes that could hold the request, in a stable order) SPREAD takes on
/// `turn`: the first from the turn's place with room now, else the turn's own. A node whose
/// resources are held for long (a training worker's) is passed over while others have room.
pub fn spread_pick(ring: &[&NodeView], request: &ResourceSet, turn: usize) -> usize {
    (0..ring.len())
        .map(|step| (turn + step) % ring.len())
        .find(|&i| ring[i].has_room(request))
        .unwrap_or(turn % ring.len())
}

/// The nodes matching the first selector any node matches, or None while none matches.
pub fn matching<'a>(selectors: &[Selector], nodes: &'a [NodeView]) -> Option<Vec<&'a NodeView>> {
    selectors.iter().find_map(|selector| {
        let fitting: Vec<&NodeView> =
            nodes.iter().filter(|n| selector_matches(selector, |key| n.labels.get(key).map(String::as_str))).collect();
        (!fitting.is_empty()).then_some(fitting)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cpus(n: f64) -> ResourceSet {
        [("CPU".to_string(), n)].into_iter().collect()
    }

    fn node(id: &str, total: f64, available: f64) -> NodeView {
        NodeView {
            node_id: id.into(),
            agent: format!("{id}:1"),
            total: cpus(total),
            available: cpus(available),
            labels: BTreeMap::new(),
        }
    }

    fn labelled(id: &str, zone: &str) -> NodeView {
        let mut n = node(id, 2.0, 2.0);
        n.labels.insert("zone".into(), zone.into());
        n
    }

    fn there(id: &str) -> Decision {
        Decision::There(format!("{id}:1"))
    }

    #[test]
    fn spread_takes_turns_and_passes_over_nodes_without_room() {
        let picks = |ring: &[NodeView], turns: usize| -> Vec<usize> {
            let ring: Vec<&NodeView> = ring.iter().collect();
            (0..turns).map(|turn| spread_pick(&ring, &cpus(1.0), turn)).collect()
        };
        assert_eq!(picks(&[node("a", 1.0, 1.0), node("b", 1.0, 1.0)], 4), [0, 1, 0, 1]);
        let ring = [node("a", 1.0, 0.0), node("b", 2.0, 1.0), node("c", 2.0, 2.0)];
        assert_eq!(picks(&ring, 4), [1, 1, 2, 1], "a has no room: its turns go to the next with room");
        assert_eq!(picks(&[node("a", 1.0, 0.0), node("b", 1.0, 0.0)], 3), [0, 1, 0], "none has room: in turn");
    }

    #[test]
    fn default_stays_here_and_spills_to_room_elsewhere() {
        let nodes = [node("a", 2.0, 0.0), node("b", 2.0, 0.0), node("c", 2.0, 1.0)];
        let route = |busy| route(&Strategy::Default, &cpus(1.0), "a", &nodes, 0, busy);
        assert_eq!(route(false), Decision::Here, "this node could hold it: ask here first");
        assert_eq!(route(true), there("c"), "no room here in time: the other node with room");
        let full = [node("a", 2.0, 0.0), node("b", 2.0, 0.0)];
        assert_eq!(super::route(&Strategy::Default, &cpus(1.0), "a", &full, 0, true), Decision::Wait);
    }

    #[test]
    fn default_sends_what_this_node_can_never_hold_to_a_node_that_can() {
        let nodes = [node("a", 1.0, 1.0), node("b", 4.0, 0.0), node("c", 4.0, 0.0)];
        assert_eq!(route(&Strategy::Default, &cpus(2.0), "a", &nodes, 1, false), there("c"), "none has room: in turn");
        let Decision::Never(why) = route(&Strategy::Default, &cpus(8.0), "a", &nodes, 0, false) else { panic!() };
        assert!(why.contains("{CPU: 8}") && why.contains("{CPU: 4}"), "{why}");
    }

    #[test]
    fn spread_goes_round_and_only_to_nodes_that_could_hold_it() {
        let nodes = [node("a", 2.0, 2.0), node("b", 1.0, 1.0), node("c", 2.0, 2.0)];
        let picks: Vec<Decision> =
            (0..3).map(|t| route(&Strategy::Spread, &cpus(2.0), "a", &nodes, t, false)).collect();
        assert_eq!(picks, [Decision::Here, there("c"), Decision::Here]);
        assert_eq!(route(&Strategy::Spread, &cpus(2.0), "a", &nodes, 0, true), there("c"));
        assert!(matches!(route(&Strategy::Spread, &cpus(3.0), "a", &nodes, 0, false), Decision::Never(_)));
    }

    #[test]
    fn node_affinity_goes_there_and_soft_falls_back() {
        let nodes = [node("a", 2.0, 2.0), node("b", 2.0, 0.0)];
        let hard = |id: &str| Strategy::Node { node_id: id.into(), soft: false };
        let soft = |id: &str| Strategy::Node { node_id: id.into(), soft: true };
        assert_eq!(route(&hard("b"), &cpus(1.0), "a", &nodes, 0, false), there("b"), "even without room now");
        assert!(matches!(route(&hard("gone"), &cpus(1.0), "a", &nodes, 0, false), Decision::Never(_)));
        assert_eq!(route(&soft("gone"), &cpus(1.0), "a", &nodes, 0, false), Decision::Here);
        assert_eq!(
            route(&soft("b"), &cpus(4.0), "a", &nodes, 0, false),
            Decision::Never(no_node_holds(&cpus(4.0), &nodes))
        );
    }

    #[test]
    fn labels_pick_the_first_selector_that_matches_and_this_node_first() {
        let zone = |z: &str| -> Selector { [("zone".to_string(), z.to_string())].into_iter().collect() };
        let nodes = [labelled("a", "x"), labelled("b", "y"), labelled("c", "y")];
        let by =
            |selectors: Vec<Selector>, turn| route(&Strategy::Labels(selectors), &cpus(1.0), "a", &nodes, turn, false);
        assert_eq!(by(vec![zone("x")], 0), Decision::Here);
        assert_eq!(by(vec![zone("y")], 0), there("b"));
        assert_eq!(by(vec![zone("y")], 1), there("c"));
        assert_eq!(by(vec![zone("z"), zone("y")], 0), there("b"), "the fallback selector");
        assert_eq!(by(vec![zone("z")], 0), Decision::Wait, "until a node in zone z joins");
    }
}
