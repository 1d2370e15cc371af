//! Cluster membership: who is in the cluster, who is alive, and what they have free.

use crate::events::Events;
use crate::store::{off_thread, Store, StoreError};
use oxray_types::{now_ms, NodeId, NodeInfo, ResourceSet};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Ok,
    UnknownNode,
    NodeDead,
}

#[derive(Debug, thiserror::Error)]
pub enum MembershipError {
    #[error("node {0} was declared dead; it must rejoin under a new node id")]
    NodeDead(NodeId),
    #[error(transparent)]
    Store(#[from] StoreError),
}

struct Entry {
    info: NodeInfo,
    last_seen: Instant,
    /// The change count when this node last changed, for the agents' views.
    changed: u64,
}

/// The nodes in memory show only what the database holds: a change is written first (off
/// the async threads, one writer at a time), then shown. Heartbeats change memory only.
pub struct Membership {
    nodes: Mutex<HashMap<NodeId, Entry>>,
    writer: tokio::sync::Mutex<()>,
    store: Arc<Store>,
    events: Arc<Events>,
    death_timeout: Duration,
    /// What the nodes use, from their heartbeats.
    usage: crate::usage_history::UsageHistory,
    /// Counts the changes of any node (joins, deaths, free resources): the agents' views
    /// follow it (`changes_since`).
    version: tokio::sync::watch::Sender<u64>,
}

impl Membership {
    pub fn usage(&self) -> &crate::usage_history::UsageHistory {
        &self.usage
    }

