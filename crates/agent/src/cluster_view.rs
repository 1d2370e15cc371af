//! The agent's view of the cluster, kept from the node changes the head pushes, so that it
//! decides where a lease goes (spillback) without asking the head.

use oxray_proto::convert::resources_from_proto;
use oxray_proto::v1;
use oxray_rpc::HeadClient;
use oxray_scheduler::{Change, ClusterView, NodeView};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// How long to wait before following the head again after the stream broke.
const RECONNECT: Duration = Duration::from_millis(500);

#[derive(Default)]
pub struct SharedView {
    view: Mutex<ClusterView>,
    changed: Notify,
    /// The head's whole list has arrived once: until then the view knows only this node.
    synced: std::sync::atomic::AtomicBool,
}

impl SharedView {
    /// The alive nodes, with `local` (this node as it is now) among them.
    pub fn snapshot(&self, local: NodeView) -> Vec<NodeView> {
        self.view.lock().expect("view lock").snapshot(local)
    }

    pub fn synced(&self) -> bool {
        self.synced.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Resolves on the next change of the view.
    pub async fn changed(&self) {
        self.changed.notified().await
    }

    fn apply(&self, change: v1::NodesChange) {
        let changes = change.nodes.into_iter().filter_map(change_of).collect();
        self.view.lock().expect("view lock").apply(change.version, change.full, changes);
        if change.full {
            self.synced.store(true, std::sync::atomic::Ordering::Release);
        }
        self.changed.notify_waiters();
    }
}

/// A node of the head's message as a change of the view (None: one it could not read).
fn change_of(node: v1::Node) -> Option<Change> {
    if node.state != v1::NodeState::Alive as i32 || node.agent_port == 0 {
        return Some(Change::Gone(node.node_id));
    }
    let view = NodeView {
        agent: format!("{}:{}", node.node_ip, node.agent_port),
        total: resources_from_proto(node.resources_total).ok()?,
        available: resources_from_proto(node.resources_available).ok()?,
        labels: node.labels.into_iter().collect(),
        node_id: node.node_id,
    };
    Some(Change::Alive(view))
}

/// Follows the head's node changes into `view` until `shutdown`, again and again when the
/// stream breaks (a head restart sends the whole list anew).
pub async fn follow(mut head: HeadClient, view: Arc<SharedView>, shutdown: CancellationToken) {
    loop {
        let stream = tokio::select! {
            _ = shutdown.cancelled() => return,
            s = head.watch_nodes(v1::WatchNodesRequest::default()) => s,
        };
        if let Ok(stream) = stream {
            let mut stream = stream.into_inner();
            loop {
                let message = tokio::select! {
                    _ = shutdown.cancelled() => return,
                    m = stream.message() => m,
                };
                match message {
                    Ok(Some(change)) => view.apply(change),
                    Ok(None) | Err(_) => break,
                }
            }
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(RECONNECT) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn node(id: &str, alive: bool) -> v1::Node {
        v1::Node {
            node_id: id.into(),
            node_ip: "10.0.0.1".into(),
            agent_port: 7,
            state: if alive { v1::NodeState::Alive } else { v1::NodeState::Dead } as i32,
            resources_total: HashMap::from([("CPU".to_string(), 2.0)]),
            ..Default::default()
        }
    }

    #[test]
    fn alive_nodes_join_the_view_and_dead_ones_leave_it() {
        let Some(Change::Alive(view)) = change_of(node("a", true)) else { panic!() };
        assert_eq!((view.agent.as_str(), view.total.get("CPU")), ("10.0.0.1:7", 2.0));
        assert_eq!(change_of(node("a", false)), Some(Change::Gone("a".into())));
        let shared = SharedView::default();
        assert!(!shared.synced(), "nothing from the head yet");
        shared.apply(v1::NodesChange { version: 1, full: true, nodes: vec![node("a", true), node("b", true)] });
        assert!(shared.synced());
        shared.apply(v1::NodesChange { version: 2, full: false, nodes: vec![node("a", false)] });
        let ids: Vec<String> = shared.snapshot(view_of("me")).into_iter().map(|n| n.node_id).collect();
        assert_eq!(ids, ["b", "me"]);
    }

    fn view_of(id: &str) -> NodeView {
        let Some(Change::Alive(view)) = change_of(node(id, true)) else { panic!() };
        view
    }
}
