//! Ray's label scheduling (`label_selector` with `fallback_strategy`): the first selector
//! that some alive node matches decides where a lease goes, among the nodes it matches; while
//! none matches, the lease waits for one to join, as a Ray task or actor stays pending.

use super::{agent_address, fits, spread_pick, LeaseError, LeaseFor, Submitter};
use oxray_proto::v1;
use oxray_types::ResourceSet;
use std::time::Duration;

pub use oxray_types::Selector;

/// How often the nodes are looked at again while none matches.
const RECHECK: Duration = Duration::from_millis(500);

pub fn matches(selector: &Selector, labels: &std::collections::HashMap<String, String>) -> bool {
    oxray_types::selector_matches(selector, |key| labels.get(key).map(String::as_str))
}

/// The nodes a lease may go to: those matching the first selector any alive node matches
/// (in a stable order), or None while no selector matches any.
pub fn matching<'a>(selectors: &[Selector], nodes: &'a [v1::Node]) -> Option<Vec<&'a v1::Node>> {
    selectors.iter().find_map(|selector| {
        let mut fitting: Vec<&v1::Node> = nodes.iter().filter(|n| matches(selector, &n.labels)).collect();
        fitting.sort_by(|a, b| a.node_id.cmp(&b.node_id));
        (!fitting.is_empty()).then_some(fitting)
    })
}

/// Of the matching nodes that could hold the request, this process's node when it is one
/// (as DEFAULT prefers it), else the first in turn with room now; None when none could.
pub fn pick(matching: &[&v1::Node], resources: &ResourceSet, local_agent: &str, turn: usize) -> Option<String> {
    let ring: Vec<v1::Node> = matching.iter().filter(|n| fits(n, resources)).map(|n| (*n).clone()).collect();
    if ring.is_empty() {
        return None;
    }
    if let Some(local) = ring.iter().find(|n| agent_address(n) == local_agent) {
        return Some(agent_address(local));
    }
    Some(agent_address(&ring[spread_pick(&ring, resources, turn)]))
}

impl Submitter {
    /// A lease on a node the selectors match, waiting while none matches or has room (an
    /// actor's, until it is killed).
    pub(super) async fn lease_by_labels(
        &self,
        request: &v1::LeaseRequest,
        resources: &ResourceSet,
        selectors: &[Selector],
        holder: &LeaseFor,
    ) -> Result<super::Lease, LeaseError> {
        loop {
            if let LeaseFor::Actor { actor_id, .. } = holder {
                if self.actor_is_dead(actor_id) {
                    return Err(
                        format!("the actor {actor_id} was killed before a node matched its label selector").into()
                    );
                }
            }
            let nodes = self.alive_nodes().await?;
            let turn = self.spread_turn.fetch_add(1, std::sync::atomic::Ordering::Relaxed) as usize;
            let target = matching(selectors, &nodes).and_then(|m| pick(&m, resources, &self.local_agent, turn));
            match target {
                Some(address) => {
                    if let Some(lease) = self.ask(&address, request).await? {
                        return Ok(lease);
                    }
                }
                None => tokio::time::sleep(RECHECK).await,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(id: &str, port: u32, labels: &[(&str, &str)], cpus: f64) -> v1::Node {
        v1::Node {
            node_id: id.into(),
            node_ip: "10.0.0.1".into(),
            agent_port: port,
            labels: labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            resources_total: [("CPU".to_string(), cpus)].into(),
            resources_available: [("CPU".to_string(), cpus)].into(),
            ..Default::default()
        }
    }

    fn selector(pairs: &[(&str, &str)]) -> Selector {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn the_first_selector_any_node_matches_decides() {
        let nodes = [node("n1", 1, &[("zone", "a")], 1.0), node("n2", 2, &[("zone", "b"), ("gpu", "h100")], 1.0)];
        let wanted = [selector(&[("gpu", "a100")]), selector(&[("zone", "b")]), selector(&[])];
        let found = matching(&wanted, &nodes).unwrap();
        assert_eq!(found.iter().map(|n| n.node_id.as_str()).collect::<Vec<_>>(), ["n2"]);
        assert!(matching(&[selector(&[("gpu", "a100")])], &nodes).is_none(), "pending while none matches");
        assert_eq!(matching(&[selector(&[])], &nodes).unwrap().len(), 2, "an empty selector matches every node");
    }

    #[test]
    fn the_local_node_first_then_room_in_turn() {
        let nodes = [node("n1", 1, &[], 1.0), node("n2", 2, &[], 4.0), node("n3", 3, &[], 4.0)];
        let all: Vec<&v1::Node> = nodes.iter().collect();
        let cpus = |n: f64| ResourceSet::from_iter([("CPU".to_string(), n)]);
        let (one, two) = (cpus(1.0), cpus(2.0));
        assert_eq!(pick(&all, &one, "10.0.0.1:1", 0).as_deref(), Some("10.0.0.1:1"));
        assert_eq!(pick(&all, &two, "10.0.0.1:1", 0).as_deref(), Some("10.0.0.1:2"), "the local node is too small");
        assert_eq!(pick(&all, &two, "elsewhere", 1).as_deref(), Some("10.0.0.1:3"), "in turn");
        assert_eq!(pick(&all, &cpus(8.0), "elsewhere", 0), None, "none could ever hold it");
    }
}
