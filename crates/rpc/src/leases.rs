//! The node agents' lease service as its callers use it: a trait keyed by the agent's
//! address, so the head's placement rounds and a driver's leasing run against an
//! in-process fake in tests, and the real clients, one per agent, made on first use.

use crate::auth::{ClientAuth, Token};
use crate::client::LeaseClient;
use oxray_proto::v1::{self, lease_service_client::LeaseServiceClient};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;
use tonic::transport::Endpoint;
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

/// The real lease clients, one per agent address, kept for the process's life.
pub struct LeaseClients {
    token: Token,
    /// `None`: calls wait as long as the agent takes (a lease pinned to a full node waits
    /// for room there).
    call_timeout: Option<Duration>,
    clients: Mutex<HashMap<String, LeaseClient>>,
}

impl LeaseClients {
    pub fn new(token: Token, call_timeout: Option<Duration>) -> Self {
        Self { token, call_timeout, clients: Mutex::new(HashMap::new()) }
    }

    fn client(&self, agent: &str) -> Result<LeaseClient, Status> {
        let mut clients = self.clients.lock().expect("lease clients lock");
        if let Some(client) = clients.get(agent) {
            return Ok(client.clone());
        }
        let endpoint = Endpoint::from_shared(format!("http://{agent}"))
            .map_err(|_| Status::invalid_argument(format!("{agent:?} is not an agent address")))?
            .connect_timeout(Duration::from_secs(5));
        let endpoint = match self.call_timeout {
            Some(limit) => endpoint.timeout(limit),
            None => endpoint,
        };
        let channel = crate::local::connect_lazy(endpoint);
        let client = LeaseServiceClient::with_interceptor(channel, ClientAuth::new(&self.token));
        clients.insert(agent.to_string(), client.clone());
        Ok(client)
    }
}

#[tonic::async_trait]
impl Leases for LeaseClients {
    async fn request_lease(&self, agent: &str, request: v1::LeaseRequest) -> Result<v1::LeaseReply, Status> {
        Ok(self.client(agent)?.request_worker_lease(request).await?.into_inner())
    }

    async fn return_worker(
        &self,
        agent: &str,
        request: v1::ReturnWorkerRequest,
    ) -> Result<v1::ReturnWorkerReply, Status> {
        Ok(self.client(agent)?.return_worker(request).await?.into_inner())
    }

    async fn reserve_bundles(&self, agent: &str, request: v1::ReserveBundlesRequest) -> Result<(), Status> {
        self.client(agent)?.reserve_bundles(request).await.map(|_| ())
    }

    async fn release_bundles(&self, agent: &str, request: v1::ReleaseBundlesRequest) -> Result<(), Status> {
        self.client(agent)?.release_bundles(request).await.map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_malformed_agent_address_is_an_invalid_argument() {
        let clients = LeaseClients::new(Token::generate(), None);
        let err = clients.release_bundles("bad address", Default::default()).await.unwrap_err();
        assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err}");
    }

    #[tokio::test]
    async fn one_client_per_agent_is_kept() {
        let clients = LeaseClients::new(Token::generate(), Some(Duration::from_secs(1)));
        clients.client("127.0.0.1:1").unwrap();
        clients.client("127.0.0.1:1").unwrap();
        clients.client("127.0.0.1:2").unwrap();
        assert_eq!(clients.clients.lock().unwrap().len(), 2);
    }
}
