//! Copies of jobs' driver logs, sent by the agents as the logs grow, so that a job's output up
//! to the death of its node can still be read. Each copy keeps the newest `cap` bytes at
//! most, in at most two parts: files `<hex of the submission id>.<offset>.part`, named by
//! the offset in the whole log of their first byte. A part is closed at half the cap and the
//! one before it dropped, so a copy never needs rewriting.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};

/// The newest bytes of a job's log the head keeps (`$OXRAY_JOB_LOG_COPY_MAX_BYTES`).
pub const DEFAULT_CAP: u64 = 16 << 20;
const CAP_VAR: &str = "OXRAY_JOB_LOG_COPY_MAX_BYTES";

#[derive(Debug, Clone, Copy, PartialEq)]
struct Part {
    start: u64,
    len: u64,
}

/// Where a chunk at `offset` of `len` bytes goes, given the parts a copy has: `None` when it
/// does not continue the copy (the agent then resends from the copy's end); `Some(true)`
/// when it starts a new part.
fn placement(parts: &[Part], offset: u64, cap: u64) -> Option<bool> {
    let end = parts.last().map_or(0, |p| p.start + p.len);
    if offset != end {
        return None;
    }
    Some(parts.last().is_none_or(|p| p.len >= (cap / 2).max(1)))
}

/// The parts to delete once a new part was started: all but the newest two.
fn dropped(parts: &[Part]) -> &[Part] {
    &parts[..parts.len().saturating_sub(2)]
}

pub struct LogCopies {
    dir: PathBuf,
    cap: u64,
    /// Parts per submission id, oldest first; loaded from the directory at start.
    parts: tokio::sync::Mutex<HashMap<String, Vec<Part>>>,
}

fn part_path(dir: &Path, id: &str, start: u64) -> PathBuf {
    dir.join(format!("{}.{start}.part", hex::encode(id)))
}

/// Reads the parts in `dir` back: `(submission id, part)` per file.
fn scan(dir: &Path) -> std::io::Result<HashMap<String, Vec<Part>>> {
    let mut found: HashMap<String, Vec<Part>> = HashMap::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let Some((id, start)) = name.to_str().and_then(|n| n.strip_suffix(".part")).and_then(|n| n.split_once('.'))
        else {
            continue;
        };
        let (Ok(id), Ok(start)) = (hex::decode(id), start.parse::<u64>()) else { continue };
        let Ok(id) = String::from_utf8(id) else { continue };
        found.entry(id).or_default().push(Part { start, len: entry.metadata()?.len() });
    }
    for parts in found.values_mut() {
        parts.sort_by_key(|p| p.start);
    }
    Ok(found)
}

impl LogCopies {
    pub fn open(dir: PathBuf) -> std::io::Result<Self> {
        oxray_config::paths::private_dir(&dir)?;
        let cap = std::env::var(CAP_VAR).ok().and_then(|v| v.trim().parse().ok()).unwrap_or(DEFAULT_CAP);
        Ok(Self { parts: tokio::sync::Mutex::new(scan(&dir)?), dir, cap })
    }

    /// Adds `data`, which starts at `offset` of job `id`'s log; returns how much of the log
    /// the copy now covers (where the next chunk starts).
    pub async fn append(&self, id: &str, offset: u64, data: Vec<u8>) -> std::io::Result<u64> {
        let mut all = self.parts.lock().await;
        let parts = all.entry(id.to_string()).or_default();
        let end = parts.last().map_or(0, |p| p.start + p.len);
        let Some(new_part) = placement(parts, offset, self.cap) else { return Ok(end) };
        if data.is_empty() {
            return Ok(end);
        }
        if new_part {
            parts.push(Part { start: offset, len: 0 });
        }
        let last = *parts.last().expect("a part to append to");
        let (path, gone) = (
            part_path(&self.dir, id, last.start),
            dropped(parts).iter().map(|p| part_path(&self.dir, id, p.start)).collect::<Vec<_>>(),
        );
        let len = data.len() as u64;
        tokio::task::spawn_blocking(move || -> std::io::Result<()> {
            let mut file = std::fs::OpenOptions::new().create(true).append(true).open(&path)?;
            file.write_all(&data)?;
            for old in gone {
                let _ = std::fs::remove_file(old);
            }
            Ok(())
        })
        .await
        .map_err(std::io::Error::other)??;
        let kept = parts.len().saturating_sub(2);
        parts.drain(..kept);
        parts.last_mut().expect("appended").len += len;
        Ok(end + len)
    }

