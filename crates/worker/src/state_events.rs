//! What this process saw of the tasks and actors it owns, for the cluster's state API
//! (`oxray list tasks`, `ray list actors`). Changes are merged per task attempt in memory
//! and sent to the head in one batch a second, off the path of the calls themselves.

use oxray_proto::v1;
use oxray_rpc::HeadClient;
use oxray_types::{now_ms, JobId};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

mod names;
pub use names::{asked, Names, Shape};

/// Task attempts a report carries at most (Ray's `task_events_send_batch_size`, 10,000 there):
/// a process that starts more in a second (tens of thousands of tiny calls) reports the first
/// ones and counts the rest, so that reporting costs the calls little.
const MAX_BUFFERED: usize = 5_000;
const BATCH_VAR: &str = "OXRAY_TASK_EVENTS_SEND_BATCH_SIZE";
const DEFAULT_INTERVAL: Duration = Duration::from_secs(1);
/// As Ray's `RAY_task_events_report_interval_ms`: 0 turns reporting off.
const INTERVAL_VAR: &str = "OXRAY_TASK_EVENTS_REPORT_INTERVAL_MS";

pub use v1::TaskStateCode as State;
pub const FINISHED: State = State::Finished;
pub const FAILED: State = State::Failed;

/// A task id as the key of its entry: its 32 hex digits as a number (no allocation, a
/// cheap hash); any other text by a hash of it.
fn key(task_id: &str) -> u128 {
    match u128::from_str_radix(task_id, 16) {
        Ok(n) if task_id.len() == 32 => n,
        _ => {
            use std::hash::{Hash, Hasher};
            let mut h = std::collections::hash_map::DefaultHasher::new();
            task_id.hash(&mut h);
            (1u128 << 127) | u128::from(h.finish())
        }
    }
}

#[derive(Default)]
struct Pending {
    /// Index into `tasks` of each task reported since the last batch (of its current attempt:
    /// a retry starts a new entry).
    at: HashMap<u128, usize>,
    tasks: Vec<v1::TaskEvent>,
    actors: Vec<v1::ActorEvent>,
    /// The attempt each retried task is on; tasks on their first attempt are not here.
    attempts: HashMap<u128, u32>,
    /// What the events above name by index.
    names: Names,
    dropped: u64,
    /// The job of the changes above that do not name one: the batch's.
    job: JobId,
}

impl Pending {
    /// The process went on to work for `job`: the changes so far name the job they were of.
    fn switch_job(&mut self, job: JobId) {
        let before = self.job.hex_or_empty();
        for event in self.tasks.iter_mut().filter(|e| e.job_id.is_empty()) {
            event.job_id.clone_from(&before);
        }
        self.job = job;
    }
}

pub struct Reporter {
    pending: Mutex<Pending>,
    /// The job this process works for now (`crate::job::current`).
    job: fn() -> JobId,
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
        let batch = std::env::var(BATCH_VAR).ok().and_then(|v| v.trim().parse().ok()).unwrap_or(MAX_BUFFERED);
        let reporter = Arc::new(Self { pending: Mutex::default(), job: crate::job::current, batch });
        let weak = Arc::downgrade(&reporter);
        tokio::spawn(report_every(weak, head, every));
        Some(reporter)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Pending> {
        self.pending.lock().expect("state events lock")
    }

    /// Task `task_id`'s current attempt entered `state`; `fill` adds what is known now,
    /// naming what other events share through the report's `Names`. Runs on the path of
    /// every call: nothing is allocated unless the change is kept. Returns the attempt it
    /// belongs to.
    pub fn task(&self, task_id: &str, state: State, fill: impl FnOnce(&mut v1::TaskEvent, &mut Names)) -> u32 {
        self.task_states(task_id, &[state], fill)
    }

    /// `task` for changes that happen at once (an actor call sent as it is made).
    pub fn task_states(
        &self,
        task_id: &str,
        states: &[State],
        fill: impl FnOnce(&mut v1::TaskEvent, &mut Names),
    ) -> u32 {
        let time_ms = now_ms();
        let id = key(task_id);
        let mut pending = self.lock();
        let job = (self.job)();
        if job != pending.job {
            pending.switch_job(job);
        }
        let ended = states.iter().any(|s| *s == FINISHED || *s == FAILED);
        let attempt = match pending.attempts.is_empty() {
            true => 0,
            false if ended => pending.attempts.remove(&id).unwrap_or(0),
            false => pending.attempts.get(&id).copied().unwrap_or(0),
        };
        let at = match pending.at.get(&id) {
            Some(&at) => at,
            None => {
                if pending.tasks.len() >= self.batch {
                    // Counted once, at submission: the head ignores the later changes of a
                    // task it never heard of.
                    if matches!(states.first(), Some(State::PendingArgsAvail | State::PendingNodeAssignment)) {
                        pending.dropped += 1;
                    }
                    return attempt;
                }
                let event = v1::TaskEvent {
                    task_id: task_id.to_string(),
                    attempt,
                    transitions: Vec::with_capacity(4),
                    ..Default::default()
                };
                pending.tasks.push(event);
                let at = pending.tasks.len() - 1;
                pending.at.insert(id, at);
                at
            }
        };
        let Pending { tasks, names, .. } = &mut *pending;
        let event = &mut tasks[at];
        for state in states {
            event.transitions.push(v1::TaskTransition { state: String::new(), time_ms, code: *state as i32 });
        }
        fill(event, names);
        attempt
    }

