//! TLS (rustls) on every connection between machines: control plane, node to node, and
//! callers to workers. Connections inside a machine go over Unix sockets, which no other
//! machine can reach, and stay plain.
//!
//! TLS is on unless the cluster can only live on one machine (its head's address is a
//! loopback one) or the user turned it off (`OXRAY_TLS=off`, `oxray start --no-tls`). Its
//! certificates come either from the user, as PEM files named by `OXRAY_TLS_CERT`,
//! `OXRAY_TLS_KEY` and `OXRAY_TLS_CA` (a client then checks that the server's certificate
//! names the host it dialed), or from an authority derived from the cluster token
//! (`authority`). Both sides of a connection show a certificate of the authority: a cluster
//! is a closed set of machines. `oxray start` sets the variables for everything it starts.

use crate::Token;
use std::io;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;
use tokio_stream::{Stream, StreamExt};

pub const CERT_ENV: &str = "OXRAY_TLS_CERT";
pub const KEY_ENV: &str = "OXRAY_TLS_KEY";
pub const CA_ENV: &str = "OXRAY_TLS_CA";
/// "auto" or "off", when no files are given.
pub const MODE_ENV: &str = "OXRAY_TLS";

/// What a connection carries, named in its handshake: after it every byte is encrypted, so
/// a server cannot peek at the first one to tell task streams from gRPC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Carries {
    Grpc,
    Tasks,
}

impl Carries {
    pub(crate) fn alpn(self) -> &'static [u8] {
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

/// How this process's connections to other machines go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    Off,
    /// An authority derived from the cluster token (`authority`).
    Auto,
    Files(Files),
}

impl Mode {
    /// As `OXRAY_TLS` and `current_cluster.json` name it.
    pub fn name(&self) -> &'static str {
        match self {
            Mode::Off => "off",
            Mode::Auto => "auto",
            Mode::Files(_) => "files",
        }
    }
}

