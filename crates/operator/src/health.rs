//! `/healthz` and `/metrics` for the operator's probes and Prometheus.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::routing::get;
use axum::Router;
use tokio::task::JoinHandle;

use crate::metrics::Metrics;

pub async fn serve(addr: SocketAddr, metrics: Arc<Metrics>) -> anyhow::Result<JoinHandle<()>> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {addr} for health checks: {e}"))?;
    let app = Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/metrics", get(move || async move { metrics.render() }));
    Ok(tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!(error = %e, "health endpoint stopped");
        }
    }))
}
