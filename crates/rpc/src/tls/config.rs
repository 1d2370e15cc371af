//! A process's TLS setup, as a server and as a client, from its certificate, key and the
//! authority it trusts.

use super::{Carries, Files, HANDSHAKE_TIMEOUT};
use crate::socket::SocketStream;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use std::io;
use std::path::Path;
use std::sync::Arc;
use tokio_rustls::{TlsAcceptor, TlsConnector, TlsStream};

/// What a setup is made of.
pub(crate) struct Material {
    pub certs: Vec<CertificateDer<'static>>,
    pub key: PrivateKeyDer<'static>,
    pub roots: rustls::RootCertStore,
    /// The name every server is checked for, whatever host was dialed: the certificates of a
    /// cluster whose authority comes from its token name no host (see `authority`).
    pub server_name: Option<ServerName<'static>>,
    /// Whether the dashboard serves https with this certificate.
    pub https: bool,
}

pub struct Tls {
    acceptor: TlsAcceptor,
    grpc: TlsConnector,
    tasks: TlsConnector,
    http: Option<Arc<rustls::ServerConfig>>,
    server_name: Option<ServerName<'static>>,
}

fn read_certs(path: &Path, what: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs: Vec<_> = CertificateDer::pem_file_iter(path)
        .and_then(|certs| certs.collect::<Result<_, _>>())
        .map_err(|e| format!("cannot read the {what} {}: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!("the {what} {} holds no PEM certificate", path.display()));
    }
    Ok(certs)
}

impl Tls {
    /// From PEM files given by the user: servers are checked for the host dialed, and the
    /// dashboard serves https.
    pub fn load(files: &Files) -> Result<Self, String> {
        let certs = read_certs(&files.cert, "certificate")?;
        let key = PrivateKeyDer::from_pem_file(&files.key)
            .map_err(|e| format!("cannot read the private key {}: {e}", files.key.display()))?;
        let mut roots = rustls::RootCertStore::empty();
        for ca in read_certs(&files.ca, "certificate authority")? {
            roots.add(ca).map_err(|e| format!("the authority {} is not usable: {e}", files.ca.display()))?;
        }
        let material = Material { certs, key, roots, server_name: None, https: true };
        Self::build(material).map_err(|e| {
            format!(
                "the certificate {} and key {} with the authority {} do not make a TLS setup: {e}",
                files.cert.display(),
                files.key.display(),
                files.ca.display()
            )
        })
    }

    pub(crate) fn build(material: Material) -> Result<Self, String> {
        let Material { certs, key, roots, server_name, https } = material;
        let roots = Arc::new(roots);
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let bad = |e: rustls::Error| e.to_string();

        let peers = rustls::server::WebPkiClientVerifier::builder_with_provider(roots.clone(), provider.clone())
            .build()
            .map_err(|e| e.to_string())?;
        let mut server = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(bad)?
            .with_client_cert_verifier(peers)
            .with_single_cert(certs.clone(), key.clone_key())
            .map_err(bad)?;
        server.alpn_protocols = vec![Carries::Grpc.alpn().to_vec(), Carries::Tasks.alpn().to_vec()];

        // Browsers and job clients show no certificate: the cluster token guards the API.
        let http = if https {
            let mut http = rustls::ServerConfig::builder_with_provider(provider.clone())
                .with_safe_default_protocol_versions()
                .map_err(bad)?
                .with_no_client_auth()
                .with_single_cert(certs.clone(), key.clone_key())
                .map_err(bad)?;
            http.alpn_protocols = vec![b"http/1.1".to_vec()];
            Some(Arc::new(http))
        } else {
            None
        };

        let client = |carries: Carries| -> Result<TlsConnector, String> {
            let mut config = rustls::ClientConfig::builder_with_provider(provider.clone())
                .with_safe_default_protocol_versions()
                .map_err(bad)?
                .with_root_certificates(roots.clone())
                .with_client_auth_cert(certs.clone(), key.clone_key())
                .map_err(bad)?;
            config.alpn_protocols = vec![carries.alpn().to_vec()];
            Ok(TlsConnector::from(Arc::new(config)))
        };
        Ok(Self {
            acceptor: TlsAcceptor::from(Arc::new(server)),
            grpc: client(Carries::Grpc)?,
            tasks: client(Carries::Tasks)?,
            http,
            server_name,
        })
    }

    /// The server side of a connection's handshake.
    pub async fn accept(&self, io: SocketStream) -> io::Result<TlsStream<SocketStream>> {
        let accepting = self.acceptor.accept(io);
        let stream = tokio::time::timeout(HANDSHAKE_TIMEOUT, accepting).await.map_err(|_| timed_out())??;
        Ok(stream.into())
    }

    /// The client side, checking that the server's certificate names `host` (or the
    /// cluster's one name).
    pub async fn connect(&self, host: &str, carries: Carries, io: SocketStream) -> io::Result<TlsStream<SocketStream>> {
        let name = match &self.server_name {
            Some(name) => name.clone(),
            None => ServerName::try_from(host.to_string()).map_err(|e| {
                io::Error::new(io::ErrorKind::InvalidInput, format!("{host:?} is no TLS server name: {e}"))
            })?,
        };
        let connector = match carries {
            Carries::Grpc => &self.grpc,
            Carries::Tasks => &self.tasks,
        };
        let stream =
            tokio::time::timeout(HANDSHAKE_TIMEOUT, connector.connect(name, io)).await.map_err(|_| timed_out())??;
        Ok(stream.into())
    }

    /// The dashboard's and HTTP API's server setup; `None` when the dashboard stays on
    /// plain http (a cluster whose authority no browser or job client could know).
    pub fn http_server(&self) -> Option<Arc<rustls::ServerConfig>> {
        self.http.clone()
    }
}

fn timed_out() -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, format!("no TLS handshake in {HANDSHAKE_TIMEOUT:?}"))
}