    /// The copy of job `id`'s log, and how many of its first bytes were not kept; `None`
    /// when the head has none.
    pub async fn read(&self, id: &str) -> std::io::Result<Option<(Vec<u8>, u64)>> {
        let parts = match self.parts.lock().await.get(id) {
            Some(parts) if !parts.is_empty() => parts.clone(),
            _ => return Ok(None),
        };
        let paths: Vec<PathBuf> = parts.iter().map(|p| part_path(&self.dir, id, p.start)).collect();
        let text = tokio::task::spawn_blocking(move || -> std::io::Result<Vec<u8>> {
            let mut text = Vec::new();
            for path in paths {
                text.extend(std::fs::read(path)?);
            }
            Ok(text)
        })
        .await
        .map_err(std::io::Error::other)??;
        Ok(Some((text, parts[0].start)))
    }

    /// Forgets job `id`'s copy (the job was deleted).
    pub async fn remove(&self, id: &str) {
        let parts = self.parts.lock().await.remove(id).unwrap_or_default();
        for part in parts {
            let _ = tokio::fs::remove_file(part_path(&self.dir, id, part.start)).await;
        }
    }
}

/// What a log read from the head's copy ends with: why it is the copy.
pub fn copy_notice(node: &str, why: &str, not_kept: u64) -> String {
    let cut = if not_kept > 0 { format!(" (its first {not_kept} bytes were not kept)") } else { String::new() };
    format!("\n[oxray] {node} {why}: above is the copy of this job's log that the head kept{cut}, up to what the node last sent.\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(start: u64, len: u64) -> Part {
        Part { start, len }
    }

    #[test]
    fn chunks_continue_the_copy_and_start_parts_at_half_the_cap() {
        assert_eq!(placement(&[], 0, 100), Some(true));
        assert_eq!(placement(&[], 5, 100), None);
        assert_eq!(placement(&[part(0, 10)], 10, 100), Some(false));
        assert_eq!(placement(&[part(0, 50)], 50, 100), Some(true));
        assert_eq!(placement(&[part(0, 10)], 4, 100), None);
        assert_eq!(dropped(&[part(0, 50), part(50, 50), part(100, 0)]), &[part(0, 50)]);
        assert!(dropped(&[part(0, 50), part(50, 1)]).is_empty());
    }

    #[tokio::test]
    async fn a_copy_keeps_the_newest_bytes_and_survives_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let copies = LogCopies { dir: dir.path().to_path_buf(), cap: 8, parts: Default::default() };
        assert_eq!(copies.append("raysubmit_a/b", 0, b"0123".to_vec()).await.unwrap(), 4);
        // A chunk sent again, or ahead of the copy, changes nothing: the answer says where to go on.
        assert_eq!(copies.append("raysubmit_a/b", 2, b"23".to_vec()).await.unwrap(), 4);
        assert_eq!(copies.append("raysubmit_a/b", 9, b"x".to_vec()).await.unwrap(), 4);
        for (offset, chunk) in [(4, "4567"), (8, "89"), (10, "ab"), (12, "cdef")] {
            copies.append("raysubmit_a/b", offset, chunk.as_bytes().to_vec()).await.unwrap();
        }
        let (text, not_kept) = copies.read("raysubmit_a/b").await.unwrap().unwrap();
        assert_eq!((String::from_utf8(text).unwrap(), not_kept), ("89abcdef".to_string(), 8));
        let again = LogCopies { dir: dir.path().to_path_buf(), cap: 8, parts: scan(dir.path()).unwrap().into() };
        assert_eq!(again.read("raysubmit_a/b").await.unwrap().unwrap().0, b"89abcdef");
        assert_eq!(again.append("raysubmit_a/b", 16, b"g".to_vec()).await.unwrap(), 17);
        again.remove("raysubmit_a/b").await;
        assert!(again.read("raysubmit_a/b").await.unwrap().is_none());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
