//! A task's worker tells its agent when it waits for objects in `get` or `wait`, so the
//! node lends the task's CPUs to others meanwhile: a task waiting for the tasks it
//! launched never holds the CPU they need (as Ray's blocked workers do).

use crate::channels::Authed;
use oxray_proto::v1::{lease_service_client::LeaseServiceClient, WorkerBlockedRequest};
use oxray_rpc::{ClientAuth, Token};

#[derive(Clone)]
pub struct BlockedNotice {
    agent: LeaseServiceClient<Authed>,
    worker_id: String,
}

impl BlockedNotice {
    /// For a worker process, from what its agent put in its environment; `None` in drivers.
    /// Call inside the runtime the notices are sent from.
    pub fn from_env(token: &Token) -> Option<Self> {
        let worker_id = std::env::var("OXRAY_WORKER_ID").ok().filter(|v| !v.is_empty())?;
        let agent = std::env::var("OXRAY_AGENT_ADDRESS").ok().filter(|v| !v.is_empty())?;
        let channel = crate::channels::channel(&agent).ok()?;
        Some(Self { agent: LeaseServiceClient::with_interceptor(channel, ClientAuth::new(token)), worker_id })
    }

    /// Tells the agent; a notice that does not arrive only keeps the CPUs where they were.
    pub async fn tell(self, blocked: bool) {
        let request = WorkerBlockedRequest { worker_id: self.worker_id, blocked };
        if let Err(e) = self.agent.clone().worker_blocked(request).await {
            tracing::debug!("the agent was not told that this worker waits: {}", e.message());
        }
    }
}
