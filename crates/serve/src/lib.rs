//! Serve: model serving in the head. The controller keeps each application's deployments at
//! their replicas (Python actors running the user's class), the HTTP proxy routes requests
//! to them over the core's direct actor calls, and the REST API on the dashboard port
//! deploys, reports and deletes. Only replicas run Python.

mod api;
pub mod controller;
pub mod host;
pub mod plan;
pub mod proxy;
pub mod routes;
pub mod spec;
pub mod wire;

pub use controller::{Controller, DeployError};
pub use host::{ActorHost, CallError, NewReplica, Placed, StateStore};
pub use spec::{AppSpec, DeploymentSpec, HttpOptions};

use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

struct RunningProxy {
    stop: CancellationToken,
    options: spec::HttpOptions,
}

/// The controller and its proxy, as the head runs them.
pub struct Serve {
    controller: Arc<Controller>,
    host: Arc<dyn ActorHost>,
    /// Held while the proxy is started or stopped, and across a deploy, so that a deploy
    /// never lands on a proxy being stopped.
    proxy: tokio::sync::Mutex<Option<RunningProxy>>,
    shutdown: CancellationToken,
}

impl Serve {
    pub fn open(
        host: Arc<dyn ActorHost>,
        store: Arc<dyn StateStore>,
        shutdown: CancellationToken,
    ) -> Result<Arc<Self>, String> {
        let controller = Controller::open(host.clone(), store)?;
        Ok(Arc::new(Self { controller, host, proxy: tokio::sync::Mutex::new(None), shutdown }))
    }

    pub fn controller(&self) -> &Arc<Controller> {
        &self.controller
    }

    /// The REST API, for the dashboard port (behind its token check).
    pub fn router(self: &Arc<Self>) -> axum::Router {
        api::router(self.clone())
    }

    /// Runs the controller; keeps the proxy up while there are applications (also those
    /// recovered after a restart) and stops it once the last one is gone.
    pub async fn run(self: Arc<Self>) {
        tokio::spawn(self.controller.clone().run(self.shutdown.clone()));
        loop {
            {
                let mut proxy = self.proxy.lock().await;
                if self.controller.clear_http_if_empty() {
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
        let listener = tokio::net::TcpListener::bind((options.host.as_str(), options.port))
            .await
            .map_err(|e| format!("the Serve HTTP proxy cannot listen on {}:{}: {e}", options.host, options.port))?;
        let stop = self.shutdown.child_token();
        let proxy = proxy::Proxy::new(self.controller.clone(), self.host.clone(), options);
        tokio::spawn(proxy.serve(listener, stop.clone()));
        tracing::info!("Serve HTTP proxy on {}:{}", options.host, options.port);
        *slot = Some(RunningProxy { stop, options: options.clone() });
        Ok(())
    }

    /// Deploys (or updates) an application and makes sure the proxy runs.
    pub async fn deploy(&self, name: &str, spec: AppSpec) -> Result<(), DeployError> {
        let mut proxy = self.proxy.lock().await;
        let options = self.controller.deploy(name, spec)?;
        match proxy.as_ref() {
            Some(running) if running.options != options => {
                tracing::warn!(
                    "Serve is running with other HTTP options ({}:{}); the new ones are ignored",
                    running.options.host,
                    running.options.port
                );
                Ok(())
            }
            Some(_) => Ok(()),
            None => self.start_proxy(&mut proxy, &options).await.map_err(DeployError::Proxy),
        }
    }
}
