//! Copies of jobs' driver logs, sent by the agents as the logs grow, so that a job's output up
//! to the death of its node can still be read. Each copy keeps the newest `cap` bytes at
//! most, in at most two parts: files `<hex of the submission id>.<offset>.part`, named by
//! the offset in the whole log of their first byte. A part is closed at half the cap and the
//! one before it dropped, so a copy never needs rewriting.

use bytes::Bytes;
use futures_util::StreamExt;
use oxray_http::ByteStream;
use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

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

/// One job's copy: its parts, oldest first. Locked per job, so jobs copy side by side.
type Copy = Arc<tokio::sync::Mutex<Vec<Part>>>;

pub struct LogCopies {
    dir: PathBuf,
    cap: u64,
    /// Loaded from the directory at start.
    copies: std::sync::Mutex<HashMap<String, Copy>>,
}

/// Submission ids are checked when jobs are submitted; this keeps any other text out of
/// the directory's names all the same.
fn usable(id: &str) -> bool {
    !id.is_empty() && !id.starts_with('.') && id.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
}

fn part_path(dir: &Path, id: &str, start: u64) -> PathBuf {
    dir.join(format!("{id}.{start}.part"))
}

/// Reads the parts in `dir` back, by submission id.
fn scan(dir: &Path) -> std::io::Result<HashMap<String, Vec<Part>>> {
    let mut found: HashMap<String, Vec<Part>> = HashMap::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let Some((id, start)) = name.to_str().and_then(|n| n.strip_suffix(".part")).and_then(|n| n.rsplit_once('.'))
        else {
            continue;
        };
        let Ok(start) = start.parse::<u64>() else { continue };
        found.entry(id.to_string()).or_default().push(Part { start, len: entry.metadata()?.len() });
    }
    for parts in found.values_mut() {
        parts.sort_by_key(|p| p.start);
    }
    Ok(found)
}

/// Appends `data` to the part at `path` (made new when `new`) and removes the parts in
/// `gone`; returns the part's length after it, read from the file (so a write that failed
/// half-way still leaves the copy's size true), with how the write went.
fn write_part(path: &Path, new: bool, data: &[u8], gone: &[PathBuf]) -> std::io::Result<(u64, std::io::Result<()>)> {
    // A new part's file can only be there from a write whose answer was lost: it starts over.
    let mut file = std::fs::OpenOptions::new().create(true).append(!new).write(true).truncate(new).open(path)?;
    let written = file.write_all(data);
    for old in gone {
        let _ = std::fs::remove_file(old);
    }
    Ok((file.metadata()?.len(), written))
}

impl LogCopies {
    pub fn open(dir: PathBuf) -> std::io::Result<Self> {
        oxray_config::paths::private_dir(&dir)?;
        let cap = std::env::var(CAP_VAR).ok().and_then(|v| v.trim().parse().ok()).unwrap_or(DEFAULT_CAP);
        let copies = scan(&dir)?.into_iter().map(|(id, parts)| (id, Arc::new(tokio::sync::Mutex::new(parts))));
        Ok(Self { copies: std::sync::Mutex::new(copies.collect()), dir, cap })
    }

    fn copy(&self, id: &str) -> Copy {
        self.copies.lock().expect("log copies lock").entry(id.to_string()).or_default().clone()
    }

    /// Adds `data`, which starts at `offset` of job `id`'s log; returns how much of the log
    /// the copy now covers (where the next chunk starts). Runs to its end even when its
    /// caller goes away, so the parts in memory always match the files.
    pub async fn append(self: &Arc<Self>, id: &str, offset: u64, data: Vec<u8>) -> std::io::Result<u64> {
        if !usable(id) {
            return Err(std::io::Error::other(format!("{id:?} cannot name a log copy")));
        }
        let (this, id) = (self.clone(), id.to_string());
        tokio::spawn(async move { this.append_now(&id, offset, data).await }).await.map_err(std::io::Error::other)?
    }

