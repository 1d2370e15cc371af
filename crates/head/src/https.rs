//! The dashboard's port inside TLS: only connections through their handshakes reach the
//! HTTP server.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::server::TlsStream;
use tokio_stream::{Stream, StreamExt};

type Ready = (TlsStream<TcpStream>, SocketAddr);

pub struct Listener {
    handshaken: Pin<Box<dyn Stream<Item = Ready> + Send>>,
    local: std::io::Result<SocketAddr>,
}

impl Listener {
    /// Accepts on `tcp` until dropped.
    pub fn new(tcp: TcpListener, config: Arc<rustls::ServerConfig>) -> Self {
        let local = tcp.local_addr();
        let acceptor = tokio_rustls::TlsAcceptor::from(config);
        let accepted = futures_util::stream::unfold(tcp, |tcp| async move { Some((tcp.accept().await, tcp)) });
        let handshaken = oxray_rpc::tls::handshaken(accepted, move |(conn, peer): (TcpStream, SocketAddr)| {
            let handshake = tokio::time::timeout(oxray_rpc::tls::HANDSHAKE_TIMEOUT, acceptor.accept(conn));
            async move {
                match handshake.await {
                    Ok(Ok(stream)) => Some((stream, peer)),
                    Ok(Err(e)) => {
                        tracing::debug!("a dashboard client at {peer} failed its TLS handshake: {e}");
                        None
                    }
                    Err(_) => {
                        tracing::debug!("a dashboard client at {peer} made no TLS handshake");
                        None
                    }
                }
            }
        });
        Self { handshaken: Box::pin(handshaken), local }
    }
}

impl axum::serve::Listener for Listener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.handshaken.next().await {
            Some(conn) => conn,
            // Accepting ends only once this listener is dropped.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.local.as_ref().map(|a| *a).map_err(|e| std::io::Error::new(e.kind(), e.to_string()))
    }
}
