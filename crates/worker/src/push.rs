//! Tasks pushed to workers: one long-lived gRPC stream per worker carries every task this
//! process sends it, and the replies come back on it in any order. A unary call per task
//! would cost a new HTTP/2 stream, headers and trailers, and a server task each time.
//!
//! Actor calls are numbered per stream (`Place`), and the worker runs each stream's calls in
//! that order. A worker that died takes its stream with it, so calls to whatever listens
//! at its address next (a restarted actor, or another worker given the same port) start a
//! new count.

use crate::tasks::Authed;
use oxray_proto::v1::{self, worker_service_client::WorkerServiceClient};
use oxray_rpc::{ClientAuth, Token};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::{mpsc, oneshot};

type Waiting = oneshot::Sender<Result<v1::PushTaskReply, String>>;

/// A worker's service, connected on first use.
pub(crate) fn client(address: &str, token: &Token) -> Result<WorkerServiceClient<Authed>, String> {
    Ok(WorkerServiceClient::with_interceptor(crate::tasks::channel(address)?, ClientAuth::new(token))
        .max_decoding_message_size(usize::MAX)
        .max_encoding_message_size(usize::MAX))
}

/// A call's place in this process's order to one worker: its stream, and its number on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Place {
    stream: u64,
    sequence: u64,
}

const BROKEN: &str = "the connection to the worker broke";

pub(crate) struct Pushes {
    token: Token,
    /// Names this process's streams to workers (with a stream's number).
    caller: String,
    streams: Arc<Mutex<HashMap<String, Arc<Stream>>>>,
}

struct Stream {
    id: u64,
    sequences: AtomicU64,
    requests: mpsc::UnboundedSender<v1::PushTaskRequest>,
    /// `None` once the stream broke: nothing more is sent on it.
    waiting: Mutex<Option<HashMap<String, Waiting>>>,
}

impl Pushes {
    pub fn new(token: Token, caller: String) -> Self {
        Self { token, caller, streams: Default::default() }
    }

    /// The next place in order on the stream to the worker at `address` (opened if needed,
    /// so inside the runtime).
    pub fn place(&self, address: &str) -> Result<Place, String> {
        let stream = self.stream(address)?;
        Ok(Place { stream: stream.id, sequence: stream.sequences.fetch_add(1, Ordering::Relaxed) })
    }

    /// Sends a task to the worker at `address` and waits for its reply; an actor call goes
    /// at its `place`. An error means the worker died or cannot be reached, and says why.
    pub async fn push(
        &self,
        address: &str,
        place: Option<Place>,
        mut request: v1::PushTaskRequest,
    ) -> Result<v1::PushTaskReply, String> {
        let stream = self.stream(address)?;
        if let Some(place) = place {
            if place.stream != stream.id {
                return Err(BROKEN.into());
            }
            request.caller_id = format!("{}#{}", self.caller, stream.id);
            request.sequence = place.sequence;
        }
        let (tx, rx) = oneshot::channel();
        match stream.waiting.lock().expect("waiting lock").as_mut() {
            Some(waiting) => waiting.insert(request.task_id.clone(), tx),
            None => return Err(BROKEN.into()),
        };
        // Sent under no lock: a broken stream fails what waits, this call included.
        let _ = stream.requests.send(request);
        rx.await.unwrap_or_else(|_| Err(BROKEN.into()))
    }

    fn stream(&self, address: &str) -> Result<Arc<Stream>, String> {
        let mut streams = self.streams.lock().expect("streams lock");
        if let Some(stream) = streams.get(address) {
            return Ok(stream.clone());
        }
        let mut worker = client(address, &self.token)?;
        let (requests, outgoing) = mpsc::unbounded_channel();
        static STREAMS: AtomicU64 = AtomicU64::new(0);
        let stream = Arc::new(Stream {
            id: STREAMS.fetch_add(1, Ordering::Relaxed),
            sequences: AtomicU64::new(0),
            requests,
            waiting: Mutex::new(Some(HashMap::new())),
        });
        streams.insert(address.to_string(), stream.clone());
        let (this, address, streams) = (stream.clone(), address.to_string(), self.streams.clone());
        tokio::spawn(async move {
            let outgoing = tokio_stream::wrappers::UnboundedReceiverStream::new(outgoing);
            let reason = match worker.push_tasks(outgoing).await {
                Ok(replies) => this.receive(replies.into_inner()).await,
                Err(status) => oxray_rpc::root_cause(&status),
            };
            {
                // A newer stream may have taken its place already.
                let mut streams = streams.lock().expect("streams lock");
                if streams.get(&address).is_some_and(|s| Arc::ptr_eq(s, &this)) {
                    streams.remove(&address);
                }
            }
            let waiting = this.waiting.lock().expect("waiting lock").take().unwrap_or_default();
            for (_, tx) in waiting {
                let _ = tx.send(Err(reason.clone()));
            }
        });
        Ok(stream)
    }
}

impl Stream {
    /// Hands each reply to its caller; returns why the stream ended.
    async fn receive(&self, mut replies: tonic::Streaming<v1::PushTaskReply>) -> String {
        loop {
            match replies.message().await {
                Ok(Some(reply)) => {
                    let tx = self.waiting.lock().expect("waiting lock").as_mut().and_then(|w| w.remove(&reply.task_id));
                    if let Some(tx) = tx {
                        let _ = tx.send(Ok(reply));
                    }
                }
                Ok(None) => return "the worker closed the connection".into(),
                Err(status) => return oxray_rpc::root_cause(&status),
            }
        }
    }
}
