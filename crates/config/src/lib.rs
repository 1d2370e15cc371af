//! Where oxray keeps things on a machine (its home and session directories, token files,
//! process records) and the readiness handshake between a starting server and its launcher.

pub mod current;
pub mod log_rotation;
pub mod paths;
pub mod private_clusters;
pub mod procs;
pub mod ray_env;
pub mod ready;
pub mod secret;
pub mod session;

/// Default control-plane port, as Ray's GCS.
pub const DEFAULT_PORT: u16 = 6379;
/// Default dashboard / HTTP API port, as Ray's dashboard.
pub const DEFAULT_DASHBOARD_PORT: u16 = 8265;
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Why a process of oxray `here` cannot join a cluster running oxray `cluster`, as Ray
/// refuses a driver or node of another version: both sides must be the same release, since
/// their messages and pickled objects change between releases. An unknown side (empty)
/// passes.
pub fn version_mismatch(cluster: &str, here: &str) -> Option<String> {
    (!cluster.is_empty() && !here.is_empty() && cluster != here).then(|| {
        format!(
            "version mismatch: the cluster runs oxray {cluster} and this process oxray {here}; \
             install the same oxray version on every node and client"
        )
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_the_same_release_joins() {
        assert_eq!(super::version_mismatch("0.1.0", "0.1.0"), None);
        assert_eq!(super::version_mismatch("", "0.1.0"), None, "an unknown side passes");
        let why = super::version_mismatch("0.2.0", "0.1.0").unwrap();
        assert!(why.contains("cluster runs oxray 0.2.0") && why.contains("this process oxray 0.1.0"), "{why}");
    }
}
