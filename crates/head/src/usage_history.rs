//! The nodes' use over the last hour, from their heartbeats: the latest reading of each node
//! for `/metrics`, and one reading per `STEP_MS` for the dashboard's charts.

use oxray_api_types::usage::{GpuUsage, NodeUsage, KEEP_MS, STEP_MS};
use oxray_proto::v1;
use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

/// Appends `reading` when it is the first in its step of time (readings come more often
/// than steps, so every step gets one), and drops what is older than `keep` before it.
fn push(series: &mut VecDeque<NodeUsage>, reading: NodeUsage, step: u64, keep: u64) {
    if series.back().is_some_and(|last| reading.time_ms / step <= last.time_ms / step) {
        return;
    }
    let oldest = reading.time_ms.saturating_sub(keep);
    series.push_back(reading);
    while series.front().is_some_and(|r| r.time_ms < oldest) {
        series.pop_front();
    }
}

pub fn from_proto(u: v1::NodeUsage) -> NodeUsage {
    NodeUsage {
        time_ms: u.time_ms,
        cpu_fraction: u.cpu_fraction,
        memory_used: u.memory_used,
        memory_total: u.memory_total,
        object_store_used: u.object_store_used,
        object_store_spilled: u.object_store_spilled,
        workers_leased: u.workers_leased,
        gpus: u
            .gpus
            .into_iter()
            .map(|g| GpuUsage {
                index: g.index,
                utilization: g.utilization,
                memory_used: g.memory_used,
                memory_total: g.memory_total,
            })
            .collect(),
    }
}

#[derive(Default)]
struct Series {
    latest: Option<NodeUsage>,
    kept: VecDeque<NodeUsage>,
}

#[derive(Default)]
pub struct UsageHistory {
    nodes: Mutex<HashMap<String, Series>>,
}

impl UsageHistory {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Series>> {
        self.nodes.lock().expect("usage history lock")
    }

    pub fn record(&self, node_id: &str, reading: NodeUsage) {
        let mut nodes = self.lock();
        let series = nodes.entry(node_id.to_string()).or_default();
        push(&mut series.kept, reading.clone(), STEP_MS, KEEP_MS);
        series.latest = Some(reading);
    }

    /// The latest reading of each node that reported (a dead node's last one too).
    pub fn latest(&self) -> Vec<(String, NodeUsage)> {
        self.lock().iter().filter_map(|(id, s)| Some((id.clone(), s.latest.clone()?))).collect()
    }

    /// The readings of the last hour of a node, or of every node, by node id.
    pub fn history(&self, node_id: Option<&str>, now_ms: u64) -> HashMap<String, Vec<NodeUsage>> {
        let oldest = now_ms.saturating_sub(KEEP_MS);
        let mut nodes = self.lock();
        nodes.retain(|_, s| s.kept.back().is_some_and(|r| r.time_ms >= oldest));
        nodes
            .iter()
            .filter(|(id, _)| node_id.is_none_or(|n| n == id.as_str()))
            .map(|(id, s)| (id.clone(), s.kept.iter().filter(|r| r.time_ms >= oldest).cloned().collect()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(time_ms: u64) -> NodeUsage {
        NodeUsage { time_ms, ..Default::default() }
    }

    #[test]
    fn one_reading_per_step_is_kept_for_the_window() {
        let mut series = VecDeque::new();
        for t in [0, 1_000, 5_000, 9_000, 10_000, 12_000, 14_000, 16_000, 30_000] {
            push(&mut series, at(t), 5_000, 20_000);
        }
        let times: Vec<u64> = series.iter().map(|r| r.time_ms).collect();
        assert_eq!(times, [10_000, 16_000, 30_000]);
    }

    #[test]
    fn the_latest_is_per_node_and_silent_nodes_age_out() {
        let history = UsageHistory::default();
        history.record("a", at(1_000));
        history.record("a", at(2_000));
        history.record("b", at(1_000));
        history.record("b", at(9_000));
        let mut latest = history.latest();
        latest.sort_by(|x, y| x.0.cmp(&y.0));
        assert_eq!(latest, vec![("a".to_string(), at(2_000)), ("b".to_string(), at(9_000))]);
        assert_eq!(history.history(Some("a"), 2_000)["a"], vec![at(1_000)]);
        assert_eq!(history.history(None, 9_000).len(), 2);
        assert_eq!(history.history(None, 2_000 + KEEP_MS).len(), 1, "a's readings aged out, b's did not");
    }
}
