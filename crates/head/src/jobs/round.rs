//! A job round's decisions, made from a snapshot of the table and the nodes: the jobs of
//! dead nodes fail, waiting jobs are placed first come first served, and starts not yet
//! acknowledged are sent (again).

use super::Table;
use oxray_proto::convert::resources_to_proto;
use oxray_proto::v1;
use oxray_scheduler::job::{place, Placement};
use oxray_types::{error_types, JobRecord, JobStatus, NodeId, NodeInfo, ResourceSet};
use std::collections::{BTreeMap, HashMap};

/// A job's start, sent to the agent of its node.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Dispatch {
    pub id: String,
    pub node: NodeInfo,
    pub request: v1::StartJobRequest,
}

#[derive(Debug, Default)]
pub(super) struct Round {
    /// The records the round changes, by id: written before they are shown or acted on.
    pub changed: BTreeMap<String, JobRecord>,
    pub dispatches: Vec<Dispatch>,
}

pub(super) fn plan(table: &Table, nodes: &[NodeInfo], now_ms: u64) -> Round {
    let by_id: HashMap<&NodeId, &NodeInfo> = nodes.iter().map(|n| (&n.node_id, n)).collect();
    let mut round = Round::default();
    let mut reserved: HashMap<NodeId, ResourceSet> = HashMap::new();
    for job in table.records.values().filter(|j| !j.status.is_terminal()) {
        let Some(node_id) = job.driver_node_id.clone() else { continue };
        if by_id.get(&node_id).is_none_or(|n| !n.is_alive()) {
            let mut failed = job.clone();
            let message = format!("The node {node_id} running the job died; the job's entrypoint is lost.");
            if failed.finish(JobStatus::Failed, message, Some(error_types::NODE_DIED), now_ms) {
                round.changed.insert(failed.submission_id.clone(), failed);
            }
            continue;
        }
        reserved.entry(node_id).or_default().add(&job.resources);
    }
    for id in &table.order {
        // A job the round already changed (failed with its node) is seen as changed.
        let Some(current) = round.changed.get(id).or_else(|| table.records.get(id)) else { continue };
        if current.status != JobStatus::Pending || current.stop_requested {
            continue;
        }
        let mut job = current.clone();
        if job.driver_node_id.is_none() {
            match place(&job.resources, nodes, &reserved) {
                Placement::Node(node_id) => {
                    reserved.entry(node_id.clone()).or_default().add(&job.resources);
                    job.driver_node_id = Some(node_id);
                    round.changed.insert(id.clone(), job.clone());
                }
                Placement::Wait => continue,
                Placement::Never(_) if table.autoscaling => continue,
                Placement::Never(why) => {
                    let message = format!("Job cannot run: {why}.");
                    if job.finish(JobStatus::Failed, message, Some(error_types::UNSCHEDULABLE), now_ms) {
                        round.changed.insert(id.clone(), job);
                    }
                    continue;
                }
            }
        }
        if table.dispatched.contains(id) {
            continue;
        }
        let node_id = job.driver_node_id.as_ref().expect("placed above");
        if let Some(node) = by_id.get(node_id) {
            round.dispatches.push(Dispatch {
                id: id.clone(),
                node: (*node).clone(),
                request: v1::StartJobRequest {
                    submission_id: id.clone(),
                    entrypoint: job.entrypoint.clone(),
                    runtime_env_json: serde_json::Value::Object(job.runtime_env.clone()).to_string(),
                    resources: resources_to_proto(&job.resources),
                },
            });
        }
    }
    round
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jobs::tests::sample_job;
    use oxray_types::NodeState;

    use crate::membership::tests::node_with as node;

    fn job(id: &str, cpus: f64) -> JobRecord {
        JobRecord { resources: [("CPU".to_string(), cpus)].into_iter().collect(), ..sample_job(id) }
    }

    fn table(jobs: Vec<JobRecord>) -> Table {
        Table {
            order: jobs.iter().map(|j| j.submission_id.clone()).collect(),
            records: jobs.into_iter().map(|j| (j.submission_id.clone(), j)).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn waiting_jobs_are_placed_in_order_while_there_is_room_and_sent_once_placed() {
        let nodes = vec![node(2.0)];
        let round = plan(&table(vec![job("a", 2.0), job("b", 1.0)]), &nodes, 5);
        assert_eq!(round.changed.keys().collect::<Vec<_>>(), vec!["a"], "b waits for a's room");
        assert_eq!(round.changed["a"].driver_node_id, Some(nodes[0].node_id.clone()));
        assert_eq!(round.dispatches.len(), 1);
        assert_eq!(round.dispatches[0].request.submission_id, "a");
    }

    #[test]
    fn a_placed_job_not_acknowledged_is_sent_again_and_an_acknowledged_one_is_not() {
        let nodes = vec![node(2.0)];
        let placed = JobRecord { driver_node_id: Some(nodes[0].node_id.clone()), ..job("a", 1.0) };
        let mut t = table(vec![placed]);
        let round = plan(&t, &nodes, 5);
        assert!(round.changed.is_empty());
        assert_eq!(round.dispatches.len(), 1);
        t.dispatched.insert("a".into());
        assert!(plan(&t, &nodes, 5).dispatches.is_empty());
    }

    #[test]
    fn the_jobs_of_a_dead_node_fail_and_free_their_room() {
        let mut dead = node(2.0);
        dead.state = NodeState::Dead;
        let alive = node(2.0);
        let lost = JobRecord { driver_node_id: Some(dead.node_id.clone()), ..job("lost", 1.0) };
        let round = plan(&table(vec![lost, job("next", 2.0)]), &[dead, alive.clone()], 5);
        let sent: Vec<&str> = round.dispatches.iter().map(|d| d.id.as_str()).collect();
        assert_eq!(sent, vec!["next"], "nothing is sent to a dead node");
        assert_eq!(round.changed["lost"].status, JobStatus::Failed);
        assert_eq!(round.changed["lost"].error_type.as_deref(), Some(error_types::NODE_DIED));
        assert_eq!(round.changed["next"].driver_node_id, Some(alive.node_id));
    }

    #[test]
    fn a_job_no_node_could_ever_hold_fails_and_stopped_or_ended_jobs_are_left_alone() {
        let round = plan(&table(vec![job("huge", 64.0)]), &[node(2.0)], 5);
        assert_eq!(round.changed["huge"].status, JobStatus::Failed);
        let stopping = JobRecord { stop_requested: true, ..job("s", 1.0) };
        let mut ended = job("e", 1.0);
        ended.finish(JobStatus::Succeeded, "done".into(), None, 1);
        let round = plan(&table(vec![stopping, ended]), &[node(2.0)], 5);
        assert!(round.changed.is_empty() && round.dispatches.is_empty());
        let waiting = Table { autoscaling: true, ..table(vec![job("huge", 64.0)]) };
        let round = plan(&waiting, &[node(2.0)], 5);
        assert!(round.changed.is_empty() && round.dispatches.is_empty(), "it waits for a node to be added");
    }
}
