//! Where oxray keeps things on a machine (its home and session directories, token files,
//! process records) and the readiness handshake between a starting server and its launcher.

pub mod paths;
pub mod private_clusters;
pub mod procs;
pub mod ready;
pub mod secret;
pub mod session;

/// Default control-plane port, as Ray's GCS.
pub const DEFAULT_PORT: u16 = 6379;
/// Default dashboard / HTTP API port, as Ray's dashboard.
pub const DEFAULT_DASHBOARD_PORT: u16 = 8265;
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
