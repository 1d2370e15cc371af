use crate::cluster;
use oxray_proto::v1;
use oxray_testkit::count_states;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(15);

fn one_cpu() -> v1::Bundle {
    v1::Bundle { resources: [("CPU".to_string(), 1.0)].into_iter().collect(), ..Default::default() }
}

fn by_id(id: &str) -> v1::PlacementGroupRef {
    v1::PlacementGroupRef { placement_group_id: id.to_string(), ..Default::default() }
}

async fn wait_created(head: &mut oxray_rpc::HeadClient, id: &str) -> v1::PlacementGroup {
    let request = v1::WaitPlacementGroupRequest { placement_group_id: id.to_string(), timeout_s: 5.0 };
    let group = head.wait_placement_group(request).await.unwrap().into_inner();
    assert_eq!(group.state, v1::PlacementGroupState::Created as i32, "{group:?}");
    group
}

#[tokio::test]
async fn groups_are_reserved_by_strategy_and_survive_a_head_restart() {
    let mut c = cluster(2);
    c.wait_for(WAIT, |n| count_states(n) == (2, 0)).await.unwrap();
    let mut head = oxray_rpc::connect_head(&c.address(), c.token(), WAIT).await.unwrap();
    let request = |strategy: v1::PlacementStrategy, bundles: usize| v1::CreatePlacementGroupRequest {
        bundles: vec![one_cpu(); bundles],
        strategy: strategy as i32,
        namespace: "default".into(),
        detached: true,
        ..Default::default()
    };
    let spread = head.create_placement_group(request(v1::PlacementStrategy::StrictSpread, 2)).await.unwrap();
    let spread = wait_created(&mut head, &spread.into_inner().placement_group_id).await;
    assert_ne!(spread.bundle_nodes[0], spread.bundle_nodes[1], "one bundle per node");

    // Every CPU is reserved: another group waits.
    let waiting = head.create_placement_group(request(v1::PlacementStrategy::Pack, 1)).await.unwrap().into_inner();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let pending = head.get_placement_group(by_id(&waiting.placement_group_id)).await.unwrap().into_inner();
    assert_eq!(pending.state, v1::PlacementGroupState::Pending as i32);

    c.restart_head().unwrap();
    let mut head = oxray_rpc::connect_head(&c.address(), c.token(), WAIT).await.unwrap();
    let kept = head.get_placement_group(by_id(&spread.placement_group_id)).await.unwrap().into_inner();
    assert_eq!(kept.bundle_nodes, spread.bundle_nodes, "the restarted head knows where the bundles are");
    assert_eq!(kept.state, v1::PlacementGroupState::Created as i32);

    // Removing the first group frees its reservations on the agents: the waiting one fits.
    head.remove_placement_group(by_id(&spread.placement_group_id)).await.unwrap();
    wait_created(&mut head, &waiting.placement_group_id).await;
    let bad = head.create_placement_group(request(v1::PlacementStrategy::Pack, 0)).await.unwrap_err();
    assert!(bad.message().contains("at least one bundle"), "{bad:?}");
}

#[tokio::test]
async fn a_creator_may_choose_the_id_but_not_a_taken_or_malformed_one() {
    let c = cluster(1);
    c.wait_for(WAIT, |n| count_states(n) == (1, 0)).await.unwrap();
    let mut head = oxray_rpc::connect_head(&c.address(), c.token(), WAIT).await.unwrap();
    let chosen = "ab".repeat(18);
    let request = |id: &str| v1::CreatePlacementGroupRequest {
        bundles: vec![one_cpu()],
        namespace: "default".into(),
        placement_group_id: id.to_string(),
        ..Default::default()
    };
    let group = head.create_placement_group(request(&chosen)).await.unwrap().into_inner();
    assert_eq!(group.placement_group_id, chosen);
    wait_created(&mut head, &chosen).await;
    let taken = head.create_placement_group(request(&chosen)).await.unwrap_err();
    assert!(taken.message().contains("taken"), "{taken:?}");
    head.remove_placement_group(by_id(&chosen)).await.unwrap();
    let again = head.create_placement_group(request(&chosen)).await.unwrap_err();
    assert!(again.message().contains("taken"), "a removed group's id stays taken: {again:?}");
    let malformed = head.create_placement_group(request("../etc")).await.unwrap_err();
    assert!(malformed.message().contains("is not a placement group id"), "{malformed:?}");
}
