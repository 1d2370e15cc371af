//! The tasks and actors of the cluster as their owners report them (`ReportEvents`), for
//! the state API. Kept in memory only and bounded: the newest `max_ended` ended task
//! attempts and dead actors are kept, older ones forgotten, so a million short tasks do not
//! grow the head.

use oxray_proto::v1;
use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

/// How many records of work not ended yet are kept, per ended one kept.
const LIVE_PER_ENDED: usize = 10;

/// A transition's state by name: reporters send codes, named only when shown (a report
/// of thousands of changes a second makes no strings for them).
pub fn state_name(t: &v1::TaskTransition) -> &str {
    if !t.state.is_empty() {
        return &t.state;
    }
    match t.code() {
        v1::TaskStateCode::PendingArgsAvail => "PENDING_ARGS_AVAIL",
        v1::TaskStateCode::PendingNodeAssignment => "PENDING_NODE_ASSIGNMENT",
        v1::TaskStateCode::Running => "RUNNING",
        v1::TaskStateCode::Finished => "FINISHED",
        v1::TaskStateCode::Failed => "FAILED",
        v1::TaskStateCode::Unspecified => "NIL",
    }
}

fn is_ended_task(state: &str) -> bool {
    state == "FINISHED" || state == "FAILED"
}

/// Takes `from` when it says something.
fn keep(into: &mut String, from: String) {
    if !from.is_empty() {
        *into = from;
    }
}

/// A task attempt: everything its owner reported, merged. Boxed: the table of tens of
/// thousands of them stays small to search, and an entry moves as a pointer.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TaskRecord {
    pub event: Box<v1::TaskEvent>,
}

impl TaskRecord {
    /// The latest state.
    pub fn state(&self) -> &str {
        self.event.transitions.last().map_or("NIL", state_name)
    }

    fn ended(&self) -> bool {
        is_ended_task(self.state())
    }

    fn merge(&mut self, e: v1::TaskEvent) {
        let into = &mut self.event;
        keep(&mut into.name, e.name);
        keep(&mut into.kind, e.kind);
        keep(&mut into.job_id, e.job_id);
        keep(&mut into.actor_id, e.actor_id);
        keep(&mut into.node_id, e.node_id);
        keep(&mut into.worker_id, e.worker_id);
        keep(&mut into.error_type, e.error_type);
        keep(&mut into.error_message, e.error_message);
        keep(&mut into.placement_group_id, e.placement_group_id);
        keep(&mut into.parent_task_id, e.parent_task_id);
        if e.worker_pid != 0 {
            into.worker_pid = e.worker_pid;
        }
        if !e.required_resources.is_empty() {
            into.required_resources = e.required_resources;
        }
        if !e.log_offsets.is_empty() {
            into.log_offsets = e.log_offsets;
        }
        // An ended attempt stays ended: a late report of an earlier state changes nothing.
        let was_ended = is_ended_task(into.transitions.last().map_or("", state_name));
        if !was_ended {
            into.transitions.extend(e.transitions);
        }
    }
}

/// An actor: its owner's reports, merged.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ActorRecord {
    pub event: v1::ActorEvent,
    /// When it first became ALIVE, when it died (0: not yet).
    pub start_time_ms: u64,
    pub end_time_ms: u64,
    pub num_restarts: u32,
}

impl ActorRecord {
    fn merge(&mut self, e: v1::ActorEvent) {
        if self.event.state == "DEAD" {
            return;
        }
        let into = &mut self.event;
        match e.state.as_str() {
            "ALIVE" if self.start_time_ms == 0 => self.start_time_ms = e.time_ms,
            "RESTARTING" => self.num_restarts += 1,
            "DEAD" => self.end_time_ms = e.time_ms,
            _ => {}
        }
        keep(&mut into.actor_id, e.actor_id);
        keep(&mut into.state, e.state);
        keep(&mut into.class_name, e.class_name);
        keep(&mut into.name, e.name);
        keep(&mut into.namespace, e.namespace);
        // An actor belongs to its creator's job for good, whatever its owner works on later.
        if into.job_id.is_empty() {
            into.job_id = e.job_id;
        }
        keep(&mut into.node_id, e.node_id);
        keep(&mut into.worker_id, e.worker_id);
        keep(&mut into.death_cause, e.death_cause);
        keep(&mut into.placement_group_id, e.placement_group_id);
        if e.pid != 0 {
            into.pid = e.pid;
        }
        if !e.required_resources.is_empty() {
            into.required_resources = e.required_resources;
        }
        into.detached |= e.detached;
        into.time_ms = e.time_ms;
    }
}

