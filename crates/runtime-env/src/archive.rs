use std::fs::{self, File};
use std::io::{self, Read};
use std::path::{Component, Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    #[error("unsupported package {0:?}: names must end in .zip, .whl, .tar.gz, .tgz or .tar.xz")]
    Unsupported(String),
    #[error("archive entry {0:?} escapes the target directory")]
    Escapes(String),
    #[error("archive entry {0:?} is a link; links are not allowed")]
    Link(String),
    #[error("archive entry {0:?} is not a regular file or directory")]
    Special(String),
    #[error("malformed archive: {0}")]
    Malformed(String),
    #[error("archive unpacks to more than {0} (a package must stay under it)")]
    TooLarge(String),
    #[error(transparent)]
    Io(#[from] io::Error),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArchiveKind {
    Zip,
    /// A wheel: checked like a zip, installed or imported as a file, never unpacked.
    Wheel,
    TarGz,
    TarXz,
}

/// The names each kind goes by.
const SUFFIXES: [(&str, ArchiveKind); 5] = [
    (".zip", ArchiveKind::Zip),
    (".whl", ArchiveKind::Wheel),
    (".tar.gz", ArchiveKind::TarGz),
    (".tgz", ArchiveKind::TarGz),
    (".tar.xz", ArchiveKind::TarXz),
];

impl ArchiveKind {
    pub fn from_name(name: &str) -> Result<Self, ArchiveError> {
        SUFFIXES
            .iter()
            .find(|(suffix, _)| name.ends_with(suffix))
            .map(|(_, kind)| *kind)
            .ok_or_else(|| ArchiveError::Unsupported(name.to_string()))
    }
}

/// A package's name without its archive suffix (where it is unpacked).
pub fn stem(name: &str) -> &str {
    SUFFIXES.iter().find_map(|(suffix, _)| name.strip_suffix(suffix)).unwrap_or(name)
}

/// What one package may unpack to at most: an archive that decompresses far beyond its
/// upload (a zip bomb) stops there instead of filling the disk or its inodes.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub bytes: u64,
    pub entries: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self { bytes: 16 << 30, entries: 500_000 }
    }
}

/// The tar stream inside a compressed tar file.
fn tar_archive(path: &Path, kind: ArchiveKind) -> Result<tar::Archive<Box<dyn Read>>, ArchiveError> {
    let file = File::open(path)?;
    let stream: Box<dyn Read> = match kind {
        ArchiveKind::TarXz => Box::new(liblzma::read::XzDecoder::new(file)),
        _ => Box::new(flate2::read::GzDecoder::new(file)),
    };
    Ok(tar::Archive::new(stream))
}

/// A relative path that stays inside its target: no root, no `..`.
fn safe_relative(raw: &str) -> Result<PathBuf, ArchiveError> {
    let path = Path::new(raw);
    let mut clean = PathBuf::new();
    for part in path.components() {
        match part {
            Component::Normal(p) => clean.push(p),
            Component::CurDir => {}
            Component::ParentDir | Component::RootDir | Component::Prefix(_) => {
                return Err(ArchiveError::Escapes(raw.to_string()))
            }
        }
    }
    Ok(clean)
}

#[derive(Debug)]
enum Entry {
    Dir(PathBuf),
    File(PathBuf),
}

const S_IFMT: u32 = 0o170000;
const S_IFLNK: u32 = 0o120000;
const S_IFREG: u32 = 0o100000;
const S_IFDIR: u32 = 0o040000;

fn zip_entries(path: &Path, limits: Limits) -> Result<(zip::ZipArchive<File>, Vec<Entry>), ArchiveError> {
    let mut zip = zip::ZipArchive::new(File::open(path)?).map_err(|e| ArchiveError::Malformed(e.to_string()))?;
    let mut entries = Vec::with_capacity(zip.len());
    for i in 0..zip.len() {
        let file = zip.by_index_raw(i).map_err(|e| ArchiveError::Malformed(e.to_string()))?;
        let name = file.name().to_string();
        let rel = safe_relative(&name)?;
        match file.unix_mode().map(|m| m & S_IFMT) {
            Some(S_IFLNK) => return Err(ArchiveError::Link(name)),
            Some(0) | Some(S_IFREG) | Some(S_IFDIR) | None => {}
            Some(_) => return Err(ArchiveError::Special(name)),
        }
        entries.push(if file.is_dir() { Entry::Dir(rel) } else { Entry::File(rel) });
        check_count(entries.len(), limits)?;
    }
    Ok((zip, entries))
}

