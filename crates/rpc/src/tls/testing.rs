//! Certificates and TLS connections for tests.

use super::*;
use crate::socket::{Socket, SocketStream};
use std::path::Path;
use tokio_rustls::TlsStream;

/// A certificate authority that signs certificates for names.
pub struct Authority {
    cert: rcgen::Certificate,
    key: rcgen::KeyPair,
}

impl Authority {
    pub fn new() -> Self {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let key = rcgen::KeyPair::generate().unwrap();
        Self { cert: params.self_signed(&key).unwrap(), key }
    }

    /// A node's files in `dir`: its certificate for `name`, its key, and this authority.
    pub fn node(&self, dir: &Path, name: &str) -> Files {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec![name.to_string()])
            .unwrap()
            .signed_by(&key, &self.cert, &self.key)
            .unwrap();
        let files = Files { cert: dir.join("node.crt"), key: dir.join("node.key"), ca: dir.join("ca.crt") };
        std::fs::write(&files.cert, cert.pem()).unwrap();
        std::fs::write(&files.key, key.serialize_pem()).unwrap();
        std::fs::write(&files.ca, self.cert.pem()).unwrap();
        files
    }
}

pub fn node(authority: &Authority, name: &str) -> (tempfile::TempDir, Tls) {
    let dir = tempfile::tempdir().unwrap();
    let tls = Tls::load(&authority.node(dir.path(), name)).unwrap();
    (dir, tls)
}

/// Two ends of a TCP connection on loopback.
pub async fn tcp_pair() -> (SocketStream, SocketStream) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let dialing = tokio::net::TcpStream::connect(listener.local_addr().unwrap());
    let (dialed, accepted) = tokio::join!(dialing, listener.accept());
    let wrap = |s| SocketStream::new(Socket::from_tokio_tcp(s).unwrap());
    (wrap(dialed.unwrap()), wrap(accepted.unwrap().0))
}

/// Both sides of a handshake: the client dialing `host` for `carries`.
pub async fn handshake(
    server: &Tls,
    client: &Tls,
    host: &str,
    carries: Carries,
) -> (io::Result<TlsStream<SocketStream>>, io::Result<TlsStream<SocketStream>>) {
    let (dialed, accepted) = tcp_pair().await;
    tokio::join!(client.connect(host, carries, dialed), server.accept(accepted))
}

/// Bytes written on the dialed side arrive on the accepted one.
pub async fn ping(dialed: &mut TlsStream<SocketStream>, accepted: &mut TlsStream<SocketStream>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    dialed.write_all(b"ping").await.unwrap();
    dialed.flush().await.unwrap();
    let mut got = [0u8; 4];
    accepted.read_exact(&mut got).await.unwrap();
    assert_eq!(&got, b"ping");
}
