//! Archives as an attacker would make them: random bytes, and well-formed zip and tar files
//! whose entry names, kinds and sizes are drawn at random (`..`, absolute paths, links,
//! devices, names that clash). Whatever comes in, unpacking never panics and never writes
//! outside its target; what it refuses leaves nothing behind, and nothing passes its limits.

use oxray_runtime_env::{unpack_within, ArchiveKind, Limits};
use proptest::prelude::*;
use std::io::Write;
use std::path::Path;

const KINDS: [ArchiveKind; 3] = [ArchiveKind::Zip, ArchiveKind::TarGz, ArchiveKind::TarXz];
const LIMITS: Limits = Limits { bytes: 4096, entries: 16 };

/// Every path under `root`, relative to it.
fn tree(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            out.push(path.strip_prefix(root).unwrap().display().to_string());
            if path.is_dir() && !path.is_symlink() {
                stack.push(path);
            }
        }
    }
    out.sort();
    out
}

/// Unpacks `archive` into `<sandbox>/inside/target` and checks what the sandbox holds after.
fn unpack_and_check(archive: &Path, kind: ArchiveKind) -> Result<(), String> {
    let sandbox = tempfile::tempdir().unwrap();
    let target = sandbox.path().join("inside").join("target");
    let outcome = unpack_within(archive, kind, &target, LIMITS);
    let left = tree(sandbox.path());
    for path in &left {
        prop_assert_or(
            path == "inside" || path == "inside/target" || path.starts_with("inside/target/"),
            format!("{path} was written outside the target ({outcome:?})"),
        )?;
    }
    match outcome {
        Ok(()) => {
            let mut bytes = 0;
            let files = tree(&target);
            for path in &files {
                let meta = std::fs::symlink_metadata(target.join(path)).unwrap();
                prop_assert_or(!meta.file_type().is_symlink(), format!("{path} is a link"))?;
                bytes += if meta.is_file() { meta.len() } else { 0 };
            }
            prop_assert_or(bytes <= LIMITS.bytes, format!("{bytes} bytes unpacked"))?;
            prop_assert_or(files.len() <= LIMITS.entries * 8, format!("{} paths unpacked", files.len()))
        }
        Err(_) => prop_assert_or(left.iter().all(|p| p == "inside"), format!("a refusal left {left:?}")),
    }
}

fn prop_assert_or(ok: bool, why: String) -> Result<(), String> {
    if ok {
        Ok(())
    } else {
        Err(why)
    }
}

fn name_part() -> impl Strategy<Value = String> {
    // Mostly plain names, so that many archives are accepted and what they write is checked.
    prop_oneof![
        1 => Just("..".to_string()),
        1 => Just(".".to_string()),
        1 => Just("".to_string()),
        6 => Just("a".to_string()),
        6 => Just("b".to_string()),
        1 => Just("/".to_string()),
        1 => Just("\\..".to_string()),
        3 => "[a-z./\\\\]{1,6}",
    ]
}

fn entry_name() -> impl Strategy<Value = String> {
    (proptest::collection::vec(name_part(), 1..4), prop::bool::weighted(0.05)).prop_map(|(parts, absolute)| {
        let joined = parts.join("/");
        if absolute {
            format!("/{joined}")
        } else {
            joined
        }
    })
}

#[derive(Debug, Clone)]
enum Kind {
    File(usize),
    Dir,
    Symlink(String),
    HardLink(String),
    Fifo,
}

fn entry_kind() -> impl Strategy<Value = Kind> {
    prop_oneof![
        4 => (0usize..300).prop_map(Kind::File),
        2 => Just(Kind::Dir),
        1 => entry_name().prop_map(Kind::Symlink),
        1 => entry_name().prop_map(Kind::HardLink),
        1 => Just(Kind::Fifo),
    ]
}

fn entries() -> impl Strategy<Value = Vec<(String, Kind)>> {
    proptest::collection::vec((entry_name(), entry_kind()), 0..12)
}

