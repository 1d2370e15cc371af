//! Clients and server plumbing for the control plane: the cluster token, the auth
//! interceptors, and connecting to a head.

mod agent_jobs;
mod auth;
mod client;
mod clients;
pub mod frames;
mod leases;
mod local;
mod owners;
pub mod reconnect;
mod socket;
mod stream;
pub mod tls;

pub use agent_jobs::{AgentJobClients, AgentJobs};
pub use auth::{ClientAuth, ServerAuth, Token, TokenError};
pub use client::{
    connect_agent_lazy, connect_head, connect_head_lazy, connect_objects_lazy, explain, root_cause, AgentClient,
    HeadClient, LeaseClient, ObjectClient, RpcError,
};

pub use leases::{LeaseClients, Leases};
pub use local::{connect, connect_lazy, dial_address, incoming, incoming_and_plain, Conn};
pub use owners::{OwnerClients, Owners};
pub use socket::{Room, Socket, SocketStream, StdSocket};
pub use stream::Stream;

/// A gRPC server as every oxray process runs one. The stream limit is announced
/// explicitly: without it, clients keep their initial guess of 100 concurrent calls per
/// connection, and actor calls held back at the worker for an earlier call (which waits
/// for a stream behind them) would never run.
pub fn server() -> tonic::transport::Server {
    tonic::transport::Server::builder().max_concurrent_streams(1 << 20)
}

/// How long a stopping server waits for its open connections to finish.
pub const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(3);

/// Runs a server until it ends by itself, or until `SHUTDOWN_GRACE` after `shutdown`: a
/// client that keeps a connection open without driving it (a process busy with other work
/// never answers the server's goodbye) must not keep a stopping server alive.
pub async fn serve_until<E>(
    server: impl std::future::Future<Output = Result<(), E>>,
    shutdown: tokio_util::sync::CancellationToken,
) -> Result<(), E> {
    let mut server = std::pin::pin!(server);
    tokio::select! {
        done = &mut server => return done,
        _ = shutdown.cancelled() => {}
    }
    tokio::time::timeout(SHUTDOWN_GRACE, server).await.unwrap_or_else(|_| {
        tracing::info!("connections still open after {SHUTDOWN_GRACE:?} are closed");
        Ok(())
    })
}
