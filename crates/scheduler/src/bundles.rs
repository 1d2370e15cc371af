//! Where a placement group's bundles go: pure, so each strategy is tested on its own.

use oxray_types::{selector_matches, ResourceSet, Selector};
use std::collections::BTreeMap;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    /// As few nodes as possible, more when one is not enough.
    Pack,
    /// As many nodes as possible, fewer when there are not enough.
    Spread,
    /// One node, or not yet.
    StrictPack,
    /// A different node for every bundle, or not yet.
    StrictSpread,
}

/// A node that can take bundles, with what is still free on it for them.
#[derive(Debug, Clone)]
pub struct Candidate {
    pub node: String,
    pub free: ResourceSet,
    pub labels: BTreeMap<String, String>,
}

impl Candidate {
    /// Whether the node has the labels bundle `i` asks for (`selectors` may be empty: none asked).
    fn suits(&self, selectors: &[Selector], i: usize) -> bool {
        selectors.get(i).is_none_or(|s| selector_matches(s, |key| self.labels.get(key).map(String::as_str)))
    }
}

/// A node for every bundle not placed yet (`placed[i]` is `None`), keeping the placed ones
/// where they are; `None` when the strategy cannot be met with these nodes now. A bundle
/// goes only to a node its selector (`selectors[i]`, when given) matches.
pub fn place(
    strategy: Strategy,
    bundles: &[ResourceSet],
    selectors: &[Selector],
    placed: &[Option<String>],
    nodes: &[Candidate],
) -> Option<Vec<String>> {
    let mut nodes = nodes.to_vec();
    let mut out: Vec<Option<String>> = placed.to_vec();
    let todo: Vec<usize> = (0..bundles.len()).filter(|i| placed[*i].is_none()).collect();
    let used = |out: &[Option<String>], node: &str| out.iter().filter(|n| n.as_deref() == Some(node)).count();
    match strategy {
        Strategy::StrictPack => {
            let mut sum = ResourceSet::new();
            for i in &todo {
                sum.add(&bundles[*i]);
            }
            let target = placed.iter().flatten().next().cloned();
            let node = nodes.iter().find(|n| {
                target.as_ref().is_none_or(|t| *t == n.node)
                    && sum.fits_in(&n.free)
                    && todo.iter().all(|i| n.suits(selectors, *i))
            })?;
            for i in todo {
                out[i] = Some(node.node.clone());
            }
        }
        Strategy::Pack => {
            let mut sum = ResourceSet::new();
            for i in &todo {
                sum.add(&bundles[*i]);
            }
            // One node for all when one can hold them, preferring one already in use.
            let whole = nodes
                .iter()
                .filter(|n| sum.fits_in(&n.free) && todo.iter().all(|i| n.suits(selectors, *i)))
                .min_by_key(|n| std::cmp::Reverse(used(&out, &n.node)))
                .map(|n| n.node.clone());
            for i in todo {
                let node = match &whole {
                    Some(node) => node.clone(),
                    None => {
                        let fitting = nodes.iter_mut().filter(|n| bundles[i].fits_in(&n.free) && n.suits(selectors, i));
                        let best = fitting.min_by_key(|n| std::cmp::Reverse(used(&out, &n.node)))?;
                        best.free.take(&bundles[i]);
                        best.node.clone()
                    }
                };
                out[i] = Some(node);
            }
        }
        Strategy::Spread | Strategy::StrictSpread => {
            for i in todo {
                let strict = strategy == Strategy::StrictSpread;
                let fitting = nodes.iter_mut().filter(|n| bundles[i].fits_in(&n.free) && n.suits(selectors, i));
                let fitting = fitting.filter(|n| !strict || used(&out, &n.node) == 0);
                // Fewest bundles of this group first; ties keep the nodes' order.
                let best = fitting.min_by_key(|n| used(&out, &n.node))?;
                best.free.take(&bundles[i]);
                out[i] = Some(best.node.clone());
            }
        }
    }
    out.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cpus(n: f64) -> ResourceSet {
        [("CPU".to_string(), n)].into_iter().collect()
    }

    fn nodes(free: &[f64]) -> Vec<Candidate> {
        free.iter()
            .enumerate()
            .map(|(i, f)| Candidate { node: format!("n{i}"), free: cpus(*f), labels: BTreeMap::new() })
            .collect()
    }

    fn on(names: &[&str]) -> Option<Vec<String>> {
        Some(names.iter().map(|s| s.to_string()).collect())
    }

    #[test]
    fn pack_uses_one_node_when_it_can_and_more_when_it_must() {
        let b = [cpus(1.0), cpus(1.0)];
        assert_eq!(place(Strategy::Pack, &b, &[], &[None, None], &nodes(&[1.0, 2.0])), on(&["n1", "n1"]));
        assert_eq!(place(Strategy::Pack, &b, &[], &[None, None], &nodes(&[1.0, 1.0])), on(&["n0", "n1"]));
        assert_eq!(place(Strategy::Pack, &b, &[], &[None, None], &nodes(&[1.0])), None);
    }

    #[test]
    fn strict_pack_needs_one_node_for_all() {
        let b = [cpus(1.0), cpus(1.0)];
        assert_eq!(place(Strategy::StrictPack, &b, &[], &[None, None], &nodes(&[1.0, 1.0])), None);
        assert_eq!(place(Strategy::StrictPack, &b, &[], &[None, None], &nodes(&[1.0, 2.0])), on(&["n1", "n1"]));
    }

    #[test]
    fn spread_prefers_different_nodes_and_strict_spread_requires_them() {
        let b = [cpus(1.0), cpus(1.0), cpus(1.0)];
        let spread = place(Strategy::Spread, &b, &[], &[None, None, None], &nodes(&[2.0, 2.0]));
        assert_eq!(spread, on(&["n0", "n1", "n0"]));
        assert_eq!(place(Strategy::StrictSpread, &b, &[], &[None, None, None], &nodes(&[2.0, 2.0])), None);
        let strict = place(Strategy::StrictSpread, &b, &[], &[None, None, None], &nodes(&[1.0, 1.0, 1.0]));
        assert_eq!(strict, on(&["n0", "n1", "n2"]));
    }

    #[test]
    fn placed_bundles_stay_and_the_rest_follow_the_strategy() {
        let b = [cpus(1.0), cpus(1.0)];
        let placed = [Some("n1".to_string()), None];
        let strict = place(Strategy::StrictSpread, &b, &[], &placed, &nodes(&[1.0, 1.0, 1.0]));
        assert_eq!(strict, on(&["n1", "n0"]));
        let pack = place(Strategy::StrictPack, &b, &[], &placed, &nodes(&[5.0, 1.0]));
        assert_eq!(pack, on(&["n1", "n1"]));
    }

    fn labelled(zones: &[&str]) -> Vec<Candidate> {
        let mut all = nodes(&vec![4.0; zones.len()]);
        for (node, zone) in all.iter_mut().zip(zones) {
            node.labels.insert("zone".into(), zone.to_string());
        }
        all
    }

    fn zone(z: &str) -> Selector {
        [("zone".to_string(), z.to_string())].into_iter().collect()
    }

    #[test]
    fn bundles_go_only_to_nodes_their_selectors_match() {
        let b = [cpus(1.0), cpus(1.0)];
        let zones = labelled(&["a", "b", "b"]);
        let both_b = place(Strategy::Pack, &b, &[zone("b"), zone("b")], &[None, None], &zones);
        assert_eq!(both_b, on(&["n1", "n1"]), "packed on the first node in zone b");
        let one_each = place(Strategy::Spread, &b, &[zone("a"), zone("b")], &[None, None], &zones);
        assert_eq!(one_each, on(&["n0", "n1"]));
        let split = place(Strategy::Pack, &b, &[zone("a"), zone("b")], &[None, None], &zones);
        assert_eq!(split, on(&["n0", "n1"]), "no one node suits both");
        assert_eq!(place(Strategy::StrictPack, &b, &[zone("a"), zone("b")], &[None, None], &zones), None);
        assert_eq!(place(Strategy::Pack, &b, &[zone("c"), zone("b")], &[None, None], &zones), None, "pending");
        let not_a = place(Strategy::StrictSpread, &b, &[zone("!a"), zone("!a")], &[None, None], &zones);
        assert_eq!(not_a, on(&["n1", "n2"]));
    }
}
