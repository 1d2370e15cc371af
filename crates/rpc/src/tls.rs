//! TLS (rustls) on every connection between machines: control plane, node to node, and
//! callers to workers. Connections inside a machine go over Unix sockets, which no other
//! machine can reach, and stay plain.
//!
//! A process takes its certificate, key and certificate authority from `OXRAY_TLS_CERT`,
//! `OXRAY_TLS_KEY` and `OXRAY_TLS_CA` (paths to PEM files), which `oxray start` sets from its
//! flags for everything it starts. Both sides of a connection show a certificate signed by
//! the authority (a cluster is a closed set of machines), and a client checks that the
//! server's certificate names the host it dialed.

use crate::socket::SocketStream;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use std::io;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tokio_rustls::{TlsAcceptor, TlsConnector, TlsStream};
use tokio_stream::{Stream, StreamExt};

pub const CERT_ENV: &str = "OXRAY_TLS_CERT";
pub const KEY_ENV: &str = "OXRAY_TLS_KEY";
pub const CA_ENV: &str = "OXRAY_TLS_CA";

/// What a connection carries, named in its handshake: after it every byte is encrypted, so
/// a server cannot peek at the first one to tell task streams from gRPC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Carries {
    Grpc,
    Tasks,
}

impl Carries {
    fn alpn(self) -> &'static [u8] {
        match self {
            Carries::Grpc => b"h2",
            Carries::Tasks => b"oxray-tasks",
        }
    }

    /// What the handshake named; gRPC when it named nothing.
    pub fn of(alpn: Option<&[u8]>) -> Self {
        match alpn {
            Some(name) if name == Carries::Tasks.alpn() => Carries::Tasks,
            _ => Carries::Grpc,
        }
    }
}

/// How long a peer may take over its handshake before its connection is dropped.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Where a process's certificate, key and authority are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Files {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub ca: PathBuf,
}

impl Files {
    /// From the three variables as `var` reads them: none set (or all empty) is no TLS,
    /// some but not all is an error naming what is missing.
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<Option<Files>, String> {
        let [cert, key, ca] = [CERT_ENV, KEY_ENV, CA_ENV].map(|name| var(name).filter(|v| !v.trim().is_empty()));
        match (cert, key, ca) {
            (None, None, None) => Ok(None),
            (Some(cert), Some(key), Some(ca)) => Ok(Some(Files { cert: cert.into(), key: key.into(), ca: ca.into() })),
            (cert, key, ca) => {
                let missing: Vec<&str> = [(CERT_ENV, &cert), (KEY_ENV, &key), (CA_ENV, &ca)]
                    .into_iter()
                    .filter(|(_, v)| v.is_none())
                    .map(|(name, _)| name)
                    .collect();
                Err(format!(
                    "TLS needs a certificate, its key and the cluster's authority: {} not set",
                    missing.join(", ")
                ))
            }
        }
    }

    /// The three as environment variables, for the processes this one starts.
    pub fn to_env(&self) -> Vec<(&'static str, String)> {
        [(CERT_ENV, &self.cert), (KEY_ENV, &self.key), (CA_ENV, &self.ca)]
            .into_iter()
            .map(|(name, path)| (name, path.display().to_string()))
            .collect()
    }
}

/// A process's TLS setup, as a server and as a client.
pub struct Tls {
    acceptor: TlsAcceptor,
    grpc: TlsConnector,
    tasks: TlsConnector,
    http: Arc<rustls::ServerConfig>,
}

