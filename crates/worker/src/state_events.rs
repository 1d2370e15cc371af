//! What this process saw of the tasks and actors it owns, for the cluster's state API
//! (`oxray list tasks`, `ray list actors`). Changes are merged per task attempt in memory
//! and sent to the head in one batch a second, off the path of the calls themselves.

use oxray_proto::v1;
use oxray_rpc::HeadClient;
use oxray_types::now_ms;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

/// Task attempts a report carries at most (Ray's `task_events_send_batch_size`, 10,000 there):
/// a process that starts more in a second (tens of thousands of tiny calls) reports the first
/// ones and counts the rest, so that reporting costs the calls little.
const MAX_BUFFERED: usize = 5_000;
const BATCH_VAR: &str = "OXRAY_TASK_EVENTS_SEND_BATCH_SIZE";
const DEFAULT_INTERVAL: Duration = Duration::from_secs(1);
/// As Ray's `RAY_task_events_report_interval_ms`: 0 turns reporting off.
const INTERVAL_VAR: &str = "OXRAY_TASK_EVENTS_REPORT_INTERVAL_MS";

pub const FINISHED: &str = "FINISHED";
pub const FAILED: &str = "FAILED";

#[derive(Default)]
struct Pending {
    /// Index into `tasks` of each task reported since the last batch (of its current attempt:
    /// a retry starts a new entry).
    at: HashMap<String, usize>,
    tasks: Vec<v1::TaskEvent>,
    actors: Vec<v1::ActorEvent>,
    /// The attempt each retried task is on; tasks on their first attempt are not here.
    attempts: HashMap<String, u32>,
    dropped: u64,
}

pub struct Reporter {
    pending: Mutex<Pending>,
    job_id: String,
    /// Task attempts one report carries at most.
    batch: usize,
}

/// The interval from the environment's value: `None` turns reporting off.
fn interval(value: Option<&str>) -> Option<Duration> {
    match value.map(str::trim).and_then(|v| v.parse::<u64>().ok()) {
        Some(0) => None,
        Some(ms) => Some(Duration::from_millis(ms)),
        None => Some(DEFAULT_INTERVAL),
    }
}

