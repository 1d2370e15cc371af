//! The control plane: cluster membership and health, the durable state, the control-plane
//! gRPC service and the HTTP API. Start it with [`Head::bind`], then [`BoundHead::run`].

mod actors;
mod agents;
mod demand;
mod drivers;
mod events;
mod https;
mod job_log_copies;
mod jobs;
mod membership;
mod packages;
mod placement_groups;
mod processes;
mod ray_gcs;
mod serve_host;
mod service;
mod state_rows;
mod store;
mod task_states;
mod usage_history;
mod user_metrics;

pub use jobs::JobManager;
pub use membership::{Membership, MembershipError, Verdict};
pub use store::{Store, StoreError};

use futures_util::FutureExt;
use oxray_config::session::SessionDir;
use oxray_http::{ApiState, ClusterView};
use oxray_proto::ray_rpc::internal_kv_gcs_service_server::InternalKvGcsServiceServer;
use oxray_proto::ray_rpc::node_info_gcs_service_server::NodeInfoGcsServiceServer;
use oxray_proto::v1::head_service_server::HeadServiceServer;
use oxray_rpc::{ServerAuth, Token};
use oxray_types::NodeInfo;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// How long the head waits for an agent to reserve or free a placement group's bundles.
const AGENT_CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// How long the head waits for an agent to start or stop a job's entrypoint.
const JOB_CALL_TIMEOUT: Duration = Duration::from_secs(30);
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(10);
const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(20);

