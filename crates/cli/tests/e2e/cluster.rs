use crate::cluster;
use nix::sys::signal::Signal;
use oxray_testkit::count_states;
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(15);

#[tokio::test]
async fn agents_join_with_their_resources() {
    let c = cluster(3);
    let nodes = c.wait_for(WAIT, |n| count_states(n) == (3, 0)).await.unwrap();
    for node in &nodes {
        assert_eq!(node.resources_total.get("CPU"), 1.0);
        assert_eq!(node.resources_total.get("node:127.0.0.1"), 1.0);
        assert_eq!(node.labels.get("ray.io/node_id"), Some(&node.node_id.hex()));
        assert!(node.node_name.starts_with("agent-"));
    }
    let mut ids: Vec<_> = nodes.iter().map(|n| n.node_id.hex()).collect();
    ids.sort();
    let mut expected: Vec<_> = (0..3).map(|i| c.agent_node_id(i).unwrap()).collect();
    expected.sort();
    assert_eq!(ids, expected);
}

#[tokio::test]
async fn a_killed_agent_is_declared_dead_and_its_resources_leave() {
    let mut c = cluster(3);
    c.wait_for(WAIT, |n| count_states(n) == (3, 0)).await.unwrap();
    let victim = c.agent_node_id(1).unwrap();
    let killed_at = Instant::now();
    c.kill_agent(1, Signal::SIGKILL);
    let nodes = c.wait_for(WAIT, |n| count_states(n) == (2, 1)).await.unwrap();
    // Death timeout is 2 s in the test kit; the head checks every 200 ms.
    assert!(killed_at.elapsed() < Duration::from_secs(6), "took {:?}", killed_at.elapsed());
    let dead = nodes.iter().find(|n| !n.is_alive()).unwrap();
    assert_eq!(dead.node_id.hex(), victim);
    assert!(dead.resources_available.is_empty());
    assert!(dead.end_time_ms >= dead.start_time_ms);
    assert!(dead.state_message.as_deref().unwrap().contains("no heartbeat"));
    let cpus: f64 = nodes.iter().filter(|n| n.is_alive()).map(|n| n.resources_total.get("CPU")).sum();
    assert_eq!(cpus, 2.0);
}

#[tokio::test]
async fn a_silent_agent_that_comes_back_rejoins() {
    let mut c = cluster(1);
    c.wait_for(WAIT, |n| count_states(n) == (1, 0)).await.unwrap();
    let first = c.agent_node_id(0).unwrap();
    c.pause_agent(0);
    c.wait_for(WAIT, |n| count_states(n) == (0, 1)).await.unwrap();
    c.resume_agent(0);
    let nodes = c.wait_for(WAIT, |n| count_states(n) == (1, 1)).await.unwrap();
    let alive = nodes.iter().find(|n| n.is_alive()).unwrap();
    assert_ne!(alive.node_id.hex(), first, "a node declared dead comes back under a new id");
    assert_eq!(alive.pid, c.agent_pid(0).unwrap(), "the same agent process rejoined");
}

#[tokio::test]
async fn head_restart_keeps_state_and_agents_reconnect_by_themselves() {
    let mut c = cluster(3);
    c.wait_for(WAIT, |n| count_states(n) == (3, 0)).await.unwrap();
    c.kill_agent(2, Signal::SIGKILL);
    let before = c.wait_for(WAIT, |n| count_states(n) == (2, 1)).await.unwrap();
    let agent_pids: Vec<_> = (0..2).map(|i| c.agent_pid(i).unwrap()).collect();

    c.kill_head(Signal::SIGKILL);
    tokio::time::sleep(Duration::from_millis(500)).await;
    c.restart_head().unwrap();

    let after = c.nodes().await.unwrap();
    assert_eq!(after.len(), 3, "every node seen before the crash is still known");
    let dead_before = before.iter().find(|n| !n.is_alive()).unwrap();
    let dead_after = after.iter().find(|n| n.node_id == dead_before.node_id).unwrap();
    assert_eq!(dead_after, dead_before, "the dead node's record is intact");

    // Well past the death timeout, the surviving agents are still alive: they reported to
    // the new head on their own, as the same processes under the same node ids.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let later = c.wait_for(WAIT, |n| count_states(n) == (2, 1)).await.unwrap();
    for (i, pid) in agent_pids.iter().enumerate() {
        assert!(c.agent_running(i));
        assert_eq!(c.agent_pid(i), Some(*pid));
        let id = c.agent_node_id(i).unwrap();
        assert!(later.iter().any(|n| n.node_id.hex() == id && n.is_alive()), "agent {i} rejoined");
    }
}

#[tokio::test]
async fn a_wrong_token_is_refused_and_nothing_joins() {
    let c = cluster(1);
    c.wait_for(WAIT, |n| count_states(n) == (1, 0)).await.unwrap();
    let error = c.agent_error_with_token("not-the-token").unwrap();
    assert!(error.contains("refused the cluster token"), "{error}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(c.nodes().await.unwrap().len(), 1);
}

#[tokio::test]
async fn a_stopping_head_does_not_wait_for_a_client_that_never_answers() {
    let c = cluster(1);
    c.wait_for(WAIT, |n| count_states(n) == (1, 0)).await.unwrap();
    // A client whose connection nobody drives after its first call (a driver's thread busy
    // with other work): it never answers the stopping head's goodbye.
    let (address, token) = (c.address(), c.token().clone());
    let idle = std::thread::spawn(move || {
        let idle = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let mut client = idle.block_on(oxray_rpc::connect_head(&address, &token, WAIT)).unwrap();
        idle.block_on(client.list_nodes(oxray_proto::v1::ListNodesRequest {})).unwrap();
        (idle, client)
    })
    .join()
    .unwrap();

    let head = nix::unistd::Pid::from_raw(c.head_pid().unwrap() as i32);
    nix::sys::signal::kill(head, Signal::SIGTERM).unwrap();
    let began = Instant::now();
    let exited = loop {
        match nix::sys::wait::waitpid(head, Some(nix::sys::wait::WaitPidFlag::WNOHANG)) {
            Ok(nix::sys::wait::WaitStatus::StillAlive) if began.elapsed() < Duration::from_secs(15) => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Ok(nix::sys::wait::WaitStatus::StillAlive) => break false,
            _ => break true,
        }
    };
    assert!(exited, "the head still runs 15 s after SIGTERM");
    std::thread::spawn(move || drop(idle)).join().unwrap();
}

#[tokio::test]
async fn a_node_of_another_oxray_version_is_refused() {
    let c = cluster(1);
    c.wait_for(WAIT, |n| count_states(n) == (1, 0)).await.unwrap();
    let mut head = oxray_rpc::connect_head(&c.address(), c.token(), WAIT).await.unwrap();
    let node = oxray_types::NodeInfo {
        node_id: oxray_types::NodeId::random(),
        ..c.wait_for(WAIT, |n| count_states(n) == (1, 0)).await.unwrap().remove(0)
    };
    let request = |version: &str| oxray_proto::v1::RegisterNodeRequest {
        node: Some(oxray_proto::v1::Node::from(&node)),
        version: version.into(),
    };
    let refused = head.register_node(request("0.0.1-older")).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::InvalidArgument);
    assert!(refused.message().contains("version mismatch") && refused.message().contains("0.0.1-older"), "{refused}");
    let nodes = c.wait_for(WAIT, |n| count_states(n) == (1, 0)).await.unwrap();
    assert!(nodes.iter().all(|n| n.node_id != node.node_id), "the refused node did not join");
}
