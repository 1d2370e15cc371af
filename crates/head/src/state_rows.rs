//! Rows of Ray's state API (`TaskState`, `ActorState`, `PlacementGroupState`) from what the
//! head knows, with every column, detail ones included: the HTTP layer keeps the columns a
//! request asks for. Ray's client checks each row strictly, so required string columns
//! are never null.

use crate::actors::Actors;
use crate::placement_groups::PlacementGroups;
use crate::task_states::{state_name, ActorRecord, TaskRecord, TaskStates};
use oxray_api_types::state::StateKind;
use oxray_proto::v1;
use serde_json::{json, Value};
use std::collections::HashMap;

/// Every row of `kind` (jobs come from the jobs API, workers from the agents, objects from
/// the processes that hold them), and what is missing from them.
pub fn of_kind(kind: StateKind, states: &TaskStates, named: &Actors, groups: &PlacementGroups) -> (Vec<Value>, String) {
    match kind {
        StateKind::Tasks => {
            let actors = states.actors().into_iter().map(|a| (a.event.actor_id.clone(), a)).collect();
            let (tasks, dropped) = states.tasks();
            let warning = match dropped {
                0 => String::new(),
                n => format!(
                    "{n} task attempts are not shown: the head keeps the newest --max-ended-tasks ended ones, \
                     and a process reports at most a few thousand new tasks a second"
                ),
            };
            (tasks.iter().map(|t| task_row(t, &actors)).collect(), warning)
        }
        StateKind::Actors => {
            let named = named.list(None).into_iter().map(|a| (a.actor_id, (a.name, a.namespace))).collect();
            (states.actors().iter().map(|a| actor_row(a, &named)).collect(), String::new())
        }
        StateKind::PlacementGroups => (groups.list().iter().map(placement_group_row).collect(), String::new()),
        StateKind::Jobs | StateKind::Workers | StateKind::Objects => (Vec::new(), String::new()),
    }
}

fn or_null(text: &str) -> Value {
    if text.is_empty() {
        Value::Null
    } else {
        Value::String(text.to_string())
    }
}

fn time_of(record: &TaskRecord, states: &[&str]) -> Value {
    record.event.transitions.iter().find(|t| states.contains(&state_name(t))).map_or(Value::Null, |t| json!(t.time_ms))
}

/// A task attempt. Calls of actors whose worker the caller did not lease take the actor's
/// node and process.
pub fn task_row(record: &TaskRecord, actors: &HashMap<String, ActorRecord>) -> Value {
    let e = &record.event;
    let actor = actors.get(&e.actor_id).map(|a| &a.event);
    let pick = |own: &str, actor_side: Option<&str>| -> Value {
        if own.is_empty() {
            actor_side.map_or(Value::Null, or_null)
        } else {
            Value::String(own.to_string())
        }
    };
    let pid = match (e.worker_pid, actor.map(|a| a.pid)) {
        (0, Some(pid)) if pid != 0 => json!(pid),
        (0, _) => Value::Null,
        (pid, _) => json!(pid),
    };
    let events: Vec<Value> =
        e.transitions.iter().map(|t| json!({ "state": state_name(t), "created_ms": t.time_ms })).collect();
    let kind = if e.kind.is_empty() { "NORMAL_TASK" } else { e.kind.as_str() };
    // Ray names actor work after the class: `Counter.incr`, `Counter.__init__`.
    let name = match (kind, actor.map(|a| a.class_name.as_str()).unwrap_or_default()) {
        ("ACTOR_CREATION_TASK", _) => format!("{}.__init__", e.name),
        ("ACTOR_TASK", class) if !class.is_empty() => format!("{class}.{}", e.name),
        _ => e.name.clone(),
    };
    json!({
        "task_id": e.task_id,
        "attempt_number": e.attempt,
        "name": name,
        "state": record.state(),
        "job_id": e.job_id,
        "actor_id": or_null(&e.actor_id),
        "type": kind,
        "func_or_class_name": name,
        "parent_task_id": e.parent_task_id,
        "node_id": pick(&e.node_id, actor.map(|a| a.node_id.as_str())),
        "worker_id": pick(&e.worker_id, actor.map(|a| a.worker_id.as_str())),
        "worker_pid": pid,
        "error_type": or_null(&e.error_type),
        "language": "PYTHON",
        "required_resources": e.required_resources,
        "runtime_env_info": Value::Null,
        "placement_group_id": or_null(&e.placement_group_id),
        "events": events,
        "profiling_data": {},
        "creation_time_ms": e.transitions.first().map_or(Value::Null, |t| json!(t.time_ms)),
        "start_time_ms": time_of(record, &["RUNNING"]),
        "end_time_ms": time_of(record, &["FINISHED", "FAILED"]),
        "task_log_info": task_log_info(e),
        "error_message": or_null(&e.error_message),
        "is_debugger_paused": Value::Null,
        "call_site": Value::Null,
        "label_selector": Value::Null,
        "fallback_strategy": Value::Null,
    })
}

