//! The node agent: joins this machine to a cluster and keeps it there with heartbeats,
//! rejoining on its own when the head restarts or declared it dead.

mod cluster_view;
mod demand;
pub mod detect;
mod envs;
mod gpus;
mod jobs;
mod leases;
mod logs;
pub mod memory;
mod serve_proxy;
mod usage;
mod worker_records;
mod workers;

use oxray_proto::convert::resources_to_proto;
use oxray_proto::v1;
use oxray_rpc::{connect_head_lazy, explain, HeadClient, Token};
use oxray_types::{NodeId, NodeInfo, ResourceSet};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tonic::Code;

#[derive(Debug, Clone)]
pub struct AgentConfig {
    pub head_address: String,
    pub token: Token,
    pub node_ip: String,
    pub node_name: String,
    pub is_head_node: bool,
    /// Complete amounts, detection already applied.
    pub resources: ResourceSet,
    pub labels: BTreeMap<String, String>,
    /// How long the first registration may keep retrying an unreachable head.
    pub join_timeout: Duration,
    /// Port of the agent's own service (0: any free port); it listens on all interfaces.
    pub port: u16,
    /// Job logs go to `logs/`, runtime environments to `runtime_resources/`.
    pub session_dir: PathBuf,
    pub memory_monitor: memory::MonitorConfig,
}

#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("{0}")]
    Refused(String),
    #[error("{0}")]
    Unreachable(String),
    #[error(transparent)]
    Rpc(#[from] oxray_rpc::RpcError),
    #[error("cannot listen on port {port} for the agent service: {reason}")]
    Bind { port: u16, reason: String },
}

/// An agent whose node is registered with the head.
pub struct JoinedAgent {
    config: AgentConfig,
    client: HeadClient,
    node: NodeInfo,
    heartbeat_interval: Duration,
    listener: Option<TcpListener>,
    runner: Arc<jobs::Runner>,
    pool: Arc<workers::WorkerPool>,
    /// The node id job reports carry; it changes when the node rejoins under a new id.
    node_id: Arc<Mutex<String>>,
    /// The head's HTTP API, for the jobs' environment.
    dashboard_url: Arc<Mutex<String>>,
    /// Work waiting for room, reported with each heartbeat.
    demand: Arc<demand::Demand>,
}

fn describe(config: &AgentConfig, node_id: NodeId, agent_port: u16) -> NodeInfo {
    let mut node = NodeInfo::joining(node_id, &config.node_ip, &config.node_name, config.resources.clone());
    node.labels = config.labels.clone();
    node.labels.insert("ray.io/node_id".into(), node.node_id.hex());
    node.is_head_node = config.is_head_node;
    node.agent_port = agent_port;
    node
}

fn is_refusal(code: Code) -> bool {
    matches!(code, Code::Unauthenticated | Code::PermissionDenied | Code::InvalidArgument)
}

use oxray_object_store::dirs as store_dirs;
pub use oxray_object_store::dirs::STORE_NODE_FILE;

