//! Serve: model serving in the head. The controller keeps each application's deployments at
//! their replicas (Python actors running the user's class), the HTTP proxy routes requests
//! to them over the core's direct actor calls, and the REST API on the dashboard port
//! deploys, reports and deletes. Only replicas run Python.

mod api;
pub mod autoscale;
pub mod builds;
pub mod controller;
pub mod core_calls;
pub mod declarative;
pub mod handle_queues;
pub mod host;
pub mod plan;
pub mod proxy;
pub mod ray_shape;
pub mod routes;
pub mod routing;
pub mod spec;
pub mod wire;

pub use controller::{Controller, DeployError};
pub use host::{ActorHost, CallError, NewReplica, Placed, ReplicaCalls, StateStore};
pub use spec::{AppSpec, DeploymentSpec, HttpOptions};

use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

pub type NodeOfProxy = Box<dyn Fn() -> ray_shape::ProxyNode + Send + Sync>;

struct RunningProxy {
    stop: CancellationToken,
    options: spec::HttpOptions,
}

/// The controller and its proxy, as the head runs them.
pub struct Serve {
    controller: Arc<Controller>,
    declarative: Arc<builds::Declarative>,
    host: Arc<dyn ActorHost>,
    /// Where the proxy runs (the head's node, once it joined), for reports.
    node: NodeOfProxy,
    /// Held while the proxy is started or stopped, and across a deploy, so that a deploy
    /// never lands on a proxy being stopped.
    proxy: tokio::sync::Mutex<Option<RunningProxy>>,
    /// The proxies of other nodes, by node id: their address and last report.
    node_proxies: std::sync::Mutex<std::collections::HashMap<String, (String, std::time::Instant)>>,
    shutdown: CancellationToken,
}

/// A node's proxy not heard from for this long is not listed.
const PROXY_REPORT_TTL: Duration = Duration::from_secs(10);

impl Serve {
    pub fn open(
        host: Arc<dyn ActorHost>,
        store: Arc<dyn StateStore>,
        node: NodeOfProxy,
        shutdown: CancellationToken,
    ) -> Result<Arc<Self>, String> {
        let controller = Controller::open(host.clone(), store.clone())?;
        let declarative = builds::Declarative::new(controller.clone(), host.clone(), store);
        Ok(Arc::new(Self {
            controller,
            declarative,
            host,
            node,
            proxy: tokio::sync::Mutex::new(None),
            node_proxies: Default::default(),
            shutdown,
        }))
    }

    pub fn controller(&self) -> &Arc<Controller> {
        &self.controller
    }

    /// The REST API, for the dashboard port (behind its token check).
    pub fn router(self: &Arc<Self>) -> oxray_http::Documented {
        api::router(self.clone())
    }

    /// Runs the controller; keeps the proxy up while there are applications (also those
    /// recovered after a restart) and stops it once the last one is gone.
    pub async fn run(self: Arc<Self>) {
        tokio::spawn(self.controller.clone().run(self.shutdown.clone()));
        self.declarative.resume();
        loop {
            {
                let mut proxy = self.proxy.lock().await;
                // A declarative app still building keeps the proxy its config started.
                let idle = !self.declarative.building() && self.controller.clear_http_if_empty();
                if idle || self.controller.proxy_location() == routing::ProxyLocation::Disabled {
                    if let Some(running) = proxy.take() {
                        running.stop.cancel();
                    }
                } else if proxy.is_none() {
                    if let Some(options) = self.controller.http_options() {
                        if let Err(e) = self.start_proxy(&mut proxy, &options).await {
                            tracing::error!("{e}");
                        }
                    }
                }
            }
            tokio::select! {
                _ = self.shutdown.cancelled() => return,
                _ = tokio::time::sleep(Duration::from_millis(500)) => {}
            }
        }
    }

    async fn start_proxy(&self, slot: &mut Option<RunningProxy>, options: &HttpOptions) -> Result<(), String> {
        let stop = self.shutdown.child_token();
        proxy::Proxy::start(self.controller.clone(), self.host.clone(), options, stop.clone()).await?;
        *slot = Some(RunningProxy { stop, options: options.clone() });
        Ok(())
    }

