//! The node's object store: large objects live in files under a shared-memory directory
//! (one file per object, written once, then read by every process of the node through
//! read-only mappings), and on disk once the shared memory set aside for objects is full.
//! How much of it is in use is one counter in a small shared file, updated atomically by
//! every process of the node.

use std::fs::OpenOptions;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

const USAGE_FILE: &str = ".usage";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredFile {
    pub path: PathBuf,
    pub size: u64,
    /// In shared memory (counted against the capacity), or spilled to disk.
    pub in_memory: bool,
}

pub struct NodeStore {
    dir: PathBuf,
    spill: PathBuf,
    capacity: u64,
    usage: memmap2::MmapMut,
}

impl NodeStore {
    /// Opens (creating if needed) the store of a node: `dir` in shared memory holding up to
    /// `capacity` bytes, `spill` on disk for the rest.
    pub fn open(dir: &Path, spill: &Path, capacity: u64) -> io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        std::fs::create_dir_all(spill)?;
        let file = OpenOptions::new().read(true).write(true).create(true).truncate(false).open(dir.join(USAGE_FILE))?;
        if file.metadata()?.len() < 8 {
            file.set_len(8)?;
        }
        // SAFETY: the mapping is 8 bytes of a file only this store's code writes, and only
        // through the atomic below.
        let usage = unsafe { memmap2::MmapMut::map_mut(&file)? };
        Ok(Self { dir: dir.to_path_buf(), spill: spill.to_path_buf(), capacity, usage })
    }

    fn counter(&self) -> &AtomicU64 {
        // SAFETY: the mapping is page-aligned, at least 8 bytes long, lives as long as
        // `self`, and is only accessed atomically (by every process that maps it).
        unsafe { &*(self.usage.as_ptr() as *const AtomicU64) }
    }

    /// Bytes of shared memory in use by objects on this node.
    pub fn used(&self) -> u64 {
        self.counter().load(Ordering::Relaxed)
    }

    /// A new, empty file of `size` bytes for object `id`: in shared memory while there is
    /// room (and `spill` is false), on disk otherwise.
    pub fn create(&self, id: &str, size: u64, spill: bool) -> io::Result<StoredFile> {
        if id.is_empty() || id.contains(['/', '.']) {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("bad object id {id:?}")));
        }
        let mut in_memory = false;
        if !spill {
            let before = self.counter().fetch_add(size, Ordering::AcqRel);
            in_memory = before.saturating_add(size) <= self.capacity;
            if !in_memory {
                self.counter().fetch_sub(size, Ordering::AcqRel);
            }
        }
        let path = if in_memory { self.dir.join(id) } else { self.spill.join(id) };
        let made = OpenOptions::new().write(true).create_new(true).open(&path).and_then(|f| f.set_len(size));
        let file = StoredFile { path, size, in_memory };
        if let Err(e) = made {
            self.delete(&file);
            return Err(e);
        }
        Ok(file)
    }

    /// Removes an object's file. Processes that mapped it keep their view until they let
    /// go of it.
    pub fn delete(&self, file: &StoredFile) {
        if let Err(e) = std::fs::remove_file(&file.path) {
            tracing::debug!(path = %file.path.display(), "object file not removed: {e}");
        }
        if file.in_memory {
            self.counter().fetch_sub(file.size, Ordering::AcqRel);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objects_spill_to_disk_when_shared_memory_is_full_and_free_their_room() {
        let tmp = tempfile::tempdir().unwrap();
        let (dir, spill) = (tmp.path().join("shm"), tmp.path().join("spill"));
        let store = NodeStore::open(&dir, &spill, 100).unwrap();
        let a = store.create("a", 60, false).unwrap();
        assert!(a.in_memory && a.path.starts_with(&dir));
        assert_eq!(std::fs::metadata(&a.path).unwrap().len(), 60);
        let b = store.create("b", 60, false).unwrap();
        assert!(!b.in_memory && b.path.starts_with(&spill), "no room left: spilled");
        let other = NodeStore::open(&dir, &spill, 100).unwrap();
        assert_eq!(other.used(), 60, "every process of the node sees the same usage");
        store.delete(&a);
        assert_eq!(other.used(), 0);
        assert!(!a.path.exists());
        assert!(other.create("c", 100, false).unwrap().in_memory, "the room came back");
        assert!(!other.create("d", 1, true).unwrap().in_memory, "asked to spill");
        store.delete(&b);
        assert_eq!(other.used(), 100, "a spilled object never counted");
        assert!(store.create("../x", 1, false).is_err());
    }
}
