//! The node's object store: large objects live in files under a shared-memory directory
//! (one file per object, written once, then read by every process of the node through
//! read-only mappings), and on disk once the shared memory set aside for objects is full.
//! How much of it is in use is counted in a small shared file, updated atomically by every
//! process of the node: bytes taken (objects and kept files, below) and bytes kept.
//!
//! Filling fresh shared-memory pages costs the kernel allocating and zeroing each one, so a
//! process keeps a few of its freed files for its next objects of about the same size, but
//! only files no process maps any more: readers hold a shared `flock` on a file for as long
//! as their mapping lives, and a file is kept only if an exclusive one can be taken. Kept
//! files are named for their process, so any process short of room removes those of
//! processes that died.

use std::fs::OpenOptions;
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Mutex;

use crate::usage::Usage;
/// Freed files a process keeps for reuse, and their total size as a share of the capacity.
const KEPT_FILES: usize = 4;
const KEPT_SHARE: u64 = 4;
const KEPT_PREFIX: &str = ".kept-";

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
    usage: Usage,
    /// Freed files in shared memory, no longer mapped, kept for reuse (still counted).
    kept: Mutex<Vec<StoredFile>>,
}

impl NodeStore {
    /// Opens (creating if needed) the store of a node: `dir` in shared memory holding up to
    /// `capacity` bytes, `spill` on disk for the rest.
    pub fn open(dir: &Path, spill: &Path, capacity: u64) -> io::Result<Self> {
        oxray_config::paths::private_dir(dir)?;
        oxray_config::paths::private_dir(spill)?;
        let usage = Usage::open(dir)?;
        Ok(Self { dir: dir.to_path_buf(), spill: spill.to_path_buf(), capacity, usage, kept: Mutex::new(Vec::new()) })
    }

    /// Bytes of shared memory taken, objects and kept files both.
    fn counter(&self) -> &std::sync::atomic::AtomicU64 {
        self.usage.taken()
    }

    /// Bytes of shared memory in kept files.
    fn kept_counter(&self) -> &std::sync::atomic::AtomicU64 {
        self.usage.kept()
    }

    /// The shared-memory directory: it names the store.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The object file at `path`, if it is one of this store's (another process of the
    /// node wrote it and hands it over).
    pub fn file_at(&self, path: &Path) -> Option<StoredFile> {
        let in_memory = path.parent() == Some(self.dir.as_path());
        if !in_memory && path.parent() != Some(self.spill.as_path()) {
            return None;
        }
        let name = path.file_name()?.to_str()?;
        if name.starts_with('.') {
            return None;
        }
        let size = std::fs::metadata(path).ok()?.len();
        Some(StoredFile { path: path.to_path_buf(), size, in_memory })
    }

    /// Bytes of shared memory in use by objects on this node.
    pub fn used(&self) -> u64 {
        self.counter().load(Ordering::Acquire).saturating_sub(self.kept_counter().load(Ordering::Acquire))
    }

