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

/// The head's database when `--storage` is not given: one place per temp dir and control
/// port, so a head started again with the same flags (after a crash or a reboot that kept
/// the temp dir) finds its jobs, nodes, groups and named actors. A head on port 0 (any free
/// port) has no stable identity: it gets none.
pub fn stable_head_storage(temp_dir: &std::path::Path, port: u16) -> Option<PathBuf> {
    (port != 0).then(|| temp_dir.join(format!("head-{port}")).join("head.redb"))
}

pub fn token_file(home: &std::path::Path) -> PathBuf {
    home.join("auth_token")
}

/// The token files a client reads, first found wins: oxray's, then Ray's `~/.ray/auth_token`.
pub fn token_files(home: &std::path::Path) -> Vec<PathBuf> {
    std::iter::once(token_file(home)).chain(crate::ray_env::ray_token_file()).collect()
}

/// The first token file of `token_files` that holds a token, with its path.
pub fn read_token(home: &std::path::Path) -> std::io::Result<Option<(String, PathBuf)>> {
    for file in token_files(home) {
        if let Some(token) = crate::secret::read_trimmed(&file)?.filter(|t| !t.is_empty()) {
            return Ok(Some((token, file)));
        }
    }
    Ok(None)
}

/// The address of the cluster last started on this machine, for commands given no address.
pub fn current_cluster_file(home: &std::path::Path) -> PathBuf {
    home.join("current_cluster.json")
}

/// Creates `dir` (and its missing parents) readable by this user alone, and makes it so if
/// it was there: object stores, spill and session directories hold other jobs' data.
pub fn private_dir(dir: &std::path::Path) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn private_dirs_are_the_user_s_alone() {
        use std::os::unix::fs::PermissionsExt;
        let base = std::env::temp_dir().join(format!("oxray-private-test-{}", std::process::id()));
        let dir = base.join("a/b");
        private_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        private_dir(&dir).unwrap();
        assert_eq!(std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777, 0o700);
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn stable_storage_follows_temp_dir_and_port() {
        let at = stable_head_storage(Path::new("/tmp/oxray"), 6379).unwrap();
        assert_eq!(at, Path::new("/tmp/oxray/head-6379/head.redb"));
        assert_ne!(Some(at), stable_head_storage(Path::new("/tmp/oxray"), 6380));
        assert_eq!(stable_head_storage(Path::new("/tmp/oxray"), 0), None);
    }
}
