//! Job entrypoints on this node: runtime environments, processes, logs, reports.

mod log_copy;
mod reporter;
mod runner;
mod service;

pub use reporter::Reporter;
pub use runner::{JobContext, Runner};
pub use service::AgentService;
