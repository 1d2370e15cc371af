//! The store's usage file: two native-endian u64 in a small file of the shared-memory
//! directory, the bytes taken and, of those, the bytes in freed files kept for reuse. Every
//! process of the node maps it and changes it atomically: the only unsafe code of the store.

use std::fs::OpenOptions;
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::atomic::AtomicU64;

/// The usage file's name in a store's shared-memory directory.
pub const USAGE_FILE: &str = ".usage";
const LEN: u64 = 16;

pub struct Usage {
    map: memmap2::MmapMut,
}

impl Usage {
    /// Maps the usage file of the store in `dir`, making it if it is not there.
    pub fn open(dir: &Path) -> io::Result<Self> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(dir.join(USAGE_FILE))?;
        if file.metadata()?.len() < LEN {
            file.set_len(LEN)?;
        }
        // SAFETY: the file is only ever written through the atomics below, by this code in
        // every process of the node.
        let map = unsafe { memmap2::MmapMut::map_mut(&file)? };
        Ok(Self { map })
    }

    fn word(&self, index: usize) -> &AtomicU64 {
        assert!(index < 2 && self.map.len() as u64 >= LEN);
        // SAFETY: the mapping is page-aligned, at least 16 bytes long (checked above), lives
        // as long as `self`, and is only accessed atomically.
        unsafe { &*(self.map.as_ptr().add(index * 8) as *const AtomicU64) }
    }

    /// Bytes of shared memory taken: objects and kept files both.
    pub fn taken(&self) -> &AtomicU64 {
        self.word(0)
    }

    /// Bytes of shared memory in kept files.
    pub fn kept(&self) -> &AtomicU64 {
        self.word(1)
    }
}

/// Bytes of objects in a store, from the content of its usage file (read without mapping,
/// by the agent's sampler).
pub fn objects_bytes(usage: &[u8]) -> u64 {
    let word = |at: usize| usage.get(at..at + 8).map_or(0, |b| u64::from_ne_bytes(b.try_into().expect("8 bytes")));
    word(0).saturating_sub(word(8))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    #[test]
    fn a_stores_objects_are_its_bytes_less_its_kept_files() {
        let usage: Vec<u8> = [100u64, 30].iter().flat_map(|w| w.to_ne_bytes()).collect();
        assert_eq!(objects_bytes(&usage), 70);
        assert_eq!(objects_bytes(&usage[..8]), 100);
        assert_eq!(objects_bytes(&[]), 0);
    }

    #[test]
    fn two_mappings_of_one_file_see_each_others_counts() {
        let tmp = tempfile::tempdir().unwrap();
        let (a, b) = (Usage::open(tmp.path()).unwrap(), Usage::open(tmp.path()).unwrap());
        a.taken().fetch_add(100, Ordering::AcqRel);
        b.kept().fetch_add(30, Ordering::AcqRel);
        assert_eq!((b.taken().load(Ordering::Acquire), a.kept().load(Ordering::Acquire)), (100, 30));
        assert_eq!(objects_bytes(&std::fs::read(tmp.path().join(USAGE_FILE)).unwrap()), 70);
    }
}
