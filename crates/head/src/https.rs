//! The dashboard's port inside TLS: handshakes run side by side, so that a slow or silent
//! client holds up no other, and only finished ones reach the HTTP server.

use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::server::TlsStream;

pub struct Listener {
    handshaken: mpsc::UnboundedReceiver<(TlsStream<TcpStream>, SocketAddr)>,
    local: std::io::Result<SocketAddr>,
}

impl Listener {
    /// Accepts on `tcp` until dropped.
    pub fn new(tcp: TcpListener, config: Arc<rustls::ServerConfig>) -> Self {
        let local = tcp.local_addr();
        let acceptor = tokio_rustls::TlsAcceptor::from(config);
        let (done, handshaken) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            loop {
                let accepted = tokio::select! {
                    _ = done.closed() => return,
                    accepted = tcp.accept() => accepted,
                };
                let (conn, peer) = match accepted {
                    Ok(accepted) => accepted,
                    Err(e) => {
                        // Out of descriptors, say: give it a moment rather than spin.
                        tracing::warn!("accepting a dashboard connection failed: {e}");
                        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let (acceptor, done) = (acceptor.clone(), done.clone());
                tokio::spawn(async move {
                    let handshake = tokio::time::timeout(oxray_rpc::tls::HANDSHAKE_TIMEOUT, acceptor.accept(conn));
                    match handshake.await {
                        Ok(Ok(stream)) => drop(done.send((stream, peer))),
                        Ok(Err(e)) => tracing::debug!("a dashboard client at {peer} failed its TLS handshake: {e}"),
                        Err(_) => tracing::debug!("a dashboard client at {peer} made no TLS handshake"),
                    }
                });
            }
        });
        Self { handshaken, local }
    }
}

impl axum::serve::Listener for Listener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.handshaken.recv().await {
            Some(conn) => conn,
            // The accepting task ends only once this listener is dropped.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.local.as_ref().map(|a| *a).map_err(|e| std::io::Error::new(e.kind(), e.to_string()))
    }
}
