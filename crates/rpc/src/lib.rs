//! Clients and server plumbing for the control plane: the cluster token, the auth
//! interceptors, and connecting to a head.

mod auth;
mod client;
pub mod frames;
mod local;
mod socket;

pub use auth::{ClientAuth, ServerAuth, Token, TokenError};
pub use client::{
    connect_agent_lazy, connect_head, connect_head_lazy, connect_leases_lazy, explain, root_cause, AgentClient,
    HeadClient, LeaseClient, RpcError,
};

pub use local::{connect, connect_lazy, dial_address, incoming, Conn};
pub use socket::{Room, Socket, SocketStream, StdSocket};

/// A gRPC server as every oxray process runs one. The stream limit is announced
/// explicitly: without it, clients keep their initial guess of 100 concurrent calls per
/// connection, and actor calls held back at the worker for an earlier call (which waits
/// for a stream behind them) would never run.
pub fn server() -> tonic::transport::Server {
    tonic::transport::Server::builder().max_concurrent_streams(1 << 20)
}
