use crate::WorkerError;
use oxray_proto::v1;
use oxray_rpc::{connect_head, explain, HeadClient, Token};
use oxray_types::NodeInfo;
use std::collections::BTreeMap;
use std::time::Duration;

/// A connection to a cluster's head.
pub struct Cluster {
    address: String,
    client: HeadClient,
    info: v1::ClusterInfo,
}

impl Cluster {
    /// Connects and checks the token with one call, so a wrong one fails here.
    pub async fn connect(address: &str, token: &Token) -> Result<Self, WorkerError> {
        let mut client = connect_head(address, token, Duration::from_secs(10))
            .await
            .map_err(|e| WorkerError::Connect(e.to_string()))?;
        let info = client
            .get_cluster_info(v1::GetClusterInfoRequest {})
            .await
            .map_err(|s| WorkerError::Connect(explain(address, &s)))?
            .into_inner();
        Ok(Self { address: address.to_string(), client, info })
    }

    /// A client of the head, for cluster-wide decisions (where a task can run).
    pub fn head(&self) -> HeadClient {
        self.client.clone()
    }

    pub fn address(&self) -> &str {
        &self.address
    }

    pub fn dashboard_url(&self) -> &str {
        &self.info.dashboard_url
    }

    pub fn session_name(&self) -> &str {
        &self.info.session_name
    }

    pub async fn register_actor(&self, actor: v1::NamedActor) -> Result<(), tonic::Status> {
        self.client.clone().register_actor(actor).await.map(|_| ())
    }

    pub async fn get_actor(&self, name: &str, namespace: &str) -> Result<v1::NamedActor, tonic::Status> {
        let request = v1::GetActorRequest { name: name.into(), namespace: namespace.into() };
        self.client.clone().get_actor(request).await.map(|r| r.into_inner())
    }

    pub async fn remove_actor(&self, name: &str, namespace: &str) -> Result<(), tonic::Status> {
        let request = v1::GetActorRequest { name: name.into(), namespace: namespace.into() };
        self.client.clone().remove_actor(request).await.map(|_| ())
    }

    pub async fn nodes(&self) -> Result<Vec<NodeInfo>, WorkerError> {
        let reply = self
            .client
            .clone()
            .list_nodes(v1::ListNodesRequest {})
            .await
            .map_err(|s| WorkerError::Connect(explain(&self.address, &s)))?;
        reply
            .into_inner()
            .nodes
            .into_iter()
            .map(|n| NodeInfo::try_from(n).map_err(|e| WorkerError::Malformed(e.to_string())))
            .collect()
    }
}

fn sum(nodes: &[NodeInfo], pick: impl Fn(&NodeInfo) -> &oxray_types::ResourceSet) -> BTreeMap<String, f64> {
    let mut total: BTreeMap<String, f64> = BTreeMap::new();
    for node in nodes.iter().filter(|n| n.is_alive()) {
        for (name, amount) in pick(node).iter() {
            *total.entry(name.to_string()).or_default() += amount;
        }
    }
    // Ray leaves out what the cluster has none of (a CPU-only cluster shows no GPU).
    total.retain(|_, v| *v > 0.0);
    total
}

/// Totals over alive nodes, as `ray.cluster_resources()`.
pub fn cluster_resources(nodes: &[NodeInfo]) -> BTreeMap<String, f64> {
    sum(nodes, |n| &n.resources_total)
}

/// What alive nodes have free, as `ray.available_resources()`.
pub fn available_resources(nodes: &[NodeInfo]) -> BTreeMap<String, f64> {
    sum(nodes, |n| &n.resources_available)
}
