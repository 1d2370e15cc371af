//! What the controller needs from the cluster: replicas are actors, made, called and ended
//! through the core. The head implements it; tests may put a double below it.

use std::collections::BTreeMap;

/// A replica to create: a detached actor named `name` in the "serve" namespace, running
/// `class` (a Python import path: the replica class, or the builder of declarative apps)
/// with `args`.
#[derive(Debug, Clone)]
pub struct NewReplica {
    pub name: String,
    pub class: &'static str,
    /// The methods handles may call.
    pub methods: &'static [&'static str],
    /// How the actor shows in logs (Ray's `ServeReplica:<app>:<deployment>`).
    pub class_name: String,
    pub python: String,
    pub resources: BTreeMap<String, f64>,
    pub env: BTreeMap<String, String>,
    /// Calls it may run at once.
    pub max_concurrency: u32,
    pub args: Vec<u8>,
}

/// Where a created replica runs.
#[derive(Debug, Clone)]
pub struct Placed {
    pub actor_id: String,
    pub worker_address: String,
    pub node_id: String,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CallError {
    /// The method raised, or the reply could not be read.
    #[error("{0}")]
    Failed(String),
    /// The actor is gone or cannot be reached.
    #[error("{0}")]
    Died(String),
}

/// Calls of replicas that exist: what an HTTP proxy needs.
#[async_trait::async_trait]
pub trait ReplicaCalls: Send + Sync + 'static {
    /// The pickled reply of `method`.
    async fn call(&self, actor_id: &str, address: &str, method: &str, args: Vec<u8>) -> Result<Vec<u8>, CallError>;
    /// A streaming call: each pickled item as the method yields it; an error ends the
    /// stream. Dropping the receiver lets go of the items not yet taken.
    async fn stream(
        &self,
        actor_id: &str,
        address: &str,
        method: &str,
        args: Vec<u8>,
    ) -> Result<tokio::sync::mpsc::Receiver<Result<Vec<u8>, CallError>>, CallError>;
}

#[async_trait::async_trait]
pub trait ActorHost: ReplicaCalls {
    /// Creates the actor and returns once it has a worker (its constructor may still run:
    /// calls wait behind it).
    async fn create(&self, replica: NewReplica) -> Result<Placed, String>;
    /// Ends the actor at once and forgets its name.
    async fn kill(&self, actor_id: &str, address: &str, name: &str);
}

/// Where the controller keeps its state across head restarts.
pub trait StateStore: Send + Sync + 'static {
    fn save_app(&self, name: &str, record: &[u8]) -> Result<(), String>;
    fn delete_app(&self, name: &str) -> Result<(), String>;
    fn load_apps(&self) -> Result<Vec<(String, Vec<u8>)>, String>;
    /// The last declarative config (`None` forgets it).
    fn save_config(&self, record: Option<&[u8]>) -> Result<(), String>;
    fn load_config(&self) -> Result<Option<Vec<u8>>, String>;
}
