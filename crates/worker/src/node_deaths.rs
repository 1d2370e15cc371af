//! Which nodes the head's node changes say are gone, for a process that pushes work to their
//! workers (`push` cuts their connections).

use oxray_proto::v1;
use std::collections::HashSet;

/// The nodes among `known` that `change` says are gone: those not alive in it, and, in the
/// head's whole list, those missing from it.
pub(crate) fn gone(change: &v1::NodesChange, known: &HashSet<String>) -> Vec<String> {
    let alive = |n: &v1::Node| n.state == v1::NodeState::Alive as i32;
    let listed_alive: HashSet<&str> = change.nodes.iter().filter(|n| alive(n)).map(|n| n.node_id.as_str()).collect();
    let listed_dead: HashSet<&str> = change.nodes.iter().filter(|n| !alive(n)).map(|n| n.node_id.as_str()).collect();
    let is_gone = |id: &str| listed_dead.contains(id) || (change.full && !listed_alive.contains(id));
    let mut gone: Vec<String> = known.iter().filter(|id| is_gone(id)).cloned().collect();
    gone.sort();
    gone
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(id: &str, alive: bool) -> v1::Node {
        let state = if alive { v1::NodeState::Alive } else { v1::NodeState::Dead };
        v1::Node { node_id: id.into(), state: state as i32, ..Default::default() }
    }

    #[test]
    fn a_known_node_is_gone_when_dead_or_missing_from_the_whole_list() {
        let known: HashSet<String> = ["a", "b", "c"].into_iter().map(String::from).collect();
        let change = |full, nodes| v1::NodesChange { version: 1, full, nodes };
        assert_eq!(gone(&change(false, vec![node("a", false), node("x", false), node("b", true)]), &known), ["a"]);
        assert!(gone(&change(false, vec![]), &known).is_empty(), "a change that names nothing");
        assert_eq!(gone(&change(true, vec![node("a", true), node("b", false)]), &known), ["b", "c"]);
    }
}