#[derive(Debug, Clone)]
pub struct HeadConfig {
    /// Interface the control plane listens on (all by default, so other machines can join).
    pub bind_host: String,
    pub port: u16,
    /// The address other machines reach this head at.
    pub node_ip: String,
    pub dashboard_host: String,
    pub dashboard_port: u16,
    pub storage: PathBuf,
    pub session: SessionDir,
    pub token: Token,
    /// A node silent this long is declared dead.
    pub node_death_timeout: Duration,
    /// A dead node's record is forgotten this long after its death.
    pub dead_node_retention: Duration,
    /// How many ended task attempts and dead actors the state API keeps (newest first).
    pub max_ended_tasks: usize,
    /// Uploaded packages larger than this are refused (HTTP 413).
    pub max_package_bytes: u64,
    /// An autoscaler adds nodes for waiting work: leases no node can hold wait for one.
    pub autoscaling: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum HeadError {
    #[error("port {port} ({what}) is already in use on {host}: stop what uses it or choose another port with {flag}")]
    PortInUse { what: &'static str, host: String, port: u16, flag: &'static str },
    #[error("cannot listen on {host}:{port} ({what}): {reason}")]
    Bind { what: &'static str, host: String, port: u16, reason: String },
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("cannot use the directory {0}: {1}")]
    Dir(PathBuf, std::io::Error),
    #[error("the {0} server failed: {1}")]
    Serve(&'static str, String),
}

/// A head whose ports are bound and whose state is loaded, ready to serve.
pub struct BoundHead {
    config: HeadConfig,
    membership: Arc<Membership>,
    jobs: Arc<JobManager>,
    events: Arc<events::Events>,
    actors: Arc<actors::Actors>,
    groups: Arc<placement_groups::PlacementGroups>,
    states: Arc<task_states::TaskStates>,
    store: Arc<Store>,
    control: TcpListener,
    http: TcpListener,
}

async fn bind(what: &'static str, flag: &'static str, host: &str, port: u16) -> Result<TcpListener, HeadError> {
    TcpListener::bind((host, port)).await.map_err(|e| match e.kind() {
        std::io::ErrorKind::AddrInUse => HeadError::PortInUse { what, host: host.to_string(), port, flag },
        _ => HeadError::Bind { what, host: host.to_string(), port, reason: e.to_string() },
    })
}

pub struct Head;

impl Head {
    pub async fn bind(config: HeadConfig) -> Result<BoundHead, HeadError> {
        let control = bind("control plane", "--port", &config.bind_host, config.port).await?;
        let http = bind("dashboard", "--dashboard-port", &config.dashboard_host, config.dashboard_port).await?;
        let store = Arc::new(Store::open(&config.storage)?);
        let events = Arc::new(events::Events::open(store.clone())?);
        let membership = Arc::new(Membership::open(store.clone(), events.clone(), config.node_death_timeout)?);
        let package_dir = config.storage.with_extension("packages");
        let packages = packages::Packages::open(&package_dir).map_err(|e| HeadError::Dir(package_dir, e))?;
        let copies_dir = config.storage.with_extension("joblogs");
        let log_copies =
            job_log_copies::LogCopies::open(copies_dir.clone()).map_err(|e| HeadError::Dir(copies_dir, e))?;
        let jobs = Arc::new(JobManager::open(
            store.clone(),
            membership.clone(),
            events.clone(),
            packages,
            config.token.clone(),
            Arc::new(oxray_rpc::AgentJobClients::new(config.token.clone(), JOB_CALL_TIMEOUT)),
            log_copies,
        )?);
        jobs.set_autoscaling(config.autoscaling);
        let actors = Arc::new(actors::Actors::open(store.clone())?);
        let leases = Arc::new(oxray_rpc::LeaseClients::new(config.token.clone(), Some(AGENT_CALL_TIMEOUT)));
        let groups = placement_groups::PlacementGroups::open(membership.clone(), leases, store.clone())?;
        let states = Arc::new(task_states::TaskStates::new(config.max_ended_tasks));
        Ok(BoundHead { config, membership, jobs, events, actors, groups, states, store, control, http })
    }
}

struct View {
    membership: Arc<Membership>,
    processes: Arc<processes::Processes>,
    jobs: Arc<JobManager>,
    events: Arc<events::Events>,
    actors: Arc<actors::Actors>,
    groups: Arc<placement_groups::PlacementGroups>,
    states: Arc<task_states::TaskStates>,
    demand: Arc<demand::Demand>,
}

impl View {
    fn pending_work(&self) -> demand::Pending<'_> {
        demand::Pending { demand: &self.demand, jobs: &self.jobs, groups: &self.groups, membership: &self.membership }
    }
}

#[async_trait::async_trait]
impl ClusterView for View {
    fn nodes(&self) -> Vec<NodeInfo> {
        self.membership.snapshot()
    }
    fn pending(&self) -> Vec<String> {
        self.pending_work().lines()
    }
    fn demand(&self) -> (Vec<oxray_api_types::PendingResources>, std::collections::HashMap<String, f64>) {
        self.pending_work().shapes()
    }
    fn autoscaling(&self) -> bool {
        self.jobs.autoscaling()
    }
    fn set_autoscaling(&self, on: bool) {
        if on != self.jobs.autoscaling() {
            tracing::info!(on, "autoscaling turned {}", if on { "on" } else { "off" });
        }
        self.jobs.set_autoscaling(on);
    }
    fn events(&self, limit: usize) -> Vec<oxray_api_types::Event> {
        self.events.latest(limit)
    }
    fn state_rows(&self, kind: oxray_api_types::state::StateKind) -> (Vec<serde_json::Value>, String) {
        state_rows::of_kind(kind, &self.states, &self.actors, &self.groups)
    }
    async fn node_log(&self, node_id: &str, max_bytes: u64) -> Result<String, oxray_api_types::ApiError> {
        let id =
            node_id.parse().map_err(|e: oxray_types::IdError| oxray_api_types::ApiError::NotFound(e.to_string()))?;
        self.jobs.agent_log(&id, max_bytes).await
    }
    fn node_usage(&self) -> Vec<(String, oxray_api_types::usage::NodeUsage)> {
        let alive: std::collections::HashSet<String> =
            self.membership.snapshot().into_iter().filter(|n| n.is_alive()).map(|n| n.node_id.hex()).collect();
        self.membership.usage().latest().into_iter().filter(|(id, _)| alive.contains(id)).collect()
    }
    fn usage_history(
        &self,
        node_id: Option<&str>,
    ) -> std::collections::HashMap<String, Vec<oxray_api_types::usage::NodeUsage>> {
        self.membership.usage().history(node_id, oxray_types::now_ms())
    }
    fn user_metrics(&self) -> String {
        self.states.metrics().render()
    }
    async fn worker_rows(&self, timeout: std::time::Duration) -> (Vec<serde_json::Value>, String) {
        self.jobs.agents().worker_rows(timeout).await
    }
    async fn object_rows(&self, timeout: std::time::Duration) -> (Vec<serde_json::Value>, String) {
        self.processes.object_rows(timeout).await
    }
    async fn list_logs(&self, node: &NodeInfo, glob: &str) -> Result<Vec<String>, oxray_api_types::ApiError> {
        self.jobs.agents().list_logs(node, glob).await
    }
    async fn read_log(
        &self,
        target: &oxray_api_types::logs::LogTarget,
    ) -> Result<oxray_http::ByteStream, oxray_api_types::ApiError> {
        self.jobs.agents().read_log(target).await
    }
}

impl BoundHead {
    pub fn control_addr(&self) -> SocketAddr {
        self.control.local_addr().expect("bound listener has an address")
    }

