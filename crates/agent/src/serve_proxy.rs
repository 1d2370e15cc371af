//! This node's Serve HTTP proxy (Ray's EveryNode): while a replica of some application runs
//! here, requests that reach this node on the Serve port go straight to replicas, with no
//! hop through the head. The routing table comes from the head's stream; the proxy keeps
//! serving from the last one it got while the head is away.

use oxray_proto::v1;
use oxray_rpc::{HeadClient, Token};
use oxray_serve::core_calls::CoreCaller;
use oxray_serve::proxy::Proxy;
use oxray_serve::routing::{Mirror, Table};
use oxray_serve::HttpOptions;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// How often a running proxy tells the head it is up, with what it holds waiting.
const REPORT_EVERY: Duration = Duration::from_secs(1);

pub struct NodeProxy {
    pub client: HeadClient,
    pub token: Token,
    pub head_address: String,
    pub agent_address: String,
    pub node_ip: String,
    pub node_id: Arc<Mutex<String>>,
    /// Why the proxy could not start, last time.
    pub failed: Mutex<Option<String>>,
}

struct Running {
    options: HttpOptions,
    stop: CancellationToken,
    served: tokio::task::JoinHandle<()>,
}

impl Running {
    /// Stops serving and waits until the port is let go (a new proxy may bind it next).
    async fn stop(self) {
        self.stop.cancel();
        if tokio::time::timeout(Duration::from_secs(5), self.served).await.is_err() {
            tracing::warn!("the Serve HTTP proxy on {}:{} is slow to stop", self.options.host, self.options.port);
        }
        tracing::info!("Serve HTTP proxy on {}:{} stopped", self.options.host, self.options.port);
    }
}

impl NodeProxy {
    fn node_id(&self) -> String {
        self.node_id.lock().expect("node id lock").clone()
    }

    pub async fn run(self, shutdown: CancellationToken) {
        let mirror = Arc::new(Mirror::default());
        let mut caller: Option<Arc<CoreCaller>> = None;
        let mut running: Option<Running> = None;
        let mut routes = None;
        let mut report = tokio::time::interval(REPORT_EVERY);
        loop {
            if routes.is_none() {
                match self.client.clone().watch_serve_routes(v1::WatchServeRoutesRequest {}).await {
                    Ok(stream) => routes = Some(stream.into_inner()),
                    Err(e) => tracing::debug!("cannot follow Serve's routes yet: {e}"),
                }
            }
            tokio::select! {
                _ = shutdown.cancelled() => break,
                item = next(&mut routes) => match item {
                    Some(routes) => match serde_json::from_slice::<Table>(&routes.table) {
                        Ok(table) => mirror.set(table),
                        Err(e) => tracing::error!("the head sent a Serve routing table this agent cannot read: {e}"),
                    },
                    // The head went away: serve on from the last table, follow again later.
                    None => {
                        routes = None;
                        tokio::select! {
                            _ = shutdown.cancelled() => break,
                            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                        }
                    }
                },
                _ = report.tick() => {
                    if running.is_some() {
                        self.report(true, mirror.queued()).await;
                    }
                }
            }
            let table = mirror.table();
            let wanted = if table.wants_proxy_on(&self.node_id(), &self.node_ip) { table.http } else { None };
            running = self.reconcile(running, wanted, &mirror, &mut caller, &shutdown).await;
        }
        if let Some(r) = running {
            r.stop().await;
            self.report(false, Vec::new()).await;
        }
    }

    /// Starts, restarts (other options) or stops the proxy as the table asks.
    async fn reconcile(
        &self,
        running: Option<Running>,
        wanted: Option<HttpOptions>,
        mirror: &Arc<Mirror>,
        caller: &mut Option<Arc<CoreCaller>>,
        shutdown: &CancellationToken,
    ) -> Option<Running> {
        if let Some(r) = running {
            if wanted.as_ref() == Some(&r.options) {
                return Some(r);
            }
            r.stop().await;
            if wanted.is_none() {
                self.report(false, Vec::new()).await;
            }
        }
        let options = wanted?;
        match self.start(&options, mirror, caller, shutdown).await {
            Ok((stop, served)) => {
                *self.failed.lock().expect("proxy error lock") = None;
                self.report(true, Vec::new()).await;
                Some(Running { options, stop, served })
            }
            Err(e) => {
                // Tried again at the next change or report tick; said once.
                let mut failed = self.failed.lock().expect("proxy error lock");
                if failed.as_deref() != Some(e.as_str()) {
                    tracing::error!("{e}");
                    *failed = Some(e);
                }
                None
            }
        }
    }

    async fn start(
        &self,
        options: &HttpOptions,
        mirror: &Arc<Mirror>,
        caller: &mut Option<Arc<CoreCaller>>,
        shutdown: &CancellationToken,
    ) -> Result<(CancellationToken, tokio::task::JoinHandle<()>), String> {
        let calls = match caller {
            Some(c) => c.clone(),
            None => {
                let made = CoreCaller::alone(&self.token, &self.head_address, &self.agent_address, &self.node_ip)
                    .await
                    .map(Arc::new)
                    .map_err(|e| format!("the Serve HTTP proxy of this node cannot call replicas: {e}"))?;
                caller.insert(made).clone()
            }
        };
        let stop = shutdown.child_token();
        let served = Proxy::start(mirror.clone(), calls, options, stop.clone()).await?;
        Ok((stop, served))
    }

    async fn report(&self, running: bool, queued: Vec<(String, String, i64)>) {
        let report = v1::ServeProxyReport {
            node_id: self.node_id(),
            node_ip: self.node_ip.clone(),
            running,
            queued: queued
                .into_iter()
                .map(|(app, deployment, requests)| v1::ServeQueued { app, deployment, requests })
                .collect(),
        };
        let sent = tokio::time::timeout(Duration::from_secs(2), self.client.clone().report_serve_proxy(report)).await;
        if let Ok(Err(e)) = sent {
            tracing::debug!("cannot tell the head about this node's Serve proxy: {e}");
        }
    }
}

/// The next table, or `None` once the stream ended (or there is none: then never).
async fn next(routes: &mut Option<tonic::Streaming<v1::ServeRoutes>>) -> Option<v1::ServeRoutes> {
    match routes {
        Some(stream) => stream.message().await.ok().flatten(),
        None => std::future::pending().await,
    }
}
