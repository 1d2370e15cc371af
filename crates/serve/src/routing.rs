//! What an HTTP proxy routes by. The head's proxy reads it from the controller; a proxy on
//! another node keeps a `Mirror` of the table the head sends whenever it changes, so no
//! request of that node passes through the head.

use crate::plan::AppStatus;
use crate::spec::HttpOptions;
pub use crate::spec::ProxyLocation;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
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

/// The routing state the head sends to the proxies of other nodes.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Table {
    /// The proxies' options; none while Serve has no application.
    pub http: Option<HttpOptions>,
    pub location: ProxyLocation,
    /// Route prefixes and their applications.
    pub prefixes: Vec<(String, String)>,
    pub routes: BTreeMap<String, Route>,
    /// The nodes a running replica of any deployment is on.
    #[serde(default)]
    pub nodes: BTreeSet<String>,
    /// The head's address: its proxy serves that host, so no agent there takes its port.
    #[serde(default)]
    pub head_ip: String,
}

impl Table {
    /// Whether node `node_id` at `node_ip` (not the head's) runs a proxy: Serve is up with
    /// proxies on every node, a replica of some deployment runs there (Ray's EveryNode), and
    /// the head's proxy does not already serve that address.
    pub fn wants_proxy_on(&self, node_id: &str, node_ip: &str) -> bool {
        self.http.is_some()
            && self.location == ProxyLocation::EveryNode
            && self.nodes.contains(node_id)
            && node_ip != self.head_ip
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

/// How long a node's proxy leaves out a replica a call found gone: the head's health
/// checks replace a dead one within that time, and one that was only unreachable for a
/// moment comes back.
const LEFT_OUT_FOR: Duration = Duration::from_secs(10);

/// A copy of the head's table, on another node.
#[derive(Default)]
pub struct Mirror {
    table: Mutex<Table>,
    /// Replicas a call found gone, and when.
    gone: Mutex<HashMap<String, Instant>>,
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
        let mut route = self.table.lock().expect("routes lock").routes.get(app).cloned()?;
        let mut gone = self.gone.lock().expect("gone lock");
        gone.retain(|_, at| at.elapsed() < LEFT_OUT_FOR);
        route.replicas.retain(|t| !gone.contains_key(&t.replica_id));
        Some(route)
    }

    fn changed(&self) -> &Notify {
        &self.changed
    }

    /// Leaves the replica out here for a while: the head's own health checks replace it if
    /// it died (a node does not end what may only be unreachable from it).
    fn replica_died(&self, replica_id: &str) {
        self.gone.lock().expect("gone lock").insert(replica_id.to_string(), Instant::now());
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
            nodes: nodes.iter().map(|n| n.to_string()).collect(),
            head_ip: "10.0.0.1".into(),
        }
    }

    #[test]
    fn a_node_runs_a_proxy_only_with_a_replica_and_every_node_proxies() {
        let ip = "10.0.0.2";
        assert!(table(ProxyLocation::EveryNode, &["n1"]).wants_proxy_on("n1", ip));
        assert!(!table(ProxyLocation::EveryNode, &["n1"]).wants_proxy_on("n2", ip));
        assert!(!table(ProxyLocation::EveryNode, &["n1"]).wants_proxy_on("n1", "10.0.0.1"), "the head's address");
        assert!(!table(ProxyLocation::HeadOnly, &["n1"]).wants_proxy_on("n1", ip));
        assert!(!table(ProxyLocation::Disabled, &["n1"]).wants_proxy_on("n1", ip));
        assert!(!Table { http: None, ..table(ProxyLocation::EveryNode, &["n1"]) }.wants_proxy_on("n1", ip));
    }

    #[test]
    fn a_mirror_leaves_a_dead_replica_out_for_a_while_and_names_queued_ingresses() {
        let mirror = Mirror::default();
        mirror.set(table(ProxyLocation::EveryNode, &["n1", "n2"]));
        mirror.replica_died("r0");
        assert_eq!(mirror.route("app").unwrap().replicas.len(), 1);
        mirror.set(table(ProxyLocation::EveryNode, &["n1", "n2"]));
        assert_eq!(mirror.route("app").unwrap().replicas.len(), 1, "a new table does not bring it back at once");
        mirror.gone.lock().unwrap().insert("r0".into(), Instant::now() - LEFT_OUT_FOR);
        assert_eq!(mirror.route("app").unwrap().replicas.len(), 2, "it comes back after a while");
        mirror.waiting().lock().unwrap().insert("app".into(), 3);
        mirror.waiting().lock().unwrap().insert("gone".into(), 1);
        assert_eq!(mirror.queued(), vec![("app".to_string(), "D".to_string(), 3)]);
        assert_eq!(ProxyLocation::parse("HeadOnly").map(ProxyLocation::as_str), Some("HeadOnly"));
        assert_eq!(ProxyLocation::parse("Nowhere"), None);
    }
}