/// A tar file written header by header, so that names the tar crate's own builder would
/// refuse (`..`, absolute) are in it as an attacker would put them.
fn tar_bytes(entries: &[(String, Kind)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (name, kind) in entries {
        let mut header = tar::Header::new_old();
        let raw = name.as_bytes();
        let bytes = &mut header.as_old_mut().name;
        let n = raw.len().min(bytes.len());
        bytes[..n].copy_from_slice(&raw[..n]);
        header.set_mode(0o644);
        let (entry_type, size, link) = match kind {
            Kind::File(size) => (tar::EntryType::Regular, *size, None),
            Kind::Dir => (tar::EntryType::Directory, 0, None),
            Kind::Symlink(to) => (tar::EntryType::Symlink, 0, Some(to)),
            Kind::HardLink(to) => (tar::EntryType::Link, 0, Some(to)),
            Kind::Fifo => (tar::EntryType::Fifo, 0, None),
        };
        header.set_entry_type(entry_type);
        header.set_size(size as u64);
        if let Some(to) = link {
            let raw = to.as_bytes();
            let field = &mut header.as_old_mut().linkname;
            let n = raw.len().min(field.len());
            field[..n].copy_from_slice(&raw[..n]);
        }
        header.set_cksum();
        out.extend_from_slice(header.as_bytes());
        out.extend(std::iter::repeat_n(b'x', size));
        out.extend(std::iter::repeat_n(0u8, (512 - size % 512) % 512));
    }
    out.extend([0u8; 1024]);
    out
}

fn zip_bytes(entries: &[(String, Kind)]) -> Vec<u8> {
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let options = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Deflated);
    for (name, kind) in entries {
        let written = match kind {
            Kind::File(size) => zip
                .start_file(name.as_str(), options)
                .and_then(|_| zip.write_all(&vec![b'x'; *size]).map_err(Into::into)),
            Kind::Dir => zip.add_directory(name.as_str(), options),
            Kind::Symlink(to) | Kind::HardLink(to) => zip.add_symlink(name.as_str(), to.as_str(), options),
            Kind::Fifo => zip.start_file(name.as_str(), options.unix_permissions(0o010644)),
        };
        if written.is_err() {
            continue; // a name the writer itself refuses (a duplicate): left out
        }
    }
    zip.finish().unwrap().into_inner()
}

fn compressed(kind: ArchiveKind, tar: Vec<u8>) -> Vec<u8> {
    match kind {
        ArchiveKind::TarXz => {
            let mut out = liblzma::write::XzEncoder::new(Vec::new(), 1);
            out.write_all(&tar).unwrap();
            out.finish().unwrap()
        }
        _ => {
            let mut out = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            out.write_all(&tar).unwrap();
            out.finish().unwrap()
        }
    }
}

fn file_of(bytes: &[u8]) -> tempfile::NamedTempFile {
    let mut file = tempfile::NamedTempFile::new().unwrap();
    file.write_all(bytes).unwrap();
    file
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_are_refused_without_a_trace(bytes in proptest::collection::vec(any::<u8>(), 0..2048),
                                                kind in 0usize..3) {
        let file = file_of(&bytes);
        unpack_and_check(file.path(), KINDS[kind]).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn crafted_tar_entries_stay_inside(entries in entries(), xz in any::<bool>()) {
        let kind = if xz { ArchiveKind::TarXz } else { ArchiveKind::TarGz };
        let file = file_of(&compressed(kind, tar_bytes(&entries)));
        unpack_and_check(file.path(), kind).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn crafted_zip_entries_stay_inside(entries in entries()) {
        let file = file_of(&zip_bytes(&entries));
        unpack_and_check(file.path(), ArchiveKind::Zip).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn a_damaged_archive_is_refused_without_a_trace(entries in entries(), cut in any::<prop::sample::Index>(),
                                                    flip in any::<prop::sample::Index>()) {
        let mut bytes = zip_bytes(&entries);
        if !bytes.is_empty() {
            let at = flip.index(bytes.len());
            bytes[at] ^= 0x5a;
            bytes.truncate(cut.index(bytes.len()) + 1);
        }
        let file = file_of(&bytes);
        unpack_and_check(file.path(), ArchiveKind::Zip).map_err(TestCaseError::fail)?;
    }
}

#[test]
fn a_bomb_stops_at_the_byte_limit() {
    // 64 KiB of one byte deflates to a few hundred bytes: far under the upload, far over the limit.
    let bomb = zip_bytes(&[("bomb.bin".into(), Kind::File(64 * 1024))]);
    assert!(bomb.len() < 4096, "{} bytes", bomb.len());
    let file = file_of(&bomb);
    let sandbox = tempfile::tempdir().unwrap();
    let err = unpack_within(file.path(), ArchiveKind::Zip, &sandbox.path().join("t"), LIMITS).unwrap_err();
    assert!(err.to_string().contains("more than 4096 bytes"), "{err}");
    assert!(tree(sandbox.path()).is_empty());
    let many: Vec<(String, Kind)> = (0..17).map(|i| (format!("f{i}"), Kind::File(1))).collect();
    let file = file_of(&compressed(ArchiveKind::TarGz, tar_bytes(&many)));
    let err = unpack_within(file.path(), ArchiveKind::TarGz, &sandbox.path().join("t"), LIMITS).unwrap_err();
    assert!(err.to_string().contains("16 entries"), "{err}");
}