/// Where a normal task's output lies in its worker's log files, as Ray's `task_log_info`
/// (none when the offsets make no range: its log was rotated meanwhile).
fn task_log_info(e: &v1::TaskEvent) -> Value {
    match e.log_offsets[..] {
        [out_start, out_end, err_start, err_end]
            if !e.worker_id.is_empty() && out_start <= out_end && err_start <= err_end =>
        {
            json!({
            "stdout_file": format!("worker-{}.out", e.worker_id),
            "stdout_start": out_start,
            "stdout_end": out_end,
            "stderr_file": format!("worker-{}.err", e.worker_id),
            "stderr_start": err_start,
            "stderr_end": err_end,
            })
        }
        _ => Value::Null,
    }
}

/// An actor; `named` gives the name and namespace of the named ones.
pub fn actor_row(record: &ActorRecord, named: &HashMap<String, (String, String)>) -> Value {
    let e = &record.event;
    let (name, namespace) =
        named.get(&e.actor_id).map_or(("", e.namespace.as_str()), |(n, ns)| (n.as_str(), ns.as_str()));
    let death_cause = if e.death_cause.is_empty() {
        Value::Null
    } else {
        json!({ "actor_died_error_context": { "error_message": e.death_cause } })
    };
    json!({
        "actor_id": e.actor_id,
        "class_name": e.class_name,
        "state": e.state,
        "job_id": e.job_id,
        "name": name,
        "node_id": or_null(&e.node_id),
        "pid": e.pid,
        "ray_namespace": or_null(namespace),
        "serialized_runtime_env": Value::Null,
        "required_resources": e.required_resources,
        "death_cause": death_cause,
        "is_detached": e.detached,
        "placement_group_id": or_null(&e.placement_group_id),
        "repr_name": "",
        "num_restarts": record.num_restarts,
        "num_restarts_due_to_lineage_reconstruction": 0,
        "num_restarts_due_to_node_preemption": 0,
        "call_site": Value::Null,
        "label_selector": Value::Null,
        "fallback_strategy": Value::Null,
        "start_time_ms": (record.start_time_ms != 0).then_some(record.start_time_ms),
        "end_time_ms": (record.end_time_ms != 0).then_some(record.end_time_ms),
    })
}

fn strategy_name(strategy: i32) -> &'static str {
    match v1::PlacementStrategy::try_from(strategy).unwrap_or(v1::PlacementStrategy::Pack) {
        v1::PlacementStrategy::Pack => "PACK",
        v1::PlacementStrategy::Spread => "SPREAD",
        v1::PlacementStrategy::StrictPack => "STRICT_PACK",
        v1::PlacementStrategy::StrictSpread => "STRICT_SPREAD",
    }
}