    /// A file of `size` bytes for object `id`, its content undefined: in shared memory while
    /// there is room (and `spill` is false), on disk otherwise.
    pub fn create(&self, id: &str, size: u64, spill: bool) -> io::Result<StoredFile> {
        if id.is_empty() || id.contains(['/', '.']) {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("bad object id {id:?}")));
        }
        if !spill {
            if let Some(file) = self.reuse(id, size) {
                return Ok(file);
            }
        }
        let mut in_memory = !spill && self.reserve(size);
        if !in_memory && !spill && (self.release_kept() | self.remove_orphans()) {
            in_memory = self.reserve(size);
        }
        let path = if in_memory { self.dir.join(id) } else { self.spill.join(id) };
        let made =
            OpenOptions::new().write(true).create_new(true).mode(0o600).open(&path).and_then(|f| f.set_len(size));
        let file = StoredFile { path, size, in_memory };
        if let Err(e) = made {
            self.remove(&file);
            return Err(e);
        }
        Ok(file)
    }

    /// Counts `size` more bytes of shared memory in use, if they fit.
    fn reserve(&self, size: u64) -> bool {
        let before = self.counter().fetch_add(size, Ordering::AcqRel);
        let fits = before.saturating_add(size) <= self.capacity;
        if !fits {
            self.counter().fetch_sub(size, Ordering::AcqRel);
        }
        fits
    }

    /// A kept file of at least `size` bytes (and not much more), renamed for object `id`
    /// and cut to size.
    fn reuse(&self, id: &str, size: u64) -> Option<StoredFile> {
        let old = {
            let mut kept = self.kept.lock().expect("kept lock");
            let fitting = kept.iter().enumerate().filter(|(_, f)| f.size >= size && f.size / 2 <= size);
            let at = fitting.min_by_key(|(_, f)| f.size).map(|(at, _)| at)?;
            kept.swap_remove(at)
        };
        self.kept_counter().fetch_sub(old.size, Ordering::AcqRel);
        let file = StoredFile { path: self.dir.join(id), size, in_memory: true };
        let moved = std::fs::rename(&old.path, &file.path)
            .and_then(|()| OpenOptions::new().write(true).open(&file.path))
            .and_then(|f| f.set_len(size));
        if let Err(e) = moved {
            tracing::debug!(path = %old.path.display(), "kept object file not reused: {e}");
            self.remove(&old);
            let _ = std::fs::remove_file(&file.path);
            return None;
        }
        self.counter().fetch_sub(old.size - size, Ordering::AcqRel);
        Some(file)
    }

    /// Frees an object's file: kept for reuse when no process maps it and there is room
    /// among the kept ones, removed otherwise. Processes that mapped it keep their view
    /// until they let go of it.
    pub fn delete(&self, file: &StoredFile) {
        let budget = self.capacity / KEPT_SHARE;
        if file.in_memory && file.size <= budget && self.unmapped(&file.path) {
            let mut kept = self.kept.lock().expect("kept lock");
            // The newest freed file is the likeliest to fit the next object (a loop putting
            // values of one size): older kept files make room for it.
            while !kept.is_empty()
                && (kept.len() >= KEPT_FILES || kept.iter().map(|f| f.size).sum::<u64>() + file.size > budget)
            {
                let old = kept.remove(0);
                self.kept_counter().fetch_sub(old.size, Ordering::AcqRel);
                self.remove(&old);
            }
            let total: u64 = kept.iter().map(|f| f.size).sum::<u64>() + file.size;
            let at = (0..KEPT_FILES).find(|n| kept.iter().all(|f| f.path != self.kept_path(*n)));
            if let Some(at) = at.filter(|_| total <= budget) {
                let path = self.kept_path(at);
                if std::fs::rename(&file.path, &path).is_ok() {
                    self.kept_counter().fetch_add(file.size, Ordering::AcqRel);
                    kept.push(StoredFile { path, ..file.clone() });
                    return;
                }
            }
        }
        self.remove(file);
    }

    fn kept_path(&self, n: usize) -> PathBuf {
        self.dir.join(format!("{KEPT_PREFIX}{}-{n}", std::process::id()))
    }

    /// Removes the files kept by processes that are gone; returns whether there were any.
    fn remove_orphans(&self) -> bool {
        let Ok(entries) = std::fs::read_dir(&self.dir) else { return false };
        let mut removed = false;
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(pid) = name.to_str().and_then(|n| n.strip_prefix(KEPT_PREFIX)).and_then(|n| n.split('-').next())
            else {
                continue;
            };
            if Path::new("/proc").join(pid).exists() {
                continue;
            }
            let size = entry.metadata().map(|m| m.len()).unwrap_or(0);
            // Of several processes sweeping at once, only the one that removes it uncounts it.
            if std::fs::remove_file(entry.path()).is_ok() {
                self.counter().fetch_sub(size, Ordering::AcqRel);
                self.kept_counter().fetch_sub(size, Ordering::AcqRel);
                removed = true;
            }
        }
        removed
    }

    /// Whether no process holds the file mapped (readers keep a shared lock on it).
    fn unmapped(&self, path: &Path) -> bool {
        OpenOptions::new().read(true).open(path).is_ok_and(|f| f.try_lock().is_ok())
    }

    fn remove(&self, file: &StoredFile) {
        if let Err(e) = std::fs::remove_file(&file.path) {
            tracing::debug!(path = %file.path.display(), "object file not removed: {e}");
        }
        if file.in_memory {
            self.counter().fetch_sub(file.size, Ordering::AcqRel);
        }
    }

    /// Removes the kept files; returns whether there were any.
    pub fn release_kept(&self) -> bool {
        let kept = std::mem::take(&mut *self.kept.lock().expect("kept lock"));
        for file in &kept {
            self.kept_counter().fetch_sub(file.size, Ordering::AcqRel);
            self.remove(file);
        }
        !kept.is_empty()
    }
}

