//! What the node uses, sampled every few seconds and sent with the heartbeat: CPU, memory,
//! its object store (in shared memory and spilled to disk), its GPUs and the workers busy.

use oxray_proto::v1;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How often the node's use is read.
pub const SAMPLE_EVERY: Duration = Duration::from_secs(2);

/// Jiffies the CPUs spent busy, and in all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuTimes {
    busy: u64,
    total: u64,
}

/// The machine's CPU times from the first line of /proc/stat (idle and iowait are idle).
pub fn cpu_times(stat: &str) -> Option<CpuTimes> {
    let line = stat.lines().next()?.strip_prefix("cpu ")?;
    let fields: Vec<u64> = line.split_whitespace().map(|f| f.parse().unwrap_or(0)).collect();
    if fields.len() < 4 {
        return None;
    }
    // user nice system idle iowait irq softirq steal (guest time is counted in user).
    let total: u64 = fields.iter().take(8).sum();
    let idle = fields[3] + fields.get(4).copied().unwrap_or(0);
    Some(CpuTimes { busy: total - idle, total })
}

/// The fraction of the CPUs busy between two readings.
pub fn cpu_fraction(before: CpuTimes, now: CpuTimes) -> f64 {
    let total = now.total.saturating_sub(before.total);
    if total == 0 {
        return 0.0;
    }
    (now.busy.saturating_sub(before.busy) as f64 / total as f64).clamp(0.0, 1.0)
}

/// Bytes of the objects in store directory `dir` (not the store's own files), 0 when it is
/// not there.
pub fn dir_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    entries
        .filter_map(Result::ok)
        .filter(|e| !oxray_object_store::dirs::is_bookkeeping(&e.file_name().to_string_lossy()))
        .filter_map(|e| e.metadata().ok())
        .filter(|m| m.is_file())
        .map(|m| m.len())
        .sum()
}

/// One line per GPU of `nvidia-smi --query-gpu=index,utilization.gpu,memory.used,memory.total
/// --format=csv,noheader,nounits` (memory in MiB).
pub fn parse_gpus(csv: &str) -> Vec<v1::GpuUsage> {
    csv.lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split(',').map(str::trim).collect();
            let [index, util, used, total] = f[..] else { return None };
            Some(v1::GpuUsage {
                index: index.parse().ok()?,
                utilization: util.parse::<f64>().ok()? / 100.0,
                memory_used: used.parse::<u64>().ok()? << 20,
                memory_total: total.parse::<u64>().ok()? << 20,
            })
        })
        .collect()
}

fn read_gpus() -> Vec<v1::GpuUsage> {
    let output = std::process::Command::new("nvidia-smi")
        .args(["--query-gpu=index,utilization.gpu,memory.used,memory.total", "--format=csv,noheader,nounits"])
        .stderr(std::process::Stdio::null())
        .output();
    match output {
        Ok(o) if o.status.success() => parse_gpus(&String::from_utf8_lossy(&o.stdout)),
        _ => Vec::new(),
    }
}

/// The latest reading, shared with the heartbeat.
pub type Latest = Arc<Mutex<Option<v1::NodeUsage>>>;

/// Reads the node's use every `SAMPLE_EVERY` until `stop`; `leased` counts the busy workers.
pub fn sample_periodically(
    store: (PathBuf, PathBuf),
    has_gpus: bool,
    leased: impl Fn() -> u32 + Send + 'static,
    stop: tokio_util::sync::CancellationToken,
) -> Latest {
    let latest: Latest = Arc::default();
    let out = latest.clone();
    tokio::spawn(async move {
        let mut before: Option<CpuTimes> = None;
        let mut tick = tokio::time::interval(SAMPLE_EVERY);
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tick.tick() => {}
            }
            let store = store.clone();
            let read = tokio::task::spawn_blocking(move || {
                let cpu = std::fs::read_to_string("/proc/stat").ok().as_deref().and_then(cpu_times);
                let memory = crate::memory::read_usage();
                let gpus = if has_gpus { read_gpus() } else { Vec::new() };
                // The store counts its shared memory itself; what spilled is only on disk.
                let usage = std::fs::read(store.0.join(oxray_object_store::USAGE_FILE)).unwrap_or_default();
                let in_memory = oxray_object_store::objects_bytes(&usage);
                (cpu, memory, in_memory, dir_bytes(&store.1), gpus)
            });
            let Ok((cpu, memory, in_memory, spilled, gpus)) = read.await else { continue };
            let cpu_fraction = match (before, cpu) {
                (Some(b), Some(n)) => cpu_fraction(b, n),
                _ => 0.0,
            };
            before = cpu;
            let usage = v1::NodeUsage {
                time_ms: crate::worker_records::now_ms(),
                cpu_fraction,
                memory_used: memory.map_or(0, |m| m.used),
                memory_total: memory.map_or(0, |m| m.total),
                object_store_used: in_memory,
                object_store_spilled: spilled,
                workers_leased: leased(),
                gpus,
            };
            *out.lock().expect("usage lock") = Some(usage);
        }
    });
    latest
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_use_is_the_busy_share_between_readings() {
        let a = cpu_times("cpu  100 0 100 700 100 0 0 0 0 0\ncpu0 1 2 3 4\n").unwrap();
        let b = cpu_times("cpu  150 0 150 800 100 0 0 0 0 0\n").unwrap();
        assert_eq!((a.busy, a.total), (200, 1000));
        assert!((cpu_fraction(a, b) - 0.5).abs() < 1e-9);
        assert_eq!(cpu_fraction(b, b), 0.0);
        assert!(cpu_times("intr 1 2 3").is_none());
    }

    #[test]
    fn gpus_are_read_from_nvidia_smi_csv() {
        let gpus = parse_gpus("0, 37, 1024, 81920\n1, 0, 0, 81920\nbroken line\n");
        assert_eq!(gpus.len(), 2);
        assert_eq!((gpus[0].index, gpus[0].memory_used, gpus[0].memory_total), (0, 1 << 30, 80 << 30));
        assert!((gpus[0].utilization - 0.37).abs() < 1e-9);
    }

    #[test]
    fn a_store_directory_counts_its_objects_bytes() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a"), vec![0u8; 10]).unwrap();
        std::fs::write(dir.path().join("b"), vec![0u8; 5]).unwrap();
        std::fs::write(dir.path().join(".usage"), vec![0u8; 16]).unwrap();
        std::fs::write(dir.path().join("agent"), "ns\n1\n2\n").unwrap();
        assert_eq!(dir_bytes(dir.path()), 15, "the store's own files are no objects");
        assert_eq!(dir_bytes(&dir.path().join("none")), 0);
    }
}
