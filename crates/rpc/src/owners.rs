//! What node agents ask of the processes that own actors (their object services): a trait
//! keyed by the owner's address, so the agent's pool runs against an in-process fake in
//! tests, and the real clients, one per owner, made on first use.

use crate::auth::{ClientAuth, Token};
use crate::client::ObjectClient;
use oxray_proto::v1::{self, object_service_client::ObjectServiceClient};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;
use tonic::transport::Endpoint;
use tonic::Status;

#[tonic::async_trait]
pub trait Owners: Send + Sync + 'static {
    /// Tells an actor's owner that the actor's worker died: it restarts the actor or records
    /// it dead.
    async fn actor_failed(&self, owner: &str, request: v1::ActorFailedRequest) -> Result<(), Status>;
}

/// The real object service clients, one per owner address. Owners come and go (each
/// driver is one): a client is dropped when a call to it fails, and at most `KEPT` are kept.
pub struct OwnerClients {
    token: Token,
    call_timeout: Duration,
    clients: Mutex<HashMap<String, ObjectClient>>,
}

const KEPT: usize = 256;

impl OwnerClients {
    pub fn new(token: Token, call_timeout: Duration) -> Self {
        Self { token, call_timeout, clients: Mutex::new(HashMap::new()) }
    }

    fn client(&self, owner: &str) -> Result<ObjectClient, Status> {
        let mut clients = self.clients.lock().expect("owner clients lock");
        if let Some(client) = clients.get(owner) {
            return Ok(client.clone());
        }
        let endpoint = Endpoint::from_shared(format!("http://{owner}"))
            .map_err(|_| Status::invalid_argument(format!("{owner:?} is not an owner's address")))?
            .connect_timeout(Duration::from_secs(3))
            .timeout(self.call_timeout);
        let client =
            ObjectServiceClient::with_interceptor(crate::local::connect_lazy(endpoint), ClientAuth::new(&self.token));
        if clients.len() >= KEPT {
            clients.clear();
        }
        clients.insert(owner.to_string(), client.clone());
        Ok(client)
    }
}

#[tonic::async_trait]
impl Owners for OwnerClients {
    async fn actor_failed(&self, owner: &str, request: v1::ActorFailedRequest) -> Result<(), Status> {
        let answered = self.client(owner)?.actor_failed(request).await;
        if answered.is_err() {
            self.clients.lock().expect("owner clients lock").remove(owner);
        }
        answered.map(|_| ())
    }
}
