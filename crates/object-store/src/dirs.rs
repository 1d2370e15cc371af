//! The node's object store directories (shared memory, and disk for what spills): made and
//! marked when the agent joins, removed when it leaves. An agent killed outright cannot
//! remove them, so each agent that starts removes those whose agent is gone. Each directory
//! names its agent: one whose /dev/shm was private (a container's, a test host's) left its
//! spill directory in a /tmp that others share.

use oxray_config::procs;
use std::path::{Path, PathBuf};

/// Where the node agent listening on `agent_port` keeps large objects: a directory in
/// shared memory (/dev/shm), and one on disk for what does not fit there.
pub fn object_store_dirs(agent_port: u16) -> (PathBuf, PathBuf) {
    let shm = Path::new("/dev/shm");
    let memory = if shm.is_dir() { shm.to_path_buf() } else { std::env::temp_dir() };
    (memory.join(format!("{PREFIX}{agent_port}")), std::env::temp_dir().join(format!("{SPILL_PREFIX}{agent_port}")))
}

/// The file in the object store directory that names the node it belongs to.
pub const STORE_NODE_FILE: &str = "node";
/// The file that names the agent process keeping the store: pid namespace, pid, start time.
const STORE_AGENT_FILE: &str = "agent";
const PREFIX: &str = "oxray-objects-";

/// Whether a file of a store directory is one the store keeps for itself (its marks, its
/// hidden counters) rather than an object.
pub fn is_bookkeeping(name: &str) -> bool {
    name.starts_with('.') || name == STORE_NODE_FILE || name == STORE_AGENT_FILE
}
const SPILL_PREFIX: &str = "oxray-spill-";

/// Creates the directories of the store of the agent on `port` and names its node and
/// agent in them, so processes of this machine know the store is their node's.
pub fn mark(port: u16, node_id: &str) -> std::io::Result<()> {
    let (memory, spill) = object_store_dirs(port);
    oxray_config::paths::private_dir(&memory)?;
    oxray_config::paths::private_dir(&spill)?;
    let me = procs::identity();
    let agent = format!("{}\n{}\n{}\n", me.pid_namespace, me.pid, me.start_ticks);
    write_private(&memory.join(STORE_AGENT_FILE), &agent)?;
    write_private(&spill.join(STORE_AGENT_FILE), &agent)?;
    write_private(&memory.join(STORE_NODE_FILE), node_id)
}

/// Writes a file only its owner reads, as every file of the store is.
fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let mut file = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(path)?;
    // One left by an older agent keeps its mode through `open`.
    file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    file.write_all(text.as_bytes())
}

pub fn remove(port: u16) {
    for dir in <[_; 2]>::from(object_store_dirs(port)) {
        if let Err(e) = std::fs::remove_dir_all(&dir) {
            tracing::debug!(dir = %dir.display(), "object store not removed: {e}");
        }
    }
}

/// Removes the store directories of agents of this machine that are gone; returns how many.
pub fn sweep() -> usize {
    let (memory, spill) = object_store_dirs(0);
    let here = procs::identity().pid_namespace;
    let mut removed = 0;
    for (base, prefix) in [(memory.parent(), PREFIX), (spill.parent(), SPILL_PREFIX)] {
        let Some(entries) = base.and_then(|b| std::fs::read_dir(b).ok()) else { continue };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let ours = name.to_str().and_then(|n| n.strip_prefix(prefix)).is_some_and(|p| p.parse::<u16>().is_ok());
            if ours && keeper_is_gone(&entry.path(), &here) {
                tracing::info!(dir = %entry.path().display(), "removing the object store of an agent that is gone");
                if std::fs::remove_dir_all(entry.path()).is_ok() {
                    removed += 1;
                }
            }
        }
    }
    removed
}

fn keeper_is_gone(store: &Path, pid_namespace: &str) -> bool {
    std::fs::read_to_string(store.join(STORE_AGENT_FILE))
        .is_ok_and(|text| is_gone(&text, pid_namespace, procs::start_ticks))
}

/// Whether the agent an `agent` file names is gone. One in another pid namespace (or a
/// file that cannot be read) is never judged.
fn is_gone(text: &str, pid_namespace: &str, start_ticks: impl Fn(u32) -> Option<u64>) -> bool {
    let mut lines = text.lines();
    let (Some(namespace), Some(pid), Some(ticks)) = (lines.next(), lines.next(), lines.next()) else { return false };
    let (Ok(pid), Ok(ticks)) = (pid.parse::<u32>(), ticks.parse::<u64>()) else { return false };
    namespace == pid_namespace && start_ticks(pid) != Some(ticks)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_marks_are_readable_by_their_owner_only() {
        use std::os::unix::fs::PermissionsExt;
        // A port no agent of a test uses.
        let port = 65_123;
        mark(port, "node-a").unwrap();
        let (memory, spill) = object_store_dirs(port);
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        let files = [memory.join(STORE_AGENT_FILE), spill.join(STORE_AGENT_FILE), memory.join(STORE_NODE_FILE)];
        let modes = (mode(&memory), mode(&spill), files.map(|p| mode(&p)));
        remove(port);
        assert_eq!(modes, (0o700, 0o700, [0o600; 3]));
    }

    #[test]
    fn an_agent_is_gone_when_its_pid_is_free_or_reused() {
        let running = |pid: u32| (pid == 7).then_some(100);
        assert!(!is_gone("ns\n7\n100\n", "ns", running), "alive");
        assert!(is_gone("ns\n7\n99\n", "ns", running), "the pid went to another process");
        assert!(is_gone("ns\n8\n100\n", "ns", running), "no such process");
        assert!(!is_gone("other\n8\n100\n", "ns", running), "another pid namespace: not ours to judge");
        assert!(!is_gone("garbage", "ns", running));
    }
}