    /// The task's attempt failed and it runs again: the next events are the next attempt's.
    pub fn retry(&self, task_id: &str, error_type: &str, error_message: String) {
        let failed = self.task(task_id, FAILED, |e, _| {
            e.error_type = error_type.to_string();
            e.error_message = error_message;
        });
        let id = key(task_id);
        let mut pending = self.lock();
        pending.attempts.insert(id, failed + 1);
        pending.at.remove(&id);
    }

    pub fn actor(&self, mut event: v1::ActorEvent) {
        event.time_ms = now_ms();
        event.job_id = (self.job)().hex_or_empty();
        self.lock().actors.push(event);
    }

    fn take(&self) -> Option<v1::ReportEventsRequest> {
        let mut pending = self.lock();
        if pending.tasks.is_empty() && pending.actors.is_empty() && pending.dropped == 0 {
            return None;
        }
        pending.at.clear();
        // The next second is likely as busy: its buffer is made at once, not grown by copies.
        let room = Vec::with_capacity(pending.tasks.len());
        let (shapes, places) = pending.names.take();
        Some(v1::ReportEventsRequest {
            tasks: std::mem::replace(&mut pending.tasks, room),
            actors: std::mem::take(&mut pending.actors),
            dropped_tasks: std::mem::take(&mut pending.dropped),
            job_id: pending.job.hex_or_empty(),
            shapes,
            places,
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

    thread_local! {
        static JOB: std::cell::Cell<u32> = const { std::cell::Cell::new(1) };
    }

    fn job() -> JobId {
        JOB.with(|j| JobId(j.get()))
    }

    fn reporter() -> Reporter {
        Reporter { pending: Mutex::default(), job, batch: MAX_BUFFERED }
    }

    fn states(event: &v1::TaskEvent) -> Vec<State> {
        event.transitions.iter().map(|t| t.code()).collect()
    }

    const PENDING: State = State::PendingNodeAssignment;

    #[test]
    fn changes_of_one_attempt_merge_and_retries_start_another() {
        let r = reporter();
        r.task("t", PENDING, |e, _| e.name = "f".into());
        r.task("t", State::Running, |e, names| e.place = names.place("n", "w", 1));
        r.retry("t", "WORKER_DIED", "gone".into());
        r.task("t", PENDING, |_, _| {});
        r.retry("t", "WORKER_DIED", "again".into());
        r.task("t", FINISHED, |_, _| {});
        let batch = r.take().unwrap();
        assert_eq!(batch.tasks.len(), 3);
        assert_eq!((batch.tasks[2].attempt, states(&batch.tasks[2])), (2, vec![FINISHED]));
        let (first, second) = (&batch.tasks[0], &batch.tasks[1]);
        assert_eq!((first.attempt, first.name.as_str(), first.place), (0, "f", 1));
        assert_eq!(batch.places[0].node_id, "n");
        assert_eq!(states(first), [PENDING, State::Running, FAILED]);
        assert_eq!(first.error_type, "WORKER_DIED");
        assert_eq!((second.attempt, states(second)), (1, vec![PENDING, FAILED]));
        assert_eq!(batch.job_id, "01000000");
        assert!(r.take().is_none());
        // A finished task's next events (none are expected) would start at attempt 0 again.
        assert!(r.lock().attempts.is_empty());
    }

    #[test]
    fn a_full_buffer_drops_and_counts() {
        let r = reporter();
        for i in 0..MAX_BUFFERED + 3 {
            r.task(&i.to_string(), PENDING, |_, _| {});
        }
        r.task("0", FINISHED, |_, _| {});
        r.task(&MAX_BUFFERED.to_string(), FINISHED, |_, _| {});
        let batch = r.take().unwrap();
        assert_eq!((batch.tasks.len(), batch.dropped_tasks), (MAX_BUFFERED, 3));
        assert_eq!(batch.tasks[0].transitions.len(), 2);
    }

    #[test]
    fn changes_at_once_are_one_entry_and_ids_key_by_their_digits() {
        let r = reporter();
        let id = "0123456789abcdef0123456789abcdef";
        r.task_states(id, &[PENDING, State::Running], |e, _| e.name = "A.f".into());
        r.task(id, FINISHED, |_, _| {});
        let batch = r.take().unwrap();
        assert_eq!(states(&batch.tasks[0]), [PENDING, State::Running, FINISHED]);
        assert_eq!(key(id), 0x0123456789abcdef0123456789abcdef);
        assert_ne!(key("t"), key("u"));
        assert_ne!(key("t") >> 127, 0);
    }

    #[test]
    fn the_interval_comes_from_the_environment_value() {
        assert_eq!(interval(None), Some(DEFAULT_INTERVAL));
        assert_eq!(interval(Some("0")), None);
        assert_eq!(interval(Some("250")), Some(Duration::from_millis(250)));
        assert_eq!(interval(Some("soon")), Some(DEFAULT_INTERVAL));
    }

    #[test]
    fn changes_name_the_job_the_process_worked_for_when_they_came() {
        let r = reporter();
        r.task("t", PENDING, |_, _| {});
        JOB.with(|j| j.set(2));
        r.task("t", State::Running, |_, _| {});
        r.task("u", PENDING, |_, _| {});
        let batch = r.take().unwrap();
        assert_eq!(batch.job_id, "02000000");
        // The head fills in the batch's job where a change names none.
        let jobs: Vec<&str> = batch.tasks.iter().map(|e| e.job_id.as_str()).collect();
        assert_eq!(jobs, ["01000000", ""]);
    }
}
