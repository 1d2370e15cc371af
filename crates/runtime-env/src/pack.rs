//! Packing a local directory into a package archive, as Ray's client does for
//! `working_dir` and `py_modules`: a stored (uncompressed) zip named by its content.

use globset::{Glob, GlobSet, GlobSetBuilder};
use sha2::{Digest, Sha256};
use std::io::{Cursor, Write};
use std::path::Path;

/// Skipped unless the user asks otherwise, as Ray skips them.
const DEFAULT_EXCLUDES: [&str; 4] = [".git", ".venv", "venv", "__pycache__"];

#[derive(Debug, thiserror::Error)]
pub enum PackError {
    #[error("{0} is not a directory")]
    NotADirectory(String),
    #[error("invalid exclude pattern {0:?}: {1}")]
    BadPattern(String, String),
    #[error("{dir} packs to {size} MiB, over the {limit} MiB limit: exclude large files with \"excludes\"")]
    TooLarge { dir: String, size: u64, limit: u64 },
    #[error("cannot pack {0}: {1}")]
    Io(String, std::io::Error),
}

fn matcher(excludes: &[String]) -> Result<GlobSet, PackError> {
    let mut builder = GlobSetBuilder::new();
    for pattern in DEFAULT_EXCLUDES.iter().map(|s| s.to_string()).chain(excludes.iter().cloned()) {
        let trimmed = pattern.trim_matches('/');
        // A bare name matches at any depth, like gitignore.
        let globs = if trimmed.contains('/') {
            vec![trimmed.to_string()]
        } else {
            vec![trimmed.to_string(), format!("**/{trimmed}")]
        };
        for g in globs {
            builder.add(Glob::new(&g).map_err(|e| PackError::BadPattern(pattern.clone(), e.to_string()))?);
        }
    }
    builder.build().map_err(|e| PackError::BadPattern(excludes.join(","), e.to_string()))
}

