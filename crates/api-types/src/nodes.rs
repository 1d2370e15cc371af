use oxray_types::NodeInfo;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Ray refuses limits above this.
pub const MAX_LIMIT: usize = 10_000;

/// One node in the shape of Ray's `NodeState` (`ray list nodes`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeRow {
    pub node_id: String,
    pub node_ip: String,
    pub is_head_node: bool,
    pub state: String,
    pub state_message: Option<String>,
    pub node_name: String,
    pub resources_total: BTreeMap<String, f64>,
    pub labels: BTreeMap<String, String>,
    /// Only with detail: absent, not null, otherwise.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub start_time_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub end_time_ms: Option<u64>,
}

impl NodeRow {
    pub fn new(node: &NodeInfo, detail: bool) -> Self {
        NodeRow {
            node_id: node.node_id.hex(),
            node_ip: node.node_ip.clone(),
            is_head_node: node.is_head_node,
            state: node.state.as_str().to_string(),
            state_message: node.state_message.clone(),
            node_name: node.node_name.clone(),
            resources_total: node.resources_total.to_map(),
            labels: node.labels.clone(),
            start_time_ms: detail.then_some(node.start_time_ms),
            end_time_ms: detail.then_some(node.end_time_ms),
        }
    }

    fn field(&self, key: FilterKey) -> String {
        match key {
            FilterKey::NodeId => self.node_id.clone(),
            FilterKey::NodeIp => self.node_ip.clone(),
            FilterKey::IsHeadNode => self.is_head_node.to_string(),
            FilterKey::State => self.state.clone(),
            FilterKey::NodeName => self.node_name.clone(),
        }
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FilterError {
    #[error("cannot filter nodes by {0:?}: filterable keys are node_id, node_ip, is_head_node, state, node_name")]
    UnknownKey(String),
    #[error("invalid filter {0:?}: expected key=value or key!=value")]
    Malformed(String),
    #[error("unsupported filter predicate {0:?}: expected = or !=")]
    Predicate(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FilterKey {
    NodeId,
    NodeIp,
    IsHeadNode,
    State,
    NodeName,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeFilter {
    key: FilterKey,
    equal: bool,
    value: String,
}

impl NodeFilter {
    /// From Ray's query triple (`filter_keys`, `filter_predicates`, `filter_values`).
    pub fn new(key: &str, predicate: &str, value: &str) -> Result<Self, FilterError> {
        let key = match key.trim() {
            "node_id" => FilterKey::NodeId,
            "node_ip" => FilterKey::NodeIp,
            "is_head_node" => FilterKey::IsHeadNode,
            "state" => FilterKey::State,
            "node_name" => FilterKey::NodeName,
            other => return Err(FilterError::UnknownKey(other.to_string())),
        };
        let equal = match predicate {
            "=" => true,
            "!=" => false,
            other => return Err(FilterError::Predicate(other.to_string())),
        };
        Ok(Self { key, equal, value: value.trim().to_string() })
    }

    /// From the CLI's `key=value` or `key!=value`.
    pub fn parse(text: &str) -> Result<Self, FilterError> {
        if let Some((k, v)) = text.split_once("!=") {
            return Self::new(k, "!=", v);
        }
        match text.split_once('=') {
            Some((k, v)) => Self::new(k, "=", v),
            None => Err(FilterError::Malformed(text.to_string())),
        }
    }

    /// String matches ignore case, as Ray's do.
    pub fn matches(&self, row: &NodeRow) -> bool {
        row.field(self.key).eq_ignore_ascii_case(&self.value) == self.equal
    }
}

/// The body of Ray's list response (`data.result`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeList {
    pub total: usize,
    pub num_after_truncation: usize,
    pub num_filtered: usize,
    pub result: Vec<NodeRow>,
    pub partial_failure_warning: String,
    pub warnings: Option<Vec<String>>,
}

/// Sorts by node id, truncates to `limit`, then filters: Ray's order of operations.
pub fn list_nodes(nodes: &[NodeInfo], filters: &[NodeFilter], limit: usize, detail: bool) -> NodeList {
    let mut sorted: Vec<&NodeInfo> = nodes.iter().collect();
    sorted.sort_by(|a, b| a.node_id.cmp(&b.node_id));
    let total = sorted.len();
    sorted.truncate(limit);
    let num_after_truncation = sorted.len();
    let result: Vec<NodeRow> = sorted
        .into_iter()
        .map(|n| NodeRow::new(n, detail))
        .filter(|row| filters.iter().all(|f| f.matches(row)))
        .collect();
    NodeList {
        total,
        num_after_truncation,
        num_filtered: result.len(),
        result,
        partial_failure_warning: String::new(),
        warnings: None,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use oxray_types::{NodeId, NodeState, ResourceSet};

    pub fn node(name: &str, head: bool, state: NodeState) -> NodeInfo {
        let mut total = ResourceSet::new();
        total.set("CPU", 2.0).unwrap();
        total.set("memory", 1e9).unwrap();
        total.set("node:127.0.0.1", 1.0).unwrap();
        NodeInfo {
            node_id: NodeId::random(),
            node_ip: "127.0.0.1".into(),
            node_name: name.into(),
            is_head_node: head,
            state,
            state_message: (state == NodeState::Dead).then(|| "gone".to_string()),
            resources_available: if state == NodeState::Alive { total.clone() } else { ResourceSet::new() },
            resources_total: total,
            labels: BTreeMap::new(),
            start_time_ms: 10,
            end_time_ms: 0,
            pid: 1,
            agent_port: 0,
        }
    }

    #[test]
    fn detail_adds_times_and_plain_rows_omit_them() {
        let n = node("a", true, NodeState::Alive);
        let plain = serde_json::to_value(NodeRow::new(&n, false)).unwrap();
        assert!(plain.get("start_time_ms").is_none());
        assert!(plain["state_message"].is_null());
        let detail = serde_json::to_value(NodeRow::new(&n, true)).unwrap();
        assert_eq!(detail["start_time_ms"], 10);
        assert_eq!(detail["end_time_ms"], 0);
    }

    #[test]
    fn filters_ignore_case_and_negate() {
        let nodes = vec![
            node("a", true, NodeState::Alive),
            node("b", false, NodeState::Dead),
            node("c", false, NodeState::Alive),
        ];
        let alive = list_nodes(&nodes, &[NodeFilter::parse("state=alive").unwrap()], 100, false);
        assert_eq!((alive.total, alive.num_filtered), (3, 2));
        let not_head = list_nodes(&nodes, &[NodeFilter::parse("is_head_node!=True").unwrap()], 100, false);
        assert_eq!(not_head.num_filtered, 2);
        let sorted: Vec<_> = list_nodes(&nodes, &[], 100, false).result.into_iter().map(|r| r.node_id).collect();
        let mut expected = sorted.clone();
        expected.sort();
        assert_eq!(sorted, expected);
    }

    #[test]
    fn truncates_before_filtering() {
        let nodes: Vec<_> = (0..5).map(|i| node(&i.to_string(), false, NodeState::Alive)).collect();
        let list = list_nodes(&nodes, &[], 2, false);
        assert_eq!((list.total, list.num_after_truncation, list.result.len()), (5, 2, 2));
    }

    #[test]
    fn rejects_bad_filters() {
        assert_eq!(NodeFilter::parse("color=red"), Err(FilterError::UnknownKey("color".into())));
        assert!(matches!(NodeFilter::parse("state"), Err(FilterError::Malformed(_))));
        assert!(matches!(NodeFilter::new("state", "~", "x"), Err(FilterError::Predicate(_))));
    }
}