/// A new attempt's record: what does not change between attempts (the name, the kind, the
/// resources) comes from the attempt before, which its owner reported already.
fn retry_of(previous: &TaskRecord, event: &v1::TaskEvent) -> v1::TaskEvent {
    let p = &previous.event;
    v1::TaskEvent {
        task_id: event.task_id.clone(),
        attempt: event.attempt,
        name: p.name.clone(),
        kind: p.kind.clone(),
        job_id: p.job_id.clone(),
        actor_id: p.actor_id.clone(),
        required_resources: p.required_resources.clone(),
        placement_group_id: p.placement_group_id.clone(),
        parent_task_id: p.parent_task_id.clone(),
        ..Default::default()
    }
}

/// Fills in what an event names by index in its report's tables; an index out of the
/// tables names nothing.
fn named(event: &mut v1::TaskEvent, shapes: &[v1::TaskShape], places: &[v1::TaskPlace]) {
    if let Some(shape) = (event.shape as usize).checked_sub(1).and_then(|at| shapes.get(at)) {
        event.name.clone_from(&shape.name);
        event.kind.clone_from(&shape.kind);
        event.actor_id.clone_from(&shape.actor_id);
        event.placement_group_id.clone_from(&shape.placement_group_id);
        event.required_resources.clone_from(&shape.required_resources);
    }
    if let Some(place) = (event.place as usize).checked_sub(1).and_then(|at| places.get(at)) {
        event.node_id.clone_from(&place.node_id);
        event.worker_id.clone_from(&place.worker_id);
        event.worker_pid = place.worker_pid;
    }
}

/// A task attempt's key: task ids are 128-bit hex, so reports of tens of thousands of tasks
/// a second cost no allocation for their keys.
type Key = (u128, u32);

fn key_of(event: &v1::TaskEvent) -> Option<Key> {
    u128::from_str_radix(&event.task_id, 16).ok().map(|id| (id, event.attempt))
}

#[derive(Default)]
struct Tables {
    tasks: HashMap<Key, TaskRecord>,
    /// Ended attempts, oldest first: the first forgotten.
    ended_tasks: VecDeque<Key>,
    actors: HashMap<String, ActorRecord>,
    dead_actors: VecDeque<String>,
    /// Task attempts not kept: dropped by their reporters or beyond the bounds here.
    dropped_tasks: u64,
}

pub struct TaskStates {
    tables: Mutex<Tables>,
    max_ended: usize,
    /// The application metrics the same reports carry.
    metrics: crate::user_metrics::UserMetrics,
}

impl TaskStates {
    pub fn new(max_ended: usize) -> Self {
        Self { tables: Mutex::default(), max_ended: max_ended.max(1), metrics: Default::default() }
    }

