//! The node's log directory as the state API reads it: which files there are, a file's
//! last lines or a byte range of it, and what is written to it after (`follow`).

use oxray_proto::v1;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::time::Duration;
use tokio::io::AsyncReadExt;
use tonic::Status;

const CHUNK: usize = 64 * 1024;
/// How often a followed log that reached its end is checked for more.
const POLL: Duration = Duration::from_millis(100);

pub type LogStream = Pin<Box<dyn futures_util::Stream<Item = Result<v1::LogChunk, Status>> + Send>>;

/// A file's name as a caller gives it: a plain name in the log directory, nothing that
/// leads out of it.
pub fn checked_name(name: &str) -> Result<&str, String> {
    if name.is_empty() || name.contains('/') || name.contains('\\') || name == "." || name == ".." {
        return Err(format!("{name:?} is not the name of a file in the node's log directory"));
    }
    Ok(name)
}

/// The files of `dir` whose names match `glob` (`*` when empty), sorted.
pub fn list(dir: &Path, glob: &str) -> Result<Vec<String>, String> {
    let glob = if glob.is_empty() { "*" } else { glob };
    let matcher = globset::Glob::new(glob).map_err(|e| format!("bad glob {glob:?}: {e}"))?.compile_matcher();
    let entries = std::fs::read_dir(dir).map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
    let mut files: Vec<String> = entries
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|name| matcher.is_match(name))
        .collect();
    files.sort();
    Ok(files)
}

/// Where the last `lines` lines of `bytes` start (a final newline ends the last line, it
/// does not start another).
fn last_lines_in(bytes: &[u8], lines: usize, ends_with_newline: bool) -> (usize, usize) {
    let mut wanted = lines + usize::from(ends_with_newline);
    for (i, b) in bytes.iter().enumerate().rev() {
        if *b == b'\n' {
            wanted -= 1;
            if wanted == 0 {
                return (i + 1, 0);
            }
        }
    }
    (0, wanted)
}

/// The offset where the last `lines` lines of the file start, read from its end in blocks.
pub fn tail_offset(file: &mut std::fs::File, lines: usize, block: usize) -> std::io::Result<u64> {
    let len = file.metadata()?.len();
    if len == 0 || lines == 0 {
        return Ok(len);
    }
    let mut last = [0u8; 1];
    file.seek(SeekFrom::Start(len - 1))?;
    file.read_exact(&mut last)?;
    let mut ends_with_newline = last[0] == b'\n';
    let mut remaining = lines;
    let mut end = len;
    let mut buf = vec![0u8; block];
    while end > 0 {
        let start = end.saturating_sub(block as u64);
        let n = (end - start) as usize;
        file.seek(SeekFrom::Start(start))?;
        file.read_exact(&mut buf[..n])?;
        let (at, left) = last_lines_in(&buf[..n], remaining, ends_with_newline);
        if left == 0 {
            return Ok(start + at as u64);
        }
        // The final newline was counted in this block; the lines still wanted are whole.
        remaining = left;
        ends_with_newline = false;
        end = start;
    }
    Ok(0)
}

/// How long a stream goes on once it reached the end of what is written.
pub enum Follow {
    /// It stops there.
    No,
    /// It waits for more until the caller hangs up.
    Always,
    /// It waits for more while `running` says the writer runs, then reads once more.
    While(Box<dyn Fn() -> bool + Send>),
}

/// Streams `path` from `start` to `end` (its end when `None`), then as `follow` says.
pub fn stream(path: PathBuf, start: u64, end: Option<u64>, follow: Follow) -> LogStream {
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tokio::spawn(async move {
        let mut offset = start;
        let mut buf = vec![0u8; CHUNK];
        let mut file: Option<tokio::fs::File> = None;
        let mut drained = false;
        loop {
            if file.is_none() {
                file = open_at(&path, offset).await;
            }
            let want = end.map_or(CHUNK, |e| (e.saturating_sub(offset) as usize).min(CHUNK));
            let read = match file.as_mut() {
                Some(f) if want > 0 => f.read(&mut buf[..want]).await.unwrap_or(0),
                _ => 0,
            };
            if read > 0 {
                offset += read as u64;
                if tx.send(Ok(v1::LogChunk { data: buf[..read].to_vec() })).await.is_err() {
                    return;
                }
                continue;
            }
            let more = match &follow {
                Follow::No => false,
                Follow::Always => end.is_none(),
                // Once the writer ended, read once more (it may have written between our
                // read and its exit), then stop.
                Follow::While(running) => !std::mem::replace(&mut drained, !running()),
            };
            if !more {
                return;
            }
            tokio::select! {
                _ = tokio::time::sleep(POLL) => {}
                _ = tx.closed() => return,
            }
        }
    });
    Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx))
}

