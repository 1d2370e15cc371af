use crate::placement_groups::Creations;
use crate::WorkerError;
use oxray_proto::v1;
use oxray_rpc::{connect_head, connect_head_lazy, explain, reconnect, HeadClient, Token};
use oxray_types::NodeInfo;
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::runtime::{Builder, Runtime};

const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// A connection to a cluster's head.
pub struct Cluster {
    address: String,
    /// For work running on the core's runtime.
    client: HeadClient,
    info: v1::ClusterInfo,
    /// Python's synchronous calls: a runtime that only the waiting caller drives, with a
    /// connection of its own, so a call's request and reply cross no thread (on the core's
    /// runtime each would wake another thread, which costs more than the call itself).
    direct: Runtime,
    direct_client: HeadClient,
    groups: Arc<Creations>,
}

impl Cluster {
    /// Connects and checks the token with one call, so a wrong one fails here. Runs
    /// inside the core's runtime.
    pub async fn connect(address: &str, token: &Token) -> Result<Self, WorkerError> {
        oxray_rpc::tls::init(token, address).map_err(WorkerError::Connect)?;
        let mut client =
            connect_head(address, token, CALL_TIMEOUT).await.map_err(|e| WorkerError::Connect(e.to_string()))?;
        let info = client
            .get_cluster_info(v1::GetClusterInfoRequest {})
            .await
            .map_err(|s| WorkerError::Connect(explain(address, &s)))?
            .into_inner();
        if let Some(why) = oxray_config::version_mismatch(&info.version, oxray_config::VERSION) {
            return Err(WorkerError::VersionMismatch(format!("{address}: {why}")));
        }
        let direct =
            Builder::new_current_thread().enable_all().build().map_err(|e| WorkerError::Connect(e.to_string()))?;
        let direct_client = {
            // The lazy channel's connection task belongs to the runtime entered here.
            let _inside = direct.enter();
            connect_head_lazy(address, token, CALL_TIMEOUT).map_err(|e| WorkerError::Connect(e.to_string()))?
        };
        Ok(Self { address: address.to_string(), client, info, direct, direct_client, groups: Arc::default() })
    }

    /// A client of the head for the core's runtime (where a task can run, background waits).
    pub fn head(&self) -> HeadClient {
        self.client.clone()
    }

    /// The placement groups this process is creating.
    pub fn groups(&self) -> &Arc<Creations> {
        &self.groups
    }

    /// Makes a call to the head on the calling thread and waits for its answer. Not for
    /// threads inside a runtime.
    pub fn call<F: Future>(&self, call: impl FnOnce(HeadClient) -> F) -> F::Output {
        self.direct.block_on(call(self.direct_client.clone()))
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

    /// As `call`, for a call that changes nothing at the head: made again while no answer
    /// comes, for as long as the head may take to come back (`reconnect::window`).
    pub fn read<T, F>(&self, call: impl Fn(HeadClient) -> F) -> Result<T, WorkerError>
    where
        F: Future<Output = Result<T, tonic::Status>>,
    {
        Ok(self.read_status(call)?)
    }

    fn read_status<T, F>(&self, call: impl Fn(HeadClient) -> F) -> Result<T, tonic::Status>
    where
        F: Future<Output = Result<T, tonic::Status>>,
    {
        self.direct.block_on(reconnect::retried(|| call(self.direct_client.clone()), reconnect::unanswered))
    }

    /// As `call`, for a call that changes something: made again only while it cannot have
    /// reached the head (its connection is refused), for as long as the head may take to
    /// come back.
    pub fn write<T, F>(&self, call: impl Fn(HeadClient) -> F) -> Result<T, tonic::Status>
    where
        F: Future<Output = Result<T, tonic::Status>>,
    {
        self.direct.block_on(reconnect::retried(|| call(self.direct_client.clone()), reconnect::never_sent))
    }

    /// As `read`, once the head has group `id`.
    pub fn read_about_group<T, F>(&self, id: &str, call: impl Fn(HeadClient) -> F) -> Result<T, WorkerError>
    where
        F: Future<Output = Result<T, tonic::Status>>,
    {
        let call = &call;
        self.read(|head| async move {
            self.groups.settled(id).await?;
            call(head).await
        })
    }

    pub fn register_actor(&self, actor: v1::NamedActor) -> Result<(), WorkerError> {
        Ok(self.write(|mut head| {
            let actor = actor.clone();
            async move { head.register_actor(actor).await.map(|_| ()) }
        })?)
    }

    pub fn get_actor(&self, name: &str, namespace: &str) -> Result<v1::NamedActor, WorkerError> {
        let request = v1::GetActorRequest { name: name.into(), namespace: namespace.into() };
        let request = &request;
        self.read(|mut head| async move { head.get_actor(request.clone()).await.map(|r| r.into_inner()) })
    }

    /// Named actors of `namespace` (of every one when empty).
    pub fn list_actors(&self, namespace: &str) -> Result<Vec<v1::NamedActor>, WorkerError> {
        let request = v1::ListActorsRequest { namespace: namespace.into() };
        let request = &request;
        self.read(|mut head| async move { head.list_actors(request.clone()).await.map(|r| r.into_inner().actors) })
    }

    /// Tells the head where this process serves the objects it owns (for the state API),
    /// to run on the core's runtime without anyone waiting: the objects are served whether
    /// or not the head hears of it.
    pub fn announce_process(
        &self,
        address: &str,
        node_id: &str,
        ip: &str,
    ) -> impl Future<Output = ()> + Send + 'static {
        let kind = if std::env::var_os("OXRAY_WORKER_ID").is_some() { "WORKER" } else { "DRIVER" };
        let info = v1::ProcessInfo {
            address: address.to_string(),
            pid: std::process::id(),
            node_id: node_id.to_string(),
            ip: ip.to_string(),
            kind: kind.to_string(),
            job_id: crate::job::current().hex_or_empty(),
        };
        let mut head = self.head();
        async move {
            if let Err(e) = head.announce_process(info).await {
                tracing::debug!("the head did not hear of this process's objects: {}", e.message());
            }
        }
    }

    /// The application metrics of this process, as they are now.
    pub fn report_metrics(&self, reporter: String, metrics: Vec<v1::MetricSample>) -> Result<(), WorkerError> {
        let request = v1::ReportEventsRequest { metrics, reporter, ..Default::default() };
        Ok(self.call(|mut head| async move { head.report_events(request).await.map(|_| ()) })?)
    }

    pub fn remove_actor(&self, name: &str, namespace: &str) -> Result<(), WorkerError> {
        let request = v1::GetActorRequest { name: name.into(), namespace: namespace.into() };
        Ok(self.write(|mut head| {
            let request = request.clone();
            async move { head.remove_actor(request).await.map(|_| ()) }
        })?)
    }

    pub fn nodes(&self) -> Result<Vec<NodeInfo>, WorkerError> {
        let reply = self
            .read_status(|mut head| async move { head.list_nodes(v1::ListNodesRequest {}).await })
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