    pub fn metrics(&self) -> &crate::user_metrics::UserMetrics {
        &self.metrics
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Tables> {
        self.tables.lock().expect("task states lock")
    }

    pub fn apply(&self, report: v1::ReportEventsRequest) {
        if !report.metrics.is_empty() {
            self.metrics.record(&report.reporter, report.metrics, std::time::Instant::now());
        }
        let mut t = self.lock();
        t.dropped_tasks += report.dropped_tasks;
        for mut event in report.tasks {
            named(&mut event, &report.shapes, &report.places);
            self.apply_task(&mut t, event, &report.job_id);
        }
        for event in report.actors {
            let id = event.actor_id.clone();
            let record = t.actors.entry(id.clone()).or_default();
            let was_dead = record.event.state == "DEAD";
            record.merge(event);
            if !was_dead && record.event.state == "DEAD" {
                t.dead_actors.push_back(id);
                while t.dead_actors.len() > self.max_ended {
                    if let Some(gone) = t.dead_actors.pop_front() {
                        t.actors.remove(&gone);
                    }
                }
            }
        }
    }

    /// `job_id`: the report's, for an event that names none.
    fn apply_task(&self, t: &mut Tables, event: v1::TaskEvent, job_id: &str) {
        let Some(key) = key_of(&event) else {
            t.dropped_tasks += 1;
            return;
        };
        if !t.tasks.contains_key(&key) {
            if t.tasks.len() >= self.max_ended * (LIVE_PER_ENDED + 1) {
                t.dropped_tasks += 1;
                return;
            }
            let previous = if key.1 == 0 { None } else { t.tasks.get(&(key.0, key.1 - 1)) };
            let fresh = match previous {
                Some(previous) => retry_of(previous, &event),
                // Later changes of a task whose start was not kept (dropped by its reporter
                // or here) make no record: it would have no name.
                None if event.kind.is_empty() => return,
                None => v1::TaskEvent { task_id: event.task_id.clone(), attempt: key.1, ..Default::default() },
            };
            let mut record = TaskRecord { event: Box::new(fresh) };
            if record.event.job_id.is_empty() {
                record.event.job_id = job_id.to_string();
            }
            t.tasks.insert(key, record);
        }
        let record = t.tasks.get_mut(&key).expect("inserted above");
        let was_ended = record.ended();
        record.merge(event);
        if !was_ended && record.ended() {
            t.ended_tasks.push_back(key);
            while t.ended_tasks.len() > self.max_ended {
                if let Some(gone) = t.ended_tasks.pop_front() {
                    t.tasks.remove(&gone);
                    t.dropped_tasks += 1;
                }
            }
        }
    }

    pub fn tasks(&self) -> (Vec<TaskRecord>, u64) {
        let t = self.lock();
        (t.tasks.values().cloned().collect(), t.dropped_tasks)
    }

    pub fn actors(&self) -> Vec<ActorRecord> {
        self.lock().actors.values().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(id: &str, attempt: u32, states: &[&str]) -> v1::TaskEvent {
        v1::TaskEvent {
            task_id: id.into(),
            attempt,
            kind: "NORMAL_TASK".into(),
            transitions: states
                .iter()
                .enumerate()
                .map(|(i, s)| v1::TaskTransition { state: s.to_string(), time_ms: i as u64 + 1, ..Default::default() })
                .collect(),
            ..Default::default()
        }
    }

    fn report(tasks: Vec<v1::TaskEvent>, actors: Vec<v1::ActorEvent>) -> v1::ReportEventsRequest {
        v1::ReportEventsRequest { tasks, actors, ..Default::default() }
    }

    #[test]
    fn states_sent_as_codes_are_named_and_events_take_the_reports_job() {
        let states = TaskStates::new(10);
        let code = |c: v1::TaskStateCode, time_ms| v1::TaskTransition { code: c as i32, time_ms, ..Default::default() };
        let event = v1::TaskEvent {
            task_id: "ab".repeat(16),
            name: "f".into(),
            kind: "NORMAL_TASK".into(),
            transitions: vec![code(v1::TaskStateCode::PendingNodeAssignment, 1), code(v1::TaskStateCode::Finished, 2)],
            ..Default::default()
        };
        states.apply(v1::ReportEventsRequest { tasks: vec![event], job_id: "job-7".into(), ..Default::default() });
        let (tasks, _) = states.tasks();
        assert_eq!((tasks[0].state(), tasks[0].event.job_id.as_str()), ("FINISHED", "job-7"));
        assert_eq!(state_name(&tasks[0].event.transitions[0]), "PENDING_NODE_ASSIGNMENT");
    }

    #[test]
    fn events_take_what_they_name_from_their_reports_tables() {
        let states = TaskStates::new(10);
        let shape = v1::TaskShape { name: "f".into(), kind: "NORMAL_TASK".into(), ..Default::default() };
        let place = v1::TaskPlace { node_id: "n1".into(), worker_id: "w1".into(), worker_pid: 42 };
        let (mut named, mut astray) = (task("b1", 0, &["RUNNING"]), task("b2", 0, &["RUNNING"]));
        (named.shape, named.place) = (1, 1);
        (astray.shape, astray.place, astray.name) = (2, 9, "g".into());
        let report = v1::ReportEventsRequest {
            tasks: vec![named, astray],
            shapes: vec![shape],
            places: vec![place],
            ..Default::default()
        };
        states.apply(report);
        let (mut tasks, _) = states.tasks();
        tasks.sort_by(|a, b| a.event.task_id.cmp(&b.event.task_id));
        let e = &tasks[0].event;
        assert_eq!((e.name.as_str(), e.node_id.as_str(), e.worker_id.as_str(), e.worker_pid), ("f", "n1", "w1", 42));
        assert_eq!(
            (tasks[1].event.name.as_str(), tasks[1].event.node_id.as_str()),
            ("g", ""),
            "an index out of range names nothing"
        );
    }

    #[test]
    fn reports_of_an_attempt_merge_and_ended_ones_stay_ended() {
        let states = TaskStates::new(10);
        let mut first = task("a1", 0, &["PENDING_NODE_ASSIGNMENT"]);
        first.name = "f".into();
        states.apply(report(vec![first], vec![]));
        let mut running = task("a1", 0, &["RUNNING", "FINISHED"]);
        running.node_id = "n1".into();
        states.apply(report(vec![running, task("a1", 0, &["RUNNING"])], vec![]));
        let (tasks, dropped) = states.tasks();
        assert_eq!((tasks.len(), dropped), (1, 0));
        let t = &tasks[0];
        assert_eq!((t.state(), t.event.name.as_str(), t.event.node_id.as_str()), ("FINISHED", "f", "n1"));
        assert_eq!(t.event.transitions.len(), 3);
    }

    #[test]
    fn a_retry_keeps_what_its_first_attempt_said() {
        let states = TaskStates::new(10);
        let mut first = task("a1", 0, &["PENDING_NODE_ASSIGNMENT", "RUNNING", "FAILED"]);
        first.name = "f".into();
        first.kind = "NORMAL_TASK".into();
        states.apply(report(vec![first], vec![]));
        let mut retry = task("a1", 1, &["RUNNING", "FINISHED"]);
        retry.kind.clear();
        states.apply(report(vec![retry], vec![]));
        let mut unknown = task("bbbb", 0, &["FINISHED"]);
        unknown.kind.clear();
        states.apply(report(vec![unknown, task("not an id", 0, &["RUNNING"])], vec![]));
        let (mut tasks, _) = states.tasks();
        assert_eq!(tasks.len(), 2);
        tasks.sort_by_key(|t| t.event.attempt);
        assert_eq!((tasks[1].event.name.as_str(), tasks[1].state()), ("f", "FINISHED"));
    }

    #[test]
    fn only_the_newest_ended_attempts_are_kept() {
        let states = TaskStates::new(3);
        states.apply(report(vec![task("ffff", 0, &["RUNNING"])], vec![]));
        for i in 0..100 {
            states.apply(report(vec![task(&i.to_string(), 0, &["RUNNING", "FINISHED"])], vec![]));
        }
        let (tasks, dropped) = states.tasks();
        let mut ids: Vec<_> = tasks.iter().map(|t| t.event.task_id.clone()).collect();
        ids.sort();
        assert_eq!(ids, ["97", "98", "99", "ffff"]);
        assert_eq!(dropped, 97);
    }

    #[test]
    fn work_not_ended_is_bounded_too() {
        let states = TaskStates::new(1);
        let pending: Vec<_> = (0..50).map(|i| task(&i.to_string(), 0, &["PENDING_NODE_ASSIGNMENT"])).collect();
        states.apply(report(pending, vec![]));
        let (tasks, dropped) = states.tasks();
        assert_eq!((tasks.len(), dropped), (LIVE_PER_ENDED + 1, 50 - (LIVE_PER_ENDED as u64 + 1)));
    }

    fn actor(id: &str, state: &str, time_ms: u64) -> v1::ActorEvent {
        v1::ActorEvent { actor_id: id.into(), state: state.into(), time_ms, ..Default::default() }
    }

    #[test]
    fn actors_count_restarts_and_dead_ones_are_bounded() {
        let states = TaskStates::new(2);
        let mut created = actor("a", "PENDING_CREATION", 1);
        created.class_name = "Counter".into();
        states.apply(report(
            vec![],
            vec![created, actor("a", "ALIVE", 2), actor("a", "RESTARTING", 3), actor("a", "ALIVE", 4)],
        ));
        let a = &states.actors()[0];
        assert_eq!((a.event.state.as_str(), a.event.class_name.as_str()), ("ALIVE", "Counter"));
        assert_eq!((a.start_time_ms, a.num_restarts, a.end_time_ms), (2, 1, 0));
        for id in ["x", "y", "z"] {
            states.apply(report(vec![], vec![actor(id, "DEAD", 9)]));
        }
        states.apply(report(vec![], vec![actor("y", "ALIVE", 10)]));
        let mut ids: Vec<_> = states.actors().into_iter().map(|a| (a.event.actor_id, a.event.state)).collect();
        ids.sort();
        assert_eq!(ids, [("a".into(), "ALIVE".into()), ("y".into(), "DEAD".into()), ("z".into(), "DEAD".into())]);
    }
}