fn tar_entries(path: &Path, kind: ArchiveKind, limits: Limits) -> Result<Vec<Entry>, ArchiveError> {
    let mut archive = tar_archive(path, kind)?;
    let mut entries = Vec::new();
    for entry in archive.entries().map_err(|e| ArchiveError::Malformed(e.to_string()))? {
        let entry = entry.map_err(|e| ArchiveError::Malformed(e.to_string()))?;
        let raw = entry.path_bytes();
        let name = String::from_utf8_lossy(&raw).into_owned();
        let rel = safe_relative(&name)?;
        let kind = entry.header().entry_type();
        entries.push(match kind {
            tar::EntryType::Regular | tar::EntryType::Continuous => Entry::File(rel),
            tar::EntryType::Directory => Entry::Dir(rel),
            tar::EntryType::Symlink | tar::EntryType::Link => return Err(ArchiveError::Link(name)),
            // Metadata records of pax and GNU tar carry no file.
            tar::EntryType::XGlobalHeader | tar::EntryType::XHeader | tar::EntryType::GNULongName => continue,
            _ => return Err(ArchiveError::Special(name)),
        });
        check_count(entries.len(), limits)?;
    }
    Ok(entries)
}

/// Checks every entry; returns how many there are.
pub fn validate(path: &Path, kind: ArchiveKind) -> Result<usize, ArchiveError> {
    let limits = Limits::default();
    match kind {
        ArchiveKind::Zip | ArchiveKind::Wheel => Ok(zip_entries(path, limits)?.1.len()),
        ArchiveKind::TarGz | ArchiveKind::TarXz => Ok(tar_entries(path, kind, limits)?.len()),
    }
}

/// Unpacks into `dest`, which must not exist yet. Everything is checked first and written
/// into a sibling temporary directory, then renamed, so `dest` is either complete or absent.
pub fn unpack(path: &Path, kind: ArchiveKind, dest: &Path) -> Result<(), ArchiveError> {
    unpack_within(path, kind, dest, Limits::default())
}

/// `unpack`, refusing archives that unpack to more than `limits`.
pub fn unpack_within(path: &Path, kind: ArchiveKind, dest: &Path, limits: Limits) -> Result<(), ArchiveError> {
    let parent = dest.parent().ok_or_else(|| ArchiveError::Malformed("no parent directory".into()))?;
    fs::create_dir_all(parent)?;
    let tmp = parent.join(format!(
        ".{}.unpack-{}",
        dest.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
        std::process::id()
    ));
    let _ = fs::remove_dir_all(&tmp);
    fs::create_dir_all(&tmp)?;
    let result = match kind {
        ArchiveKind::Zip | ArchiveKind::Wheel => unpack_zip(path, &tmp, limits),
        ArchiveKind::TarGz | ArchiveKind::TarXz => unpack_tar(path, kind, &tmp, limits),
    };
    if let Err(e) = result {
        let _ = fs::remove_dir_all(&tmp);
        return Err(e);
    }
    fs::rename(&tmp, dest).inspect_err(|_| {
        let _ = fs::remove_dir_all(&tmp);
    })?;
    Ok(())
}

fn check_count(entries: usize, limits: Limits) -> Result<(), ArchiveError> {
    if entries > limits.entries {
        return Err(ArchiveError::TooLarge(format!("{} entries", limits.entries)));
    }
    Ok(())
}