/// Zips `dir`; entries sit under `prefix/` when given (py_modules keep their folder name).
/// Returns the package name and the archive bytes.
pub fn pack_dir(
    dir: &Path,
    prefix: Option<&str>,
    excludes: &[String],
    limit: u64,
) -> Result<(String, Vec<u8>), PackError> {
    let shown = dir.display().to_string();
    if !dir.is_dir() {
        return Err(PackError::NotADirectory(shown));
    }
    let skip = matcher(excludes)?;
    let io = |e: std::io::Error| PackError::Io(shown.clone(), e);
    let mut files = Vec::new();
    // The .gitignore files inside the directory apply, as in Ray (not the user's global
    // ones, nor those above the directory).
    let walk = ignore::WalkBuilder::new(dir)
        .standard_filters(false)
        .git_ignore(true)
        .require_git(false)
        .filter_entry({
            let (skip, root) = (skip.clone(), dir.to_path_buf());
            move |entry| {
                let rel = entry.path().strip_prefix(&root).map(|r| r.to_string_lossy().replace('\\', "/"));
                !rel.is_ok_and(|rel| !rel.is_empty() && skip.is_match(&rel))
            }
        })
        .build();
    for entry in walk {
        let entry = entry.map_err(|e| io(std::io::Error::other(e)))?;
        // Links and special files are left out: the server refuses them anyway.
        if entry.file_type().is_some_and(|t| t.is_file()) {
            let rel = entry.path().strip_prefix(dir).expect("inside dir").to_string_lossy().replace('\\', "/");
            files.push((rel, entry.path().to_path_buf()));
        }
    }
    files.sort();
    let mut hasher = Sha256::new();
    let mut zip = zip::ZipWriter::new(Cursor::new(Vec::new()));
    let mut size = 0u64;
    for (rel, path) in &files {
        let bytes = std::fs::read(path).map_err(io)?;
        size += bytes.len() as u64;
        if size > limit {
            return Err(PackError::TooLarge { dir: shown, size: size >> 20, limit: limit >> 20 });
        }
        let name = match prefix {
            Some(p) => format!("{p}/{rel}"),
            None => rel.clone(),
        };
        hasher.update(name.as_bytes());
        hasher.update([0]);
        hasher.update(&bytes);
        let mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(path).map_err(io)?.permissions());
        let options = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Stored)
            .unix_permissions(mode & 0o755)
            .large_file(bytes.len() as u64 >= u32::MAX as u64);
        zip.start_file(name, options).map_err(|e| io(std::io::Error::other(e)))?;
        zip.write_all(&bytes).map_err(io)?;
    }
    let bytes = zip.finish().map_err(|e| io(std::io::Error::other(e)))?.into_inner();
    let name = format!("_ray_pkg_{}.zip", hex::encode(&hasher.finalize()[..8]));
    Ok((name, bytes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{unpack, ArchiveKind};

    #[test]
    fn packs_skips_excludes_and_round_trips() {
        let src = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(src.path().join("sub/__pycache__")).unwrap();
        std::fs::create_dir_all(src.path().join(".git")).unwrap();
        std::fs::write(src.path().join("main.py"), "print(1)").unwrap();
        std::fs::write(src.path().join("sub/data.txt"), "d").unwrap();
        std::fs::write(src.path().join("sub/__pycache__/x.pyc"), "c").unwrap();
        std::fs::write(src.path().join(".git/HEAD"), "h").unwrap();
        std::fs::write(src.path().join("big.log"), "l").unwrap();
        let (name, bytes) = pack_dir(src.path(), None, &["*.log".into()], 1 << 20).unwrap();
        assert!(name.starts_with("_ray_pkg_") && name.ends_with(".zip"));
        let (again, _) = pack_dir(src.path(), None, &["*.log".into()], 1 << 20).unwrap();
        assert_eq!(name, again, "content-addressed");

        let out = tempfile::tempdir().unwrap();
        let archive = out.path().join(&name);
        std::fs::write(&archive, bytes).unwrap();
        let dest = out.path().join("x");
        unpack(&archive, ArchiveKind::Zip, &dest).unwrap();
        assert!(dest.join("main.py").is_file() && dest.join("sub/data.txt").is_file());
        assert!(
            !dest.join(".git").exists() && !dest.join("big.log").exists() && !dest.join("sub/__pycache__").exists()
        );
    }

    #[test]
    fn gitignore_files_inside_the_directory_apply() {
        let src = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(src.path().join("data/raw")).unwrap();
        std::fs::write(src.path().join(".gitignore"), "*.ckpt\n/data/raw/\n").unwrap();
        std::fs::write(src.path().join("data/.gitignore"), "local.txt\n").unwrap();
        std::fs::write(src.path().join("train.py"), "x").unwrap();
        std::fs::write(src.path().join("model.ckpt"), "x").unwrap();
        std::fs::write(src.path().join("data/raw/huge.bin"), "x").unwrap();
        std::fs::write(src.path().join("data/local.txt"), "x").unwrap();
        std::fs::write(src.path().join("data/kept.txt"), "x").unwrap();
        let (_, bytes) = pack_dir(src.path(), None, &[], 1 << 20).unwrap();
        let zip = zip::ZipArchive::new(Cursor::new(bytes)).unwrap();
        let mut names: Vec<&str> = zip.file_names().collect();
        names.sort();
        assert_eq!(names, [".gitignore", "data/.gitignore", "data/kept.txt", "train.py"]);
    }

    #[test]
    fn prefixes_entries_and_enforces_the_limit() {
        let src = tempfile::tempdir().unwrap();
        std::fs::write(src.path().join("__init__.py"), "x".repeat(100)).unwrap();
        let (_, bytes) = pack_dir(src.path(), Some("mypkg"), &[], 1 << 20).unwrap();
        let zip = zip::ZipArchive::new(Cursor::new(bytes)).unwrap();
        assert_eq!(zip.file_names().collect::<Vec<_>>(), ["mypkg/__init__.py"]);
        assert!(matches!(pack_dir(src.path(), None, &[], 10), Err(PackError::TooLarge { .. })));
        assert!(matches!(pack_dir(&src.path().join("none"), None, &[], 10), Err(PackError::NotADirectory(_))));
    }
}
