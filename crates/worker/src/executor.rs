//! The worker side: a process the agent started serves pushed tasks to its Python loop,
//! which runs them one at a time and hands back the results. Calls to an actor run in each
//! caller's order, and only after the actor was created.

use crate::push::MAGIC;
use oxray_proto::v1::{self, worker_service_server};
use oxray_rpc::frames::{self, Receiver, Sender, HELLO_LIMIT};
use oxray_rpc::tls::Carries;
use oxray_rpc::{Conn, ServerAuth, Stream, Token};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_stream::StreamExt;
use tonic::{Request, Response, Status};

pub struct Incoming {
    pub task_id: String,
    pub name: String,
    pub function: Vec<u8>,
    pub args: Vec<u8>,
    pub dependencies: Vec<(String, Vec<u8>)>,
    pub actor_creation: bool,
    pub actor_method: String,
    pub num_returns: u32,
    /// Where a large result may go (`PushTaskRequest.result_store`).
    pub result_store: String,
    /// The function yields values, each sent to the caller as it comes (`item`).
    pub streaming: bool,
    /// The GPUs of the task's lease (an actor's: on its creation call).
    pub gpu_ids: Vec<u32>,
    /// On an actor's creation call: how often it was restarted before.
    pub restarts: u32,
}

/// How long a new connection may take to say what it is.
const HELLO_TIMEOUT: Duration = Duration::from_secs(30);

/// Actor calls held back until they may run.
#[derive(Default)]
struct Order {
    created: bool,
    /// Per caller: the next sequence number to deliver, and what arrived early.
    callers: HashMap<String, (u64, BTreeMap<u64, Incoming>)>,
}

impl Order {
    /// Takes one arrival; returns what can now be delivered, in order.
    fn arrive(&mut self, caller: String, seq: u64, task: Incoming) -> Vec<Incoming> {
        self.callers.entry(caller).or_default().1.insert(seq, task);
        let mut out = Vec::new();
        // Delivering the creation can unblock other callers: repeat until nothing moves.
        loop {
            let before = out.len();
            for (next, waiting) in self.callers.values_mut() {
                while let Some(first) = waiting.first_key_value().map(|(k, _)| *k) {
                    if first != *next || !(self.created || waiting[&first].actor_creation) {
                        break;
                    }
                    let task = waiting.remove(&first).expect("present");
                    self.created |= task.actor_creation;
                    out.push(task);
                    *next += 1;
                }
            }
            if out.len() == before {
                return out;
            }
        }
    }
}

/// Where each task's reply goes: the connection of the caller that pushed it.
#[derive(Default)]
struct Replies(Mutex<HashMap<String, Arc<Sender>>>);

/// The task the Python loop runs now, and how to interrupt it.
#[derive(Default)]
pub struct Current {
    task: Mutex<Option<String>>,
    interrupt: Mutex<Option<Box<dyn Fn() + Send + Sync>>>,
    /// Told when tasks arrive, for a Python loop that takes them with `try_next`.
    arrival: Mutex<Option<Box<dyn Fn() + Send + Sync>>>,
}

#[derive(Clone)]
struct Service {
    queue: mpsc::UnboundedSender<Incoming>,
    replies: Arc<Replies>,
    order: Arc<Mutex<Order>>,
    current: Arc<Current>,
}

impl Service {
    /// Takes a pushed task: its reply will go to `reply`; it runs once its turn came. False
    /// once the worker is shutting down.
    fn accept(&self, r: v1::PushTaskRequest, reply: &Arc<Sender>) -> bool {
        self.replies.0.lock().expect("replies lock").insert(r.task_id.clone(), reply.clone());
        // A task worker works for the job of the task it runs; an actor for its creator's.
        if r.actor_method.is_empty() || r.actor_creation {
            crate::job::set_current(oxray_types::JobId(r.job));
        }
        let incoming = Incoming {
            task_id: r.task_id,
            name: r.function_name,
            function: r.function,
            args: r.args,
            dependencies: r.dependencies.into_iter().map(|d| (d.object_id, d.data)).collect(),
            actor_creation: r.actor_creation,
            actor_method: r.actor_method,
            num_returns: r.num_returns,
            result_store: r.result_store,
            streaming: r.streaming,
            gpu_ids: r.gpu_ids,
            restarts: r.restarts,
        };
        let deliver = if r.caller_id.is_empty() {
            vec![incoming]
        } else {
            self.order.lock().expect("order lock").arrive(r.caller_id, r.sequence, incoming)
        };
        let delivered = !deliver.is_empty();
        for task in deliver {
            if self.queue.send(task).is_err() {
                return false;
            }
        }
        if delivered {
            if let Some(arrival) = self.current.arrival.lock().expect("arrival lock").as_ref() {
                arrival();
            }
        }
        true
    }

