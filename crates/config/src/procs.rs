//! Records of the server processes oxray started on this machine, so `oxray stop` finds
//! them by pid file and process group, never by name.

use serde::{Deserialize, Serialize};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProcRecord {
    pub pid: u32,
    /// Start time from /proc/<pid>/stat, so a recycled pid is never mistaken for ours.
    pub start_ticks: u64,
    pub role: String,
    pub session_dir: PathBuf,
}

fn dir(home: &Path) -> PathBuf {
    home.join("procs")
}

fn file(home: &Path, pid: u32) -> PathBuf {
    dir(home).join(format!("{pid}.json"))
}

/// Records the calling process; it leads its own process group.
pub fn register_self(home: &Path, role: &str, session_dir: &Path) -> io::Result<ProcRecord> {
    let pid = std::process::id();
    let record = ProcRecord {
        pid,
        start_ticks: start_ticks(pid).unwrap_or(0),
        role: role.to_string(),
        session_dir: session_dir.to_path_buf(),
    };
    crate::secret::write_json(&file(home, pid), &record)?;
    Ok(record)
}

pub fn unregister(home: &Path, pid: u32) {
    let _ = fs::remove_file(file(home, pid));
}

/// Every record, with records of processes that are gone removed on the way.
pub fn list_running(home: &Path) -> Vec<ProcRecord> {
    let Ok(entries) = fs::read_dir(dir(home)) else {
        return Vec::new();
    };
    let mut running = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        if path.extension().and_then(|e| e.to_str()) != Some("json") {
            continue;
        }
        let record = fs::read(&path).ok().and_then(|b| serde_json::from_slice::<ProcRecord>(&b).ok());
        match record {
            Some(r) if is_running(&r) => running.push(r),
            _ => {
                let _ = fs::remove_file(&path);
            }
        }
    }
    running.sort_by_key(|r| r.pid);
    running
}

pub fn is_running(record: &ProcRecord) -> bool {
    match start_ticks(record.pid) {
        Some(ticks) => record.start_ticks == 0 || ticks == record.start_ticks,
        None => false,
    }
}

/// Which machine and pid space a process lives in, and which process it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub boot_id: String,
    pub pid_namespace: String,
    pub pid: u32,
    pub start_ticks: u64,
}

/// This process's identity.
pub fn identity() -> Identity {
    let pid = std::process::id();
    Identity {
        boot_id: fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default().trim().to_string(),
        pid_namespace: fs::read_link("/proc/self/ns/pid").map(|p| p.display().to_string()).unwrap_or_default(),
        pid,
        start_ticks: start_ticks(pid).unwrap_or(0),
    }
}

/// Field 22 of /proc/<pid>/stat; `None` when the process is gone or a zombie.
pub fn start_ticks(pid: u32) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: parse after the last ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    if fields.first() == Some(&"Z") {
        return None;
    }
    fields.get(19)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registers_lists_and_forgets() {
        let home = tempfile::tempdir().unwrap();
        let rec = register_self(home.path(), "head", Path::new("/tmp/s")).unwrap();
        assert!(rec.start_ticks > 0);
        assert_eq!(list_running(home.path()), vec![rec.clone()]);
        unregister(home.path(), rec.pid);
        assert!(list_running(home.path()).is_empty());
    }

    #[test]
    fn drops_records_of_recycled_pids() {
        let home = tempfile::tempdir().unwrap();
        let mut rec = register_self(home.path(), "agent", Path::new("/tmp/s")).unwrap();
        rec.start_ticks += 1;
        crate::secret::write_json(&file(home.path(), rec.pid), &rec).unwrap();
        assert!(list_running(home.path()).is_empty());
        assert!(!file(home.path(), rec.pid).exists());
    }
}
