//! Log files that rotate at a size cap, as Ray's do (`RAY_ROTATION_MAX_BYTES`,
//! `RAY_ROTATION_BACKUP_COUNT`). A process whose stdout or stderr is a regular file (a
//! worker's `worker-<id>.out`, an agent's or head's log) looks at its size every few seconds
//! and, past the cap, renames it to `<name>.1` (older ones move up to the backup count, the
//! oldest goes) and points the descriptor at a fresh file of the same name. The writer never
//! notices: its next write lands in the new file.

use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::time::Duration;

const MAX_BYTES_VARS: [&str; 2] = ["OXRAY_LOG_ROTATION_MAX_BYTES", "RAY_ROTATION_MAX_BYTES"];
const BACKUPS_VARS: [&str; 2] = ["OXRAY_LOG_ROTATION_BACKUP_COUNT", "RAY_ROTATION_BACKUP_COUNT"];
/// Ray's defaults.
const DEFAULT_MAX_BYTES: u64 = 512 * 1024 * 1024;
const DEFAULT_BACKUPS: u32 = 5;
const EVERY: Duration = Duration::from_secs(2);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rotation {
    pub max_bytes: u64,
    pub backups: u32,
}

impl Rotation {
    /// From the environment (oxray's names, else Ray's), else Ray's defaults; None when the
    /// cap is 0, which turns rotation off.
    pub fn from_env() -> Option<Self> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Option<Self> {
        let first = |names: [&str; 2]| names.iter().find_map(|n| get(n)).and_then(|v| v.trim().parse::<u64>().ok());
        let max_bytes = first(MAX_BYTES_VARS).unwrap_or(DEFAULT_MAX_BYTES);
        let backups = first(BACKUPS_VARS).map_or(DEFAULT_BACKUPS, |n| n.min(u64::from(u32::MAX)) as u32);
        (max_bytes > 0).then_some(Self { max_bytes, backups })
    }
}

/// The renames that make room for a new file, oldest first: `path.(n-1)` -> `path.n`, ...,
/// `path` -> `path.1`. With no backups there are none: the full file is removed instead.
pub fn shifts(path: &Path, backups: u32) -> Vec<(PathBuf, PathBuf)> {
    let numbered = |n: u32| {
        let mut name = path.as_os_str().to_owned();
        name.push(format!(".{n}"));
        PathBuf::from(name)
    };
    (1..=backups).rev().map(|n| (if n == 1 { path.to_path_buf() } else { numbered(n - 1) }, numbered(n))).collect()
}

/// The regular file behind a descriptor of this process and its size, if it is one.
fn file_of(fd: RawFd) -> Option<(PathBuf, u64)> {
    let path = std::fs::read_link(format!("/proc/self/fd/{fd}")).ok()?;
    // A file removed while open reads "(deleted)": nothing of it can be renamed.
    let meta = std::fs::metadata(&path).ok()?;
    meta.is_file().then_some((path, meta.len()))
}

/// Rotates the file behind `fd` when it has grown past the cap; true when it did.
pub fn rotate_if_full(fd: RawFd, rotation: Rotation) -> io::Result<bool> {
    let Some((path, size)) = file_of(fd) else { return Ok(false) };
    if size <= rotation.max_bytes {
        return Ok(false);
    }
    if rotation.backups == 0 {
        std::fs::remove_file(&path)?;
    }
    for (from, to) in shifts(&path, rotation.backups) {
        match std::fs::rename(&from, &to) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
    }
    let fresh = std::fs::OpenOptions::new().create(true).append(true).open(&path)?;
    // `fd` stays open (it is the process's stdout or stderr): only its file changes.
    let mut target = std::mem::ManuallyDrop::new(unsafe { OwnedFd::from_raw_fd(fd) });
    nix::unistd::dup2(&fresh, &mut target).map_err(io::Error::from)?;
    Ok(true)
}

/// Checks `fds` every two seconds from a thread of its own, for the life of the process.
pub fn watch(fds: &'static [RawFd], rotation: Rotation) {
    let spawned = std::thread::Builder::new().name("log-rotation".into()).spawn(move || loop {
        std::thread::sleep(EVERY);
        for fd in fds {
            // A log that cannot be rotated (a full disk) is written on as it is.
            let _ = rotate_if_full(*fd, rotation);
        }
    });
    drop(spawned);
}

/// `watch` of this process's stdout and stderr, with the environment's rotation.
pub fn watch_stdout_and_stderr() {
    if let Some(rotation) = Rotation::from_env() {
        watch(&[1, 2], rotation);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::AsRawFd;

    #[test]
    fn settings_come_from_oxray_names_then_rays_then_defaults() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| pairs.iter().find(|(k, _)| *k == name).map(|(_, v)| v.to_string())
        };
        assert_eq!(Rotation::from_lookup(env(&[])), Some(Rotation { max_bytes: 512 << 20, backups: 5 }));
        let rays = Rotation::from_lookup(env(&[("RAY_ROTATION_MAX_BYTES", "100"), ("RAY_ROTATION_BACKUP_COUNT", "2")]));
        assert_eq!(rays, Some(Rotation { max_bytes: 100, backups: 2 }));
        let ours = env(&[("OXRAY_LOG_ROTATION_MAX_BYTES", "7"), ("RAY_ROTATION_MAX_BYTES", "100")]);
        assert_eq!(Rotation::from_lookup(ours).map(|r| r.max_bytes), Some(7));
        assert_eq!(Rotation::from_lookup(env(&[("OXRAY_LOG_ROTATION_MAX_BYTES", "0")])), None, "0 turns it off");
    }

    #[test]
    fn older_backups_move_up_and_the_oldest_goes() {
        let names: Vec<(String, String)> = shifts(Path::new("/l/w.out"), 3)
            .into_iter()
            .map(|(a, b)| (a.display().to_string(), b.display().to_string()))
            .collect();
        let pair = |a: &str, b: &str| (a.to_string(), b.to_string());
        assert_eq!(
            names,
            [pair("/l/w.out.2", "/l/w.out.3"), pair("/l/w.out.1", "/l/w.out.2"), pair("/l/w.out", "/l/w.out.1")]
        );
        assert!(shifts(Path::new("/l/w.out"), 0).is_empty());
    }

    #[test]
    fn a_full_log_is_renamed_and_the_descriptor_writes_to_a_fresh_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("worker-a.out");
        let mut log = std::fs::OpenOptions::new().create(true).append(true).open(&path).unwrap();
        let fd = log.as_raw_fd();
        let rotation = Rotation { max_bytes: 10, backups: 2 };
        log.write_all(b"0123456789").unwrap();
        assert!(!rotate_if_full(fd, rotation).unwrap(), "at the cap, not past it");
        for round in 1..=3 {
            log.write_all(format!("round {round} is long enough\n").as_bytes()).unwrap();
            assert!(rotate_if_full(fd, rotation).unwrap());
        }
        log.write_all(b"after").unwrap();
        let read = |name: &str| std::fs::read_to_string(dir.path().join(name)).unwrap();
        assert_eq!(read("worker-a.out"), "after", "the same descriptor writes to the new file");
        assert!(read("worker-a.out.1").starts_with("round 3"));
        assert!(read("worker-a.out.2").starts_with("round 2"));
        assert!(!dir.path().join("worker-a.out.3").exists(), "two backups at most");
        let pipe = nix::unistd::pipe().unwrap();
        assert!(!rotate_if_full(pipe.1.as_raw_fd(), rotation).unwrap(), "a pipe is not a log file");
    }
}