    pub fn dashboard_addr(&self) -> SocketAddr {
        self.http.local_addr().expect("bound listener has an address")
    }

    /// Serves until `shutdown` is cancelled, then stops accepting and returns.
    pub async fn run(self, shutdown: CancellationToken) -> Result<(), HeadError> {
        let BoundHead { config, membership, jobs, events, actors, groups, states, store, control, http } = self;
        let session_name = config.session.name();
        tracing::info!(
            control = %control.local_addr().map(|a| a.to_string()).unwrap_or_default(),
            dashboard = %http.local_addr().map(|a| a.to_string()).unwrap_or_default(),
            storage = %config.storage.display(),
            "head serving"
        );

        let monitor = tokio::spawn(watch_heartbeats(
            membership.clone(),
            jobs.clone(),
            groups.clone(),
            config.dead_node_retention,
            shutdown.clone(),
        ));
        let scheduler = tokio::spawn(jobs.clone().run(shutdown.clone()));
        let placer = tokio::spawn(groups.clone().run(shutdown.clone()));
        let drivers = jobs.drivers().clone();
        let unclaimed = tokio::spawn(async move { drivers.end_unclaimed(drivers::REREGISTER_GRACE).await });

        let serve = {
            let port = control.local_addr().map(|a| a.port()).unwrap_or(config.port);
            let reach = match config.bind_host.as_str() {
                "0.0.0.0" | "::" => "127.0.0.1",
                host => host,
            };
            let host = serve_host::CoreHost::new(
                format!("{reach}:{port}"),
                config.token.clone(),
                config.node_ip.clone(),
                actors.clone(),
                membership.clone(),
            );
            let nodes = membership.clone();
            let node: oxray_serve::NodeOfProxy = Box::new(move || {
                let head = nodes.snapshot().into_iter().find(|n| n.is_head_node && n.is_alive());
                head.map(|n| oxray_serve::ray_shape::ProxyNode { node_id: n.node_id.hex(), node_ip: n.node_ip })
                    .unwrap_or_default()
            });
            oxray_serve::Serve::open(Arc::new(host), Arc::new(serve_host::ServeStore(store)), node, shutdown.clone())
                .map_err(|e| HeadError::Serve("Serve controller", e))?
        };
        let serving = tokio::spawn(serve.clone().run());

        let dashboard = config.dashboard(&http);
        let ray_gcs = ray_gcs::RayGcs::new(&session_name, &dashboard.url);
        let processes = Arc::new(processes::Processes::new(config.token.clone()));
        let demand = Arc::new(demand::Demand::default());
        let service = service::HeadService {
            demand: demand.clone(),
            membership: membership.clone(),
            jobs: jobs.clone(),
            actors: actors.clone(),
            groups: groups.clone(),
            states: states.clone(),
            session_name: session_name.clone(),
            dashboard,
            processes: processes.clone(),
            serve: serve.clone(),
            shutdown: shutdown.clone(),
        };
        // Pings find a driver whose machine went away without closing its connection: its
        // job ends with the connection.
        let (control, plain) = oxray_rpc::incoming_and_plain(control);
        let grpc = oxray_rpc::server()
            .http2_keepalive_interval(Some(KEEPALIVE_INTERVAL))
            .http2_keepalive_timeout(Some(KEEPALIVE_TIMEOUT))
            .add_service(HeadServiceServer::with_interceptor(service, ServerAuth(config.token.clone())))
            .add_service(NodeInfoGcsServiceServer::with_interceptor(ray_gcs.clone(), ServerAuth(config.token.clone())))
            .add_service(InternalKvGcsServiceServer::with_interceptor(
                ray_gcs.clone(),
                ServerAuth(config.token.clone()),
            ))
            .serve_with_incoming_shutdown(control, shutdown.clone().cancelled_owned());
        // Ray's tools speak no TLS: with it on, they reach this part of Ray's GCS (the
        // cluster id and the dashboard's address) and nothing of oxray's.
        let ray_tools = oxray_rpc::server()
            .add_service(NodeInfoGcsServiceServer::with_interceptor(ray_gcs.clone(), ServerAuth(config.token.clone())))
            .add_service(InternalKvGcsServiceServer::with_interceptor(ray_gcs, ServerAuth(config.token.clone())))
            .serve_with_incoming_shutdown(plain, shutdown.clone().cancelled_owned());

        let api = oxray_http::router(
            ApiState {
                view: Arc::new(View {
                    membership,
                    processes,
                    jobs: jobs.clone(),
                    events,
                    actors,
                    groups,
                    states,
                    demand,
                }),
                jobs: Arc::new(jobs::Api(jobs)),
                token: config.token.clone(),
                session_name,
                max_package_bytes: config.max_package_bytes,
            },
            serve.router(),
        );
        let stopped = shutdown.clone().cancelled_owned();
        let web = match oxray_rpc::tls::current().and_then(|tls| tls.http_server()) {
            Some(server) => {
                let https = https::Listener::new(http, server);
                std::future::IntoFuture::into_future(axum::serve(https, api).with_graceful_shutdown(stopped)).boxed()
            }
            None => {
                std::future::IntoFuture::into_future(axum::serve(http, api).with_graceful_shutdown(stopped)).boxed()
            }
        };

        let grpc = oxray_rpc::serve_until(grpc, shutdown.clone());
        let ray_tools = oxray_rpc::serve_until(ray_tools, shutdown.clone());
        let web = oxray_rpc::serve_until(web, shutdown.clone());
        let result = tokio::try_join!(
            async { grpc.await.map_err(|e| HeadError::Serve("control plane", e.to_string())) },
            async { ray_tools.await.map_err(|e| HeadError::Serve("control plane for Ray's tools", e.to_string())) },
            async { web.await.map_err(|e| HeadError::Serve("dashboard", e.to_string())) },
        );
        shutdown.cancel();
        let _ = monitor.await;
        let _ = scheduler.await;
        let _ = placer.await;
        let _ = serving.await;
        unclaimed.abort();
        result.map(|_| ())
    }
}

/// Where the HTTP API listens and how clients reach it.
#[derive(Debug, Clone)]
pub struct Dashboard {
    pub host: String,
    pub port: u16,
    pub url: String,
}

impl HeadConfig {
    fn dashboard(&self, http: &TcpListener) -> Dashboard {
        let port = http.local_addr().map(|a| a.port()).unwrap_or(self.dashboard_port);
        let reach = match self.dashboard_host.as_str() {
            "0.0.0.0" | "::" => self.node_ip.as_str(),
            host => host,
        };
        let https = oxray_rpc::tls::current().is_some_and(|tls| tls.http_server().is_some());
        let scheme = if https { "https" } else { "http" };
        Dashboard { host: self.dashboard_host.clone(), port, url: format!("{scheme}://{reach}:{port}") }
    }
}

/// Declares silent nodes dead; checks several times per timeout so death is noticed
/// within a small fraction of it. Forgets nodes dead for longer than `retention`.
async fn watch_heartbeats(
    membership: Arc<Membership>,
    jobs: Arc<JobManager>,
    groups: Arc<placement_groups::PlacementGroups>,
    retention: Duration,
    shutdown: CancellationToken,
) {
    let period = (membership.death_timeout() / 10).clamp(Duration::from_millis(50), Duration::from_secs(1));
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tick.tick() => {
                match membership.expire(tokio::time::Instant::now()).await {
                    Ok(dead) if !dead.is_empty() => {
                        jobs.nodes_changed();
                        groups.nodes_changed();
                    }
                    Ok(_) => {}
                    Err(e) => tracing::error!("cannot record dead nodes: {e}"),
                }
                if let Err(e) = membership.prune(oxray_types::now_ms(), retention).await {
                    tracing::error!("cannot forget long-dead nodes: {e}");
                }
            }
        }
    }
}