impl Drop for NodeStore {
    fn drop(&mut self) {
        self.release_kept();
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
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!((mode(&dir), mode(&spill), mode(&a.path), mode(&b.path)), (0o700, 0o700, 0o600, 0o600));
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

    #[test]
    fn freed_files_nobody_maps_are_reused_and_orphans_removed() {
        let tmp = tempfile::tempdir().unwrap();
        let (dir, spill) = (tmp.path().join("shm"), tmp.path().join("spill"));
        let store = NodeStore::open(&dir, &spill, 8000).unwrap();
        let a = store.create("a", 1000, false).unwrap();
        store.delete(&a);
        assert!(!a.path.exists());
        assert_eq!(store.used(), 0, "kept for reuse: taken, but not in use");
        assert_eq!(store.counter().load(Ordering::Acquire), 1000);
        let b = store.create("b", 600, false).unwrap();
        assert_eq!(std::fs::metadata(&b.path).unwrap().len(), 600, "the kept file, cut to size");
        assert_eq!(store.used(), 600);
        assert!(store.create("c", 200, false).unwrap().in_memory, "nothing kept that small: a new file");

        let reader = std::fs::File::open(&b.path).unwrap();
        reader.lock_shared().unwrap();
        store.delete(&b);
        assert!(!b.path.exists());
        assert_eq!(store.used(), 200, "a mapped file is removed, never kept");
        drop(reader);

        // Files kept by a process that is gone are removed by whoever runs short of room.
        let orphan = dir.join(format!("{KEPT_PREFIX}{}-0", u32::MAX));
        std::fs::write(&orphan, vec![0; 700]).unwrap();
        store.counter().fetch_add(700, Ordering::AcqRel);
        store.kept_counter().fetch_add(700, Ordering::AcqRel);
        assert!(store.create("d", 7500, false).unwrap().in_memory);
        assert!(!orphan.exists());
        assert_eq!(store.used(), 7700);
    }

    #[test]
    fn the_newest_freed_file_pushes_older_kept_ones_out() {
        let tmp = tempfile::tempdir().unwrap();
        let store = NodeStore::open(&tmp.path().join("shm"), &tmp.path().join("spill"), 80_000).unwrap();
        let small: Vec<StoredFile> =
            (0..KEPT_FILES).map(|n| store.create(&format!("s{n}"), 100, false).unwrap()).collect();
        for f in &small {
            store.delete(f);
        }
        assert_eq!(store.kept.lock().unwrap().len(), KEPT_FILES);
        let big = store.create("big", 9_000, false).unwrap();
        store.delete(&big);
        let kept: Vec<u64> = store.kept.lock().unwrap().iter().map(|f| f.size).collect();
        assert!(kept.contains(&9_000), "kept despite the full slots: {kept:?}");
        assert_eq!(kept.iter().sum::<u64>(), store.kept_counter().load(Ordering::Acquire));
        let again = store.create("again", 9_000, false).unwrap();
        assert_eq!(store.kept.lock().unwrap().iter().filter(|f| f.size == 9_000).count(), 0, "reused");
        assert!(again.in_memory);
        let past_budget = 80_000 / KEPT_SHARE + 1;
        let too_big = store.create("too-big", past_budget, false).unwrap();
        store.delete(&too_big);
        assert!(store.kept.lock().unwrap().iter().all(|f| f.size != past_budget), "past the budget: removed");
    }
}