async fn open_at(path: &Path, offset: u64) -> Option<tokio::fs::File> {
    use tokio::io::AsyncSeekExt;
    let mut file = tokio::fs::File::open(path).await.ok()?;
    file.seek(SeekFrom::Start(offset)).await.ok()?;
    Some(file)
}

/// Where a read of `path` starts: the range's start, or where its last `lines` begin.
pub fn start_of(path: &Path, request: &v1::ReadLogRequest) -> Result<u64, Status> {
    let mut file = std::fs::File::open(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => Status::not_found(format!("no log file {} on this node", path.display())),
        _ => Status::internal(format!("cannot open {}: {e}", path.display())),
    })?;
    if request.lines <= 0 {
        return Ok(request.start_offset);
    }
    let tail = tail_offset(&mut file, request.lines as usize, CHUNK).map_err(|e| Status::internal(e.to_string()))?;
    Ok(tail.max(request.start_offset))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn tail(text: &str, lines: usize, block: usize) -> String {
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(text.as_bytes()).unwrap();
        let at = tail_offset(&mut file, lines, block).unwrap();
        text[at as usize..].to_string()
    }

    #[test]
    fn the_last_lines_are_found_across_blocks() {
        let text = "one\ntwo\nthree\nfour\n";
        for block in [1, 2, 3, 5, 64] {
            assert_eq!(tail(text, 2, block), "three\nfour\n", "block {block}");
            assert_eq!(tail(text, 1, block), "four\n");
            assert_eq!(tail(text, 10, block), text);
            assert_eq!(tail("one\ntwo", 1, block), "two");
            assert_eq!(tail("one\ntwo", 2, block), "one\ntwo");
        }
        assert_eq!(tail("", 3, 4), "");
    }

    #[test]
    fn names_that_leave_the_directory_are_refused() {
        for bad in ["", "..", "../x", "a/b", "/etc/passwd", "."] {
            assert!(checked_name(bad).is_err(), "{bad}");
        }
        assert_eq!(checked_name("worker-1.out"), Ok("worker-1.out"));
    }

    #[test]
    fn files_are_listed_by_glob() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["worker-a.out", "worker-a.err", "head.log"] {
            std::fs::write(dir.path().join(name), "x").unwrap();
        }
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        assert_eq!(list(dir.path(), "").unwrap(), ["head.log", "worker-a.err", "worker-a.out"]);
        assert_eq!(list(dir.path(), "*.out").unwrap(), ["worker-a.out"]);
        assert!(list(dir.path(), "[").is_err());
    }

    #[tokio::test]
    async fn a_range_is_streamed_and_a_followed_file_grows() {
        use futures_util::StreamExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, "0123456789").unwrap();
        let collect = |s: LogStream| async move {
            let chunks: Vec<_> = s.collect().await;
            chunks.into_iter().flat_map(|c| c.unwrap().data).collect::<Vec<u8>>()
        };
        assert_eq!(collect(stream(path.clone(), 2, Some(5), Follow::No)).await, b"234");
        let running = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
        let flag = running.clone();
        let followed = stream(path.clone(), 8, None, Follow::While(Box::new(move || flag.load(Ordering::SeqCst))));
        let writer = async {
            tokio::time::sleep(Duration::from_millis(150)).await;
            std::fs::OpenOptions::new().append(true).open(&path).unwrap().write_all(b"ab").unwrap();
            running.store(false, Ordering::SeqCst);
        };
        let (got, ()) = tokio::join!(collect(followed), writer);
        assert_eq!(got, b"89ab");
    }

    use std::sync::atomic::Ordering;
}