    async fn append_now(&self, id: &str, offset: u64, data: Vec<u8>) -> std::io::Result<u64> {
        let copy = self.copy(id);
        let mut parts = copy.lock().await;
        let end = parts.last().map_or(0, |p| p.start + p.len);
        let Some(new) = placement(&parts, offset, self.cap) else { return Ok(end) };
        if data.is_empty() {
            return Ok(end);
        }
        if new {
            parts.push(Part { start: offset, len: 0 });
        }
        let start = parts.last().expect("a part to append to").start;
        let path = part_path(&self.dir, id, start);
        let gone: Vec<PathBuf> = dropped(&parts).iter().map(|p| part_path(&self.dir, id, p.start)).collect();
        let written = tokio::task::spawn_blocking(move || write_part(&path, new, &data, &gone))
            .await
            .map_err(std::io::Error::other)?;
        let (len, result) = match written {
            Ok(written) => written,
            Err(e) => {
                if new {
                    parts.pop();
                }
                return Err(e);
            }
        };
        let kept = parts.len().saturating_sub(2);
        parts.drain(..kept);
        let last = parts.last_mut().expect("appended");
        last.len = len;
        result.map(|()| last.start + last.len)
    }

    /// The copy of job `id`'s log, and how many of its first bytes were not kept; `None`
    /// when the head has none.
    pub async fn read(&self, id: &str) -> std::io::Result<Option<(Vec<u8>, u64)>> {
        let Some(copy) = self.copies.lock().expect("log copies lock").get(id).cloned() else { return Ok(None) };
        // Held while reading: a part is not dropped under the reader.
        let parts = copy.lock().await;
        let Some(first) = parts.first().map(|p| p.start) else { return Ok(None) };
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
        Ok(Some((text, first)))
    }

    /// Forgets job `id`'s copy (the job was deleted).
    pub async fn remove(&self, id: &str) {
        let Some(copy) = self.copies.lock().expect("log copies lock").remove(id) else { return };
        for part in copy.lock().await.drain(..) {
            let _ = tokio::fs::remove_file(part_path(&self.dir, id, part.start)).await;
        }
    }

    /// Forgets the copies of jobs `keep` does not name (deleted while a copy was on its way).
    pub async fn retain(&self, keep: impl Fn(&str) -> bool) {
        let ids: Vec<String> =
            self.copies.lock().expect("log copies lock").keys().filter(|id| !keep(id)).cloned().collect();
        for id in ids {
            self.remove(&id).await;
        }
    }
}

/// What a log read from the head's copy ends with: why it is the copy.
pub fn copy_notice(node: &str, why: &str, not_kept: u64) -> String {
    let cut = if not_kept > 0 { format!(" (its first {not_kept} bytes were not kept)") } else { String::new() };
    format!("\n[oxray] {node} {why}: above is the copy of this job's log that the head kept{cut}, up to what the node last sent.\n")
}

/// A follower's stream of a live node's log that, should the node stop answering midway,
/// goes on with what the head's copy holds beyond what was sent already, then a line
/// saying why, and ends.
pub fn followed_then_copy(copies: Arc<LogCopies>, id: String, node: String, live: ByteStream) -> ByteStream {
    enum Phase {
        Live(ByteStream, u64),
        Ended,
    }
    let step = move |phase| {
        let (copies, id, node) = (copies.clone(), id.clone(), node.clone());
        async move {
            let Phase::Live(mut live, sent) = phase else { return None };
            match live.next().await? {
                Ok(bytes) => {
                    let sent = sent + bytes.len() as u64;
                    Some((Ok(bytes), Phase::Live(live, sent)))
                }
                Err(why) => {
                    let (copy, not_kept) = match copies.read(&id).await {
                        Ok(copy) => copy.unwrap_or_default(),
                        Err(e) => {
                            return Some((Err(format!("{why}; the head's copy cannot be read: {e}")), Phase::Ended))
                        }
                    };
                    let mut rest = unsent(copy, not_kept, sent);
                    rest.extend(copy_notice(&node, &format!("stopped answering ({why})"), not_kept).into_bytes());
                    Some((Ok(Bytes::from(rest)), Phase::Ended))
                }
            }
        }
    };
    futures_util::stream::unfold(Phase::Live(live, 0), step).boxed()
}