    /// Loads every node the head has seen. Nodes that were alive get a full timeout from now
    /// to report again, so agents that outlived a head restart are not declared dead.
    pub fn open(store: Arc<Store>, events: Arc<Events>, death_timeout: Duration) -> Result<Self, StoreError> {
        let now = Instant::now();
        let nodes = store
            .load_nodes()?
            .into_iter()
            .map(|info| (info.node_id.clone(), Entry { info, last_seen: now, changed: 0 }))
            .collect();
        let version = tokio::sync::watch::Sender::new(0);
        Ok(Self {
            nodes: Mutex::new(nodes),
            writer: tokio::sync::Mutex::new(()),
            store,
            events,
            death_timeout,
            usage: Default::default(),
            version,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<NodeId, Entry>> {
        self.nodes.lock().expect("membership lock")
    }

    /// The next change count (called under the nodes' lock, so counts follow the changes).
    fn bump(&self) -> u64 {
        let mut now = 0;
        self.version.send_modify(|v| {
            *v += 1;
            now = *v;
        });
        now
    }

    /// Resolves on the next change once `changes_since` was read.
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.version.subscribe()
    }

    /// The change count now and the nodes changed after `since` (every node for None).
    pub fn changes_since(&self, since: Option<u64>) -> (u64, Vec<NodeInfo>) {
        let nodes = self.lock();
        let version = *self.version.borrow();
        let changed = nodes.values().filter(|e| since.is_none_or(|s| e.changed > s)).map(|e| e.info.clone()).collect();
        (version, changed)
    }

    pub fn death_timeout(&self) -> Duration {
        self.death_timeout
    }

    pub async fn register(&self, mut info: NodeInfo) -> Result<(), MembershipError> {
        let _writing = self.writer.lock().await;
        if let Some(existing) = self.lock().get(&info.node_id) {
            if !existing.info.is_alive() {
                return Err(MembershipError::NodeDead(info.node_id));
            }
            // Re-registration of a live node keeps its original start time.
            info.start_time_ms = existing.info.start_time_ms;
        }
        info.state = oxray_types::NodeState::Alive;
        info.state_message = None;
        info.end_time_ms = 0;
        let written = info.clone();
        off_thread(&self.store, move |store| store.put_node(&written)).await?;
        tracing::info!(node_id = %info.node_id, ip = %info.node_ip, name = %info.node_name, "node joined");
        let name = if info.node_name != info.node_ip { format!(", {}", info.node_name) } else { String::new() };
        self.events.record(
            "INFO",
            "node_joined",
            format!("Node {} ({}{name}) joined", info.node_id.short(), info.node_ip),
        );
        let mut nodes = self.lock();
        let changed = self.bump();
        nodes.insert(info.node_id.clone(), Entry { info, last_seen: Instant::now(), changed });
        Ok(())
    }

    pub fn heartbeat(&self, id: &NodeId, available: ResourceSet) -> Verdict {
        let mut nodes = self.lock();
        match nodes.get_mut(id) {
            None => Verdict::UnknownNode,
            Some(entry) if !entry.info.is_alive() => Verdict::NodeDead,
            Some(entry) => {
                entry.last_seen = Instant::now();
                if entry.info.resources_available != available {
                    entry.info.resources_available = available;
                    entry.changed = self.bump();
                }
                Verdict::Ok
            }
        }
    }

    /// A node leaving on purpose; unknown or already dead nodes are left as they are.
    pub async fn unregister(&self, id: &NodeId, reason: &str) -> Result<(), StoreError> {
        let _writing = self.writer.lock().await;
        let Some(mut info) = self.get(id).filter(NodeInfo::is_alive) else { return Ok(()) };
        info.mark_dead(reason, now_ms());
        let written = info.clone();
        off_thread(&self.store, move |store| store.put_node(&written)).await?;
        tracing::info!(node_id = %id, reason, "node left");
        self.events.record("INFO", "node_left", format!("Node {} ({}) left: {reason}", id.short(), info.node_ip));
        self.show_dead(vec![info]);
        Ok(())
    }

    /// Shows nodes declared dead (and written so).
    fn show_dead(&self, dead: Vec<NodeInfo>) {
        let mut nodes = self.lock();
        for info in dead {
            if let Some(entry) = nodes.get_mut(&info.node_id) {
                entry.info = info;
                entry.changed = self.bump();
            }
        }
    }

    /// Declares dead every live node silent for longer than the timeout; returns them.
    pub async fn expire(&self, now: Instant) -> Result<Vec<NodeId>, StoreError> {
        let _writing = self.writer.lock().await;
        let timeout = self.death_timeout;
        let mut expired: Vec<NodeInfo> = self
            .lock()
            .values()
            .filter(|e| e.info.is_alive() && now.duration_since(e.last_seen) > timeout)
            .map(|e| e.info.clone())
            .collect();
        if expired.is_empty() {
            return Ok(Vec::new());
        }
        let reason = format!("no heartbeat for {:.1} s: the node agent died or is unreachable", timeout.as_secs_f64());
        for info in &mut expired {
            info.mark_dead(reason.clone(), now_ms());
        }
        let written = expired.clone();
        off_thread(&self.store, move |store| store.put_nodes(&written)).await?;
        for info in &expired {
            tracing::warn!(node_id = %info.node_id, ip = %info.node_ip, "node declared dead: {reason}");
            let message = format!("Node {} ({}) died: {reason}", info.node_id.short(), info.node_ip);
            self.events.record("WARNING", "node_dead", message);
        }
        let ids = expired.iter().map(|i| i.node_id.clone()).collect();
        self.show_dead(expired);
        Ok(ids)
    }

    /// Forgets nodes dead for longer than `retention` (wall-clock, so a head restart does
    /// not reset the count); returns how many went.
    pub async fn prune(&self, now_ms: u64, retention: Duration) -> Result<usize, StoreError> {
        let _writing = self.writer.lock().await;
        let stale = {
            let nodes = self.lock();
            let infos: Vec<&NodeInfo> = nodes.values().map(|e| &e.info).collect();
            dead_longer_than(&infos, now_ms, retention)
        };
        if stale.is_empty() {
            return Ok(0);
        }
        let written = stale.clone();
        off_thread(&self.store, move |store| store.delete_nodes(&written)).await?;
        let mut nodes = self.lock();
        for id in &stale {
            nodes.remove(id);
        }
        tracing::info!(count = stale.len(), "forgot nodes dead for longer than {:?}", retention);
        Ok(stale.len())
    }

    pub fn get(&self, id: &NodeId) -> Option<NodeInfo> {
        self.lock().get(id).map(|e| e.info.clone())
    }

    pub fn snapshot(&self) -> Vec<NodeInfo> {
        let nodes = self.lock();
        let mut list: Vec<NodeInfo> = nodes.values().map(|e| e.info.clone()).collect();
        list.sort_by(|a, b| a.node_id.cmp(&b.node_id));
        list
    }
}

/// The nodes dead since before `now_ms - retention`.
fn dead_longer_than(nodes: &[&NodeInfo], now_ms: u64, retention: Duration) -> Vec<NodeId> {
    let cutoff = now_ms.saturating_sub(u64::try_from(retention.as_millis()).unwrap_or(u64::MAX));
    nodes.iter().filter(|n| !n.is_alive() && n.end_time_ms < cutoff).map(|n| n.node_id.clone()).collect()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use oxray_types::NodeState;

    pub fn sample_node(name: &str) -> NodeInfo {
        let mut total = ResourceSet::new();
        total.set("CPU", 2.0).unwrap();
        NodeInfo::joining(NodeId::random(), "127.0.0.1", name, total)
    }

    /// A node with `cpus` CPUs and an agent, for the rounds' tests.
    pub fn node_with(cpus: f64) -> NodeInfo {
        let mut node = sample_node("n");
        node.resources_total = [("CPU".to_string(), cpus)].into_iter().collect();
        node.agent_port = 7000;
        node
    }

    fn membership(dir: &tempfile::TempDir) -> Membership {
        let store = Arc::new(Store::open(&dir.path().join("db")).unwrap());
        let events = Arc::new(Events::open(store.clone()).unwrap());
        Membership::open(store, events, Duration::from_secs(5)).unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn silent_nodes_die_after_the_timeout() {
        let dir = tempfile::tempdir().unwrap();
        let m = membership(&dir);
        let (a, b) = (sample_node("a"), sample_node("b"));
        m.register(a.clone()).await.unwrap();
        m.register(b.clone()).await.unwrap();

        tokio::time::advance(Duration::from_secs(4)).await;
        assert_eq!(m.heartbeat(&a.node_id, a.resources_total.clone()), Verdict::Ok);
        assert!(m.expire(Instant::now()).await.unwrap().is_empty());

        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(m.expire(Instant::now()).await.unwrap(), vec![b.node_id.clone()]);
        let dead = m.snapshot().into_iter().find(|n| n.node_id == b.node_id).unwrap();
        assert_eq!(dead.state, NodeState::Dead);
        assert!(dead.resources_available.is_empty());
        assert!(dead.state_message.unwrap().contains("no heartbeat"));
        assert_eq!(m.heartbeat(&b.node_id, ResourceSet::new()), Verdict::NodeDead);
        assert!(matches!(m.register(b).await, Err(MembershipError::NodeDead(_))));
    }

    #[tokio::test]
    async fn changes_count_and_name_only_the_nodes_that_changed() {
        let dir = tempfile::tempdir().unwrap();
        let m = membership(&dir);
        let (a, b) = (sample_node("a"), sample_node("b"));
        m.register(a.clone()).await.unwrap();
        m.register(b.clone()).await.unwrap();
        let (joined, all) = m.changes_since(None);
        assert_eq!((joined, all.len()), (2, 2));
        assert_eq!(m.heartbeat(&a.node_id, a.resources_total.clone()), Verdict::Ok);
        assert_eq!(m.changes_since(Some(joined)), (2, vec![]), "the same free resources are no change");
        assert_eq!(m.heartbeat(&a.node_id, ResourceSet::new()), Verdict::Ok);
        m.unregister(&b.node_id, "stopped").await.unwrap();
        let (now, changed) = m.changes_since(Some(joined));
        assert_eq!(now, 4);
        let mut names: Vec<&str> = changed.iter().map(|n| n.node_name.as_str()).collect();
        names.sort();
        assert_eq!(names, ["a", "b"]);
        assert!(changed.iter().any(|n| n.node_name == "b" && !n.is_alive()));
    }

    #[test]
    fn only_nodes_dead_past_the_retention_are_stale() {
        let alive = sample_node("alive");
        let mut old = sample_node("old");
        old.mark_dead("gone", 1_000);
        let mut recent = sample_node("recent");
        recent.mark_dead("gone", 9_500);
        let nodes = [&alive, &old, &recent];
        assert_eq!(dead_longer_than(&nodes, 10_000, Duration::from_secs(1)), vec![old.node_id.clone()]);
        assert!(dead_longer_than(&nodes, 10_000, Duration::from_secs(10)).is_empty());
        assert!(dead_longer_than(&nodes, 10_000, Duration::MAX).is_empty());
    }

    #[tokio::test]
    async fn pruned_nodes_are_gone_after_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (sample_node("a"), sample_node("b"));
        {
            let m = membership(&dir);
            m.register(a.clone()).await.unwrap();
            m.register(b.clone()).await.unwrap();
            m.unregister(&b.node_id, "stopped").await.unwrap();
            assert_eq!(m.prune(now_ms() + 120_000, Duration::from_secs(60)).await.unwrap(), 1);
        }
        let ids: Vec<NodeId> = membership(&dir).snapshot().into_iter().map(|n| n.node_id).collect();
        assert_eq!(ids, vec![a.node_id]);
    }

    #[tokio::test(start_paused = true)]
    async fn restart_keeps_nodes_and_grants_a_grace_period() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (sample_node("a"), sample_node("b"));
        {
            let m = membership(&dir);
            m.register(a.clone()).await.unwrap();
            m.register(b.clone()).await.unwrap();
            m.unregister(&b.node_id, "stopped").await.unwrap();
        }
        tokio::time::advance(Duration::from_secs(60)).await;
        let m = membership(&dir);
        let snap = m.snapshot();
        assert_eq!(snap.len(), 2);
        assert!(m.expire(Instant::now()).await.unwrap().is_empty());
        assert_eq!(m.heartbeat(&a.node_id, a.resources_total.clone()), Verdict::Ok);
        assert_eq!(m.heartbeat(&NodeId::random(), ResourceSet::new()), Verdict::UnknownNode);
        let stopped = snap.iter().find(|n| n.node_id == b.node_id).unwrap();
        assert_eq!(stopped.state_message.as_deref(), Some("stopped"));
    }
}