pub fn placement_group_row(group: &v1::PlacementGroup) -> Value {
    let state = match v1::PlacementGroupState::try_from(group.state).unwrap_or(v1::PlacementGroupState::Pending) {
        v1::PlacementGroupState::Pending => "PENDING",
        v1::PlacementGroupState::Created => "CREATED",
        v1::PlacementGroupState::Removed => "REMOVED",
        v1::PlacementGroupState::Rescheduling => "RESCHEDULING",
    };
    let bundles: Vec<Value> = group
        .bundles
        .iter()
        .enumerate()
        .map(|(i, b)| {
            let node = group.bundle_nodes.get(i).map_or(Value::Null, |n| or_null(n));
            json!({
                "bundle_id": { "placement_group_id": group.placement_group_id, "bundle_index": i },
                "unit_resources": b.resources,
                "node_id": node,
                "label_selector": b.label_selector,
            })
        })
        .collect();
    json!({
        "placement_group_id": group.placement_group_id,
        "name": group.name,
        "creator_job_id": group.creator_job_id,
        "state": state,
        "bundles": bundles,
        "is_detached": group.detached,
        "stats": Value::Null,
        "strategy": strategy_name(group.strategy),
        "ray_namespace": or_null(&group.namespace),
        "created_at_ms": group.created_at_ms,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(states: &[(&str, u64)]) -> TaskRecord {
        TaskRecord {
            event: Box::new(v1::TaskEvent {
                task_id: "t".into(),
                name: "incr".into(),
                kind: "ACTOR_TASK".into(),
                actor_id: "a".into(),
                transitions: states
                    .iter()
                    .map(|(s, t)| v1::TaskTransition { state: s.to_string(), time_ms: *t, ..Default::default() })
                    .collect(),
                ..Default::default()
            }),
        }
    }

    #[test]
    fn a_task_row_has_ray_times_and_takes_its_actors_place() {
        let mut actors = HashMap::new();
        let actor = v1::ActorEvent { node_id: "n".into(), pid: 42, class_name: "Counter".into(), ..Default::default() };
        actors.insert("a".to_string(), ActorRecord { event: actor, ..Default::default() });
        let row = task_row(&record(&[("PENDING_NODE_ASSIGNMENT", 1), ("RUNNING", 2), ("FINISHED", 3)]), &actors);
        assert_eq!((row["state"].clone(), row["name"].clone()), (json!("FINISHED"), json!("Counter.incr")));
        assert_eq!((row["creation_time_ms"].clone(), row["start_time_ms"].clone()), (json!(1), json!(2)));
        assert_eq!(row["end_time_ms"], 3);
        assert_eq!((row["node_id"].clone(), row["worker_pid"].clone()), (json!("n"), json!(42)));
        // Required strings are never null.
        assert_eq!((row["parent_task_id"].clone(), row["job_id"].clone()), (json!(""), json!("")));
        let pending = task_row(&record(&[("PENDING_ARGS_AVAIL", 1)]), &HashMap::new());
        assert!(pending["end_time_ms"].is_null() && pending["node_id"].is_null());
    }

    #[test]
    fn an_actor_row_has_its_name_and_an_int_restart_count() {
        let record = ActorRecord {
            event: v1::ActorEvent {
                actor_id: "a".into(),
                class_name: "Counter".into(),
                state: "DEAD".into(),
                death_cause: "killed".into(),
                ..Default::default()
            },
            ..Default::default()
        };
        let named = HashMap::from([("a".to_string(), ("c".to_string(), "ns".to_string()))]);
        let row = actor_row(&record, &named);
        assert_eq!((row["name"].clone(), row["ray_namespace"].clone()), (json!("c"), json!("ns")));
        assert_eq!(row["num_restarts"], 0);
        assert_eq!(row["death_cause"]["actor_died_error_context"]["error_message"], "killed");
        let unnamed = actor_row(&record, &HashMap::new());
        assert_eq!((unnamed["name"].clone(), unnamed["ray_namespace"].clone()), (json!(""), Value::Null));
        let mut made_in = record.clone();
        made_in.event.namespace = "jobs".into();
        assert_eq!(actor_row(&made_in, &HashMap::new())["ray_namespace"], "jobs");
    }

    #[test]
    fn a_placement_group_row_names_its_bundles_nodes_and_selectors() {
        let bundle = |zone: &str| v1::Bundle {
            resources: [("CPU".to_string(), 1.0)].into(),
            label_selector: [("zone".to_string(), zone.to_string())].into(),
        };
        let group = v1::PlacementGroup {
            placement_group_id: "g".into(),
            bundles: vec![bundle("a"), bundle("!a")],
            bundle_nodes: vec!["n1".into(), String::new()],
            ..Default::default()
        };
        let row = placement_group_row(&group);
        assert_eq!(row["state"], "PENDING");
        assert_eq!(row["bundles"][0]["label_selector"], json!({"zone": "a"}));
        assert_eq!(row["bundles"][1]["label_selector"], json!({"zone": "!a"}));
        assert_eq!(
            (row["bundles"][0]["node_id"].clone(), row["bundles"][1]["node_id"].clone()),
            (json!("n1"), Value::Null)
        );
    }
}
