//! What an HTTP proxy routes by. The head's proxy reads it from the controller; a proxy on
//! another node keeps a `Mirror` of the table the head sends whenever it changes, so no
//! request of that node passes through the head.

use crate::plan::AppStatus;
use crate::spec::HttpOptions;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use tokio::sync::Notify;

/// A replica requests may go to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Target {
    pub replica_id: String,
    pub actor_id: String,
    pub worker_address: String,
    #[serde(default)]
    pub node_id: String,
}

/// What a proxy needs to route a request to an application.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Route {
    pub app: String,
    /// The application's ingress deployment.
    pub deployment: String,
    pub status: AppStatus,
    pub replicas: Vec<Target>,
    pub max_ongoing_requests: u32,
    pub max_queued_requests: i64,
}

/// Where Serve runs HTTP proxies (Ray's `ProxyLocation`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum ProxyLocation {
    /// On the head and on every node that runs a replica.
    #[default]
    EveryNode,
    HeadOnly,
    Disabled,
}

impl ProxyLocation {
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "EveryNode" => Some(Self::EveryNode),
            "HeadOnly" => Some(Self::HeadOnly),
            "Disabled" => Some(Self::Disabled),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::EveryNode => "EveryNode",
            Self::HeadOnly => "HeadOnly",
            Self::Disabled => "Disabled",
        }
    }
}

/// The routing state the head sends to the proxies of other nodes.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Table {
    /// The proxies' options; none while Serve has no application.
    pub http: Option<HttpOptions>,
    pub location: ProxyLocation,
    /// Route prefixes and their applications.
    pub prefixes: Vec<(String, String)>,
    pub routes: BTreeMap<String, Route>,
}

impl Table {
    /// Whether node `node_id` (not the head's) runs a proxy: Serve is up with proxies on
    /// every node, and a replica of some application runs there (Ray's EveryNode).
    pub fn wants_proxy_on(&self, node_id: &str) -> bool {
        self.http.is_some()
            && self.location == ProxyLocation::EveryNode
            && self.routes.values().flat_map(|r| &r.replicas).any(|t| t.node_id == node_id)
    }
}

/// What a proxy reads its routes from.
pub trait Routing: Send + Sync + 'static {
    /// Route prefixes and their applications.
    fn prefixes(&self) -> Vec<(String, String)>;
    fn route(&self, app: &str) -> Option<Route>;
    /// Woken (`notify_waiters`) when routes change.
    fn changed(&self) -> &Notify;
    /// A call found the replica gone.
    fn replica_died(&self, replica_id: &str);
    /// Requests the proxy holds waiting for a replica with room, per application.
    fn waiting(&self) -> Arc<Mutex<HashMap<String, i64>>>;
}

/// A copy of the head's table, on another node.
#[derive(Default)]
pub struct Mirror {
    table: Mutex<Table>,
    changed: Notify,
    waiting: Arc<Mutex<HashMap<String, i64>>>,
}

impl Mirror {
    pub fn set(&self, table: Table) {
        *self.table.lock().expect("routes lock") = table;
        self.changed.notify_waiters();
    }

    pub fn table(&self) -> Table {
        self.table.lock().expect("routes lock").clone()
    }

    /// What waits here, as (application, ingress deployment, requests): the autoscaler's
    /// load, reported to the controller.
    pub fn queued(&self) -> Vec<(String, String, i64)> {
        let table = self.table.lock().expect("routes lock");
        let waiting = self.waiting.lock().expect("waiting lock");
        waiting
            .iter()
            .filter_map(|(app, n)| table.routes.get(app).map(|r| (app.clone(), r.deployment.clone(), *n)))
            .collect()
    }
}

impl Routing for Mirror {
    fn prefixes(&self) -> Vec<(String, String)> {
        self.table.lock().expect("routes lock").prefixes.clone()
    }

    fn route(&self, app: &str) -> Option<Route> {
        self.table.lock().expect("routes lock").routes.get(app).cloned()
    }

    fn changed(&self) -> &Notify {
        &self.changed
    }

    /// Leaves the replica out here until the head's next table: the head's own health
    /// checks replace it.
    fn replica_died(&self, replica_id: &str) {
        let mut table = self.table.lock().expect("routes lock");
        for route in table.routes.values_mut() {
            route.replicas.retain(|t| t.replica_id != replica_id);
        }
        drop(table);
        self.changed.notify_waiters();
    }

    fn waiting(&self) -> Arc<Mutex<HashMap<String, i64>>> {
        self.waiting.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(location: ProxyLocation, nodes: &[&str]) -> Table {
        let replicas = nodes
            .iter()
            .enumerate()
            .map(|(i, n)| Target {
                replica_id: format!("r{i}"),
                actor_id: format!("a{i}"),
                worker_address: "10.0.0.2:1".into(),
                node_id: n.to_string(),
            })
            .collect();
        let route = Route {
            app: "app".into(),
            deployment: "D".into(),
            status: AppStatus::Running,
            replicas,
            max_ongoing_requests: 5,
            max_queued_requests: -1,
        };
        Table {
            http: Some(serde_json::from_str("{}").unwrap()),
            location,
            prefixes: vec![("/".into(), "app".into())],
            routes: [("app".to_string(), route)].into(),
        }
    }

    #[test]
    fn a_node_runs_a_proxy_only_with_a_replica_and_every_node_proxies() {
        assert!(table(ProxyLocation::EveryNode, &["n1"]).wants_proxy_on("n1"));
        assert!(!table(ProxyLocation::EveryNode, &["n1"]).wants_proxy_on("n2"));
        assert!(!table(ProxyLocation::HeadOnly, &["n1"]).wants_proxy_on("n1"));
        assert!(!table(ProxyLocation::Disabled, &["n1"]).wants_proxy_on("n1"));
        assert!(!Table { http: None, ..table(ProxyLocation::EveryNode, &["n1"]) }.wants_proxy_on("n1"));
    }

    #[test]
    fn a_mirror_forgets_a_dead_replica_until_the_next_table_and_names_queued_ingresses() {
        let mirror = Mirror::default();
        mirror.set(table(ProxyLocation::EveryNode, &["n1", "n2"]));
        mirror.replica_died("r0");
        assert_eq!(mirror.route("app").unwrap().replicas.len(), 1);
        mirror.waiting().lock().unwrap().insert("app".into(), 3);
        mirror.waiting().lock().unwrap().insert("gone".into(), 1);
        assert_eq!(mirror.queued(), vec![("app".to_string(), "D".to_string(), 3)]);
        mirror.set(table(ProxyLocation::EveryNode, &["n1", "n2"]));
        assert_eq!(mirror.route("app").unwrap().replicas.len(), 2);
        assert_eq!(ProxyLocation::parse("HeadOnly").map(ProxyLocation::as_str), Some("HeadOnly"));
        assert_eq!(ProxyLocation::parse("Nowhere"), None);
    }
}