    /// A connection to the worker's port: a caller's task connection, or gRPC.
    async fn sort(self, conn: Conn, grpc: mpsc::UnboundedSender<std::io::Result<Conn>>, token: Token) {
        let tasks = match (conn.0.carries(), &conn.0) {
            (Some(carries), _) => carries == Carries::Tasks,
            (None, Stream::Plain(plain)) => match tokio::time::timeout(HELLO_TIMEOUT, plain.socket().peek()).await {
                Ok(Ok(Some(first))) => first == MAGIC[0],
                _ => return, // closed, broken or silent
            },
            (None, Stream::Tls(_)) => false,
        };
        match tasks {
            true => self.serve_tasks(conn.0, &token).await,
            false => drop(grpc.send(Ok(conn))),
        }
    }

    /// Takes the tasks a caller pushes on its connection, once it showed the token.
    async fn serve_tasks(&self, stream: Stream, token: &Token) {
        let (reads, writes) = frames::split(stream);
        let replies = Sender::connected(tokio::runtime::Handle::current(), writes);
        let mut pushed = Receiver::new(reads);
        let hello = tokio::time::timeout(HELLO_TIMEOUT, async {
            let magic = pushed.exact(MAGIC.len()).await?;
            match magic == MAGIC {
                true => pushed.recv::<v1::TaskStreamHello>(HELLO_LIMIT).await,
                false => Ok(None),
            }
        });
        let refused = match hello.await {
            Ok(Ok(Some(hello))) if token.matches(&hello.token) => String::new(),
            Ok(Ok(Some(_))) => "the cluster token is wrong".to_string(),
            _ => return,
        };
        let _ = replies.send(&v1::TaskStreamWelcome { refused: refused.clone() });
        if !refused.is_empty() {
            tracing::warn!("refused a task connection: {refused}");
            return;
        }
        while let Ok(Some(task)) = pushed.recv::<v1::PushTaskRequest>(u64::MAX).await {
            if !self.accept(task, &replies) {
                return;
            }
        }
    }
}

#[tonic::async_trait]
impl worker_service_server::WorkerService for Service {
    async fn cancel_task(
        &self,
        request: Request<v1::CancelTaskRequest>,
    ) -> Result<Response<v1::CancelTaskReply>, Status> {
        let r = request.into_inner();
        let running = self.current.task.lock().expect("current lock").as_deref() == Some(r.task_id.as_str());
        if running {
            if r.force {
                tracing::warn!(task = %r.task_id, "force-cancelled: the worker exits");
                std::process::exit(1);
            }
            if let Some(interrupt) = self.current.interrupt.lock().expect("interrupt lock").as_ref() {
                interrupt();
            }
        }
        Ok(Response::new(v1::CancelTaskReply { was_running: running }))
    }
}

pub struct Executor {
    queue: tokio::sync::Mutex<mpsc::UnboundedReceiver<Incoming>>,
    replies: Arc<Replies>,
    current: Arc<Current>,
}

