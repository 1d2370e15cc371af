//! Where a job's entrypoint runs.

use oxray_types::{NodeId, NodeInfo, ResourceSet};
use std::collections::HashMap;

#[derive(Debug, Clone, PartialEq)]
pub enum Placement {
    Node(NodeId),
    /// Some node could take it once resources free up (or a node joins).
    Wait,
    /// No node of the cluster has enough, even idle.
    Never(String),
}

/// Jobs without resources run on the head's node, as Ray runs them; others on the first
/// node, head first, whose free resources (total less what running jobs reserved) fit.
pub fn place(request: &ResourceSet, nodes: &[NodeInfo], reserved: &HashMap<NodeId, ResourceSet>) -> Placement {
    let mut candidates: Vec<&NodeInfo> = nodes.iter().filter(|n| n.is_alive() && n.agent_port != 0).collect();
    if candidates.is_empty() {
        return Placement::Wait;
    }
    candidates.sort_by_key(|n| (!n.is_head_node, n.node_id.clone()));
    let capable: Vec<&NodeInfo> = candidates.iter().copied().filter(|n| request.fits_in(&n.resources_total)).collect();
    if capable.is_empty() {
        let largest: Vec<String> = candidates.iter().map(|n| n.resources_total.describe()).collect();
        return Placement::Never(format!(
            "no node in the cluster has the resources this job asks for ({}); the nodes offer {}",
            request.describe(),
            largest.join(", ")
        ));
    }
    let empty = ResourceSet::new();
    capable
        .into_iter()
        .find(|n| {
            let taken = reserved.get(&n.node_id).unwrap_or(&empty);
            request.fits_in(&n.resources_total.minus(taken))
        })
        .map(|n| Placement::Node(n.node_id.clone()))
        .unwrap_or(Placement::Wait)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(head: bool, cpus: f64, gpus: f64) -> NodeInfo {
        let mut n = NodeInfo::joining(oxray_types::NodeId::random(), "127.0.0.1", "n", ResourceSet::new());
        n.is_head_node = head;
        n.agent_port = 1;
        n.resources_total.set("CPU", cpus).unwrap();
        n.resources_total.set("GPU", gpus).unwrap();
        n
    }

    fn req(cpus: f64, gpus: f64) -> ResourceSet {
        let mut r = ResourceSet::new();
        r.set("CPU", cpus).unwrap();
        r.set("GPU", gpus).unwrap();
        r
    }

    #[test]
    fn no_resources_means_the_head_node() {
        let nodes = vec![node(false, 8.0, 0.0), node(true, 1.0, 0.0)];
        assert_eq!(place(&ResourceSet::new(), &nodes, &HashMap::new()), Placement::Node(nodes[1].node_id.clone()));
    }

    #[test]
    fn picks_a_node_that_has_the_resources() {
        let nodes = vec![node(true, 2.0, 0.0), node(false, 2.0, 1.0)];
        assert_eq!(place(&req(1.0, 1.0), &nodes, &HashMap::new()), Placement::Node(nodes[1].node_id.clone()));
    }

    #[test]
    fn waits_while_reserved_and_refuses_the_impossible() {
        let nodes = vec![node(true, 2.0, 0.0)];
        let reserved = HashMap::from([(nodes[0].node_id.clone(), req(2.0, 0.0))]);
        assert_eq!(place(&req(1.0, 0.0), &nodes, &reserved), Placement::Wait);
        let Placement::Never(why) = place(&req(0.0, 1.0), &nodes, &reserved) else { panic!() };
        assert!(why.contains("GPU: 1"), "{why}");
    }

    #[test]
    fn dead_nodes_and_empty_clusters_wait() {
        let mut dead = node(true, 4.0, 0.0);
        dead.mark_dead("gone", 1);
        assert_eq!(place(&req(1.0, 0.0), &[dead], &HashMap::new()), Placement::Wait);
        assert_eq!(place(&req(1.0, 0.0), &[], &HashMap::new()), Placement::Wait);
    }
}
