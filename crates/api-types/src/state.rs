//! Ray's state API over rows of any kind (actors, tasks, placement groups, jobs): which
//! columns a kind has, filters with Ray's meaning, the list funnel and the summaries. Rows
//! are JSON objects with every column; these functions only choose among them.

use serde_json::{json, Map, Value};
use std::collections::{BTreeMap, BTreeSet};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StateKind {
    Actors,
    Tasks,
    PlacementGroups,
    Jobs,
    Workers,
    Objects,
}

impl StateKind {
    /// The column rows are sorted by, and `ray get` looks up.
    pub fn id_key(self) -> &'static str {
        match self {
            StateKind::Actors => "actor_id",
            StateKind::Tasks => "task_id",
            StateKind::PlacementGroups => "placement_group_id",
            StateKind::Jobs => "submission_id",
            StateKind::Workers => "worker_id",
            StateKind::Objects => "object_id",
        }
    }

    /// Columns without `detail`.
    pub fn plain_columns(self) -> &'static [&'static str] {
        match self {
            StateKind::Actors => {
                &["actor_id", "class_name", "state", "job_id", "name", "node_id", "pid", "ray_namespace"]
            }
            StateKind::Tasks => &[
                "task_id",
                "attempt_number",
                "name",
                "state",
                "job_id",
                "actor_id",
                "type",
                "func_or_class_name",
                "parent_task_id",
                "node_id",
                "worker_id",
                "worker_pid",
                "error_type",
            ],
            StateKind::PlacementGroups => &["placement_group_id", "name", "creator_job_id", "state"],
            StateKind::Jobs => {
                &["job_id", "submission_id", "entrypoint", "type", "status", "message", "error_type", "driver_info"]
            }
            StateKind::Workers => &["worker_id", "is_alive", "worker_type", "exit_type", "node_id", "ip", "pid"],
            StateKind::Objects => &[
                "object_id",
                "object_size",
                "task_status",
                "attempt_number",
                "reference_type",
                "call_site",
                "type",
                "pid",
                "ip",
            ],
        }
    }

    pub fn filterable(self) -> Vec<&'static str> {
        let extra: &[&str] = match self {
            StateKind::Actors => &["placement_group_id", "repr_name"],
            StateKind::Tasks => &["language", "placement_group_id", "is_debugger_paused"],
            StateKind::PlacementGroups => &["is_detached"],
            StateKind::Jobs => return vec!["job_id", "type", "status", "submission_id"],
            StateKind::Workers => &["debugger_port", "num_paused_threads"],
            StateKind::Objects => &[],
        };
        self.plain_columns().iter().chain(extra).copied().collect()
    }

    /// The path segment of its list under `/api/v0/`.
    pub fn path(self) -> &'static str {
        match self {
            StateKind::Actors => "actors",
            StateKind::Tasks => "tasks",
            StateKind::PlacementGroups => "placement_groups",
            StateKind::Jobs => "jobs",
            StateKind::Workers => "workers",
            StateKind::Objects => "objects",
        }
    }

    pub fn noun(self) -> &'static str {
        match self {
            StateKind::Actors => "actors",
            StateKind::Tasks => "tasks",
            StateKind::PlacementGroups => "placement groups",
            StateKind::Jobs => "jobs",
            StateKind::Workers => "workers",
            StateKind::Objects => "objects",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateFilter {
    key: String,
    equal: bool,
    value: String,
}

impl StateFilter {
    /// From Ray's query triple; the key must be one of the kind's filterable columns.
    pub fn new(kind: StateKind, key: &str, predicate: &str, value: &str) -> Result<Self, String> {
        let key = key.trim().to_ascii_lowercase();
        let filterable = kind.filterable();
        if !filterable.contains(&key.as_str()) {
            return Err(format!(
                "The given filter column {key} is not supported. Supported filter columns: {}",
                filterable.join(", ")
            ));
        }
        // Ray converts filters on number columns and refuses what is not a number.
        if ["attempt_number", "worker_pid", "pid", "object_size"].contains(&key.as_str())
            && value.trim().parse::<i64>().is_err()
        {
            return Err(format!("invalid filter value {value:?} for {key}: it must be an integer"));
        }
        let equal = match predicate {
            "=" => true,
            "!=" => false,
            other => return Err(format!("unsupported filter predicate {other:?}: expected = or !=")),
        };
        Ok(Self { key, equal, value: value.trim().to_string() })
    }

    /// From the CLI's `key=value` or `key!=value`.
    pub fn parse(kind: StateKind, text: &str) -> Result<Self, String> {
        if let Some((k, v)) = text.split_once("!=") {
            return Self::new(kind, k, "!=", v);
        }
        match text.split_once('=') {
            Some((k, v)) => Self::new(kind, k, "=", v),
            None => Err(format!("invalid filter {text:?}: expected key=value or key!=value")),
        }
    }

    /// `(filter_keys, filter_predicates, filter_values)` entries of Ray's query.
    pub fn query_triple(&self) -> (&str, &str, &str) {
        (&self.key, if self.equal { "=" } else { "!=" }, &self.value)
    }

    /// Strings match ignoring case, booleans and numbers by value; a missing value matches
    /// only `!=`.
    pub fn matches(&self, row: &Value) -> bool {
        let same = match row.get(&self.key) {
            Some(Value::String(s)) => s.eq_ignore_ascii_case(&self.value),
            Some(Value::Bool(b)) => match self.value.to_ascii_lowercase().as_str() {
                "true" | "1" => *b,
                "false" | "0" => !*b,
                _ => false,
            },
            Some(Value::Number(n)) => self.value.parse::<f64>().ok() == n.as_f64(),
            // Lists and maps equal no filter value.
            Some(Value::Array(_) | Value::Object(_)) => false,
            _ => return !self.equal,
        };
        same == self.equal
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListQuery {
    pub limit: usize,
    pub detail: bool,
    pub filters: Vec<StateFilter>,
}

fn sort_key(kind: StateKind, row: &Value) -> (String, u64) {
    let id = row.get(kind.id_key()).and_then(Value::as_str).unwrap_or_default().to_string();
    (id, row.get("attempt_number").and_then(Value::as_u64).unwrap_or(0))
}

fn keep_columns(kind: StateKind, row: Value, detail: bool) -> Value {
    if detail {
        return row;
    }
    let Value::Object(mut all) = row else { return row };
    let plain: Map<String, Value> =
        kind.plain_columns().iter().map(|c| (c.to_string(), all.remove(*c).unwrap_or(Value::Null))).collect();
    Value::Object(plain)
}

/// Ray's `ListApiResponse`: rows by id, filtered, the first `limit` of them. `warning` says
/// what is missing (in `warnings`: Ray's SDK raises on a partial failure, not on those).
pub fn list(kind: StateKind, mut rows: Vec<Value>, query: &ListQuery, warning: &str) -> Value {
    let total = rows.len();
    rows.retain(|row| query.filters.iter().all(|f| f.matches(row)));
    let num_filtered = rows.len();
    rows.sort_by_cached_key(|row| sort_key(kind, row));
    rows.truncate(query.limit);
    let result: Vec<Value> = rows.into_iter().map(|r| keep_columns(kind, r, query.detail)).collect();
    json!({
        "total": total,
        "num_after_truncation": total,
        "num_filtered": num_filtered,
        "result": result,
        "partial_failure_warning": "",
        "warnings": if warning.is_empty() { Value::Null } else { json!([warning]) },
    })
}

fn text<'a>(row: &'a Value, key: &str) -> &'a str {
    row.get(key).and_then(Value::as_str).unwrap_or_default()
}

fn count(counts: &mut Value, state: &str) {
    let slot = &mut counts[state];
    *slot = json!(slot.as_u64().unwrap_or(0) + 1);
}

fn summary_response(cluster: Value, total: usize) -> Value {
    json!({
        "total": total,
        "num_after_truncation": total,
        "num_filtered": total,
        "partial_failure_warning": "",
        "warnings": Value::Null,
        "result": { "node_id_to_summary": { "cluster": cluster } },
    })
}

/// `ray summary tasks`: counts of states per function, as Ray's `TaskSummaries`.
pub fn summarize_tasks(rows: &[Value]) -> Value {
    let mut summary: BTreeMap<String, Value> = BTreeMap::new();
    let (mut tasks, mut actor_tasks, mut creations) = (0, 0, 0);
    for row in rows {
        let (name, kind) = (text(row, "name"), text(row, "type"));
        match kind {
            "ACTOR_TASK" => actor_tasks += 1,
            "ACTOR_CREATION_TASK" => creations += 1,
            _ => tasks += 1,
        }
        let entry = summary.entry(name.to_string()).or_insert_with(
            || json!({ "func_or_class_name": text(row, "func_or_class_name"), "type": kind, "state_counts": {} }),
        );
        count(&mut entry["state_counts"], text(row, "state"));
    }
    let cluster = json!({
        "summary": summary,
        "total_tasks": tasks,
        "total_actor_tasks": actor_tasks,
        "total_actor_scheduled": creations,
        "summary_by": "func_name",
    });
    summary_response(cluster, rows.len())
}

/// `ray summary actors`: counts of states per class, as Ray's `ActorSummaries`.
pub fn summarize_actors(rows: &[Value]) -> Value {
    let mut summary: BTreeMap<String, Value> = BTreeMap::new();
    for row in rows {
        let class = text(row, "class_name");
        let entry =
            summary.entry(class.to_string()).or_insert_with(|| json!({ "class_name": class, "state_counts": {} }));
        count(&mut entry["state_counts"], text(row, "state"));
    }
    let cluster = json!({ "summary": summary, "total_actors": rows.len(), "summary_by": "class" });
    summary_response(cluster, rows.len())
}

/// Object references grouped by the call site that made them (Ray's `summarize_objects`;
/// call sites are not recorded, so all fall under "disabled"), with sizes in MB and the
/// processes and nodes that hold them.
pub fn summarize_objects(rows: &[Value]) -> Value {
    const MB: f64 = 1024.0 * 1024.0;
    let mut summary: BTreeMap<String, Value> = BTreeMap::new();
    let mut holders: BTreeMap<String, (BTreeSet<u64>, BTreeSet<String>)> = BTreeMap::new();
    let mut total_mb = 0.0;
    for row in rows {
        let site = text(row, "call_site").to_string();
        let entry = summary.entry(site.clone()).or_insert_with(|| {
            json!({ "total_objects": 0, "total_size_mb": 0.0, "total_num_workers": 0, "total_num_nodes": 0,
                    "task_state_counts": {}, "task_attempt_number_counts": {}, "ref_type_counts": {} })
        });
        count(&mut entry["task_state_counts"], text(row, "task_status"));
        let attempt = row.get("attempt_number").and_then(Value::as_u64).unwrap_or(0).to_string();
        count(&mut entry["task_attempt_number_counts"], &attempt);
        count(&mut entry["ref_type_counts"], text(row, "reference_type"));
        entry["total_objects"] = json!(entry["total_objects"].as_u64().unwrap_or(0) + 1);
        let size = row.get("object_size").and_then(Value::as_i64).unwrap_or(-1);
        if size >= 0 {
            let mb = size as f64 / MB;
            entry["total_size_mb"] = json!(entry["total_size_mb"].as_f64().unwrap_or(0.0) + mb);
            total_mb += mb;
        }
        let (workers, nodes) = holders.entry(site).or_default();
        workers.insert(row.get("pid").and_then(Value::as_u64).unwrap_or(0));
        nodes.insert(text(row, "ip").to_string());
    }
    for (site, (workers, nodes)) in holders {
        summary.get_mut(&site).expect("counted")["total_num_workers"] = json!(workers.len());
        summary.get_mut(&site).expect("counted")["total_num_nodes"] = json!(nodes.len());
    }
    let enabled = !summary.contains_key("disabled");
    let cluster = json!({ "summary": summary, "total_objects": rows.len(), "total_size_mb": total_mb,
                          "callsite_enabled": enabled, "summary_by": "callsite" });
    summary_response(cluster, rows.len())
}

/// A Chrome trace (`chrome://tracing`, Perfetto) of task rows with times: one complete event
/// per attempt that started, on a track per node and worker process, as Ray's timeline.
pub fn timeline(rows: &[Value]) -> Value {
    let mut events: Vec<Value> = rows
        .iter()
        .filter_map(|row| {
            let start = row.get("start_time_ms")?.as_u64()?;
            let end =
                row.get("end_time_ms").and_then(Value::as_u64).unwrap_or_else(|| start.max(oxray_types::now_ms()));
            Some(json!({
                "name": text(row, "name"),
                "cat": text(row, "type"),
                "ph": "X",
                "ts": start * 1000,
                "dur": end.saturating_sub(start) * 1000,
                "pid": format!("node {}", text(row, "node_id").get(..8).unwrap_or_default()),
                "tid": format!("worker {}", row.get("worker_pid").and_then(Value::as_u64).unwrap_or(0)),
                "args": {
                    "task_id": text(row, "task_id"),
                    "attempt_number": row.get("attempt_number").cloned().unwrap_or(Value::Null),
                    "state": text(row, "state"),
                    "job_id": text(row, "job_id"),
                    "actor_id": row.get("actor_id").cloned().unwrap_or(Value::Null),
                    "error_type": row.get("error_type").cloned().unwrap_or(Value::Null),
                },
            }))
        })
        .collect();
    events.sort_by_key(|e| e["ts"].as_u64().unwrap_or(0));
    Value::Array(events)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(id: &str, name: &str, state: &str, pid: Option<u32>) -> Value {
        json!({ "task_id": id, "attempt_number": 0, "name": name, "func_or_class_name": name, "type": "NORMAL_TASK",
                "state": state, "worker_pid": pid, "events": [], "is_debugger_paused": null })
    }

    fn query(filters: &[&str], limit: usize, detail: bool) -> ListQuery {
        let filters = filters.iter().map(|f| StateFilter::parse(StateKind::Tasks, f).unwrap()).collect();
        ListQuery { limit, detail, filters }
    }

    #[test]
    fn lists_filter_then_sort_then_limit() {
        let rows = vec![
            task("c", "f", "FINISHED", Some(3)),
            task("a", "f", "RUNNING", Some(1)),
            task("b", "g", "FINISHED", None),
        ];
        let all = list(StateKind::Tasks, rows.clone(), &query(&[], 100, false), "");
        let ids: Vec<_> = all["result"].as_array().unwrap().iter().map(|r| r["task_id"].clone()).collect();
        assert_eq!(ids, [json!("a"), json!("b"), json!("c")]);
        // Plain rows have the plain columns only, missing ones null.
        assert!(all["result"][0].get("events").is_none());
        assert!(all["result"][0]["worker_id"].is_null());
        let finished = list(StateKind::Tasks, rows.clone(), &query(&["STATE=finished"], 1, true), "");
        assert_eq!((finished["total"].clone(), finished["num_filtered"].clone()), (json!(3), json!(2)));
        assert_eq!(finished["result"].as_array().unwrap().len(), 1);
        assert!(finished["result"][0].get("events").is_some());
        let by_pid = list(StateKind::Tasks, rows.clone(), &query(&["worker_pid=3"], 100, false), "");
        assert_eq!(by_pid["num_filtered"], 1);
        let not_f = list(StateKind::Tasks, rows, &query(&["name!=F"], 100, false), "");
        assert_eq!(not_f["num_filtered"], 1);
    }

    #[test]
    fn filters_know_their_columns() {
        assert!(StateFilter::parse(StateKind::Tasks, "events=x").unwrap_err().contains("not supported"));
        assert!(StateFilter::parse(StateKind::Actors, "state").is_err());
        assert!(StateFilter::new(StateKind::Actors, "state", "~", "x").is_err());
        assert!(StateFilter::parse(StateKind::Tasks, "worker_pid=x").unwrap_err().contains("integer"));
        let missing = StateFilter::parse(StateKind::Tasks, "worker_pid!=5").unwrap();
        assert!(missing.matches(&task("a", "f", "RUNNING", None)));
    }

    #[test]
    fn the_timeline_has_an_event_per_started_attempt() {
        let rows = vec![
            json!({ "task_id": "a", "name": "f", "type": "NORMAL_TASK", "node_id": "0123456789ab", "worker_pid": 7,
                    "start_time_ms": 5, "end_time_ms": 8, "state": "FINISHED" }),
            json!({ "task_id": "b", "name": "g", "start_time_ms": null, "state": "PENDING_NODE_ASSIGNMENT" }),
        ];
        let trace = timeline(&rows);
        assert_eq!(trace.as_array().unwrap().len(), 1);
        assert_eq!((trace[0]["ts"].clone(), trace[0]["dur"].clone()), (json!(5000), json!(3000)));
        assert_eq!((trace[0]["pid"].clone(), trace[0]["tid"].clone()), (json!("node 01234567"), json!("worker 7")));
    }

    #[test]
    fn summaries_count_states_per_function_and_class() {
        let mut rows = vec![task("a", "f", "FINISHED", None), task("b", "f", "FAILED", None)];
        rows.push(json!({ "task_id": "c", "name": "A.m", "func_or_class_name": "A.m", "type": "ACTOR_TASK",
                          "state": "RUNNING" }));
        let tasks = summarize_tasks(&rows);
        let cluster = &tasks["result"]["node_id_to_summary"]["cluster"];
        assert_eq!(cluster["summary"]["f"]["state_counts"], json!({ "FINISHED": 1, "FAILED": 1 }));
        assert_eq!((cluster["total_tasks"].clone(), cluster["total_actor_tasks"].clone()), (json!(2), json!(1)));
        let actors = summarize_actors(&[json!({ "class_name": "A", "state": "ALIVE" })]);
        assert_eq!(actors["result"]["node_id_to_summary"]["cluster"]["summary"]["A"]["state_counts"]["ALIVE"], 1);
    }
}
