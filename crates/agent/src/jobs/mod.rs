//! Job entrypoints on this node: runtime environments, processes, logs, reports.

mod env;
pub mod gpus;
mod reporter;
mod runner;
mod service;

pub use env::{EnvCache, Prepared};
pub use gpus::{GpuPool, SharedGpus};
pub use reporter::Reporter;
pub use runner::{JobContext, Runner};
pub use service::AgentService;
