use std::path::PathBuf;

/// The user's oxray directory: `$OXRAY_HOME`, else `~/.oxray`. Holds the cluster token and
/// the records of the processes oxray started on this machine.
pub fn oxray_home() -> PathBuf {
    if let Some(home) = std::env::var_os("OXRAY_HOME").filter(|v| !v.is_empty()) {
        return PathBuf::from(home);
    }
    let user_home = std::env::var_os("HOME").filter(|v| !v.is_empty()).unwrap_or_else(|| "/tmp".into());
    PathBuf::from(user_home).join(".oxray")
}

/// Where sessions go unless `--temp-dir` says otherwise.
pub fn default_temp_dir() -> PathBuf {
    std::env::var_os("OXRAY_TEMP_DIR")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/tmp/oxray"))
}

pub fn token_file(home: &std::path::Path) -> PathBuf {
    home.join("auth_token")
}

/// The address of the cluster last started on this machine, for commands given no address.
pub fn current_cluster_file(home: &std::path::Path) -> PathBuf {
    home.join("current_cluster.json")
}

/// Where the node agent listening on `agent_port` keeps large objects: a directory in
/// shared memory (/dev/shm), and one on disk for what does not fit there.
pub fn object_store_dirs(agent_port: u16) -> (PathBuf, PathBuf) {
    let shm = std::path::Path::new("/dev/shm");
    let memory = if shm.is_dir() { shm.to_path_buf() } else { std::env::temp_dir() };
    (memory.join(format!("oxray-objects-{agent_port}")), std::env::temp_dir().join(format!("oxray-spill-{agent_port}")))
}
