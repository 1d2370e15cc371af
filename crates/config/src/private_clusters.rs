//! Clusters that `init()` started for one process ("private" clusters) keep their home,
//! with its token, in a directory of their own under the system's temp dir. Another process
//! of the same user that is given such a cluster's address finds the token there, so a
//! second driver, or a CLI command, can join what a script started, as with Ray.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The name a private cluster's directory starts with.
pub const PREFIX: &str = "oxray-local-";

/// The token of the private cluster of this user serving `address` (its control-plane
/// address, or its dashboard's `host:port` or URL), if one runs on this machine.
pub fn token_for(address: &str) -> Option<String> {
    token_in(&std::env::temp_dir(), address, nix::unistd::geteuid().as_raw())
}

/// The directories of the private clusters of user `uid` under `temp_dir`.
fn private_dirs(temp_dir: &Path, uid: u32) -> impl Iterator<Item = PathBuf> {
    let entries = std::fs::read_dir(temp_dir).into_iter().flatten().flatten();
    entries
        .filter(move |entry| {
            let mine = entry.metadata().is_ok_and(|m| m.is_dir() && m.uid() == uid);
            mine && entry.file_name().to_string_lossy().starts_with(PREFIX)
        })
        .map(|entry| entry.path())
}

fn token_in(temp_dir: &Path, address: &str, uid: u32) -> Option<String> {
    let wanted = bare(address);
    private_dirs(temp_dir, uid).find_map(|dir| {
        let home = dir.join("home");
        serves(&home, wanted).then(|| read_token(&home)).flatten()
    })
}

fn serves(home: &Path, wanted: &str) -> bool {
    let Ok(bytes) = std::fs::read(crate::paths::current_cluster_file(home)) else { return false };
    let Ok(current) = serde_json::from_slice::<serde_json::Value>(&bytes) else { return false };
    ["address", "dashboard_url"].iter().any(|key| current[key].as_str().is_some_and(|a| bare(a) == wanted))
}

fn read_token(home: &Path) -> Option<String> {
    let path: PathBuf = crate::paths::token_file(home);
    crate::secret::read_trimmed(&path).ok().flatten()
}

/// Removes the directories of this user's private clusters that have stopped: those whose
/// driver was killed outright, so it could not remove its own. Returns how many.
pub fn sweep_stopped() -> usize {
    sweep_in(&std::env::temp_dir(), nix::unistd::geteuid().as_raw())
}

fn sweep_in(temp_dir: &Path, uid: u32) -> usize {
    let mut removed = 0;
    for dir in private_dirs(temp_dir, uid) {
        let home = dir.join("home");
        // A cluster still starting has no current_cluster.json yet: it is left alone.
        let started = crate::paths::current_cluster_file(&home).exists();
        if started && crate::procs::list_running(&home).is_empty() && std::fs::remove_dir_all(&dir).is_ok() {
            removed += 1;
        }
    }
    removed
}

/// `host:port` of an address given with or without a scheme or a trailing slash.
fn bare(address: &str) -> &str {
    let rest = address.split_once("://").map_or(address, |(_, rest)| rest);
    rest.trim_end_matches('/')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster(temp: &Path, name: &str, address: &str, token: &str) {
        let home = temp.join(name).join("home");
        std::fs::create_dir_all(&home).unwrap();
        let dashboard = format!("http://127.0.0.1:1{}", &address[address.len() - 4..]);
        let current = serde_json::json!({"address": address, "dashboard_url": dashboard});
        std::fs::write(home.join("current_cluster.json"), current.to_string()).unwrap();
        std::fs::write(home.join("auth_token"), format!("{token}\n")).unwrap();
    }

    #[test]
    fn the_token_of_the_private_cluster_serving_the_address_is_found() {
        let temp = tempfile::tempdir().unwrap();
        let uid = nix::unistd::geteuid().as_raw();
        cluster(temp.path(), "oxray-local-a", "127.0.0.1:5000", "tok-a");
        cluster(temp.path(), "oxray-local-b", "127.0.0.1:6000", "tok-b");
        cluster(temp.path(), "elsewhere", "127.0.0.1:7000", "tok-c");
        assert_eq!(token_in(temp.path(), "127.0.0.1:6000", uid).as_deref(), Some("tok-b"));
        assert_eq!(token_in(temp.path(), "http://127.0.0.1:5000/", uid).as_deref(), Some("tok-a"));
        assert_eq!(token_in(temp.path(), "http://127.0.0.1:15000", uid).as_deref(), Some("tok-a"), "the dashboard");
        assert_eq!(token_in(temp.path(), "127.0.0.1:7000", uid), None, "only private clusters");
        assert_eq!(token_in(temp.path(), "127.0.0.1:8000", uid), None);
        assert_eq!(token_in(temp.path(), "127.0.0.1:5000", uid + 1), None, "only the user's own");
    }

    #[test]
    fn stopped_private_clusters_are_swept_and_running_or_starting_ones_kept() {
        let temp = tempfile::tempdir().unwrap();
        let uid = nix::unistd::geteuid().as_raw();
        cluster(temp.path(), "oxray-local-gone", "127.0.0.1:5000", "t");
        cluster(temp.path(), "oxray-local-live", "127.0.0.1:6000", "t");
        let live = temp.path().join("oxray-local-live/home");
        crate::procs::register_self(&live, "head", temp.path()).unwrap();
        std::fs::create_dir_all(temp.path().join("oxray-local-starting/home")).unwrap();
        cluster(temp.path(), "elsewhere", "127.0.0.1:7000", "t");
        assert_eq!(sweep_in(temp.path(), uid + 1), 0, "only the user's own");
        assert_eq!(sweep_in(temp.path(), uid), 1);
        let left: std::collections::BTreeSet<String> =
            std::fs::read_dir(temp.path()).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into()).collect();
        assert_eq!(left, ["elsewhere", "oxray-local-live", "oxray-local-starting"].map(String::from).into());
    }
}
