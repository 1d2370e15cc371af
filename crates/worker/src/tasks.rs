//! Submitting tasks: lease a worker from the local node agent, push the task straight to
//! that worker, record the result as an object this process owns, give the lease back.

use crate::objects::{ObjectTable, Outcome};
use oxray_proto::convert::resources_to_proto;
use oxray_proto::v1::{self, lease_service_client::LeaseServiceClient, worker_service_client::WorkerServiceClient};
use oxray_rpc::{ClientAuth, Token};
use oxray_types::ResourceSet;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, Endpoint};

type Authed = InterceptedService<Channel, ClientAuth>;

/// What a task is, as the Python side serialized it.
pub struct TaskSpec {
    pub name: String,
    pub function: Vec<u8>,
    pub args: Vec<u8>,
    /// ObjectRefs among the arguments: resolved here before the task is sent.
    pub dependencies: Vec<String>,
    pub route: Route,
}

/// Where a task goes.
pub enum Route {
    /// A worker leased for this task, holding these resources while it runs.
    Lease(ResourceSet),
    /// An actor's worker.
    Actor(ActorCall),
}

pub struct ActorCall {
    pub address: String,
    /// Empty for the creation call.
    pub method: String,
    pub creation: bool,
    pub caller: String,
    pub sequence: u64,
}

pub struct Submitter {
    objects: Arc<ObjectTable>,
    leases: LeaseServiceClient<Authed>,
    token: Token,
    python: String,
    workers: Mutex<HashMap<String, WorkerServiceClient<Authed>>>,
}

fn channel(address: &str) -> Result<Channel, String> {
    Ok(Endpoint::from_shared(format!("http://{address}"))
        .map_err(|e| e.to_string())?
        .connect_timeout(Duration::from_secs(5))
        .tcp_nodelay(true)
        .connect_lazy())
}

impl Submitter {
    /// `agent` is the local node agent's address; `python` the interpreter workers run.
    pub fn new(objects: Arc<ObjectTable>, agent: &str, token: Token, python: String) -> Result<Self, String> {
        let leases = LeaseServiceClient::with_interceptor(channel(agent)?, ClientAuth::new(&token));
        Ok(Self { objects, leases, token, python, workers: Mutex::new(HashMap::new()) })
    }

    fn worker(&self, address: &str) -> Result<WorkerServiceClient<Authed>, String> {
        let mut workers = self.workers.lock().expect("worker clients lock");
        if let Some(c) = workers.get(address) {
            return Ok(c.clone());
        }
        let client = WorkerServiceClient::with_interceptor(channel(address)?, ClientAuth::new(&self.token))
            .max_decoding_message_size(usize::MAX)
            .max_encoding_message_size(usize::MAX);
        workers.insert(address.to_string(), client.clone());
        Ok(client)
    }

    /// Returns the id of the object that will hold the task's result.
    pub fn submit(self: &Arc<Self>, runtime: &tokio::runtime::Handle, spec: TaskSpec) -> String {
        let id = self.objects.pending();
        // The arguments stay alive until the task has them, even if the caller lets go.
        for dep in &spec.dependencies {
            self.objects.add_ref(dep);
        }
        let this = self.clone();
        let result_id = id.clone();
        runtime.spawn(async move {
            let actor = matches!(spec.route, Route::Actor(_));
            let (data, outcome) = match this.run(&result_id, spec).await {
                Ok(reply) if reply.is_error => (reply.result, Outcome::TaskError),
                Ok(reply) => (reply.result, Outcome::Value),
                Err(Failure::Dependency(ready)) => (ready.data.to_vec(), ready.outcome),
                Err(Failure::System(message)) if actor => (message.into_bytes(), Outcome::ActorDied),
                Err(Failure::System(message)) => (message.into_bytes(), Outcome::SystemError),
            };
            this.objects.fulfil(&result_id, data, outcome);
        });
        id
    }

    async fn run(&self, task_id: &str, spec: TaskSpec) -> Result<v1::PushTaskReply, Failure> {
        let values = self.objects.get(&spec.dependencies, None).await;
        for dep in &spec.dependencies {
            self.objects.release(dep);
        }
        let values = values.map_err(|e| Failure::System(e.to_string()))?;
        let mut dependencies = Vec::with_capacity(values.len());
        for (id, ready) in spec.dependencies.iter().zip(values) {
            // A failed argument fails the task with the same error, as in Ray.
            if ready.outcome != Outcome::Value {
                return Err(Failure::Dependency(ready));
            }
            dependencies.push(v1::ObjectValue { object_id: id.clone(), data: ready.data.to_vec() });
        }
        let mut push = v1::PushTaskRequest {
            task_id: task_id.to_string(),
            function: spec.function,
            args: spec.args,
            function_name: spec.name.clone(),
            dependencies,
            ..Default::default()
        };
        let resources = match spec.route {
            Route::Actor(call) => {
                push.actor_creation = call.creation;
                push.actor_method = call.method;
                push.caller_id = call.caller;
                push.sequence = call.sequence;
                let mut worker = self.worker(&call.address).map_err(Failure::System)?;
                return worker.push_task(push).await.map(|r| r.into_inner()).map_err(|s| {
                    Failure::System(format!("the actor running {} died or is unreachable: {}", spec.name, s.message()))
                });
            }
            Route::Lease(resources) => resources,
        };
        let lease = self
            .lease(resources)
            .await
            .map_err(|e| Failure::System(format!("no worker for task {}: {e}", spec.name)))?;
        let reply = match self.worker(&lease.worker_address) {
            Ok(mut worker) => worker.push_task(push).await.map(|r| r.into_inner()).map_err(|s| s.message().to_string()),
            Err(e) => Err(e),
        };
        // Losing this call only delays the reuse of the worker; the task's outcome stands.
        let _ = self.give_back(&lease.lease_id, reply.is_err()).await;
        reply.map_err(|e| Failure::System(format!("the worker running task {} died or broke off: {e}", spec.name)))
    }

    /// A worker holding `resources`, for a task or for an actor's whole life.
    pub async fn lease(&self, resources: ResourceSet) -> Result<v1::LeaseReply, String> {
        let request = v1::LeaseRequest { resources: resources_to_proto(&resources), python: self.python.clone() };
        self.leases
            .clone()
            .request_worker_lease(request)
            .await
            .map(|r| r.into_inner())
            .map_err(|s| s.message().to_string())
    }

    /// Gives a worker back; `disconnect` retires it (its process is killed).
    pub async fn give_back(&self, lease_id: &str, disconnect: bool) -> Result<(), String> {
        let request = v1::ReturnWorkerRequest { lease_id: lease_id.to_string(), disconnect };
        self.leases.clone().return_worker(request).await.map(|_| ()).map_err(|s| s.message().to_string())
    }
}

enum Failure {
    Dependency(crate::objects::Ready),
    System(String),
}
