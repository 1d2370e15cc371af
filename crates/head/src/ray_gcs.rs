//! Ray's GCS protocol, as far as Ray's own tools need it to find this cluster's dashboard
//! from its bootstrap address (`ray logs --address HEAD:6379`): they ask for the cluster id,
//! then read the dashboard's address from the internal KV store.

use oxray_proto::ray_rpc::{
    internal_kv_gcs_service_server, node_info_gcs_service_server, GcsStatus, GetClusterIdReply, GetClusterIdRequest,
    InternalKvGetReply, InternalKvGetRequest,
};
use tonic::{Request, Response, Status};

/// Ray's status codes in `GcsStatus`.
const OK: i32 = 0;
const NOT_FOUND: i32 = 17;

#[derive(Clone)]
pub struct RayGcs {
    /// 28 bytes, as Ray's cluster ids.
    cluster_id: Vec<u8>,
    /// `host:port` of the dashboard.
    dashboard: String,
}

impl RayGcs {
    pub fn new(session_name: &str, dashboard_url: &str) -> Self {
        let dashboard = dashboard_url.trim_start_matches("http://").trim_start_matches("https://").to_string();
        Self { cluster_id: cluster_id(session_name), dashboard }
    }

    /// The value of a key of Ray's internal KV store, for the keys this cluster has.
    fn get(&self, namespace: &[u8], key: &[u8]) -> Option<Vec<u8>> {
        (namespace == b"dashboard" && key == b"dashboard").then(|| self.dashboard.as_bytes().to_vec())
    }
}

/// A stable id for the cluster's session, the size of Ray's.
fn cluster_id(session_name: &str) -> Vec<u8> {
    let mut id = Vec::with_capacity(28);
    let mut seed = 0xcbf2_9ce4_8422_2325u64;
    while id.len() < 28 {
        for b in session_name.bytes().chain(std::iter::once(id.len() as u8)) {
            seed = (seed ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
        id.extend_from_slice(&seed.to_le_bytes()[..4]);
    }
    id
}

fn ok() -> Option<GcsStatus> {
    Some(GcsStatus { code: OK, message: String::new() })
}

#[tonic::async_trait]
impl node_info_gcs_service_server::NodeInfoGcsService for RayGcs {
    async fn get_cluster_id(&self, _: Request<GetClusterIdRequest>) -> Result<Response<GetClusterIdReply>, Status> {
        Ok(Response::new(GetClusterIdReply { status: ok(), cluster_id: self.cluster_id.clone() }))
    }
}

#[tonic::async_trait]
impl internal_kv_gcs_service_server::InternalKvGcsService for RayGcs {
    async fn internal_kv_get(
        &self,
        request: Request<InternalKvGetRequest>,
    ) -> Result<Response<InternalKvGetReply>, Status> {
        let request = request.into_inner();
        let reply = match self.get(&request.namespace, &request.key) {
            Some(value) => InternalKvGetReply { status: ok(), value },
            None => InternalKvGetReply {
                status: Some(GcsStatus { code: NOT_FOUND, message: "Failed to find the key".into() }),
                value: Vec::new(),
            },
        };
        Ok(Response::new(reply))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_dashboard_is_found_under_rays_key_and_the_id_is_stable() {
        let gcs = RayGcs::new("session_x", "http://10.0.0.1:8265");
        assert_eq!(gcs.get(b"dashboard", b"dashboard"), Some(b"10.0.0.1:8265".to_vec()));
        assert_eq!(gcs.get(b"other", b"dashboard"), None);
        assert_eq!(gcs.cluster_id.len(), 28);
        assert_eq!(gcs.cluster_id, cluster_id("session_x"));
        assert_ne!(gcs.cluster_id, cluster_id("session_y"));
    }
}
