use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// One run of oxray on this machine: logs, the token copy and, by default, the head's
/// database live here. `<temp-dir>/session_latest` points at the newest one.
#[derive(Debug, Clone)]
pub struct SessionDir {
    path: PathBuf,
}

impl SessionDir {
    pub fn create(temp_dir: &Path) -> io::Result<Self> {
        let stamp = humantime::format_rfc3339_micros(std::time::SystemTime::now()).to_string();
        // 2026-11-22T06:40:00.123456Z -> 2026-11-22_06-40-00_123456
        let stamp: String = stamp
            .trim_end_matches('Z')
            .chars()
            .map(|c| match c {
                'T' | '.' => '_',
                ':' => '-',
                c => c,
            })
            .collect();
        let name = format!("session_{stamp}_{}", std::process::id());
        let path = temp_dir.join(&name);
        crate::paths::private_dir(&path.join("logs"))?;
        crate::paths::private_dir(&path)?;
        let latest = temp_dir.join("session_latest");
        let tmp_link = temp_dir.join(format!(".session_latest.{}", std::process::id()));
        let _ = fs::remove_file(&tmp_link);
        std::os::unix::fs::symlink(&name, &tmp_link)?;
        fs::rename(&tmp_link, &latest)?;
        Ok(Self { path })
    }

    /// Uses an existing directory (created if missing), as the launcher hands it to a server.
    pub fn open(path: &Path) -> io::Result<Self> {
        crate::paths::private_dir(&path.join("logs"))?;
        crate::paths::private_dir(path)?;
        Ok(Self { path: path.to_path_buf() })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn name(&self) -> String {
        self.path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
    }

    pub fn logs(&self) -> PathBuf {
        self.path.join("logs")
    }

    pub fn token_file(&self) -> PathBuf {
        self.path.join("auth_token")
    }

    pub fn default_storage(&self) -> PathBuf {
        self.path.join("head.redb")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn creates_and_links_latest() {
        let dir = tempfile::tempdir().unwrap();
        let s = SessionDir::create(dir.path()).unwrap();
        assert!(s.logs().is_dir());
        assert!(s.name().starts_with("session_"));
        let latest = fs::read_link(dir.path().join("session_latest")).unwrap();
        assert_eq!(latest, PathBuf::from(s.name()));
        let again = SessionDir::create(dir.path()).unwrap();
        assert_ne!(again.name(), s.name());
    }
}
