//! Copies a job's driver log to the head as it is written, so that the log outlives this
//! node: once the node is gone, the head serves its copy.

use oxray_proto::v1;
use oxray_rpc::HeadClient;
use std::path::Path;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncSeekExt};
use tokio::sync::watch;

const EVERY: Duration = Duration::from_secs(1);
const CHUNK: u64 = 256 << 10;
/// How long the last lines of an ended job may wait for a head that is away.
const AFTER_END: Duration = Duration::from_secs(60);

enum Sent {
    /// A whole chunk went: more may be waiting.
    More,
    Nothing,
    /// The head cannot take it now; try again later.
    Later,
    /// The head knows no such job (it was deleted).
    Unwanted,
}

/// Sends what the log at `path` gained since the head's copy ended, every second, until the
/// job has finished and all of it was sent.
pub async fn follow(mut head: HeadClient, path: std::path::PathBuf, id: String, finished: watch::Receiver<bool>) {
    let mut sent = 0;
    let mut ended_at: Option<Instant> = None;
    loop {
        if *finished.borrow() && ended_at.is_none() {
            ended_at = Some(Instant::now());
        }
        match send_new(&mut head, &path, &id, &mut sent).await {
            Sent::More => continue,
            Sent::Unwanted => return,
            Sent::Nothing if ended_at.is_some() => return,
            Sent::Later if ended_at.is_some_and(|t| t.elapsed() > AFTER_END) => {
                tracing::warn!(job = %id, "the end of the job's log did not reach the head; its copy there stops at byte {sent}");
                return;
            }
            Sent::Nothing | Sent::Later => tokio::time::sleep(EVERY).await,
        }
    }
}

async fn read_from(path: &Path, offset: u64) -> std::io::Result<Vec<u8>> {
    let mut file = tokio::fs::File::open(path).await?;
    file.seek(std::io::SeekFrom::Start(offset)).await?;
    let mut data = Vec::new();
    file.take(CHUNK).read_to_end(&mut data).await?;
    Ok(data)
}

async fn send_new(head: &mut HeadClient, path: &Path, id: &str, sent: &mut u64) -> Sent {
    let data = match read_from(path, *sent).await {
        Ok(data) if data.is_empty() => return Sent::Nothing,
        Ok(data) => data,
        // Not made yet (the runtime env is being prepared), or gone with the session.
        Err(_) => return Sent::Nothing,
    };
    let (full, end) = (data.len() as u64 == CHUNK, *sent + data.len() as u64);
    let chunk = v1::JobLogChunk { submission_id: id.to_string(), offset: *sent, data };
    match head.append_job_log(chunk).await {
        // The head says where its copy ends: the next chunk starts there (elsewhere than
        // expected when it had more, or less, than this agent thought).
        Ok(ack) => {
            *sent = ack.into_inner().size;
            if full || *sent != end {
                Sent::More
            } else {
                Sent::Nothing
            }
        }
        Err(status) if status.code() == tonic::Code::NotFound => Sent::Unwanted,
        Err(status) => {
            tracing::debug!(job = %id, "job log not copied to the head yet: {}", status.message());
            Sent::Later
        }
    }
}
