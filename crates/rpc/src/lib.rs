//! Clients and server plumbing for the control plane: the cluster token, the auth
//! interceptors, and connecting to a head.

mod auth;
mod client;

pub use auth::{ClientAuth, ServerAuth, Token, TokenError};
pub use client::{
    connect_agent_lazy, connect_head, connect_head_lazy, explain, root_cause, AgentClient, HeadClient, RpcError,
};
