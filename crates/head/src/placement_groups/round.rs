//! A placement round's decisions, made from a snapshot of the table and the alive nodes:
//! where each waiting group's unplaced bundles go, asked of each node at once.

use super::Group;
use oxray_proto::v1;
use oxray_scheduler::bundles::{self, Candidate};
use oxray_types::{NodeInfo, ResourceSet};
use std::collections::BTreeMap;

/// The bundles of one group a node's agent is asked to reserve.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Ask {
    pub node: String,
    pub agent: String,
    pub bundles: BTreeMap<u32, v1::Bundle>,
}

/// A group's new bundles: all of them are reserved, or none.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Reservation {
    pub group: String,
    pub asks: Vec<Ask>,
}

/// Where the waiting groups' bundles go this round, oldest group first. `nodes` are the
/// alive nodes with an agent. A group placed here counts as holding its nodes' room for
/// the rest of the round even if a node then refuses: the groups after it wait for the
/// next round rather than overbook.
pub(super) fn plan(groups: &[Group], nodes: &[NodeInfo]) -> Vec<Reservation> {
    let mut free: Vec<Candidate> = nodes
        .iter()
        .map(|n| Candidate { node: n.node_id.hex(), free: unreserved(n, groups), labels: n.labels.clone() })
        .collect();
    let mut waiting: Vec<&Group> = groups.iter().filter(|g| g.nodes.iter().any(Option::is_none)).collect();
    waiting.sort_by_key(|g| g.created_at_ms);
    let agent_of = |id: &str| nodes.iter().find(|n| n.node_id.hex() == id).map(|n| n.agent_address());
    let mut out = Vec::new();
    for group in waiting {
        let placed: Vec<Option<String>> = group.nodes.iter().map(|n| n.as_ref().map(|n| n.0.clone())).collect();
        let Some(chosen) = bundles::place(group.strategy, &group.bundles, &group.selectors, &placed, &free) else {
            continue;
        };
        let mut asks: BTreeMap<String, BTreeMap<u32, v1::Bundle>> = BTreeMap::new();
        for (i, node) in chosen.iter().enumerate().filter(|(i, _)| placed[*i].is_none()) {
            if let Some(c) = free.iter_mut().find(|c| c.node == *node) {
                c.free = c.free.minus(&group.bundles[i]);
            }
            asks.entry(node.clone()).or_default().insert(i as u32, group.bundle(i));
        }
        let asks = asks.into_iter().map(|(node, bundles)| Some(Ask { agent: agent_of(&node)?, node, bundles }));
        if let Some(asks) = asks.collect::<Option<Vec<Ask>>>() {
            out.push(Reservation { group: group.id.clone(), asks });
        }
    }
    out
}

/// A node's total less the bundles placed on it.
fn unreserved(node: &NodeInfo, groups: &[Group]) -> ResourceSet {
    let id = node.node_id.hex();
    let mut reserved = ResourceSet::new();
    for g in groups {
        for (b, slot) in g.bundles.iter().zip(&g.nodes) {
            if slot.as_ref().is_some_and(|(n, _)| *n == id) {
                reserved.add(b);
            }
        }
    }
    node.resources_total.minus(&reserved)
}

#[cfg(test)]
mod tests {
    use super::super::tests::{group, node};
    use super::*;
    use oxray_scheduler::bundles::Strategy;

    #[test]
    fn waiting_groups_go_oldest_first_and_do_not_overbook() {
        let nodes = vec![node(4.0)];
        let mut older = group("older", Strategy::Pack, &[3.0]);
        older.created_at_ms = 1;
        let newer = group("newer", Strategy::Pack, &[3.0]);
        let plan = plan(&[newer, older], &nodes);
        assert_eq!(plan.len(), 1, "{plan:?}");
        assert_eq!(plan[0].group, "older");
        let ask = &plan[0].asks[0];
        assert_eq!((ask.node.as_str(), ask.agent.as_str()), (nodes[0].node_id.hex().as_str(), "127.0.0.1:7000"));
        assert_eq!(ask.bundles.keys().copied().collect::<Vec<_>>(), vec![0]);
    }

    #[test]
    fn bundles_placed_already_hold_their_room_and_are_not_asked_again() {
        let nodes = vec![node(4.0), node(4.0)];
        let mut half = group("half", Strategy::StrictSpread, &[3.0, 3.0]);
        half.nodes[0] = Some((nodes[0].node_id.hex(), "127.0.0.1:7000".into()));
        let plan = plan(&[half], &nodes);
        let asks = &plan[0].asks;
        assert_eq!(asks.len(), 1);
        assert_eq!(asks[0].node, nodes[1].node_id.hex(), "strict spread keeps off the node it is on");
        assert_eq!(asks[0].bundles.keys().copied().collect::<Vec<_>>(), vec![1]);
    }

    #[test]
    fn a_node_reserved_past_its_total_offers_nothing_rather_than_less_than_nothing() {
        let nodes = [node(2.0)];
        let mut over = group("over", Strategy::Pack, &[3.0]);
        over.nodes[0] = Some((nodes[0].node_id.hex(), String::new()));
        assert_eq!(unreserved(&nodes[0], &[over]).get("CPU"), 0.0);
    }
}
