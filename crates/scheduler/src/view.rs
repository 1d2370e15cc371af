//! An agent's view of the cluster, kept from the changes the head pushes.

use crate::lease::NodeView;
use std::collections::BTreeMap;

/// The alive nodes as of the head's `version`.
#[derive(Debug, Clone, Default)]
pub struct ClusterView {
    version: u64,
    nodes: BTreeMap<String, NodeView>,
}

/// One node's change: alive with these figures, or gone (dead, left).
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    Alive(NodeView),
    Gone(String),
}

impl ClusterView {
    pub fn version(&self) -> u64 {
        self.version
    }

    /// Applies what changed up to `version`; `full` replaces the view (a first message, or
    /// one after the head restarted).
    pub fn apply(&mut self, version: u64, full: bool, changes: Vec<Change>) {
        if full {
            self.nodes.clear();
        }
        for change in changes {
            match change {
                Change::Alive(node) => {
                    self.nodes.insert(node.node_id.clone(), node);
                }
                Change::Gone(id) => {
                    self.nodes.remove(&id);
                }
            }
        }
        self.version = version;
    }

    /// The alive nodes in node id order, with this agent's own node as it is now (fresher
    /// than its last report, and there even before the first push).
    pub fn snapshot(&self, local: NodeView) -> Vec<NodeView> {
        let mut nodes = self.nodes.clone();
        nodes.insert(local.node_id.clone(), local);
        nodes.into_values().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use oxray_types::ResourceSet;

    fn node(id: &str, free: f64) -> NodeView {
        let cpus: ResourceSet = [("CPU".to_string(), free)].into_iter().collect();
        NodeView {
            node_id: id.into(),
            agent: format!("{id}:1"),
            total: cpus.clone(),
            available: cpus,
            labels: Default::default(),
        }
    }

    #[test]
    fn changes_add_update_and_remove_nodes() {
        let mut view = ClusterView::default();
        view.apply(3, true, vec![Change::Alive(node("a", 1.0)), Change::Alive(node("b", 1.0))]);
        view.apply(4, false, vec![Change::Alive(node("b", 0.0)), Change::Gone("a".into())]);
        assert_eq!(view.version(), 4);
        assert_eq!(view.snapshot(node("me", 2.0)), [node("b", 0.0), node("me", 2.0)]);
        view.apply(1, true, vec![Change::Alive(node("c", 1.0))]);
        assert_eq!(view.snapshot(node("me", 2.0)), [node("c", 1.0), node("me", 2.0)], "a full view replaces");
    }

    #[test]
    fn the_local_node_is_as_the_agent_says() {
        let mut view = ClusterView::default();
        view.apply(1, true, vec![Change::Alive(node("me", 2.0))]);
        assert_eq!(view.snapshot(node("me", 0.5)), [node("me", 0.5)]);
    }
}
