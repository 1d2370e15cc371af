//! Properties every placement choice keeps, whatever the cluster looks like.

use oxray_scheduler::bundles::{place, Candidate, Strategy as Placement};
use oxray_scheduler::{route, BundleWant, Decision, Ledger, NodeView, Strategy as Lease};
use oxray_types::ResourceSet;
use proptest::prelude::*;
use std::collections::{BTreeMap, HashMap};

fn amounts() -> impl proptest::strategy::Strategy<Value = ResourceSet> {
    (0u32..=80, 0u32..=4).prop_map(|(cpu, gpu)| {
        [("CPU".to_string(), cpu as f64 / 10.0), ("GPU".to_string(), gpu as f64)].into_iter().collect()
    })
}

fn node_views() -> impl proptest::strategy::Strategy<Value = Vec<NodeView>> {
    prop::collection::vec((amounts(), 0u32..=100, prop::bool::ANY), 1..6).prop_map(|nodes| {
        nodes
            .into_iter()
            .enumerate()
            .map(|(i, (total, share, labelled))| {
                let available: ResourceSet =
                    total.iter().map(|(k, v)| (k.to_string(), v * share as f64 / 100.0)).collect();
                let labels =
                    if labelled { BTreeMap::from([("zone".to_string(), "a".to_string())]) } else { BTreeMap::new() };
                NodeView { node_id: format!("n{i}"), agent: format!("10.0.0.{i}:1"), total, available, labels }
            })
            .collect()
    })
}

fn strategies() -> impl proptest::strategy::Strategy<Value = Lease> {
    prop_oneof![
        Just(Lease::Default),
        Just(Lease::Spread),
        (0usize..7, prop::bool::ANY).prop_map(|(i, soft)| Lease::Node { node_id: format!("n{i}"), soft }),
        Just(Lease::Labels(vec![BTreeMap::from([("zone".to_string(), "a".to_string())])])),
    ]
}

#[derive(Debug, Clone)]
enum Op {
    Take(ResourceSet),
    Release(usize),
    Reserve(u8, Vec<ResourceSet>),
    Unreserve(u8),
    TakeFromBundle(u8, ResourceSet),
}

fn ops() -> impl proptest::strategy::Strategy<Value = Vec<Op>> {
    let op = prop_oneof![
        amounts().prop_map(Op::Take),
        (0usize..8).prop_map(Op::Release),
        (0u8..3, prop::collection::vec(amounts(), 1..3)).prop_map(|(g, b)| Op::Reserve(g, b)),
        (0u8..3).prop_map(Op::Unreserve),
        (0u8..3, amounts()).prop_map(|(g, r)| Op::TakeFromBundle(g, r)),
    ];
    prop::collection::vec(op, 0..40)
}

proptest! {
    #[test]
    fn resource_arithmetic_is_exact_and_never_negative(a in amounts(), b in amounts()) {
        let mut sum = a.clone();
        sum.add(&b);
        prop_assert_eq!(sum.minus(&b), a.clone());
        prop_assert!(a.fits_in(&sum) && b.fits_in(&sum));
        let mut left = a.clone();
        prop_assert_eq!(left.take(&b), b.fits_in(&a));
        for (_, v) in a.minus(&b).iter() {
            prop_assert!(v >= 0.0);
        }
    }

    #[test]
    fn a_ledger_never_hands_out_more_than_the_node_has(total in amounts(), ops in ops()) {
        let mut ledger = Ledger::new(total.clone());
        let mut held: Vec<(ResourceSet, Option<oxray_scheduler::BundleKey>)> = Vec::new();
        for op in ops {
            match op {
                Op::Take(r) => if ledger.take(&r) { held.push((r, None)) },
                Op::Release(i) if i < held.len() => { let (r, b) = held.remove(i); ledger.release(&r, b.as_ref()) }
                Op::Release(_) => {}
                Op::Reserve(g, bundles) => {
                    let _ = ledger.reserve(&g.to_string(), bundles.into_iter().enumerate().map(|(i, r)| (i as u32, r)).collect());
                }
                Op::Unreserve(g) => { ledger.unreserve(&g.to_string(), &[]); }
                Op::TakeFromBundle(g, r) => {
                    let group = g.to_string();
                    if let Ok(Some(key)) = ledger.take_from_bundle(&r, &BundleWant { group: &group, index: None }) {
                        held.push((r, Some(key)));
                    }
                }
            }
            prop_assert!(ledger.free().fits_in(&total));
        }
        for (r, b) in held {
            ledger.release(&r, b.as_ref());
        }
        for g in 0..3u8 {
            ledger.unreserve(&g.to_string(), &[]);
        }
        prop_assert_eq!(ledger.free(), total);
    }

    #[test]
    fn bundles_go_where_they_fit_and_as_the_strategy_says(
        frees in prop::collection::vec(amounts(), 1..5),
        bundles in prop::collection::vec(amounts(), 1..5),
        strategy in prop_oneof![Just(Placement::Pack), Just(Placement::Spread), Just(Placement::StrictPack), Just(Placement::StrictSpread)],
    ) {
        let nodes: Vec<Candidate> = frees.iter().enumerate()
            .map(|(i, free)| Candidate { node: format!("n{i}"), free: free.clone(), labels: BTreeMap::new() })
            .collect();
        let placed = vec![None; bundles.len()];
        if let Some(chosen) = place(strategy, &bundles, &[], &placed, &nodes) {
            let mut load: HashMap<&str, ResourceSet> = HashMap::new();
            for (node, bundle) in chosen.iter().zip(&bundles) {
                load.entry(node.as_str()).or_default().add(bundle);
            }
            for node in &nodes {
                prop_assert!(load.get(node.node.as_str()).is_none_or(|l| l.fits_in(&node.free)));
            }
            let distinct: std::collections::HashSet<&String> = chosen.iter().collect();
            match strategy {
                Placement::StrictPack => prop_assert_eq!(distinct.len(), 1),
                Placement::StrictSpread => prop_assert_eq!(distinct.len(), chosen.len()),
                _ => {}
            }
        }
    }

    #[test]
    fn a_lease_goes_only_where_it_could_run(
        nodes in node_views(),
        request in amounts(),
        strategy in strategies(),
        local in 0usize..5,
        turn in 0usize..10,
        busy in prop::bool::ANY,
    ) {
        let local = nodes[local % nodes.len()].node_id.clone();
        let decision = route(&strategy, &request, &local, &nodes, turn, busy);
        let hard_affinity = matches!(&strategy, Lease::Node { soft: false, .. });
        match &decision {
            Decision::Here => {
                let me = nodes.iter().find(|n| n.node_id == local).unwrap();
                prop_assert!(hard_affinity || request.fits_in(&me.total));
            }
            Decision::There(agent) => {
                let node = nodes.iter().find(|n| &n.agent == agent);
                prop_assert!(node.is_some_and(|n| n.node_id != local));
                prop_assert!(hard_affinity || request.fits_in(&node.unwrap().total));
            }
            Decision::Never(_) => {
                prop_assert!(hard_affinity || nodes.iter().all(|n| !request.fits_in(&n.total)));
            }
            Decision::Wait => {}
        }
    }
}
