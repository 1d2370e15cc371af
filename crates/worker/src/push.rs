//! Tasks pushed to workers: one long-lived connection per worker carries every task this
//! process sends it, and the replies come back on it in any order. The frames (see
//! `worker.proto`) are written by the thread that has them, with no hand-off to another
//! thread, and read by a task of the runtime.
//!
//! Actor calls are numbered per connection (`Place`), and the worker runs each
//! connection's calls in that order. A worker that died takes its connection with it, so
//! calls to whatever listens at its address next (a restarted actor, or another worker
//! given the same port) start a new count.

use crate::channels::Authed;
use oxray_proto::v1::{self, worker_service_client::WorkerServiceClient};
use oxray_rpc::frames::{Receiver, Sender, HELLO_LIMIT};
use oxray_rpc::{ClientAuth, Token};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::oneshot;

/// What a connection to a worker starts with, before its frames.
pub(crate) const MAGIC: &[u8; 8] = b"OXTASKS1";

/// Told of a task's reply, or of why none will come.
pub(crate) type Waiting = Box<dyn FnOnce(Result<v1::PushTaskReply, String>) + Send>;

/// A worker's service, connected on first use.
pub(crate) fn client(address: &str, token: &Token) -> Result<WorkerServiceClient<Authed>, String> {
    Ok(WorkerServiceClient::with_interceptor(crate::channels::channel(address)?, ClientAuth::new(token))
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
    /// Names this process's connections to workers (with a connection's number).
    caller: String,
    streams: Arc<Mutex<HashMap<String, Arc<Stream>>>>,
    items: Items,
    /// Nodes the head declared dead.
    dead: Mutex<std::collections::HashSet<String>>,
    head: Option<oxray_rpc::HeadClient>,
    watching: std::sync::Once,
}

/// Where the items of streaming tasks go, by task id.
type Items = Arc<Mutex<HashMap<String, ItemSink>>>;
pub(crate) type ItemSink = Arc<dyn Fn(v1::PushTaskReply) + Send + Sync>;

struct Stream {
    id: u64,
    items: Items,
    sequences: AtomicU64,
    sender: Arc<Sender>,
    /// `None` once the connection broke: nothing more is sent on it.
    waiting: Mutex<Option<HashMap<String, Waiting>>>,
    /// Ends the connection from outside, saying why.
    cut: Mutex<Option<oneshot::Sender<String>>>,
    /// The node of the worker, when this process leased it: its connection is cut when the
    /// head declares the node dead (a node cut off by the network sends no reset, and the
    /// connection would wait for ever).
    node: Mutex<Option<String>>,
}

impl Pushes {
    pub fn new(token: Token, caller: String, head: Option<oxray_rpc::HeadClient>) -> Self {
        Self {
            token,
            caller,
            streams: Default::default(),
            items: Default::default(),
            dead: Default::default(),
            head,
            watching: std::sync::Once::new(),
        }
    }

    /// The worker at `address` runs on node `node_id` (its connection is opened if needed,
    /// so inside the runtime). The first call starts following the head's node deaths.
    pub fn on_node(self: &Arc<Self>, address: &str, node_id: &str) {
        if node_id.is_empty() {
            return;
        }
        if let Ok(stream) = self.stream(address) {
            let mut node = stream.node.lock().expect("node lock");
            if node.as_deref() != Some(node_id) {
                *node = Some(node_id.to_string());
            }
        }
        if let Some(head) = &self.head {
            self.watching.call_once(|| drop(tokio::spawn(follow_deaths(head.clone(), Arc::downgrade(self)))));
        }
    }

    /// The nodes of the workers this process is connected to.
    pub fn known_nodes(&self) -> std::collections::HashSet<String> {
        let streams = self.streams.lock().expect("streams lock");
        streams.values().filter_map(|s| s.node.lock().expect("node lock").clone()).collect()
    }

    /// Whether the head declared `node_id` dead.
    pub fn is_dead(&self, node_id: &str) -> bool {
        self.dead.lock().expect("dead lock").contains(node_id)
    }

    /// Cuts the connections to the workers of `node_id`: what waits on them fails with `why`.
    pub fn node_died(&self, node_id: &str, why: &str) {
        self.dead.lock().expect("dead lock").insert(node_id.to_string());
        let streams = self.streams.lock().expect("streams lock");
        for (address, stream) in streams.iter() {
            if stream.node.lock().expect("node lock").as_deref() != Some(node_id) {
                continue;
            }
            if let Some(cut) = stream.cut.lock().expect("cut lock").take() {
                tracing::warn!(address, node_id, "cutting the connection to a worker: {why}");
                let _ = cut.send(why.to_string());
            }
        }
    }

    /// Items of the streaming task `task_id` go to `sink` until `forget_items`.
    pub fn on_items(&self, task_id: &str, sink: ItemSink) {
        self.items.lock().expect("items lock").insert(task_id.to_string(), sink);
    }

    pub fn forget_items(&self, task_id: &str) {
        self.items.lock().expect("items lock").remove(task_id);
    }

    /// The next place in order on the connection to the worker at `address` (opened if
    /// needed, so inside the runtime).
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
        request: v1::PushTaskRequest,
    ) -> Result<v1::PushTaskReply, String> {
        let (tx, rx) = oneshot::channel();
        self.send(address, place, request, Box::new(move |reply| drop(tx.send(reply))));
        rx.await.unwrap_or_else(|_| Err(BROKEN.into()))
    }

    /// Sends a task from this thread; `waiting` is told of its reply, or of why none will
    /// come, once (from the runtime, or from this thread when it cannot be sent). Inside the
    /// runtime.
    pub fn send(&self, address: &str, place: Option<Place>, mut request: v1::PushTaskRequest, waiting: Waiting) {
        let stream = match self.stream(address) {
            Ok(stream) => stream,
            Err(reason) => return waiting(Err(reason)),
        };
        if let Some(place) = place {
            if place.stream != stream.id {
                return waiting(Err(BROKEN.into()));
            }
            request.caller_id = format!("{}#{}", self.caller, stream.id);
            request.sequence = place.sequence;
        }
        match stream.waiting.lock().expect("waiting lock").as_mut() {
            Some(w) => w.insert(request.task_id.clone(), waiting),
            None => return waiting(Err(BROKEN.into())),
        };
        // Sent under no lock: a broken connection fails what waits, this call included.
        if let Err(reason) = stream.sender.send(&request) {
            let ours = stream.waiting.lock().expect("waiting lock").as_mut().and_then(|w| w.remove(&request.task_id));
            if let Some(waiting) = ours {
                waiting(Err(reason));
            }
        }
    }

    fn stream(&self, address: &str) -> Result<Arc<Stream>, String> {
        let mut streams = self.streams.lock().expect("streams lock");
        if let Some(stream) = streams.get(address) {
            return Ok(stream.clone());
        }
        let runtime = tokio::runtime::Handle::try_current().map_err(|e| e.to_string())?;
        let sender = Sender::pending(runtime, MAGIC);
        sender.send(&v1::TaskStreamHello { token: self.token.as_str().to_string() })?;
        static STREAMS: AtomicU64 = AtomicU64::new(0);
        let (cut, cut_off) = oneshot::channel();
        let stream = Arc::new(Stream {
            id: STREAMS.fetch_add(1, Ordering::Relaxed),
            items: self.items.clone(),
            sequences: AtomicU64::new(0),
            sender,
            waiting: Mutex::new(Some(HashMap::new())),
            cut: Mutex::new(Some(cut)),
            node: Mutex::new(None),
        });
        streams.insert(address.to_string(), stream.clone());
        let (this, address, streams) = (stream.clone(), address.to_string(), self.streams.clone());
        tokio::spawn(async move {
            let reason = tokio::select! {
                reason = this.serve(&address) => reason,
                Ok(why) = cut_off => format!("{BROKEN}: {why}"),
            };
            this.sender.close(&reason);
            {
                // A newer connection may have taken its place already.
                let mut streams = streams.lock().expect("streams lock");
                if streams.get(&address).is_some_and(|s| Arc::ptr_eq(s, &this)) {
                    streams.remove(&address);
                }
            }
            let waiting = this.waiting.lock().expect("waiting lock").take().unwrap_or_default();
            for (_, waiting) in waiting {
                waiting(Err(reason.clone()));
            }
        });
        Ok(stream)
    }
}