impl Executor {
    /// Serves on a free loopback port and tells the agent where.
    pub async fn start(agent: &str, worker_id: &str, token: Token) -> Result<Arc<Self>, crate::WorkerError> {
        // Callers on other machines reach it through the node's address.
        let cannot = |e: std::io::Error| crate::WorkerError::Failed(format!("cannot serve tasks: {e}"));
        let listener = tokio::net::TcpListener::bind(("0.0.0.0", 0)).await.map_err(cannot)?;
        let port = listener.local_addr().map_err(cannot)?.port();
        let (tx, rx) = mpsc::unbounded_channel();
        let replies = Arc::new(Replies::default());
        let current = Arc::new(Current::default());
        let tasks =
            Service { queue: tx, replies: replies.clone(), order: Default::default(), current: current.clone() };
        let server = worker_service_server::WorkerServiceServer::new(tasks.clone());
        let service = tonic::service::interceptor::InterceptedService::new(server, ServerAuth(token.clone()));
        let (grpc, grpc_conns) = mpsc::unbounded_channel();
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming(tokio_stream::wrappers::UnboundedReceiverStream::new(grpc_conns)),
        );
        let accepting = token.clone();
        tokio::spawn(async move {
            let mut incoming = std::pin::pin!(oxray_rpc::incoming(listener));
            while let Some(conn) = incoming.next().await {
                match conn {
                    Ok(conn) => drop(tokio::spawn(tasks.clone().sort(conn, grpc.clone(), accepting.clone()))),
                    Err(e) => {
                        // Out of descriptors, say: give it a moment rather than spin.
                        tracing::warn!("accepting a connection failed: {e}");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                }
            }
        });
        let endpoint = tonic::transport::Endpoint::from_shared(format!("http://{agent}"))
            .map_err(|e| crate::WorkerError::Invalid(format!("bad agent address {agent:?}: {e}")))?;
        let channel = oxray_rpc::connect(endpoint)
            .await
            .map_err(|e| crate::WorkerError::Connect(format!("cannot reach the agent at {agent}: {e}")))?;
        let mut agent_client =
            v1::lease_service_client::LeaseServiceClient::with_interceptor(channel, oxray_rpc::ClientAuth::new(&token));
        agent_client
            .register_worker(v1::RegisterWorkerRequest {
                worker_id: worker_id.to_string(),
                port: port as u32,
                pid: std::process::id(),
            })
            .await
            .map_err(|s| crate::WorkerError::Connect(format!("the agent refused this worker: {}", s.message())))?;
        Ok(Arc::new(Self { queue: tokio::sync::Mutex::new(rx), replies, current }))
    }

    /// The next task; `None` once no more can come.
    pub async fn next(&self) -> Option<Incoming> {
        let task = self.queue.lock().await.recv().await;
        *self.current.task.lock().expect("current lock") = task.as_ref().map(|t| t.task_id.clone());
        task
    }

    /// The next call of a threaded actor, taken by one of its threads: calls taken so run
    /// concurrently, so none counts as the running one that `cancel` interrupts.
    pub async fn next_concurrent(&self) -> Option<Incoming> {
        self.queue.lock().await.recv().await
    }

    /// A task if one is waiting, without waiting for one (`Disconnected` once no more can
    /// come). Calls taken so run concurrently (an async actor's), so none counts as the
    /// running one that `cancel` interrupts.
    pub fn try_next(&self) -> Result<Incoming, mpsc::error::TryRecvError> {
        let mut queue = self.queue.try_lock().map_err(|_| mpsc::error::TryRecvError::Empty)?;
        queue.try_recv()
    }

    /// Called after tasks arrive (from the thread that received them).
    pub fn on_arrival(&self, arrival: Box<dyn Fn() + Send + Sync>) {
        *self.current.arrival.lock().expect("arrival lock") = Some(arrival);
    }

    /// How a running task is interrupted (the Python side raises KeyboardInterrupt).
    pub fn on_interrupt(&self, interrupt: Box<dyn Fn() + Send + Sync>) {
        *self.current.interrupt.lock().expect("interrupt lock") = Some(interrupt);
    }

    /// Sends the `index`-th value a streaming task yielded (from 0) to its caller, before
    /// the task's reply.
    pub fn item(&self, task_id: &str, index: u64, reply: v1::PushTaskReply) {
        let caller = self.replies.0.lock().expect("replies lock").get(task_id).cloned();
        if let Some(caller) = caller {
            let _ = caller.send(&v1::PushTaskReply { task_id: task_id.to_string(), item: index + 1, ..reply });
        }
    }

