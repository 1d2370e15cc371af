//! What a node uses, as the head keeps it for `/metrics` and the dashboard's charts.

use serde::{Deserialize, Serialize};

/// The head keeps one reading per this many milliseconds, for this long.
pub const STEP_MS: u64 = 5_000;
pub const KEEP_MS: u64 = 3_600_000;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GpuUsage {
    pub index: u32,
    /// 0 to 1.
    pub utilization: f64,
    pub memory_used: u64,
    pub memory_total: u64,
}

/// One reading of a node's use.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeUsage {
    /// Milliseconds since the epoch.
    pub time_ms: u64,
    /// 0 to 1, of all the machine's CPUs.
    pub cpu_fraction: f64,
    pub memory_used: u64,
    pub memory_total: u64,
    /// Bytes of objects in shared memory, and spilled to disk.
    pub object_store_used: u64,
    pub object_store_spilled: u64,
    /// Tasks and actors running (workers leased out).
    pub workers_leased: u32,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpus: Vec<GpuUsage>,
}
