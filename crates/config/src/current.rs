//! What `oxray start` leaves behind so later commands and drivers on this machine find the
//! cluster, and know how to talk to it.

use crate::paths;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CurrentCluster {
    pub address: String,
    pub dashboard_url: Option<String>,
    pub session_dir: String,
    /// The authority of a cluster started with TLS files, which this machine's clients trust.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_ca: Option<String>,
    /// How the cluster's machines talk: "auto", "files" or "off" (unknown for records of
    /// older releases).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<String>,
}

pub fn read_current() -> Option<CurrentCluster> {
    let bytes = std::fs::read(paths::current_cluster_file(&paths::oxray_home())).ok()?;
    serde_json::from_slice(&bytes).ok()
}