/// What of a copy that starts at offset `not_kept` of the log lies past the first `sent`
/// bytes.
fn unsent(mut copy: Vec<u8>, not_kept: u64, sent: u64) -> Vec<u8> {
    let from = usize::try_from(sent.saturating_sub(not_kept)).unwrap_or(usize::MAX).min(copy.len());
    copy.drain(..from);
    copy
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(start: u64, len: u64) -> Part {
        Part { start, len }
    }

    #[test]
    fn a_follower_gets_what_the_copy_holds_past_what_it_was_sent() {
        assert_eq!(unsent(b"abcdef".to_vec(), 0, 4), b"ef");
        assert_eq!(unsent(b"cdef".to_vec(), 2, 4), b"ef", "the copy starts at offset 2");
        assert_eq!(unsent(b"cdef".to_vec(), 2, 1), b"cdef", "bytes before the copy are lost");
        assert_eq!(unsent(b"ab".to_vec(), 0, 5), b"", "the copy lags behind the node");
    }

    #[tokio::test]
    async fn a_followed_log_whose_node_stops_answering_goes_on_from_the_copy() {
        let dir = tempfile::tempdir().unwrap();
        let copies = Arc::new(LogCopies::open(dir.path().join("logs")).unwrap());
        copies.append("job", 0, b"one\ntwo\nthree\n".to_vec()).await.unwrap();
        let live: Vec<Result<Bytes, String>> = vec![Ok(Bytes::from_static(b"one\n")), Err("connection reset".into())];
        let stream =
            followed_then_copy(copies, "job".into(), "node n1".into(), futures_util::stream::iter(live).boxed());
        let chunks: Vec<_> = stream.collect().await;
        let text: String = chunks.into_iter().map(|c| String::from_utf8(c.unwrap().to_vec()).unwrap()).collect();
        assert!(text.starts_with("one\ntwo\nthree\n\n[oxray] node n1 stopped answering (connection reset)"), "{text}");
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
        let copies = Arc::new(LogCopies { dir: dir.path().to_path_buf(), cap: 8, copies: Default::default() });
        assert_eq!(copies.append("raysubmit_a.b", 0, b"0123".to_vec()).await.unwrap(), 4);
        // A chunk sent again, or ahead of the copy, changes nothing: the answer says where to go on.
        assert_eq!(copies.append("raysubmit_a.b", 2, b"23".to_vec()).await.unwrap(), 4);
        assert_eq!(copies.append("raysubmit_a.b", 9, b"x".to_vec()).await.unwrap(), 4);
        for (offset, chunk) in [(4, "4567"), (8, "89"), (10, "ab"), (12, "cdef")] {
            copies.append("raysubmit_a.b", offset, chunk.as_bytes().to_vec()).await.unwrap();
        }
        let (text, not_kept) = copies.read("raysubmit_a.b").await.unwrap().unwrap();
        assert_eq!((String::from_utf8(text).unwrap(), not_kept), ("89abcdef".to_string(), 8));
        assert!(copies.append("../escape", 0, b"x".to_vec()).await.is_err());
        drop(copies);
        let again = Arc::new(LogCopies::open(dir.path().to_path_buf()).unwrap());
        assert_eq!(again.read("raysubmit_a.b").await.unwrap().unwrap().0, b"89abcdef");
        assert_eq!(again.append("raysubmit_a.b", 16, b"g".to_vec()).await.unwrap(), 17);
        again.append("other", 0, b"x".to_vec()).await.unwrap();
        again.retain(|id| id == "other").await;
        assert!(again.read("raysubmit_a.b").await.unwrap().is_none());
        again.remove("other").await;
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
