//! Plain data shared by every oxray crate: identifiers, resources, node records. No IO.

mod ids;
mod job;
mod labels;
mod node;
mod resources;

pub use ids::{is_placement_group_id, new_placement_group_id, IdError, JobId, NodeId};
pub use job::{error_types, JobRecord, JobStatus};
pub use labels::{selector_matches, Selector};
pub use node::{NodeInfo, NodeState};
pub use resources::{ResourceError, ResourceSet};

/// Resource names with a meaning of their own, spelled as Ray spells them.
pub mod resource_names {
    pub const CPU: &str = "CPU";
    pub const GPU: &str = "GPU";
    pub const MEMORY: &str = "memory";
    pub const OBJECT_STORE_MEMORY: &str = "object_store_memory";
    /// Every head node carries one unit of this resource.
    pub const HEAD_MARKER: &str = "node:__internal_head__";
    /// Every node carries one unit of `node:<ip>`.
    pub fn node_ip_marker(ip: &str) -> String {
        format!("node:{ip}")
    }
}

/// The Ray release whose client-facing APIs (Jobs REST, state API) oxray answers for;
/// Ray's clients compare it before using them.
pub const RAY_COMPAT_VERSION: &str = "2.60.0";

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}