/// Whether `host` (of a HOST:PORT) is a loopback name or address.
pub fn is_loopback(host: &str) -> bool {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host == "localhost" || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// Whether the head at `address` (HOST:PORT) can only be on this machine: its host is a
/// loopback address or `localhost`. Names are not resolved: an answer that changed between
/// this check and the dial would make a client talk plain to another machine.
pub fn only_this_machine(address: &str) -> bool {
    address.is_empty() || is_loopback(host_of(address))
}

fn host_of(address: &str) -> &str {
    address.rsplit_once(':').map(|(host, _)| host).unwrap_or(address)
}

/// Whether `recorded` (the cluster last started on this machine) is the head at `head`: the
/// same address, or its port on a loopback address of this machine.
fn is_recorded(recorded: &str, head: &str) -> bool {
    let port = |a: &str| a.rsplit_once(':').map(|(_, port)| port.to_string());
    recorded == head || (is_loopback(host_of(head)) && port(recorded).is_some() && port(recorded) == port(head))
}

/// The mode of a process that talks to the head at `head` (the head itself: its own
/// address): the files when given; else what `OXRAY_TLS` (`asked`) says; else what
/// `oxray start` recorded for the cluster at that address (or port, reached on loopback) on
/// this machine; else on unless the head can only be on this machine (`local_head`, see
/// `only_this_machine`).
pub fn decide(
    files: Option<Files>,
    asked: Option<&str>,
    head: &str,
    local_head: bool,
    recorded: Option<(&str, &str)>,
) -> Result<Mode, String> {
    if let Some(files) = files {
        return Ok(Mode::Files(files));
    }
    match asked.map(str::trim).filter(|a| !a.is_empty()) {
        Some("auto") => return Ok(Mode::Auto),
        Some("off") => return Ok(Mode::Off),
        Some(other) => return Err(format!("{MODE_ENV} must be \"auto\" or \"off\", not {other:?}")),
        None => {}
    }
    match recorded {
        Some((address, "off")) if is_recorded(address, head) => Ok(Mode::Off),
        Some((address, "auto")) if is_recorded(address, head) => Ok(Mode::Auto),
        _ if local_head => Ok(Mode::Off),
        _ => Ok(Mode::Auto),
    }
}

/// What this process's setup is.
enum Setup {
    Off,
    /// With the mode's name and, for `Auto`, the token it comes from.
    On(Tls, &'static str, Option<String>),
    /// Asked for, but not usable: no connection between machines may be made without it.
    Broken(String),
}

static CURRENT: OnceLock<Setup> = OnceLock::new();

fn mode_here(head: &str) -> Result<Mode, String> {
    let var = |name: &str| std::env::var(name).ok();
    let recorded = oxray_config::current::read_current();
    let recorded = recorded.as_ref().and_then(|c| Some((c.address.as_str(), c.tls.as_deref()?)));
    Files::from_vars(var)
        .and_then(|files| decide(files, var(MODE_ENV).as_deref(), head, only_this_machine(head), recorded))
}

fn make(token: Option<&Token>, head: &str) -> Setup {
    let mode = match mode_here(head) {
        Ok(mode) => mode,
        Err(e) => return Setup::Broken(e),
    };
    let tls = match &mode {
        Mode::Off => return Setup::Off,
        Mode::Files(files) => Tls::load(files),
        Mode::Auto => match token {
            Some(token) => authority::material(token).and_then(Tls::build),
            None => Err("TLS is on, and its authority comes from the cluster token, which this process does not \
                         have (set OXRAY_AUTH_TOKEN to the cluster's token)"
                .to_string()),
        },
    };
    let token = matches!(mode, Mode::Auto).then(|| token.map(|t| t.as_str().to_string())).flatten();
    match tls {
        Ok(tls) => Setup::On(tls, mode.name(), token),
        Err(e) => Setup::Broken(e),
    }
}

fn setup() -> &'static Setup {
    CURRENT.get_or_init(|| {
        let token = std::env::var("OXRAY_AUTH_TOKEN").ok().and_then(|t| Token::parse(&t).ok());
        make(token.as_ref(), &std::env::var("OXRAY_ADDRESS").unwrap_or_default())
    })
}

/// Sets up this process's TLS, as a member of the cluster whose head is at `head` and
/// whose token is `token`: `decide` says how, from the environment. The first call
/// decides; a process makes it before it listens or dials, so that a bad setup stops it
/// with a clear error. A later call for a cluster that needs another setup fails: one
/// process talks to clusters of one setup. Returns the mode's name.
pub fn init(token: &Token, head: &str) -> Result<&'static str, String> {
    let setup = CURRENT.get_or_init(|| make(Some(token), head));
    let (name, made_for) = match setup {
        Setup::Off => ("off", None),
        Setup::On(_, name, made_for) => (*name, made_for.as_deref()),
        Setup::Broken(e) => return Err(e.clone()),
    };
    let wanted = mode_here(head)?;
    let other_token = wanted == Mode::Auto && made_for.is_some_and(|t| t != token.as_str());
    if wanted.name() != name || other_token {
        let what = if other_token { "another cluster token" } else { wanted.name() };
        return Err(format!(
            "this process already talks to a cluster with TLS {name}, and the head at {head} needs {what}: \
             one process joins clusters of one TLS setup (start another process for this cluster)"
        ));
    }
    Ok(name)
}

/// This process's TLS setup; `None` when off (or not usable: see `required`).
pub fn current() -> Option<&'static Tls> {
    match setup() {
        Setup::On(tls, ..) => Some(tls),
        _ => None,
    }
}

/// The setup a connection to another machine must use: `None` when TLS is off, an error
/// when the environment asks for TLS that cannot be set up (a connection without it would
/// carry the cluster token in the clear).
pub fn required() -> io::Result<Option<&'static Tls>> {
    match setup() {
        Setup::Off => Ok(None),
        Setup::On(tls, ..) => Ok(Some(tls)),
        Setup::Broken(e) => {
            Err(io::Error::new(io::ErrorKind::InvalidInput, format!("TLS is asked for but not usable: {e}")))
        }
    }
}

mod authority;
mod config;
pub use authority::CLUSTER_NAME;
pub use config::Tls;

#[cfg(test)]
pub(crate) mod testing;
#[cfg(test)]
mod tests;