/// Writes one file, taking its size from `budget` (the bytes the package may still use).
fn write_file(
    dest: &Path,
    rel: &Path,
    reader: &mut impl Read,
    budget: &mut u64,
    limits: Limits,
) -> Result<(), ArchiveError> {
    let target = dest.join(rel);
    if let Some(dir) = target.parent() {
        fs::create_dir_all(dir)?;
    }
    let mut out = File::create(&target)?;
    // One byte past the budget tells a file that would not fit from one that just fits.
    let written = io::copy(&mut reader.take(*budget + 1), &mut out)?;
    if written > *budget {
        return Err(ArchiveError::TooLarge(format!("{} bytes", limits.bytes)));
    }
    *budget -= written;
    Ok(())
}

fn unpack_zip(path: &Path, dest: &Path, limits: Limits) -> Result<(), ArchiveError> {
    let (mut zip, entries) = zip_entries(path, limits)?;
    let mut budget = limits.bytes;
    for (i, entry) in entries.iter().enumerate() {
        match entry {
            Entry::Dir(rel) => fs::create_dir_all(dest.join(rel))?,
            Entry::File(rel) => {
                let mut file = zip.by_index(i).map_err(|e| ArchiveError::Malformed(e.to_string()))?;
                write_file(dest, rel, &mut file, &mut budget, limits)?;
                if let Some(mode) = file.unix_mode() {
                    set_mode(&dest.join(rel), mode)?;
                }
            }
        }
    }
    Ok(())
}

