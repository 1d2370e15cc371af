//! Ray's log API (`/api/v0/logs`, `/api/v0/logs/{file,stream}`, `ray logs`): what a request
//! asks for, and which file of which node answers it.

use crate::ApiError;
use oxray_types::NodeInfo;
use serde_json::Value;
use std::collections::BTreeMap;

/// Lines a read returns when the request does not say (Ray's default).
pub const DEFAULT_LINES: i64 = 1000;

/// A request for a log, by file, worker pid, actor, task or job.
#[derive(Debug, Clone, PartialEq)]
pub struct LogQuery {
    pub node_id: Option<String>,
    pub node_ip: Option<String>,
    pub filename: Option<String>,
    pub actor_id: Option<String>,
    pub task_id: Option<String>,
    pub attempt_number: u64,
    pub pid: Option<u32>,
    pub submission_id: Option<String>,
    /// The last lines only (-1 or 0: everything).
    pub lines: i64,
    /// `out` or `err`, for logs found by id.
    pub suffix: String,
    pub follow: bool,
    pub filter_ansi_code: bool,
}

fn some(v: String) -> Option<String> {
    Some(v).filter(|v| !v.is_empty())
}

fn number<T: std::str::FromStr>(name: &str, value: &str) -> Result<T, ApiError> {
    value.trim().parse().map_err(|_| ApiError::BadRequest(format!("invalid {name} {value:?}: expected an integer")))
}

impl LogQuery {
    /// From the query of `/api/v0/logs/{media_type}`; `stream` follows the file.
    pub fn parse(pairs: Vec<(String, String)>, media_type: &str) -> Result<Self, ApiError> {
        let follow = match media_type {
            "file" => false,
            "stream" => true,
            other => {
                return Err(ApiError::BadRequest(format!("unknown media type {other:?}: expected file or stream")))
            }
        };
        let mut q = LogQuery {
            node_id: None,
            node_ip: None,
            filename: None,
            actor_id: None,
            task_id: None,
            attempt_number: 0,
            pid: None,
            submission_id: None,
            lines: DEFAULT_LINES,
            suffix: "out".into(),
            follow,
            filter_ansi_code: false,
        };
        for (name, value) in pairs {
            match name.as_str() {
                "node_id" => q.node_id = some(value),
                "node_ip" => q.node_ip = some(value),
                "filename" => q.filename = some(value),
                "actor_id" => q.actor_id = some(value),
                "task_id" => q.task_id = some(value),
                "submission_id" => q.submission_id = some(value),
                "attempt_number" => q.attempt_number = number(&name, &value)?,
                "pid" if !value.is_empty() => q.pid = Some(number(&name, &value)?),
                "lines" => q.lines = number(&name, &value)?,
                "suffix" => match value.as_str() {
                    "out" | "err" => q.suffix = value,
                    _ => return Err(ApiError::BadRequest(format!("invalid suffix {value:?}: expected out or err"))),
                },
                "filter_ansi_code" => q.filter_ansi_code = value.eq_ignore_ascii_case("true"),
                _ => {}
            }
        }
        Ok(q)
    }
}

/// Which file of which node to read, and how much of it.
#[derive(Debug, Clone, PartialEq)]
pub struct LogTarget {
    pub node_id: String,
    /// Empty when the worker is named by `pid`.
    pub filename: String,
    pub pid: u32,
    pub suffix: String,
    pub lines: i64,
    /// A byte range (a task's share of its worker's log); `end` 0: to the end.
    pub start: u64,
    pub end: u64,
    pub follow: bool,
}

/// The node a request names by id or ip; a dead node's files are gone with it.
pub fn find_node<'a>(
    nodes: &'a [NodeInfo],
    node_id: Option<&str>,
    node_ip: Option<&str>,
) -> Result<&'a NodeInfo, ApiError> {
    let node = match (node_id, node_ip) {
        (Some(id), _) => nodes
            .iter()
            .find(|n| n.node_id.hex() == id)
            .ok_or_else(|| ApiError::NotFound(format!("Node {id} does not exist")))?,
        (None, Some(ip)) => nodes
            .iter()
            .filter(|n| n.node_ip == ip)
            // Nodes that share an address (several on one machine): the head's first.
            .max_by_key(|n| (n.is_alive(), n.is_head_node, n.start_time_ms))
            .ok_or_else(|| ApiError::NotFound(format!("Cannot find matching node_id for a given node ip {ip}")))?,
        (None, None) => {
            return Err(ApiError::BadRequest(
                "Both node id and node ip are not provided. Please provide at least one of them.".into(),
            ))
        }
    };
    if !node.is_alive() {
        let why = node.state_message.as_deref().unwrap_or("it is dead");
        return Err(ApiError::NotFound(format!(
            "node {} ({}) is gone ({why}): the logs it kept went with it",
            node.node_id, node.node_ip
        )));
    }
    Ok(node)
}