    /// Hands back a finished task: its value (or error), or its values one by one when it
    /// has several, and what it printed.
    pub fn finish(&self, task_id: &str, reply: v1::PushTaskReply) {
        {
            let mut current = self.current.task.lock().expect("current lock");
            if current.as_deref() == Some(task_id) {
                *current = None;
            }
        }
        let caller = self.replies.0.lock().expect("replies lock").remove(task_id);
        if let Some(caller) = caller {
            // Written from this thread; a caller that went away takes no reply.
            let _ = caller.send(&v1::PushTaskReply { task_id: task_id.to_string(), ..reply });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use oxray_rpc::{Socket, SocketStream};

    fn task(name: &str, creation: bool) -> Incoming {
        Incoming {
            task_id: name.into(),
            name: name.into(),
            function: vec![],
            args: vec![],
            dependencies: vec![],
            actor_creation: creation,
            actor_method: String::new(),
            num_returns: 1,
            result_store: String::new(),
            streaming: false,
            gpu_ids: vec![],
            restarts: 0,
        }
    }

    fn names(tasks: Vec<Incoming>) -> Vec<String> {
        tasks.into_iter().map(|t| t.name).collect()
    }

    /// A task connection served on one end of a socket pair; the caller's end, and the
    /// service's queue.
    fn task_connection(token: &str) -> (Arc<Socket>, Service, mpsc::UnboundedReceiver<Incoming>) {
        let (caller, worker) = tokio::net::UnixStream::pair().unwrap();
        let (queue, tasks) = mpsc::unbounded_channel();
        let service =
            Service { queue, replies: Default::default(), order: Default::default(), current: Default::default() };
        let serving = service.clone();
        let token = Token::parse(token).unwrap();
        let worker = Stream::Plain(SocketStream::new(Socket::from_tokio_unix(worker).unwrap()));
        tokio::spawn(async move { serving.serve_tasks(worker, &token).await });
        (Arc::new(Socket::from_tokio_unix(caller).unwrap()), service, tasks)
    }

    fn say_hello(caller: &Arc<Socket>, token: &str) -> Arc<Sender> {
        let sender = Sender::pending(tokio::runtime::Handle::current(), MAGIC);
        sender.send(&v1::TaskStreamHello { token: token.into() }).unwrap();
        sender.connect(frames::Writes::Socket(caller.clone()));
        sender
    }

    #[tokio::test]
    async fn a_task_connection_with_a_wrong_token_is_refused_saying_why() {
        let (caller, _service, mut tasks) = task_connection("right");
        let sender = say_hello(&caller, "wrong");
        sender.send(&v1::PushTaskRequest { task_id: "t".into(), ..Default::default() }).unwrap();
        let mut replies = Receiver::new(frames::Reads::Socket(caller));
        let welcome = replies.recv::<v1::TaskStreamWelcome>(HELLO_LIMIT).await.unwrap().unwrap();
        assert_eq!(welcome.refused, "the cluster token is wrong");
        assert_eq!(replies.recv::<v1::PushTaskReply>(u64::MAX).await.unwrap(), None, "then closed");
        assert!(tasks.try_recv().is_err(), "no task was taken");
    }

    #[tokio::test]
    async fn a_pushed_task_is_queued_and_its_reply_goes_back_on_its_connection() {
        let (caller, service, mut tasks) = task_connection("right");
        let sender = say_hello(&caller, "right");
        let push = v1::PushTaskRequest { task_id: "t1".into(), function_name: "f".into(), ..Default::default() };
        sender.send(&push).unwrap();
        let mut replies = Receiver::new(frames::Reads::Socket(caller));
        let welcome = replies.recv::<v1::TaskStreamWelcome>(HELLO_LIMIT).await.unwrap().unwrap();
        assert!(welcome.refused.is_empty());
        let task = tasks.recv().await.unwrap();
        assert_eq!((task.task_id.as_str(), task.name.as_str()), ("t1", "f"));
        let executor = Executor {
            queue: tokio::sync::Mutex::new(mpsc::unbounded_channel().1),
            replies: service.replies.clone(),
            current: service.current.clone(),
        };
        // Finished from a thread outside the runtime, as a worker's Python thread does.
        let finished = std::thread::spawn(move || {
            executor.finish("t1", v1::PushTaskReply { result: b"ok".to_vec(), ..Default::default() })
        });
        finished.join().unwrap();
        let reply = replies.recv::<v1::PushTaskReply>(u64::MAX).await.unwrap().unwrap();
        assert_eq!((reply.task_id.as_str(), reply.result.as_slice()), ("t1", &b"ok"[..]));
    }

    #[test]
    fn calls_run_in_caller_order_after_creation() {
        let mut order = Order::default();
        assert!(order.arrive("other".into(), 0, task("x0", false)).is_empty(), "not created yet");
        assert!(order.arrive("owner".into(), 2, task("m2", false)).is_empty(), "out of order");
        assert_eq!(names(order.arrive("owner".into(), 0, task("create", true))), ["create", "x0"]);
        assert_eq!(names(order.arrive("owner".into(), 1, task("m1", false))), ["m1", "m2"]);
    }
}
