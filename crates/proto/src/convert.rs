use crate::v1;
use oxray_types::{IdError, NodeId, NodeInfo, NodeState, ResourceError, ResourceSet};
use std::collections::{BTreeMap, HashMap};

#[derive(Debug, thiserror::Error)]
pub enum ConvertError {
    #[error(transparent)]
    Id(#[from] IdError),
    #[error(transparent)]
    Resource(#[from] ResourceError),
    #[error("node state is missing")]
    MissingState,
    #[error("node description is missing")]
    MissingNode,
}

pub fn resources_to_proto(set: &ResourceSet) -> HashMap<String, f64> {
    set.iter().map(|(k, v)| (k.to_string(), v)).collect()
}

pub fn resources_from_proto(map: HashMap<String, f64>) -> Result<ResourceSet, ConvertError> {
    Ok(ResourceSet::try_from(map.into_iter().collect::<BTreeMap<_, _>>())?)
}

impl From<&NodeInfo> for v1::Node {
    fn from(n: &NodeInfo) -> Self {
        v1::Node {
            node_id: n.node_id.hex(),
            node_ip: n.node_ip.clone(),
            node_name: n.node_name.clone(),
            is_head_node: n.is_head_node,
            state: match n.state {
                NodeState::Alive => v1::NodeState::Alive,
                NodeState::Dead => v1::NodeState::Dead,
            } as i32,
            state_message: n.state_message.clone().unwrap_or_default(),
            resources_total: resources_to_proto(&n.resources_total),
            resources_available: resources_to_proto(&n.resources_available),
            labels: n.labels.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            start_time_ms: n.start_time_ms,
            end_time_ms: n.end_time_ms,
            pid: n.pid,
            agent_port: n.agent_port as u32,
        }
    }
}

impl TryFrom<v1::Node> for NodeInfo {
    type Error = ConvertError;
    fn try_from(n: v1::Node) -> Result<Self, Self::Error> {
        let state = match v1::NodeState::try_from(n.state) {
            Ok(v1::NodeState::Alive) => NodeState::Alive,
            Ok(v1::NodeState::Dead) => NodeState::Dead,
            _ => return Err(ConvertError::MissingState),
        };
        Ok(NodeInfo {
            node_id: n.node_id.parse::<NodeId>()?,
            node_ip: n.node_ip,
            node_name: n.node_name,
            is_head_node: n.is_head_node,
            state,
            state_message: Some(n.state_message).filter(|m| !m.is_empty()),
            resources_total: resources_from_proto(n.resources_total)?,
            resources_available: resources_from_proto(n.resources_available)?,
            labels: n.labels.into_iter().collect(),
            start_time_ms: n.start_time_ms,
            end_time_ms: n.end_time_ms,
            pid: n.pid,
            agent_port: u16::try_from(n.agent_port).unwrap_or(0),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_round_trips() {
        let mut total = ResourceSet::new();
        total.set("CPU", 4.0).unwrap();
        let node = NodeInfo {
            node_id: NodeId::random(),
            node_ip: "10.0.0.2".into(),
            node_name: "gpu-7".into(),
            is_head_node: false,
            state: NodeState::Dead,
            state_message: Some("heartbeat timeout".into()),
            resources_total: total.clone(),
            resources_available: total,
            labels: [("zone".to_string(), "a".to_string())].into(),
            start_time_ms: 1,
            end_time_ms: 2,
            pid: 42,
            agent_port: 0,
        };
        let back = NodeInfo::try_from(v1::Node::from(&node)).unwrap();
        assert_eq!(back, node);
    }

    #[test]
    fn rejects_unspecified_state() {
        let node = v1::Node { node_id: NodeId::random().hex(), ..Default::default() };
        assert!(matches!(NodeInfo::try_from(node), Err(ConvertError::MissingState)));
    }
}