fn text<'a>(row: &'a Value, key: &str) -> Option<&'a str> {
    row.get(key).and_then(Value::as_str).filter(|s| !s.is_empty())
}

fn worker_file(worker_id: &str, suffix: &str) -> String {
    format!("worker-{worker_id}.{suffix}")
}

/// What the control plane knows that names a log: rows of Ray's state API.
pub struct Known<'a> {
    pub nodes: &'a [NodeInfo],
    pub actors: &'a [Value],
    pub tasks: &'a [Value],
    /// `(submission_id, driver node)` of each job.
    pub jobs: &'a [(String, Option<String>)],
}

/// The file that answers `q`, on a live node.
pub fn resolve(q: &LogQuery, known: &Known) -> Result<LogTarget, ApiError> {
    let mut target = LogTarget {
        node_id: String::new(),
        filename: String::new(),
        pid: 0,
        suffix: q.suffix.clone(),
        lines: q.lines,
        start: 0,
        end: 0,
        follow: q.follow,
    };
    let not_found = |m: String| Err(ApiError::NotFound(m));
    let node_of = |id: Option<&str>| find_node(known.nodes, id, None).map(|n| n.node_id.hex());
    if let Some(actor_id) = &q.actor_id {
        let Some(actor) = known.actors.iter().find(|a| text(a, "actor_id") == Some(actor_id)) else {
            return not_found(format!("Actor {actor_id} not found"));
        };
        let pid = actor.get("pid").and_then(Value::as_u64).unwrap_or(0) as u32;
        let (Some(node), true) = (text(actor, "node_id"), pid > 0) else {
            return not_found(format!("Actor {actor_id} has not been scheduled to a worker yet"));
        };
        // The node knows its workers by pid, alive or ended.
        target.node_id = node_of(Some(node))?;
        target.pid = pid;
    } else if let Some(task_id) = &q.task_id {
        let attempt = known.tasks.iter().find(|t| {
            text(t, "task_id") == Some(task_id)
                && t.get("attempt_number").and_then(Value::as_u64) == Some(q.attempt_number)
        });
        let Some(task) = attempt else {
            return not_found(format!("Could not find log file for task attempt: {task_id}({})", q.attempt_number));
        };
        let (Some(node), Some(worker)) = (text(task, "node_id"), text(task, "worker_id")) else {
            return not_found(format!("Task {task_id} has not run on a worker yet"));
        };
        let info = task.get("task_log_info").filter(|i| i.is_object());
        if let (None, Some(actor_id)) = (info, text(task, "actor_id")) {
            return not_found(format!(
                "For actor task, please query actor log for actor({actor_id}): e.g. ray logs actor --id {actor_id}"
            ));
        }
        target.node_id = node_of(Some(node))?;
        target.filename = worker_file(worker, &q.suffix);
        if let Some(info) = info {
            let range = |k: &str| info.get(format!("std{}_{k}", q.suffix)).and_then(Value::as_u64);
            if let (Some(start), Some(end)) = (range("start"), range("end")) {
                (target.start, target.end) = (start, end);
                // A task's share of a log is what it printed; `lines` does not cut it.
                target.lines = -1;
                target.follow = false;
            }
        }
    } else if let Some(id) = &q.submission_id {
        let Some((_, node)) = known.jobs.iter().find(|(j, _)| j == id) else {
            return not_found(format!("Job {id} does not exist"));
        };
        let Some(node) = node else { return not_found(format!("Job {id} has not started on a node yet")) };
        target.node_id = node_of(Some(node))?;
        target.filename = format!("job-driver-{id}.log");
    } else if let Some(pid) = q.pid {
        target.node_id = find_node(known.nodes, q.node_id.as_deref(), q.node_ip.as_deref())?.node_id.hex();
        target.pid = pid;
    } else if let Some(filename) = &q.filename {
        target.node_id = find_node(known.nodes, q.node_id.as_deref(), q.node_ip.as_deref())?.node_id.hex();
        target.filename = filename.clone();
    } else {
        return Err(ApiError::BadRequest(
            "name the log: filename (with node_id or node_ip), actor_id, task_id, pid (with node_id or node_ip) or submission_id".into(),
        ));
    }
    Ok(target)
}

/// Ray's groups of a node's log files (`ray logs cluster`).
pub fn categorize(files: &[String]) -> BTreeMap<String, Vec<String>> {
    let mut groups: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for file in files {
        let group = if file.contains("worker") && file.ends_with(".out") {
            "worker_out"
        } else if file.contains("worker") && file.ends_with(".err") {
            "worker_err"
        } else if file.starts_with("job-driver-") {
            "driver"
        } else if file.starts_with("head") {
            "gcs_server"
        } else if file.starts_with("agent") {
            "agent"
        } else {
            "internal"
        };
        groups.entry(group.to_string()).or_default().push(file.clone());
    }
    groups
}

#[cfg(test)]
mod tests {
    use super::*;
    use oxray_types::NodeState;
    use serde_json::json;

