//! What the node knows of the worker processes it started, alive and gone, for the state
//! API's workers and for finding a worker's log by its id or pid after it died.

use std::collections::{HashMap, VecDeque};

/// Ended workers remembered per node (newest kept).
pub const ENDED_KEPT: usize = 1_000;

/// Why a worker ended, in Ray's words (`exit_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitType {
    SystemError,
    IntendedSystemExit,
    IntendedUserExit,
}

impl ExitType {
    pub fn as_str(self) -> &'static str {
        match self {
            ExitType::SystemError => "SYSTEM_ERROR",
            ExitType::IntendedSystemExit => "INTENDED_SYSTEM_EXIT",
            ExitType::IntendedUserExit => "INTENDED_USER_EXIT",
        }
    }
}

/// How a process that ended on its own ended: exit code 0 is the worker's own choice (an
/// actor's `exit_actor`, `max_calls`); a code or a signal otherwise is a crash.
pub fn exit_of(code: Option<i32>, signal: Option<i32>) -> (ExitType, String) {
    match (code, signal) {
        (Some(0), _) => (ExitType::IntendedUserExit, "the worker exited with code 0".to_string()),
        (Some(code), _) => (ExitType::SystemError, format!("the worker exited with code {code}")),
        (None, Some(signal)) => (ExitType::SystemError, format!("the worker was killed by signal {signal}")),
        (None, None) => (ExitType::SystemError, "the worker process is gone".to_string()),
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct WorkerRecord {
    pub id: String,
    pub pid: u32,
    /// Milliseconds since the epoch: asked to start, registered (ready), ended.
    pub launch_ms: u64,
    pub start_ms: Option<u64>,
    pub end_ms: Option<u64>,
    pub exit: Option<(ExitType, String)>,
}

impl WorkerRecord {
    pub fn is_alive(&self) -> bool {
        self.end_ms.is_none()
    }
}

/// The node's workers: those alive by id, and the newest `cap` ended ones.
pub struct WorkerRecords {
    alive: HashMap<String, WorkerRecord>,
    ended: VecDeque<WorkerRecord>,
    cap: usize,
}

impl WorkerRecords {
    pub fn new(cap: usize) -> Self {
        Self { alive: HashMap::new(), ended: VecDeque::new(), cap }
    }

    pub fn launched(&mut self, id: &str, now_ms: u64) {
        let record =
            WorkerRecord { id: id.to_string(), pid: 0, launch_ms: now_ms, start_ms: None, end_ms: None, exit: None };
        self.alive.insert(id.to_string(), record);
    }

    /// The process exists (it is not ready yet).
    pub fn spawned(&mut self, id: &str, pid: u32) {
        if let Some(r) = self.alive.get_mut(id) {
            r.pid = pid;
        }
    }

    pub fn started(&mut self, id: &str, pid: u32, now_ms: u64) {
        if let Some(r) = self.alive.get_mut(id) {
            r.pid = pid;
            r.start_ms = Some(now_ms);
        }
    }

    /// The first end recorded for a worker is the one kept: it knows why.
    pub fn ended(&mut self, id: &str, exit: (ExitType, String), now_ms: u64) {
        let Some(mut r) = self.alive.remove(id) else { return };
        r.end_ms = Some(now_ms);
        r.exit = Some(exit);
        self.ended.push_back(r);
        while self.ended.len() > self.cap {
            self.ended.pop_front();
        }
    }

    /// Every record, alive ones first, each group oldest first.
    pub fn list(&self) -> Vec<WorkerRecord> {
        let mut alive: Vec<WorkerRecord> = self.alive.values().cloned().collect();
        alive.sort_by(|a, b| (a.launch_ms, &a.id).cmp(&(b.launch_ms, &b.id)));
        alive.extend(self.ended.iter().cloned());
        alive
    }

    /// The newest worker that had this pid.
    pub fn by_pid(&self, pid: u32) -> Option<&WorkerRecord> {
        self.alive.values().find(|r| r.pid == pid).or_else(|| self.ended.iter().rev().find(|r| r.pid == pid))
    }
}

pub fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_worker_goes_from_launched_to_ended_once() {
        let mut records = WorkerRecords::new(10);
        records.launched("a", 1);
        records.spawned("a", 42);
        assert_eq!((records.list()[0].pid, records.list()[0].start_ms), (42, None));
        records.started("a", 42, 2);
        assert!(records.list()[0].is_alive());
        records.ended("a", (ExitType::IntendedSystemExit, "idle".into()), 3);
        records.ended("a", (ExitType::SystemError, "later".into()), 4);
        let list = records.list();
        assert_eq!(list.len(), 1);
        assert_eq!((list[0].pid, list[0].start_ms, list[0].end_ms), (42, Some(2), Some(3)));
        assert_eq!(list[0].exit.as_ref().unwrap().0, ExitType::IntendedSystemExit);
    }

    #[test]
    fn ended_workers_are_bounded_newest_kept_and_found_by_pid() {
        let mut records = WorkerRecords::new(2);
        for (i, id) in ["a", "b", "c"].iter().enumerate() {
            records.launched(id, i as u64);
            records.started(id, 100 + i as u32, i as u64);
            records.ended(id, exit_of(Some(1), None), i as u64);
        }
        records.launched("d", 9);
        let ids: Vec<String> = records.list().into_iter().map(|r| r.id).collect();
        assert_eq!(ids, ["d", "b", "c"]);
        assert_eq!(records.by_pid(102).map(|r| r.id.as_str()), Some("c"));
        assert!(records.by_pid(100).is_none());
    }

    #[test]
    fn exits_are_classified_as_ray_does() {
        assert_eq!(exit_of(Some(0), None).0, ExitType::IntendedUserExit);
        assert_eq!(exit_of(Some(3), None), (ExitType::SystemError, "the worker exited with code 3".into()));
        assert_eq!(exit_of(None, Some(9)).1, "the worker was killed by signal 9");
    }
}
