//! Every placement choice of the cluster, as pure functions over a snapshot: where a job's
//! entrypoint runs, where a placement group's bundles go, where a worker lease goes, and an
//! agent's accounts of its node. The callers (head and agents) bring the snapshot and act on
//! the answer.

pub mod bundles;
pub mod job;
pub mod lease;
pub mod ledger;
pub mod view;

pub use lease::{route, Decision, NodeView, Strategy};
pub use ledger::{BundleKey, BundleRefusal, BundleWant, Ledger};
pub use view::{Change, ClusterView};

#[cfg(test)]
pub(crate) mod tests {
    use oxray_types::{NodeId, NodeInfo, NodeState, ResourceSet};

    pub fn sample_node(name: &str) -> NodeInfo {
        let mut total = ResourceSet::new();
        total.set("CPU", 2.0).unwrap();
        NodeInfo {
            node_id: NodeId::random(),
            node_ip: "127.0.0.1".into(),
            node_name: name.into(),
            is_head_node: false,
            state: NodeState::Alive,
            state_message: None,
            resources_available: total.clone(),
            resources_total: total,
            labels: Default::default(),
            start_time_ms: 1,
            end_time_ms: 0,
            pid: 7,
            agent_port: 0,
        }
    }
}
