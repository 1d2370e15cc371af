//! The node agents' lease service as its callers use it: a trait keyed by the agent's
//! address, so the head's placement rounds and a driver's leasing run against an
//! in-process fake in tests, and the real clients, one per agent, made on first use.

use crate::auth::Token;
use crate::client::LeaseClient;
use crate::clients::Clients;
use oxray_proto::v1::{self, lease_service_client::LeaseServiceClient};
use std::time::Duration;
use tonic::Status;

/// The calls made of node agents' lease services.
#[tonic::async_trait]
pub trait Leases: Send + Sync + 'static {
    /// A worker lease (or the agent to ask instead, in `retry_at`).
    async fn request_lease(&self, agent: &str, request: v1::LeaseRequest) -> Result<v1::LeaseReply, Status>;
    async fn return_worker(
        &self,
        agent: &str,
        request: v1::ReturnWorkerRequest,
    ) -> Result<v1::ReturnWorkerReply, Status>;
    async fn reserve_bundles(&self, agent: &str, request: v1::ReserveBundlesRequest) -> Result<(), Status>;
    async fn release_bundles(&self, agent: &str, request: v1::ReleaseBundlesRequest) -> Result<(), Status>;
}

/// The real lease clients, one per agent address.
pub struct LeaseClients(Clients<LeaseClient>);

/// Agents a process keeps clients for: a cluster's nodes.
const AGENTS_KEPT: usize = 4096;

impl LeaseClients {
    /// `call_timeout` `None`: calls wait as long as the agent takes (a lease pinned to a
    /// full node waits for room there).
    pub fn new(token: Token, call_timeout: Option<Duration>) -> Self {
        Self(Clients::new(
            token,
            Duration::from_secs(5),
            call_timeout,
            AGENTS_KEPT,
            LeaseServiceClient::with_interceptor,
        ))
    }
}

#[tonic::async_trait]
impl Leases for LeaseClients {
    async fn request_lease(&self, agent: &str, request: v1::LeaseRequest) -> Result<v1::LeaseReply, Status> {
        Ok(self.0.get(agent)?.request_worker_lease(request).await?.into_inner())
    }

    async fn return_worker(
        &self,
        agent: &str,
        request: v1::ReturnWorkerRequest,
    ) -> Result<v1::ReturnWorkerReply, Status> {
        Ok(self.0.get(agent)?.return_worker(request).await?.into_inner())
    }

    async fn reserve_bundles(&self, agent: &str, request: v1::ReserveBundlesRequest) -> Result<(), Status> {
        self.0.get(agent)?.reserve_bundles(request).await.map(|_| ())
    }

    async fn release_bundles(&self, agent: &str, request: v1::ReleaseBundlesRequest) -> Result<(), Status> {
        self.0.get(agent)?.release_bundles(request).await.map(|_| ())
    }
}
