//! The memory monitor: when the node's memory use passes a threshold, the agent ends the
//! worker of the newest task (else of the newest actor) before the kernel's OOM killer picks
//! a process at random, the agent itself maybe. The task fails with an out-of-memory error,
//! or runs again as its retries allow, as Ray's memory monitor does.

use std::time::Duration;

/// Ray's defaults: 95% of the node's memory, looked at every 250 ms.
pub const DEFAULT_THRESHOLD: f64 = 0.95;
pub const DEFAULT_REFRESH: Duration = Duration::from_millis(250);

#[derive(Debug, Clone, Copy)]
pub struct MonitorConfig {
    /// The fraction of the node's memory past which a worker is ended.
    pub threshold: f64,
    /// How often the use is read; None: never (the monitor is off).
    pub refresh: Option<Duration>,
}

impl Default for MonitorConfig {
    fn default() -> Self {
        Self { threshold: DEFAULT_THRESHOLD, refresh: Some(DEFAULT_REFRESH) }
    }
}

/// Bytes in use and the bytes there are, on the node or in its memory cgroup.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    pub used: u64,
    pub total: u64,
}

impl Usage {
    pub fn fraction(&self) -> f64 {
        if self.total == 0 {
            return 0.0;
        }
        self.used as f64 / self.total as f64
    }

    pub fn over(&self, threshold: f64) -> bool {
        self.fraction() > threshold
    }

    pub fn describe(&self, threshold: f64) -> String {
        const GIB: f64 = (1u64 << 30) as f64;
        format!(
            "the node's memory use {:.2}/{:.2} GiB ({:.1}%) passed the memory monitor's threshold of {:.1}%",
            self.used as f64 / GIB,
            self.total as f64 / GIB,
            self.fraction() * 100.0,
            threshold * 100.0
        )
    }
}

/// The machine's use from /proc/meminfo: what is not available is used (page cache that can
/// be dropped is available).
pub fn from_meminfo(text: &str) -> Option<Usage> {
    let field = |name: &str| -> Option<u64> {
        let line = text.lines().find(|l| l.starts_with(name))?;
        let kib: u64 = line[name.len()..].trim().trim_end_matches("kB").trim().parse().ok()?;
        Some(kib * 1024)
    };
    let total = field("MemTotal:")?;
    let available = field("MemAvailable:")?;
    Some(Usage { used: total.saturating_sub(available), total })
}

/// A memory cgroup's use (v2: `memory.max`, `memory.current`, `memory.stat` with
/// `inactive_file`; v1: `memory.limit_in_bytes`, `memory.usage_in_bytes`, `memory.stat`
/// with `total_inactive_file`), less the file cache the kernel can drop; None when the
/// cgroup has no limit.
pub fn from_cgroup(limit: &str, current: &str, stat: &str, inactive_key: &str) -> Option<Usage> {
    let total: u64 = limit.trim().parse().ok()?;
    let current: u64 = current.trim().parse().ok()?;
    let inactive_file = stat
        .lines()
        .find_map(|l| l.strip_prefix(inactive_key)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap_or(0);
    Some(Usage { used: current.saturating_sub(inactive_file), total })
}

/// The use that matters here: the memory cgroup's when its limit is below the machine's
/// memory (a container), else the machine's.
pub fn read_usage() -> Option<Usage> {
    let read = |path: &str| std::fs::read_to_string(path).ok();
    let machine = from_meminfo(&read("/proc/meminfo")?)?;
    let v2 =
        ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current", "/sys/fs/cgroup/memory.stat", "inactive_file");
    let v1 = (
        "/sys/fs/cgroup/memory/memory.limit_in_bytes",
        "/sys/fs/cgroup/memory/memory.usage_in_bytes",
        "/sys/fs/cgroup/memory/memory.stat",
        "total_inactive_file",
    );
    let cgroup = [v2, v1].into_iter().find_map(|(limit, current, stat, key)| {
        from_cgroup(&read(limit)?, &read(current)?, &read(stat)?, key).filter(|u| u.total < machine.total)
    });
    Some(cgroup.unwrap_or(machine))
}

/// A lease the monitor may end, as the pool describes it.
#[derive(Debug, Clone)]
pub struct Candidate {
    pub lease_id: String,
    pub is_actor: bool,
    /// Larger is newer.
    pub granted: u64,
}

/// Which lease to end: the newest task's, else the newest actor's (a task can run again
/// where an actor loses its state).
pub fn pick(candidates: &[Candidate]) -> Option<&Candidate> {
    candidates.iter().max_by_key(|c| (!c.is_actor, c.granted))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meminfo_counts_what_is_not_available() {
        let text = "MemTotal:       16000000 kB\nMemFree:         1000000 kB\nMemAvailable:    4000000 kB\n";
        let usage = from_meminfo(text).unwrap();
        assert_eq!(usage, Usage { used: 12_000_000 * 1024, total: 16_000_000 * 1024 });
        assert!(usage.over(0.7) && !usage.over(0.75));
        assert!(from_meminfo("MemTotal: 5 kB\n").is_none());
    }

    #[test]
    fn a_cgroup_limit_counts_without_its_droppable_cache() {
        let usage = from_cgroup("1000\n", "900\n", "anon 500\ninactive_file 300\n", "inactive_file").unwrap();
        assert_eq!(usage, Usage { used: 600, total: 1000 });
        let v1 = from_cgroup("1000", "900", "inactive_file 5\ntotal_inactive_file 100\n", "total_inactive_file");
        assert_eq!(v1, Some(Usage { used: 800, total: 1000 }));
        assert!(from_cgroup("max\n", "900\n", "", "inactive_file").is_none(), "no limit: the machine's memory counts");
        assert!(usage.describe(0.5).contains("60.0%"));
    }

    #[test]
    fn the_newest_task_goes_first_then_the_newest_actor() {
        let c = |id: &str, is_actor, granted| Candidate { lease_id: id.into(), is_actor, granted };
        let all = [c("old-task", false, 1), c("new-actor", true, 5), c("new-task", false, 3)];
        assert_eq!(pick(&all).unwrap().lease_id, "new-task");
        let actors = [c("a1", true, 1), c("a2", true, 2)];
        assert_eq!(pick(&actors).unwrap().lease_id, "a2");
        assert!(pick(&[]).is_none());
    }
}