fn unpack_tar(path: &Path, kind: ArchiveKind, dest: &Path, limits: Limits) -> Result<(), ArchiveError> {
    tar_entries(path, kind, limits)?;
    let mut archive = tar_archive(path, kind)?;
    let mut budget = limits.bytes;
    for entry in archive.entries()? {
        let mut entry = entry?;
        let name = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
        let rel = safe_relative(&name)?;
        match entry.header().entry_type() {
            tar::EntryType::Directory => fs::create_dir_all(dest.join(&rel))?,
            tar::EntryType::Regular | tar::EntryType::Continuous => {
                let mode = entry.header().mode().ok();
                write_file(dest, &rel, &mut entry, &mut budget, limits)?;
                if let Some(mode) = mode {
                    set_mode(&dest.join(&rel), mode)?;
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// Keeps the owner's execute bit (scripts), nothing else: no setuid, no world-writable.
fn set_mode(path: &Path, mode: u32) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let perms = if mode & 0o100 != 0 { 0o755 } else { 0o644 };
    fs::set_permissions(path, fs::Permissions::from_mode(perms))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn zip_with(entries: &[(&str, Option<u32>)]) -> tempfile::NamedTempFile {
        // Entries are (name, unix mode); a name ending in '/' is a directory.
        let file = tempfile::NamedTempFile::new().unwrap();
        let mut zip = zip::ZipWriter::new(file.reopen().unwrap());
        for (name, mode) in entries {
            let mut opts = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
            if let Some(m) = mode {
                opts = opts.unix_permissions(*m);
            }
            if name.ends_with('/') {
                zip.add_directory(*name, opts).unwrap();
            } else {
                zip.start_file(*name, opts).unwrap();
                zip.write_all(b"data").unwrap();
            }
        }
        zip.finish().unwrap();
        file
    }

    #[test]
    fn unpacks_a_plain_zip() {
        let archive = zip_with(&[("a.py", None), ("sub/b.txt", None), ("empty/", None)]);
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("pkg");
        unpack(archive.path(), ArchiveKind::Zip, &dest).unwrap();
        assert_eq!(fs::read(dest.join("sub/b.txt")).unwrap(), b"data");
        assert!(dest.join("empty").is_dir());
    }

    #[test]
    fn refuses_escaping_zip_entries_and_writes_nothing() {
        for bad in ["../evil.txt", "/etc/evil", "a/../../evil"] {
            let archive = zip_with(&[("ok.txt", None), (bad, None)]);
            let dir = tempfile::tempdir().unwrap();
            let dest = dir.path().join("pkg");
            let err = unpack(archive.path(), ArchiveKind::Zip, &dest).unwrap_err();
            assert!(matches!(err, ArchiveError::Escapes(_)), "{bad}: {err}");
            assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0, "{bad}: nothing written");
        }
    }

    #[test]
    fn refuses_zip_symlinks() {
        let archive = tempfile::NamedTempFile::new().unwrap();
        let mut zip = zip::ZipWriter::new(archive.reopen().unwrap());
        zip.add_symlink("link", "/etc/passwd", zip::write::SimpleFileOptions::default()).unwrap();
        zip.finish().unwrap();
        assert!(matches!(validate(archive.path(), ArchiveKind::Zip), Err(ArchiveError::Link(_))));
    }

    fn tar_with(build: impl FnOnce(&mut tar::Builder<flate2::write::GzEncoder<File>>)) -> tempfile::NamedTempFile {
        let file = tempfile::NamedTempFile::new().unwrap();
        let gz = flate2::write::GzEncoder::new(file.reopen().unwrap(), flate2::Compression::fast());
        let mut builder = tar::Builder::new(gz);
        build(&mut builder);
        builder.into_inner().unwrap().finish().unwrap();
        file
    }

    #[test]
    fn unpacks_tar_gz_and_refuses_links_and_escapes() {
        let good = tar_with(|b| {
            let mut h = tar::Header::new_gnu();
            h.set_size(4);
            h.set_mode(0o755);
            h.set_cksum();
            b.append_data(&mut h, "bin/run.sh", &b"data"[..]).unwrap();
        });
        let dir = tempfile::tempdir().unwrap();
        unpack(good.path(), ArchiveKind::TarGz, &dir.path().join("x")).unwrap();
        assert_eq!(fs::read(dir.path().join("x/bin/run.sh")).unwrap(), b"data");

        let link = tar_with(|b| {
            let mut h = tar::Header::new_gnu();
            h.set_entry_type(tar::EntryType::Symlink);
            h.set_size(0);
            b.append_link(&mut h, "l", "/etc/passwd").unwrap();
        });
        assert!(matches!(validate(link.path(), ArchiveKind::TarGz), Err(ArchiveError::Link(_))));

        let escape = tar_with(|b| {
            let mut h = tar::Header::new_gnu();
            h.set_size(4);
            // The builder refuses ".." itself; write the name into the header by hand.
            h.as_old_mut().name[..9].copy_from_slice(b"../evil.x");
            h.set_cksum();
            b.append(&h, &b"data"[..]).unwrap();
        });
        assert!(matches!(validate(escape.path(), ArchiveKind::TarGz), Err(ArchiveError::Escapes(_))));
    }

    #[test]
    fn unpacks_tar_xz() {
        let file = tempfile::NamedTempFile::new().unwrap();
        let xz = liblzma::write::XzEncoder::new(file.reopen().unwrap(), 6);
        let mut builder = tar::Builder::new(xz);
        let mut h = tar::Header::new_gnu();
        h.set_size(5);
        h.set_mode(0o644);
        h.set_cksum();
        builder.append_data(&mut h, "pkg/mod.py", &b"X = 1"[..]).unwrap();
        builder.into_inner().unwrap().finish().unwrap();
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(validate(file.path(), ArchiveKind::TarXz).unwrap(), 1);
        unpack(file.path(), ArchiveKind::TarXz, &dir.path().join("x")).unwrap();
        assert_eq!(fs::read(dir.path().join("x/pkg/mod.py")).unwrap(), b"X = 1");
        assert!(matches!(validate(file.path(), ArchiveKind::TarGz), Err(ArchiveError::Malformed(_))));
    }

    #[test]
    fn refuses_garbage_and_unknown_names() {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(b"not an archive").unwrap();
        assert!(matches!(validate(f.path(), ArchiveKind::Zip), Err(ArchiveError::Malformed(_))));
        assert!(ArchiveKind::from_name("x.rar").is_err());
        assert_eq!(ArchiveKind::from_name("_ray_pkg_ab.zip").unwrap(), ArchiveKind::Zip);
        assert_eq!(ArchiveKind::from_name("a.tgz").unwrap(), ArchiveKind::TarGz);
        assert_eq!(ArchiveKind::from_name("a.tar.xz").unwrap(), ArchiveKind::TarXz);
        assert_eq!((stem("a.tar.xz"), stem("b.tgz"), stem("c.zip"), stem("d")), ("a", "b", "c", "d"));
    }
}