/// Registers this machine. A refused token fails at once; an unreachable head is retried
/// until the join timeout.
pub async fn join(config: AgentConfig) -> Result<JoinedAgent, AgentError> {
    let client = connect_head_lazy(&config.head_address, &config.token, Duration::from_secs(5))?;
    let listener = TcpListener::bind(("0.0.0.0", config.port))
        .await
        .map_err(|e| AgentError::Bind { port: config.port, reason: e.to_string() })?;
    let port = listener.local_addr().map(|a| a.port()).unwrap_or(0);
    let node = describe(&config, NodeId::random(), port);
    let node_id = Arc::new(Mutex::new(node.node_id.hex()));
    let dashboard_url = Arc::new(Mutex::new(String::new()));
    let context = jobs::JobContext {
        head_address: config.head_address.clone(),
        token: config.token.as_str().to_string(),
        node_id: node_id.clone(),
        dashboard_url: dashboard_url.clone(),
    };
    let cache = Arc::new(envs::EnvCache::new(config.session_dir.join("runtime_resources"), client.clone()));
    let gpus = config.resources.get(oxray_types::resource_names::GPU) as u32;
    let gpus: gpus::SharedGpus = Arc::new(Mutex::new(gpus::GpuPool::new(gpus)));
    let pool = Arc::new(workers::WorkerPool::new(
        config.resources.clone(),
        workers::WorkerEnv {
            head_address: config.head_address.clone(),
            token: config.token.as_str().to_string(),
            node_id: node_id.clone(),
            logs: config.session_dir.join("logs"),
            node_ip: config.node_ip.clone(),
            agent_address: Arc::new(Mutex::new(format!("127.0.0.1:{port}"))),
        },
        cache.clone(),
        gpus.clone(),
        Arc::new(oxray_rpc::OwnerClients::new(config.token.clone())),
    ));
    workers::reap_periodically(&pool);
    pool.watch_memory(config.memory_monitor);
    let runner = Arc::new(jobs::Runner::new(
        config.session_dir.join("logs"),
        cache,
        jobs::Reporter::start(client.clone()),
        context,
        gpus,
    ));
    let mut agent = JoinedAgent {
        config,
        client,
        node,
        heartbeat_interval: Duration::from_secs(1),
        listener: Some(listener),
        runner,
        pool,
        node_id,
        dashboard_url,
        demand: Arc::default(),
    };
    let deadline = Instant::now() + agent.config.join_timeout;
    loop {
        match agent.register().await {
            Ok(()) => {
                tracing::info!(node_id = %agent.node.node_id, head = %agent.config.head_address, "joined the cluster");
                return Ok(agent);
            }
            Err(status) if is_refusal(status.code()) => {
                return Err(AgentError::Refused(explain(&agent.config.head_address, &status)))
            }
            Err(status) if Instant::now() >= deadline => {
                return Err(AgentError::Unreachable(explain(&agent.config.head_address, &status)))
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

impl JoinedAgent {
    pub fn node_id(&self) -> &NodeId {
        &self.node.node_id
    }

    pub fn dashboard_url(&self) -> String {
        self.dashboard_url.lock().expect("dashboard url lock").clone()
    }

    pub fn node_ip(&self) -> &str {
        &self.node.node_ip
    }

    async fn register(&mut self) -> Result<(), tonic::Status> {
        let request =
            v1::RegisterNodeRequest { node: Some(v1::Node::from(&self.node)), version: oxray_config::VERSION.into() };
        let reply = self.client.register_node(request).await?.into_inner();
        if reply.heartbeat_interval_ms > 0 {
            self.heartbeat_interval = Duration::from_millis(reply.heartbeat_interval_ms);
        }
        *self.dashboard_url.lock().expect("dashboard url lock") = reply.dashboard_url;
        self.demand.set_autoscaling(reply.autoscaling);
        self.mark_object_store();
        Ok(())
    }

    /// Creates the node's object store directories, first removing those of agents of
    /// this machine killed before they could.
    fn mark_object_store(&self) {
        store_dirs::sweep();
        if let Err(e) = store_dirs::mark(self.node.agent_port, &self.node.node_id.hex()) {
            tracing::warn!(port = self.node.agent_port, "no shared-memory object store on this node: {e}");
        }
    }

    fn remove_object_store(&self) {
        store_dirs::remove(self.node.agent_port);
    }

    /// Serves the agent service and heartbeats until `shutdown`, then stops its jobs and
    /// leaves the cluster.
    pub async fn run(mut self, shutdown: CancellationToken) {
        let listener = self.listener.take().expect("run is called once");
        let service = oxray_proto::v1::agent_service_server::AgentServiceServer::with_interceptor(
            jobs::AgentService::new(self.runner.clone(), self.pool.clone(), self.config.session_dir.join("logs")),
            oxray_rpc::ServerAuth(self.config.token.clone()),
        );
        let view = Arc::new(cluster_view::SharedView::default());
        tokio::spawn(cluster_view::follow(self.client.clone(), view.clone(), shutdown.clone()));
        let local = leases::LocalNode {
            node_id: self.node_id.clone(),
            agent: self.node.agent_address(),
            labels: self.config.labels.clone(),
        };
        let leases = oxray_proto::v1::lease_service_server::LeaseServiceServer::with_interceptor(
            leases::LeaseService::new(self.pool.clone(), view, local, self.demand.clone()),
            oxray_rpc::ServerAuth(self.config.token.clone()),
        );
        let server = tokio::spawn(oxray_rpc::serve_until(
            oxray_rpc::server()
                .add_service(service)
                .add_service(leases)
                .serve_with_incoming_shutdown(oxray_rpc::incoming(listener), shutdown.clone().cancelled_owned()),
            shutdown.clone(),
        ));
        if !self.config.is_head_node {
            // The head node's proxy runs in the head.
            let proxy = serve_proxy::NodeProxy {
                client: self.client.clone(),
                token: self.config.token.clone(),
                head_address: self.config.head_address.clone(),
                agent_address: self.node.agent_address(),
                node_ip: self.node.node_ip.clone(),
                node_id: self.node_id.clone(),
                failed: Default::default(),
            };
            tokio::spawn(proxy.run(shutdown.clone()));
        }
        let pool = self.pool.clone();
        let has_gpus = self.config.resources.get(oxray_types::resource_names::GPU) > 0.0;
        let store = store_dirs::object_store_dirs(self.node.agent_port);
        let usage = usage::sample_periodically(store, has_gpus, move || pool.leased(), shutdown.clone());
        self.heartbeat(&shutdown, &usage).await;
        self.runner.stop_all().await;
        self.remove_object_store();
        if let Ok(Err(e)) = server.await {
            tracing::error!("the agent service failed: {e}");
        }
        self.leave().await;
    }

    /// Reports every interval, and soon after the node's free resources change (at most
    /// every `EARLY_REPORT_GAP`), so SPREAD's view of which nodes have room stays fresh.
    async fn heartbeat(&mut self, shutdown: &CancellationToken, usage: &usage::Latest) {
        const EARLY_REPORT_GAP: Duration = Duration::from_millis(100);
        let mut head_reachable = true;
        let mut last = tokio::time::Instant::now();
        loop {
            let pool = self.pool.clone();
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = tokio::time::sleep_until(last + self.heartbeat_interval) => {}
                _ = pool.changed() => {
                    // A burst of lease changes is one report.
                    tokio::time::sleep_until((last + EARLY_REPORT_GAP).max(tokio::time::Instant::now() + EARLY_REPORT_GAP / 5)).await;
                }
            }
            last = tokio::time::Instant::now();
            let request = v1::HeartbeatRequest {
                node_id: self.node.node_id.hex(),
                resources_available: resources_to_proto(&self.pool.available()),
                usage: usage.lock().expect("usage lock").clone(),
                demand: self.demand.current(std::time::Instant::now()),
                busy: self.pool.leased() > 0 || self.runner.any_running(),
            };
            let outcome = match self.client.heartbeat(request).await {
                Ok(reply) => {
                    let reply = reply.into_inner();
                    self.demand.set_autoscaling(reply.autoscaling);
                    self.follow(reply.verdict()).await
                }
                Err(status) => Err(status),
            };
            match outcome {
                Ok(()) if !head_reachable => {
                    tracing::info!("head is back; node {} is reporting again", self.node.node_id);
                    head_reachable = true;
                }
                Ok(()) => {}
                Err(status) if head_reachable => {
                    tracing::warn!("{}; retrying", explain(&self.config.head_address, &status));
                    head_reachable = false;
                }
                Err(_) => {}
            }
        }
    }

    async fn follow(&mut self, verdict: v1::HeartbeatVerdict) -> Result<(), tonic::Status> {
        match verdict {
            v1::HeartbeatVerdict::UnknownNode => {
                tracing::warn!("the head has no record of node {}; registering again", self.node.node_id);
                self.register().await
            }
            v1::HeartbeatVerdict::NodeDead => {
                let old = self.node.node_id.clone();
                // The new id first: a lease granted from now on is the new node's, and the
                // ones ended below are all the old one's.
                self.node = describe(&self.config, NodeId::random(), self.node.agent_port);
                *self.node_id.lock().expect("node id lock") = self.node.node_id.hex();
                tracing::warn!(
                    "the head declared node {old} dead; ending its workers and jobs, then rejoining as node {}",
                    self.node.node_id
                );
                // Its tasks were retried and its actors restarted elsewhere, its jobs failed:
                // none may go on beside them.
                self.pool.end_all("the head declared its node dead (it did not report for too long)");
                self.runner.stop_all().await;
                self.register().await
            }
            _ => Ok(()),
        }
    }

    async fn leave(&mut self) {
        let request = v1::UnregisterNodeRequest { node_id: self.node.node_id.hex(), reason: "node stopped".into() };
        match tokio::time::timeout(Duration::from_secs(2), self.client.unregister_node(request)).await {
            Ok(Ok(_)) => tracing::info!("node {} left the cluster", self.node.node_id),
            _ => tracing::warn!("could not tell the head that node {} is leaving", self.node.node_id),
        }
    }
}
