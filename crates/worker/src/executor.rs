//! The worker side: a process the agent started serves pushed tasks to its Python loop,
//! which runs them one at a time and hands back the results. Calls to an actor run in each
//! caller's order, and only after the actor was created.

use oxray_proto::v1::{self, worker_service_server};
use oxray_rpc::{ServerAuth, Token};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc;
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
}

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

type ReplySender = mpsc::UnboundedSender<Result<v1::PushTaskReply, Status>>;

/// Where each task's reply goes: the stream of the caller that pushed it.
#[derive(Default)]
struct Replies(Mutex<HashMap<String, ReplySender>>);

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
    /// Takes a pushed task: its reply will go to `reply`; it runs once its turn came.
    fn accept(&self, r: v1::PushTaskRequest, reply: &ReplySender) -> Result<(), Status> {
        self.replies.0.lock().expect("replies lock").insert(r.task_id.clone(), reply.clone());
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
        };
        let deliver = if r.caller_id.is_empty() {
            vec![incoming]
        } else {
            self.order.lock().expect("order lock").arrive(r.caller_id, r.sequence, incoming)
        };
        let delivered = !deliver.is_empty();
        for task in deliver {
            self.queue.send(task).map_err(|_| Status::unavailable("the worker is shutting down"))?;
        }
        if delivered {
            if let Some(arrival) = self.current.arrival.lock().expect("arrival lock").as_ref() {
                arrival();
            }
        }
        Ok(())
    }
}

type ReplyStream = std::pin::Pin<Box<dyn tokio_stream::Stream<Item = Result<v1::PushTaskReply, Status>> + Send>>;

#[tonic::async_trait]
impl worker_service_server::WorkerService for Service {
    type PushTasksStream = ReplyStream;

    async fn push_tasks(
        &self,
        request: Request<tonic::Streaming<v1::PushTaskRequest>>,
    ) -> Result<Response<ReplyStream>, Status> {
        let mut pushed = request.into_inner();
        let (reply, replies) = mpsc::unbounded_channel();
        let this = self.clone();
        // The reply stream ends once the caller stopped sending and every task it sent
        // was answered (each waiting task holds a sender).
        tokio::spawn(async move {
            while let Ok(Some(task)) = pushed.message().await {
                if let Err(status) = this.accept(task, &reply) {
                    let _ = reply.send(Err(status));
                    return;
                }
            }
        });
        Ok(Response::new(Box::pin(tokio_stream::wrappers::UnboundedReceiverStream::new(replies))))
    }

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
    pub async fn start(agent: &str, worker_id: &str, token: Token) -> Result<Arc<Self>, String> {
        // Callers on other machines reach it through the node's address.
        let listener = tokio::net::TcpListener::bind(("0.0.0.0", 0)).await.map_err(|e| e.to_string())?;
        let port = listener.local_addr().map_err(|e| e.to_string())?.port();
        let (tx, rx) = mpsc::unbounded_channel();
        let replies = Arc::new(Replies::default());
        let current = Arc::new(Current::default());
        let server = worker_service_server::WorkerServiceServer::new(Service {
            queue: tx,
            replies: replies.clone(),
            order: Default::default(),
            current: current.clone(),
        })
        .max_decoding_message_size(usize::MAX)
        .max_encoding_message_size(usize::MAX);
        let service = tonic::service::interceptor::InterceptedService::new(server, ServerAuth(token.clone()));
        tokio::spawn(
            tonic::transport::Server::builder().add_service(service).serve_with_incoming(oxray_rpc::incoming(listener)),
        );
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{agent}"))
            .map_err(|e| e.to_string())?
            .connect()
            .await
            .map_err(|e| format!("cannot reach the agent at {agent}: {e}"))?;
        let mut agent_client =
            v1::lease_service_client::LeaseServiceClient::with_interceptor(channel, oxray_rpc::ClientAuth::new(&token));
        agent_client
            .register_worker(v1::RegisterWorkerRequest {
                worker_id: worker_id.to_string(),
                port: port as u32,
                pid: std::process::id(),
            })
            .await
            .map_err(|s| format!("the agent refused this worker: {}", s.message()))?;
        Ok(Arc::new(Self { queue: tokio::sync::Mutex::new(rx), replies, current }))
    }

    /// The next task; `None` once no more can come.
    pub async fn next(&self) -> Option<Incoming> {
        let task = self.queue.lock().await.recv().await;
        *self.current.task.lock().expect("current lock") = task.as_ref().map(|t| t.task_id.clone());
        task
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

    /// Hands back a finished task: its value (or error), or its values one by one when it
    /// has several, and what it printed.
    pub fn finish(&self, task_id: &str, reply: v1::PushTaskReply) {
        {
            let mut current = self.current.task.lock().expect("current lock");
            if current.as_deref() == Some(task_id) {
                *current = None;
            }
        }
        if let Some(tx) = self.replies.0.lock().expect("replies lock").remove(task_id) {
            let _ = tx.send(Ok(v1::PushTaskReply { task_id: task_id.to_string(), ..reply }));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        }
    }

    fn names(tasks: Vec<Incoming>) -> Vec<String> {
        tasks.into_iter().map(|t| t.name).collect()
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