    fn node(ip: &str, alive: bool) -> NodeInfo {
        let mut n = crate::nodes::tests::node("n", false, if alive { NodeState::Alive } else { NodeState::Dead });
        n.node_ip = ip.into();
        n.state_message = n.state_message.map(|_| "missed its heartbeats".into());
        n
    }

    fn query(pairs: &[(&str, &str)]) -> LogQuery {
        let pairs = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        LogQuery::parse(pairs, "file").unwrap()
    }

    #[test]
    fn queries_take_ray_defaults_and_refuse_bad_values() {
        let q = query(&[("filename", "a.out"), ("node_ip", "10.0.0.1")]);
        assert_eq!((q.lines, q.suffix.as_str(), q.follow), (1000, "out", false));
        assert!(LogQuery::parse(vec![], "stream").unwrap().follow);
        assert!(LogQuery::parse(vec![], "zip").is_err());
        assert!(LogQuery::parse(vec![("lines".into(), "many".into())], "file").is_err());
        assert!(LogQuery::parse(vec![("suffix".into(), "log".into())], "file").is_err());
    }

    #[test]
    fn logs_are_found_by_file_actor_task_pid_and_job() {
        let (a, dead) = (node("10.0.0.1", true), node("10.0.0.2", false));
        let (aid, did) = (a.node_id.hex(), dead.node_id.hex());
        let nodes = [a, dead];
        let actors = [json!({"actor_id": "ac", "node_id": aid, "pid": 31}), json!({"actor_id": "pending", "pid": 0})];
        let tasks = [
            json!({"task_id": "t", "attempt_number": 0, "node_id": aid, "worker_id": "w2",
                   "task_log_info": {"stdout_file": "worker-w2.out", "stdout_start": 5, "stdout_end": 9,
                                     "stderr_file": "worker-w2.err", "stderr_start": 0, "stderr_end": 0}}),
            json!({"task_id": "m", "attempt_number": 0, "node_id": aid, "worker_id": "w1", "actor_id": "ac",
                   "task_log_info": null}),
            json!({"task_id": "gone", "attempt_number": 0, "node_id": did, "worker_id": "w3"}),
        ];
        let jobs = [("raysubmit_1".to_string(), Some(aid.clone())), ("queued".to_string(), None)];
        let known = Known { nodes: &nodes, actors: &actors, tasks: &tasks, jobs: &jobs };
        let got = |pairs: &[(&str, &str)]| resolve(&query(pairs), &known);

        let file = got(&[("filename", "head.log"), ("node_ip", "10.0.0.1")]).unwrap();
        assert_eq!((file.node_id.as_str(), file.filename.as_str(), file.lines), (aid.as_str(), "head.log", 1000));
        let actor = got(&[("actor_id", "ac"), ("suffix", "err")]).unwrap();
        assert_eq!((actor.pid, actor.suffix.as_str(), actor.filename.as_str()), (31, "err", ""));
        let task = got(&[("task_id", "t")]).unwrap();
        assert_eq!((task.filename.as_str(), task.start, task.end, task.lines), ("worker-w2.out", 5, 9, -1));
        assert_eq!(got(&[("pid", "77"), ("node_id", &aid)]).unwrap().pid, 77);
        assert_eq!(got(&[("submission_id", "raysubmit_1")]).unwrap().filename, "job-driver-raysubmit_1.log");

        let refused = |pairs: &[(&str, &str)]| got(pairs).unwrap_err().to_string();
        assert!(refused(&[("actor_id", "pending")]).contains("not been scheduled"));
        assert!(refused(&[("task_id", "m")]).contains("ray logs actor --id ac"));
        assert!(refused(&[("task_id", "gone")]).contains("is gone (missed its heartbeats)"));
        assert!(refused(&[("task_id", "t"), ("attempt_number", "1")]).contains("t(1)"));
        assert!(refused(&[("submission_id", "queued")]).contains("not started"));
        assert!(refused(&[("filename", "x")]).contains("node id and node ip"));
        assert!(refused(&[("filename", "x"), ("node_ip", "10.9.9.9")]).contains("10.9.9.9"));
        assert!(matches!(resolve(&query(&[]), &known), Err(ApiError::BadRequest(_))));
    }

    #[test]
    fn files_are_grouped_as_ray_groups_them() {
        let files: Vec<String> =
            ["worker-a.out", "worker-a.err", "job-driver-x.log", "head.log", "runtime_env_setup.log"]
                .iter()
                .map(|s| s.to_string())
                .collect();
        let groups = categorize(&files);
        assert_eq!(groups["worker_out"], ["worker-a.out"]);
        assert_eq!(groups["worker_err"], ["worker-a.err"]);
        assert_eq!(groups["driver"], ["job-driver-x.log"]);
        assert_eq!(groups["gcs_server"], ["head.log"]);
        assert_eq!(groups["internal"], ["runtime_env_setup.log"]);
    }
}
