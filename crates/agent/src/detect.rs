//! What this machine offers when the user names no amounts: CPUs (honouring cgroup quotas
//! and CPU affinity), memory (honouring the cgroup limit) and NVIDIA GPUs; and the Python
//! that runs workers no driver named an interpreter for.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The interpreter of workers whose lease names none (the head's own work: Serve builds):
/// `$OXRAY_PYTHON`, else the `python3` beside this executable (oxray installed in a virtualenv,
/// whose interpreter has the oxray package), else `python3` on the PATH.
pub fn default_python() -> String {
    choose_python(std::env::var("OXRAY_PYTHON").ok(), std::env::current_exe().ok(), |p| p.is_file())
}

fn choose_python(
    given: Option<String>,
    exe: Option<std::path::PathBuf>,
    exists: impl Fn(&std::path::Path) -> bool,
) -> String {
    if let Some(python) = given.filter(|p| !p.is_empty()) {
        return python;
    }
    exe.and_then(|e| e.parent().map(|dir| dir.join("python3")))
        .filter(|p| exists(p))
        .map(|p| p.display().to_string())
        .unwrap_or_else(|| "python3".into())
}

/// CPUs this process may use. The standard library already reads the cgroup quota and the
/// affinity mask.
pub fn cpus() -> u32 {
    std::thread::available_parallelism().map(|n| n.get() as u32).unwrap_or(1)
}

/// Bytes of memory available to this machine's work: free memory, capped by the cgroup limit.
pub fn available_memory() -> u64 {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let available = meminfo_field(&meminfo, "MemAvailable:").or_else(|| meminfo_field(&meminfo, "MemTotal:"));
    let cgroup = cgroup_headroom();
    match (available, cgroup) {
        (Some(a), Some(c)) => a.min(c),
        (Some(a), None) => a,
        (None, Some(c)) => c,
        (None, None) => 0,
    }
}

fn meminfo_field(meminfo: &str, name: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with(name))?;
    let kib: u64 = line[name.len()..].trim().trim_end_matches("kB").trim().parse().ok()?;
    Some(kib * 1024)
}

/// cgroup v2 limit minus usage; v1 as a fallback.
fn cgroup_headroom() -> Option<u64> {
    let read = |p: &str| std::fs::read_to_string(p).ok().and_then(|s| s.trim().parse::<u64>().ok());
    let (limit, usage) = match read("/sys/fs/cgroup/memory.max") {
        Some(limit) => (limit, read("/sys/fs/cgroup/memory.current").unwrap_or(0)),
        None => (
            read("/sys/fs/cgroup/memory/memory.limit_in_bytes")?,
            read("/sys/fs/cgroup/memory/memory.usage_in_bytes").unwrap_or(0),
        ),
    };
    // v1 reports "no limit" as a huge number.
    (limit < (1u64 << 60)).then(|| limit.saturating_sub(usage))
}

/// NVIDIA GPUs listed by `nvidia-smi -L`; 0 when the tool is missing, fails or hangs.
pub fn gpus() -> u32 {
    let Ok(mut child) = Command::new("nvidia-smi").arg("-L").stdout(Stdio::piped()).stderr(Stdio::null()).spawn()
    else {
        return 0;
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match child.try_wait() {
            Ok(Some(status)) if status.success() => break,
            Ok(Some(_)) | Err(_) => return 0,
            Ok(None) if Instant::now() > deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return 0;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
    let mut out = String::new();
    if let Some(mut stdout) = child.stdout.take() {
        let _ = std::io::Read::read_to_string(&mut stdout, &mut out);
    }
    count_gpus(&out)
}

fn count_gpus(listing: &str) -> u32 {
    listing.lines().filter(|l| l.starts_with("GPU ")).count() as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_python_is_the_given_one_else_the_virtualenv_s_else_the_path_s() {
        let exe = Some(std::path::PathBuf::from("/venv/bin/oxray"));
        assert_eq!(choose_python(Some("/opt/py".into()), exe.clone(), |_| true), "/opt/py");
        assert_eq!(choose_python(None, exe.clone(), |p| p.ends_with("bin/python3")), "/venv/bin/python3");
        assert_eq!(choose_python(Some(String::new()), exe, |_| false), "python3");
    }

    #[test]
    fn parses_meminfo() {
        let text = "MemTotal:       24000000 kB\nMemAvailable:   12000000 kB\n";
        assert_eq!(meminfo_field(text, "MemAvailable:"), Some(12_000_000 * 1024));
        assert_eq!(meminfo_field(text, "Nope:"), None);
    }

    #[test]
    fn counts_gpus_in_nvidia_smi_listing() {
        let text = "GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-1)\nGPU 1: NVIDIA A100-SXM4-80GB (UUID: GPU-2)\n";
        assert_eq!(count_gpus(text), 2);
        assert_eq!(count_gpus(""), 0);
    }

    #[test]
    fn this_machine_has_cpus_and_memory() {
        assert!(cpus() >= 1);
        assert!(available_memory() > 0);
    }
}
