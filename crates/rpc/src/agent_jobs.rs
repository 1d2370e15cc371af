//! What the head asks of node agents about jobs: a trait keyed by the agent's address, so
//! the head's job loop runs against an in-process fake in tests, and the real clients.

use crate::auth::Token;
use crate::client::AgentClient;
use crate::clients::Clients;
use oxray_proto::v1::{self, agent_service_client::AgentServiceClient};
use std::time::Duration;
use tonic::Status;

#[tonic::async_trait]
pub trait AgentJobs: Send + Sync + 'static {
    /// Starts a job's entrypoint on the agent's node.
    async fn start_job(&self, agent: &str, request: v1::StartJobRequest) -> Result<(), Status>;
    /// Stops a job's entrypoint; whether it was running there.
    async fn stop_job(&self, agent: &str, request: v1::StopJobRequest) -> Result<bool, Status>;
}

pub struct AgentJobClients(Clients<AgentClient>);

const AGENTS_KEPT: usize = 4096;

impl AgentJobClients {
    pub fn new(token: Token, call_timeout: Duration) -> Self {
        Self(Clients::new(
            token,
            Duration::from_secs(3),
            Some(call_timeout),
            AGENTS_KEPT,
            AgentServiceClient::with_interceptor,
        ))
    }
}

#[tonic::async_trait]
impl AgentJobs for AgentJobClients {
    async fn start_job(&self, agent: &str, request: v1::StartJobRequest) -> Result<(), Status> {
        self.0.get(agent)?.start_job(request).await.map(|_| ())
    }

    async fn stop_job(&self, agent: &str, request: v1::StopJobRequest) -> Result<bool, Status> {
        Ok(self.0.get(agent)?.stop_job(request).await?.into_inner().was_running)
    }
}