    /// Applies a declarative config (a PUT of Ray's `ServeDeploySchema`): the proxy starts
    /// with its HTTP options if none runs; its applications build in the background.
    pub async fn apply_config(&self, body: &[u8]) -> Result<(), String> {
        let mut proxy = self.proxy.lock().await;
        let config = self.declarative.apply(body)?;
        let options = self.controller.http_options_or(&config.http_options);
        self.ensure_proxy(&mut proxy, &config.http_options, &options).await
    }

    /// Starts the proxy with `options` unless one runs; one running with other options than
    /// `wanted` keeps them, as in Ray.
    async fn ensure_proxy(
        &self,
        slot: &mut Option<RunningProxy>,
        wanted: &HttpOptions,
        options: &HttpOptions,
    ) -> Result<(), String> {
        match slot.as_ref() {
            None if self.controller.proxy_location() == routing::ProxyLocation::Disabled => Ok(()),
            Some(running) if &running.options != wanted => {
                tracing::warn!(
                    "Serve is running with other HTTP options ({}:{}); the new ones are ignored",
                    running.options.host,
                    running.options.port
                );
                Ok(())
            }
            Some(_) => Ok(()),
            None => self.start_proxy(slot, options).await,
        }
    }

    /// Deletes every application (and the declarative config) and waits until their
    /// replicas are gone, as Ray's `serve.shutdown()` does.
    pub async fn shutdown_all(&self, patience: Duration) {
        self.declarative.clear();
        self.controller.delete_all();
        let deadline = tokio::time::Instant::now() + patience;
        while !self.controller.is_empty() && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The routing table for the proxies of other nodes.
    pub fn table(&self) -> routing::Table {
        routing::Table { head_ip: (self.node)().node_ip, ..self.controller.table() }
    }

    /// A node's proxy reports that it runs (or stopped) and what it holds waiting.
    pub fn report_node_proxy(&self, node_id: &str, node_ip: &str, running: bool, queued: &[(String, String, i64)]) {
        self.controller.report_handle_queues(&format!("proxy:{node_id}"), queued);
        let mut proxies = self.node_proxies.lock().expect("proxies lock");
        proxies.retain(|_, (_, seen)| seen.elapsed() < PROXY_REPORT_TTL);
        if running {
            proxies.insert(node_id.to_string(), (node_ip.to_string(), std::time::Instant::now()));
        } else {
            proxies.remove(node_id);
        }
    }

    /// Every proxy that runs: the head's, then those of other nodes heard from lately.
    fn proxies(&self) -> Vec<ray_shape::ProxyNode> {
        let head = (self.node)();
        let mut proxies: Vec<ray_shape::ProxyNode> = self
            .node_proxies
            .lock()
            .expect("proxies lock")
            .iter()
            .filter(|(id, (_, seen))| **id != head.node_id && seen.elapsed() < PROXY_REPORT_TTL)
            .map(|(id, (ip, _))| ray_shape::ProxyNode { node_id: id.clone(), node_ip: ip.clone() })
            .collect();
        proxies.sort_by(|a, b| a.node_id.cmp(&b.node_id));
        proxies.insert(0, head);
        proxies
    }

    /// Ray's `ServeInstanceDetails` for `GET /api/serve/applications/`.
    pub fn ray_details(&self, source: ray_shape::Source) -> serde_json::Value {
        let proxies = match self.controller.proxy_location() {
            routing::ProxyLocation::Disabled => Vec::new(),
            _ => self.proxies(),
        };
        let location = self.controller.proxy_location().as_str();
        ray_shape::instance_details(&self.controller.details(), &self.declarative.view(), source, &proxies, location)
    }

    /// Starts Serve's proxies with no application (`serve start`); answers the HTTP options
    /// in force.
    pub async fn start_http(
        &self,
        wanted: &HttpOptions,
        location: Option<routing::ProxyLocation>,
    ) -> Result<HttpOptions, String> {
        let mut proxy = self.proxy.lock().await;
        let options = self.controller.start_http(wanted, location);
        self.ensure_proxy(&mut proxy, wanted, &options).await?;
        Ok(options)
    }

    /// Deploys (or updates) an application and makes sure the proxy runs.
    pub async fn deploy(&self, name: &str, spec: AppSpec) -> Result<(), DeployError> {
        let mut proxy = self.proxy.lock().await;
        let options = self.controller.deploy(name, spec)?;
        self.ensure_proxy(&mut proxy, &options, &options).await.map_err(DeployError::Proxy)
    }
}