fn read_certs(path: &PathBuf, what: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs: Vec<_> = CertificateDer::pem_file_iter(path)
        .and_then(|certs| certs.collect::<Result<_, _>>())
        .map_err(|e| format!("cannot read the {what} {}: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!("the {what} {} holds no PEM certificate", path.display()));
    }
    Ok(certs)
}

impl Tls {
    pub fn load(files: &Files) -> Result<Self, String> {
        let certs = read_certs(&files.cert, "certificate")?;
        let key = PrivateKeyDer::from_pem_file(&files.key)
            .map_err(|e| format!("cannot read the private key {}: {e}", files.key.display()))?;
        let mut roots = rustls::RootCertStore::empty();
        for ca in read_certs(&files.ca, "certificate authority")? {
            roots.add(ca).map_err(|e| format!("the authority {} is not usable: {e}", files.ca.display()))?;
        }
        let roots = Arc::new(roots);
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let bad = |e: rustls::Error| {
            format!(
                "the certificate {} and key {} do not make a TLS setup: {e}",
                files.cert.display(),
                files.key.display()
            )
        };

        let peers = rustls::server::WebPkiClientVerifier::builder_with_provider(roots.clone(), provider.clone())
            .build()
            .map_err(|e| format!("the authority {} cannot check peers: {e}", files.ca.display()))?;
        let mut server = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(bad)?
            .with_client_cert_verifier(peers)
            .with_single_cert(certs.clone(), key.clone_key())
            .map_err(bad)?;
        server.alpn_protocols = vec![Carries::Grpc.alpn().to_vec(), Carries::Tasks.alpn().to_vec()];

        // Browsers and job clients show no certificate: the cluster token guards the API.
        let mut http = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(bad)?
            .with_no_client_auth()
            .with_single_cert(certs.clone(), key.clone_key())
            .map_err(bad)?;
        http.alpn_protocols = vec![b"http/1.1".to_vec()];

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
            http: Arc::new(http),
        })
    }

    /// The server side of a connection's handshake.
    pub async fn accept(&self, io: SocketStream) -> io::Result<TlsStream<SocketStream>> {
        let accepting = self.acceptor.accept(io);
        let stream = tokio::time::timeout(HANDSHAKE_TIMEOUT, accepting).await.map_err(|_| timed_out())??;
        Ok(stream.into())
    }

    /// The client side, checking that the server's certificate names `host`.
    pub async fn connect(&self, host: &str, carries: Carries, io: SocketStream) -> io::Result<TlsStream<SocketStream>> {
        let name = ServerName::try_from(host.to_string())
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("{host:?} is no TLS server name: {e}")))?;
        let connector = match carries {
            Carries::Grpc => &self.grpc,
            Carries::Tasks => &self.tasks,
        };
        let stream =
            tokio::time::timeout(HANDSHAKE_TIMEOUT, connector.connect(name, io)).await.map_err(|_| timed_out())??;
        Ok(stream.into())
    }

    /// The dashboard's and HTTP API's server setup.
    pub fn http_server(&self) -> Arc<rustls::ServerConfig> {
        self.http.clone()
    }
}

/// The connections of `accepted` once `handshake` made them ready (`None`: dropped), each
/// handshake in a task of its own so that a slow or silent peer holds up no other. Accepting
/// stops once the returned stream is dropped; after an accept error (out of descriptors,
/// say) it waits a moment rather than spin.
pub fn handshaken<I, O, F>(
    accepted: impl Stream<Item = io::Result<I>> + Send + 'static,
    handshake: impl Fn(I) -> F + Send + Sync + 'static,
) -> impl Stream<Item = O> + Send
where
    I: Send + 'static,
    O: Send + 'static,
    F: std::future::Future<Output = Option<O>> + Send + 'static,
{
    let (done, ready) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut accepted = std::pin::pin!(accepted);
        loop {
            let next = tokio::select! {
                _ = done.closed() => return,
                next = accepted.next() => next,
            };
            match next {
                None => return,
                Some(Err(e)) => {
                    tracing::warn!("accepting a connection failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Some(Ok(conn)) => {
                    let (done, handshaking) = (done.clone(), handshake(conn));
                    tokio::spawn(async move {
                        if let Some(ready) = handshaking.await {
                            drop(done.send(ready));
                        }
                    });
                }
            }
        }
    });
    tokio_stream::wrappers::UnboundedReceiverStream::new(ready)
}

fn timed_out() -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, format!("no TLS handshake in {HANDSHAKE_TIMEOUT:?}"))
}

/// What this process's environment asks for.
enum Setup {
    Off,
    On(Tls),
    /// Asked for, but not usable: no connection between machines may be made without it.
    Broken(String),
}

static CURRENT: OnceLock<Setup> = OnceLock::new();

fn setup() -> &'static Setup {
    CURRENT.get_or_init(|| {
        let files = Files::from_vars(|name| std::env::var(name).ok());
        match files.and_then(|files| files.map(|f| Tls::load(&f)).transpose()) {
            Ok(Some(tls)) => Setup::On(tls),
            Ok(None) => Setup::Off,
            Err(e) => Setup::Broken(e),
        }
    })
}

/// Loads this process's TLS setup from its environment; whether TLS is on. A process calls
/// it first, so that a bad setup stops it with a clear error.
pub fn init() -> Result<bool, String> {
    match setup() {
        Setup::Off => Ok(false),
        Setup::On(_) => Ok(true),
        Setup::Broken(e) => Err(e.clone()),
    }
}

/// This process's TLS setup; `None` when off (or not usable: see `required`).
pub fn current() -> Option<&'static Tls> {
    match setup() {
        Setup::On(tls) => Some(tls),
        _ => None,
    }
}

/// The setup a connection to another machine must use: `None` when TLS is off, an error
/// when the environment asks for TLS that cannot be set up (a connection without it would
/// carry the cluster token in the clear).
pub fn required() -> io::Result<Option<&'static Tls>> {
    match setup() {
        Setup::Off => Ok(None),
        Setup::On(tls) => Ok(Some(tls)),
        Setup::Broken(e) => {
            Err(io::Error::new(io::ErrorKind::InvalidInput, format!("TLS is asked for but not usable: {e}")))
        }
    }
}

#[cfg(test)]
pub(crate) mod testing;
#[cfg(test)]
mod tests;