impl Reporter {
    /// Starts reporting to `head` on the current runtime, unless turned off. The reporting
    /// task ends when the reporter is dropped.
    pub fn start(head: HeadClient) -> Option<Arc<Self>> {
        let every = interval(std::env::var(INTERVAL_VAR).ok().as_deref())?;
        let job_id = std::env::var("OXRAY_JOB_ID").unwrap_or_default();
        let batch = std::env::var(BATCH_VAR).ok().and_then(|v| v.trim().parse().ok()).unwrap_or(MAX_BUFFERED);
        let reporter = Arc::new(Self { pending: Mutex::default(), job_id, batch });
        let weak = Arc::downgrade(&reporter);
        tokio::spawn(report_every(weak, head, every));
        Some(reporter)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Pending> {
        self.pending.lock().expect("state events lock")
    }

    /// Task `task_id`'s current attempt entered `state`; `fill` adds what is known now.
    /// Runs on the path of every call: nothing is allocated unless the change is kept.
    /// Returns the attempt it belongs to.
    pub fn task(&self, task_id: &str, state: &str, fill: impl FnOnce(&mut v1::TaskEvent)) -> u32 {
        let time_ms = now_ms();
        let mut pending = self.lock();
        let ended = state == FINISHED || state == FAILED;
        let attempt = match pending.attempts.is_empty() {
            true => 0,
            false if ended => pending.attempts.remove(task_id).unwrap_or(0),
            false => pending.attempts.get(task_id).copied().unwrap_or(0),
        };
        let at = match pending.at.get(task_id) {
            Some(&at) => at,
            None => {
                if pending.tasks.len() >= self.batch {
                    // Counted once, at submission: the head ignores the later changes of a
                    // task it never heard of.
                    if state.starts_with("PENDING") {
                        pending.dropped += 1;
                    }
                    return attempt;
                }
                let event = v1::TaskEvent {
                    task_id: task_id.to_string(),
                    attempt,
                    job_id: self.job_id.clone(),
                    ..Default::default()
                };
                pending.tasks.push(event);
                let at = pending.tasks.len() - 1;
                pending.at.insert(task_id.to_string(), at);
                at
            }
        };
        let event = &mut pending.tasks[at];
        event.transitions.push(v1::TaskTransition { state: state.to_string(), time_ms });
        fill(event);
        attempt
    }

    /// The task's attempt failed and it runs again: the next events are the next attempt's.
    pub fn retry(&self, task_id: &str, error_type: &str, error_message: String) {
        let failed = self.task(task_id, FAILED, |e| {
            e.error_type = error_type.to_string();
            e.error_message = error_message;
        });
        let mut pending = self.lock();
        pending.attempts.insert(task_id.to_string(), failed + 1);
        pending.at.remove(task_id);
    }

    pub fn actor(&self, mut event: v1::ActorEvent) {
        event.time_ms = now_ms();
        event.job_id.clone_from(&self.job_id);
        self.lock().actors.push(event);
    }

    fn take(&self) -> Option<v1::ReportEventsRequest> {
        let mut pending = self.lock();
        if pending.tasks.is_empty() && pending.actors.is_empty() && pending.dropped == 0 {
            return None;
        }
        pending.at.clear();
        Some(v1::ReportEventsRequest {
            tasks: std::mem::take(&mut pending.tasks),
            actors: std::mem::take(&mut pending.actors),
            dropped_tasks: std::mem::take(&mut pending.dropped),
            ..Default::default()
        })
    }

    /// Sends what is pending now (a driver that ends sends its last changes).
    pub async fn flush(&self, head: &mut HeadClient) {
        if let Some(batch) = self.take() {
            // The state API is a view: a batch the head cannot take is lost, not retried.
            if let Err(e) = head.report_events(batch).await {
                tracing::debug!("cannot report task events: {}", e.message());
            }
        }
    }
}

async fn report_every(reporter: Weak<Reporter>, mut head: HeadClient, every: Duration) {
    loop {
        tokio::time::sleep(every).await;
        let Some(reporter) = reporter.upgrade() else { return };
        reporter.flush(&mut head).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reporter() -> Reporter {
        Reporter { pending: Mutex::default(), job_id: "job".into(), batch: MAX_BUFFERED }
    }

    fn states(event: &v1::TaskEvent) -> Vec<&str> {
        event.transitions.iter().map(|t| t.state.as_str()).collect()
    }

    #[test]
    fn changes_of_one_attempt_merge_and_retries_start_another() {
        let r = reporter();
        r.task("t", "PENDING_NODE_ASSIGNMENT", |e| e.name = "f".into());
        r.task("t", "RUNNING", |e| e.node_id = "n".into());
        r.retry("t", "WORKER_DIED", "gone".into());
        r.task("t", "PENDING_NODE_ASSIGNMENT", |_| {});
        r.retry("t", "WORKER_DIED", "again".into());
        r.task("t", FINISHED, |_| {});
        let batch = r.take().unwrap();
        assert_eq!(batch.tasks.len(), 3);
        assert_eq!((batch.tasks[2].attempt, states(&batch.tasks[2])), (2, vec![FINISHED]));
        let (first, second) = (&batch.tasks[0], &batch.tasks[1]);
        assert_eq!((first.attempt, first.name.as_str(), first.node_id.as_str()), (0, "f", "n"));
        assert_eq!(states(first), ["PENDING_NODE_ASSIGNMENT", "RUNNING", FAILED]);
        assert_eq!(first.error_type, "WORKER_DIED");
        assert_eq!((second.attempt, states(second)), (1, vec!["PENDING_NODE_ASSIGNMENT", FAILED]));
        assert_eq!(first.job_id, "job");
        assert!(r.take().is_none());
        // A finished task's next events (none are expected) would start at attempt 0 again.
        assert!(r.lock().attempts.is_empty());
    }

    #[test]
    fn a_full_buffer_drops_and_counts() {
        let r = reporter();
        for i in 0..MAX_BUFFERED + 3 {
            r.task(&i.to_string(), "PENDING_NODE_ASSIGNMENT", |_| {});
        }
        r.task("0", FINISHED, |_| {});
        r.task(&MAX_BUFFERED.to_string(), FINISHED, |_| {});
        let batch = r.take().unwrap();
        assert_eq!((batch.tasks.len(), batch.dropped_tasks), (MAX_BUFFERED, 3));
        assert_eq!(batch.tasks[0].transitions.len(), 2);
    }

    #[test]
    fn the_interval_comes_from_the_environment_value() {
        assert_eq!(interval(None), Some(DEFAULT_INTERVAL));
        assert_eq!(interval(Some("0")), None);
        assert_eq!(interval(Some("250")), Some(Duration::from_millis(250)));
        assert_eq!(interval(Some("soon")), Some(DEFAULT_INTERVAL));
    }
}
