use crate::{NodeId, ResourceSet};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum NodeState {
    Alive,
    Dead,
}

impl NodeState {
    pub fn as_str(self) -> &'static str {
        match self {
            NodeState::Alive => "ALIVE",
            NodeState::Dead => "DEAD",
        }
    }
}

/// What the head knows about one node; persisted in the head's database.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeInfo {
    pub node_id: NodeId,
    pub node_ip: String,
    pub node_name: String,
    pub is_head_node: bool,
    pub state: NodeState,
    /// None while alive; the reason of death otherwise.
    pub state_message: Option<String>,
    pub resources_total: ResourceSet,
    pub resources_available: ResourceSet,
    pub labels: BTreeMap<String, String>,
    pub start_time_ms: u64,
    /// 0 while alive.
    pub end_time_ms: u64,
    /// The agent's process id on its machine.
    pub pid: u32,
    /// Port of the agent's own service (jobs, logs) on `node_ip`; 0 when it has none.
    #[serde(default)]
    pub agent_port: u16,
}

impl NodeInfo {
    /// Where the node's agent serves (its lease and agent services).
    pub fn agent_address(&self) -> String {
        format!("{}:{}", self.node_ip, self.agent_port)
    }

    /// A node as its agent (this process) joins: alive, all of `resources` free, started now.
    pub fn joining(node_id: NodeId, node_ip: &str, node_name: &str, resources: ResourceSet) -> Self {
        NodeInfo {
            node_id,
            node_ip: node_ip.to_string(),
            node_name: node_name.to_string(),
            is_head_node: false,
            state: NodeState::Alive,
            state_message: None,
            resources_available: resources.clone(),
            resources_total: resources,
            labels: BTreeMap::new(),
            start_time_ms: crate::now_ms(),
            end_time_ms: 0,
            pid: std::process::id(),
            agent_port: 0,
        }
    }

    pub fn is_alive(&self) -> bool {
        self.state == NodeState::Alive
    }

    /// Marks the node dead; its resources leave the cluster view.
    pub fn mark_dead(&mut self, reason: impl Into<String>, now_ms: u64) {
        self.state = NodeState::Dead;
        self.state_message = Some(reason.into());
        self.end_time_ms = now_ms;
        self.resources_available = ResourceSet::new();
    }
}
