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

/// Where the process's memory cgroup lies under the cgroup mounts, from /proc/self/cgroup:
/// the v2 path (`0::/path`) and the v1 memory controller's (`N:...memory...:/path`).
pub fn own_cgroups(text: &str) -> (Option<String>, Option<String>) {
    let (mut v2, mut v1) = (None, None);
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next()) else { continue };
        if id == "0" && controllers.is_empty() {
            v2 = Some(path.to_string());
        } else if controllers.split(',').any(|c| c == "memory") {
            v1 = Some(path.to_string());
        }
    }
    (v2, v1)
}

/// A cgroup's folder and those above it, up to the mount: a limit set on any of them holds
/// for the process (a job's cgroup under a container's, a systemd unit's under its slice).
pub fn folder_and_ancestors(mount: &str, path: &str) -> Vec<String> {
    let mut folders = Vec::new();
    let mut parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty() && *p != "..").collect();
    loop {
        folders.push(std::iter::once(mount).chain(parts.iter().copied()).collect::<Vec<_>>().join("/"));
        if parts.pop().is_none() {
            return folders;
        }
    }
}

/// The fullest of the readings limited below the machine's memory (the first to run out:
/// a parent shared with others may be fuller than the agent's own cgroup), else the machine's.
pub fn fullest(machine: Usage, readings: impl IntoIterator<Item = Usage>) -> Usage {
    readings
        .into_iter()
        .filter(|u| u.total < machine.total)
        .max_by(|a, b| a.fraction().total_cmp(&b.fraction()))
        .unwrap_or(machine)
}

/// The use that matters here: that of the memory cgroup the agent runs in, or of one above
/// it, when limited below the machine's memory (a container, a batch job, a systemd unit),
/// the fullest of them; else the machine's.
pub fn read_usage() -> Option<Usage> {
    let read = |path: String| std::fs::read_to_string(path).ok();
    let machine = from_meminfo(&read("/proc/meminfo".into())?)?;
    let (v2, v1) = own_cgroups(&read("/proc/self/cgroup".into()).unwrap_or_default());
    let levels = |mount: &str, path: Option<String>| folder_and_ancestors(mount, path.as_deref().unwrap_or("/"));
    let v2 = levels("/sys/fs/cgroup", v2).into_iter().map(|d| {
        (format!("{d}/memory.max"), format!("{d}/memory.current"), format!("{d}/memory.stat"), "inactive_file")
    });
    let v1 = levels("/sys/fs/cgroup/memory", v1).into_iter().map(|d| {
        let f = |name: &str| format!("{d}/memory.{name}");
        (f("limit_in_bytes"), f("usage_in_bytes"), f("stat"), "total_inactive_file")
    });
    // The limit first: a cgroup with none (the root's aggregate stat is costly) is not read.
    let limited =
        |limit: &str| read(limit.to_string()).filter(|l| l.trim().parse::<u64>().is_ok_and(|l| l < machine.total));
    let readings = v2
        .chain(v1)
        .filter_map(|(limit, current, stat, key)| from_cgroup(&limited(&limit)?, &read(current)?, &read(stat)?, key));
    Some(fullest(machine, readings))
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
    fn the_agents_own_cgroup_and_those_above_it_are_read() {
        let v1 = "12:pids:/x\n4:memory:/slurm/uid_0/job_7\n0::/user.slice/a.scope\n";
        assert_eq!(own_cgroups(v1), (Some("/user.slice/a.scope".into()), Some("/slurm/uid_0/job_7".into())));
        assert_eq!(own_cgroups("5:cpu,memory:/\n"), (None, Some("/".into())));
        assert_eq!(own_cgroups("garbage\n"), (None, None));
        assert_eq!(folder_and_ancestors("/m", "/a/b"), vec!["/m/a/b", "/m/a", "/m"]);
        assert_eq!(folder_and_ancestors("/m", "/"), vec!["/m"]);
        assert_eq!(folder_and_ancestors("/m", "/../a"), vec!["/m/a", "/m"], "no way out of the mount");
    }

    #[test]
    fn the_fullest_cgroup_limited_below_the_machines_memory_counts() {
        let u = |used, total| Usage { used, total };
        let machine = u(50, 1000);
        assert_eq!(fullest(machine, [u(40, 5000), u(30, 400), u(590, 600)]), u(590, 600), "a fuller parent");
        assert_eq!(fullest(machine, [u(300, 400), u(310, 600)]), u(300, 400));
        assert_eq!(fullest(machine, [u(40, 5000), u(50, 1000)]), machine, "no limit below the machine's");
        assert_eq!(fullest(machine, []), machine);
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
