use oxray_types::{NodeInfo, ResourceSet};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeSummary {
    pub node_id: String,
    pub node_ip: String,
    pub node_name: String,
    pub is_head_node: bool,
    pub state_message: Option<String>,
    /// Resources taken by work on this node, without marker resources; empty when idle.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub resources_used: BTreeMap<String, f64>,
    /// Seconds since the node last held anything, while it holds nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_s: Option<f64>,
}

/// Work of one shape waiting for room: what an autoscaler adds nodes for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PendingResources {
    pub resources: BTreeMap<String, f64>,
    pub count: u32,
    /// The labels a node must have for it (Ray's label selector); empty: any node.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub label_selector: BTreeMap<String, String>,
}

/// What `oxray status` shows: nodes by state, resources in use, and pending demands.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClusterStatus {
    pub alive: Vec<NodeSummary>,
    pub dead: Vec<NodeSummary>,
    /// Totals over alive nodes, without the per-node marker resources (`node:...`).
    pub resources_total: BTreeMap<String, f64>,
    pub resources_used: BTreeMap<String, f64>,
    /// Work waiting for resources, one line per demand shape.
    pub pending: Vec<String>,
    /// The same, as shapes and counts: tasks, actors, placement groups and jobs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pending_resources: Vec<PendingResources>,
}

impl ClusterStatus {
    pub fn from_nodes(nodes: &[NodeInfo], pending: Vec<String>) -> Self {
        // Numbers rather than resource sets: a cluster's sum may pass what one node can hold.
        let mut total: BTreeMap<String, f64> = BTreeMap::new();
        let mut available: BTreeMap<String, f64> = BTreeMap::new();
        let add = |sum: &mut BTreeMap<String, f64>, set: &ResourceSet| {
            for (k, v) in set.iter() {
                *sum.entry(k.to_string()).or_default() += v;
            }
        };
        let (mut alive, mut dead) = (Vec::new(), Vec::new());
        for node in nodes {
            let summary = NodeSummary {
                node_id: node.node_id.hex(),
                node_ip: node.node_ip.clone(),
                node_name: node.node_name.clone(),
                is_head_node: node.is_head_node,
                state_message: node.state_message.clone(),
                resources_used: used(node),
                idle_s: None,
            };
            if node.is_alive() {
                add(&mut total, &node.resources_total);
                add(&mut available, &node.resources_available);
                alive.push(summary);
            } else {
                dead.push(summary);
            }
        }
        let visible = |name: &str| !name.starts_with("node:");
        let resources_total: BTreeMap<String, f64> = total.into_iter().filter(|(k, _)| visible(k)).collect();
        let free = |k: &str| available.get(k).copied().unwrap_or(0.0);
        let resources_used = resources_total.iter().map(|(k, v)| (k.clone(), (v - free(k)).max(0.0))).collect();
        ClusterStatus { alive, dead, resources_total, resources_used, pending, pending_resources: Vec::new() }
    }

    /// With what waits for room, as shapes, and how long idle nodes (by id) have been.
    pub fn with_demand(
        mut self,
        pending: Vec<PendingResources>,
        idle_s: &std::collections::HashMap<String, f64>,
    ) -> Self {
        for node in &mut self.alive {
            node.idle_s = idle_s.get(&node.node_id).copied();
        }
        self.pending_resources = pending;
        self
    }
}

impl PendingResources {
    /// `count` of `resources`, without the amounts of nothing.
    pub fn of(resources: &ResourceSet, count: u32) -> Self {
        let resources = resources.iter().filter(|(_, amount)| *amount > 0.0).map(|(k, v)| (k.to_string(), v)).collect();
        PendingResources { resources, count, label_selector: BTreeMap::new() }
    }

    /// One line of `oxray status`: `{CPU: 4} * 2 (what waits)`, with the labels it needs.
    pub fn describe(&self, what: &str) -> String {
        let wants: Vec<String> = self.resources.iter().map(|(k, v)| format!("{k}: {v}")).collect();
        let labels: Vec<String> = self.label_selector.iter().map(|(k, v)| format!("{k}: {v}")).collect();
        let on = if labels.is_empty() { String::new() } else { format!(" on nodes with {{{}}}", labels.join(", ")) };
        format!("{{{}}} * {}{on} ({what})", wants.join(", "), self.count)
    }
}

fn used(node: &NodeInfo) -> BTreeMap<String, f64> {
    node.resources_total
        .iter()
        .filter(|(name, _)| !name.starts_with("node:"))
        .map(|(name, total)| (name.to_string(), total - node.resources_available.get(name)))
        .filter(|(_, taken)| *taken > 1e-9)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nodes::tests::node;
    use oxray_types::NodeState;

    #[test]
    fn dead_nodes_leave_the_totals() {
        let mut busy = node("a", true, NodeState::Alive);
        busy.resources_available.set("CPU", 0.5).unwrap();
        let nodes = vec![busy, node("b", false, NodeState::Alive), node("c", false, NodeState::Dead)];
        let status = ClusterStatus::from_nodes(&nodes, vec![]);
        assert_eq!((status.alive.len(), status.dead.len()), (2, 1));
        assert_eq!(status.resources_total["CPU"], 4.0);
        assert_eq!(status.resources_used["CPU"], 1.5);
        assert!(!status.resources_total.contains_key("node:127.0.0.1"));
        assert_eq!(status.alive[0].resources_used, BTreeMap::from([("CPU".to_string(), 1.5)]));
        assert!(status.alive[1].resources_used.is_empty());
    }
}
