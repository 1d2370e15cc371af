//! The worker side: a process the agent started serves pushed tasks to its Python loop,
//! which runs them one at a time and hands back the results.

use oxray_proto::v1::{self, worker_service_server};
use oxray_rpc::{ServerAuth, Token};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::{mpsc, oneshot};
use tonic::{Request, Response, Status};

pub struct Incoming {
    pub task_id: String,
    pub name: String,
    pub function: Vec<u8>,
    pub args: Vec<u8>,
    pub dependencies: Vec<(String, Vec<u8>)>,
}

#[derive(Default)]
struct Replies(Mutex<HashMap<String, oneshot::Sender<v1::PushTaskReply>>>);

struct Service {
    queue: mpsc::UnboundedSender<Incoming>,
    replies: Arc<Replies>,
}

#[tonic::async_trait]
impl worker_service_server::WorkerService for Service {
    async fn push_task(&self, request: Request<v1::PushTaskRequest>) -> Result<Response<v1::PushTaskReply>, Status> {
        let r = request.into_inner();
        let (tx, rx) = oneshot::channel();
        self.replies.0.lock().expect("replies lock").insert(r.task_id.clone(), tx);
        let incoming = Incoming {
            task_id: r.task_id,
            name: r.function_name,
            function: r.function,
            args: r.args,
            dependencies: r.dependencies.into_iter().map(|d| (d.object_id, d.data)).collect(),
        };
        self.queue.send(incoming).map_err(|_| Status::unavailable("the worker is shutting down"))?;
        rx.await.map(Response::new).map_err(|_| Status::internal("the worker dropped the task"))
    }
}

pub struct Executor {
    queue: tokio::sync::Mutex<mpsc::UnboundedReceiver<Incoming>>,
    replies: Arc<Replies>,
}

impl Executor {
    /// Serves on a free loopback port and tells the agent where.
    pub async fn start(agent: &str, worker_id: &str, token: Token) -> Result<Arc<Self>, String> {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await.map_err(|e| e.to_string())?;
        let port = listener.local_addr().map_err(|e| e.to_string())?.port();
        let (tx, rx) = mpsc::unbounded_channel();
        let replies = Arc::new(Replies::default());
        let server = worker_service_server::WorkerServiceServer::new(Service { queue: tx, replies: replies.clone() })
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
        Ok(Arc::new(Self { queue: tokio::sync::Mutex::new(rx), replies }))
    }

    /// The next task; `None` once no more can come.
    pub async fn next(&self) -> Option<Incoming> {
        self.queue.lock().await.recv().await
    }

    pub fn finish(&self, task_id: &str, result: Vec<u8>, is_error: bool) {
        if let Some(tx) = self.replies.0.lock().expect("replies lock").remove(task_id) {
            let _ = tx.send(v1::PushTaskReply { result, is_error });
        }
    }
}
