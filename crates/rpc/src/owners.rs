//! What node agents ask of the processes that own actors (their object services): a trait
//! keyed by the owner's address, so the agent's pool runs against an in-process fake in
//! tests, and the real clients, one per owner, made on first use.

use crate::auth::Token;
use crate::client::ObjectClient;
use crate::clients::Clients;
use oxray_proto::v1::{self, object_service_client::ObjectServiceClient};
use std::time::Duration;
use tonic::Status;

#[tonic::async_trait]
pub trait Owners: Send + Sync + 'static {
    /// Tells an actor's owner that the actor's worker died: it restarts the actor or records
    /// it dead, and answers once it did (a restart takes as long as placing the actor).
    async fn actor_failed(&self, owner: &str, request: v1::ActorFailedRequest) -> Result<(), Status>;
}

/// The real object service clients, one per owner address. Owners come and go (each
/// driver is one): a client is dropped when its owner cannot be reached. Calls wait as
/// long as the owner takes; an owner that cannot be reached is given up on at once.
pub struct OwnerClients(Clients<ObjectClient>);

const OWNERS_KEPT: usize = 256;

impl OwnerClients {
    pub fn new(token: Token) -> Self {
        Self(Clients::new(token, Duration::from_secs(3), None, OWNERS_KEPT, ObjectServiceClient::with_interceptor))
    }
}

#[tonic::async_trait]
impl Owners for OwnerClients {
    async fn actor_failed(&self, owner: &str, request: v1::ActorFailedRequest) -> Result<(), Status> {
        let answered = self.0.get(owner)?.actor_failed(request).await;
        if answered.as_ref().is_err_and(|s| s.code() == tonic::Code::Unavailable) {
            self.0.forget(owner);
        }
        answered.map(|_| ())
    }
}