/// How long to wait before following the head again after the stream broke.
const RECONNECT: Duration = Duration::from_millis(500);

/// Follows the head's node changes while `pushes` lives, again after the stream breaks.
async fn follow_deaths(mut head: oxray_rpc::HeadClient, pushes: std::sync::Weak<Pushes>) {
    loop {
        if let Ok(stream) = head.watch_nodes(v1::WatchNodesRequest { deaths_only: true }).await {
            let mut stream = stream.into_inner();
            while let Ok(Some(change)) = stream.message().await {
                let Some(pushes) = pushes.upgrade() else { return };
                for node in crate::node_deaths::gone(&change, &pushes.known_nodes()) {
                    pushes.node_died(&node, &format!("the head declared node {node} dead"));
                }
            }
        }
        if pushes.strong_count() == 0 {
            return;
        }
        tokio::time::sleep(RECONNECT).await;
    }
}

/// How long reaching a worker may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

impl Stream {
    /// Connects, then hands each reply to its caller; returns why the connection ended.
    async fn serve(&self, address: &str) -> String {
        let dialing = oxray_rpc::dial_address(address, oxray_rpc::tls::Carries::Tasks);
        let (reads, writes) = match tokio::time::timeout(CONNECT_TIMEOUT, dialing).await {
            Ok(Ok(stream)) => oxray_rpc::frames::split(stream),
            Ok(Err(e)) => return format!("cannot reach the worker at {address}: {e}"),
            Err(_) => return format!("cannot reach the worker at {address}: no answer in {CONNECT_TIMEOUT:?}"),
        };
        self.sender.connect(writes);
        let mut replies = Receiver::new(reads);
        match replies.recv::<v1::TaskStreamWelcome>(HELLO_LIMIT).await {
            Ok(Some(welcome)) if welcome.refused.is_empty() => {}
            Ok(Some(welcome)) => return format!("the worker at {address} refused this process: {}", welcome.refused),
            Ok(None) => return "the worker closed the connection".into(),
            Err(e) => return format!("{BROKEN}: {e}"),
        }
        loop {
            match replies.recv::<v1::PushTaskReply>(u64::MAX).await {
                Ok(Some(reply)) if reply.item > 0 => {
                    let sink = self.items.lock().expect("items lock").get(&reply.task_id).cloned();
                    if let Some(sink) = sink {
                        sink(reply);
                    }
                }
                Ok(Some(reply)) => {
                    let waiting =
                        self.waiting.lock().expect("waiting lock").as_mut().and_then(|w| w.remove(&reply.task_id));
                    if let Some(waiting) = waiting {
                        waiting(Ok(reply));
                    }
                }
                Ok(None) => return "the worker closed the connection".into(),
                Err(e) => return format!("{BROKEN}: {e}"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_push_to_a_worker_on_a_node_declared_dead_fails_at_once() {
        // A worker that takes the connection and never answers, as one cut off by the
        // network looks from here.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let held = tokio::spawn(async move { listener.accept().await });
        let pushes = Arc::new(Pushes::new(Token::generate(), "caller".into(), None));
        pushes.on_node(&address, "node-a");
        let request = v1::PushTaskRequest { task_id: "t1".into(), ..Default::default() };
        let push = tokio::spawn({
            let (pushes, address) = (pushes.clone(), address.clone());
            async move { pushes.push(&address, None, request).await }
        });
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(!push.is_finished(), "nothing answers, nothing breaks");
        pushes.node_died("node-b", "not this one");
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!push.is_finished(), "another node's death cuts nothing here");
        pushes.node_died("node-a", "the head declared node node-a dead");
        let reply = tokio::time::timeout(Duration::from_secs(5), push).await.expect("cut at once").unwrap();
        assert!(reply.unwrap_err().contains("declared node node-a dead"));
        assert!(pushes.is_dead("node-a") && !pushes.is_dead("node-c"));
        assert!(pushes.known_nodes().is_empty(), "the cut connection is gone");
        held.abort();
    }
}
