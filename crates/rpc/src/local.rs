//! Processes on one machine talk over Unix sockets: a message over loopback TCP costs about
//! twice as much (round trip between two processes on the 2-core benchmark machine: 87 µs
//! over TCP, 40 µs over a Unix socket). Every server on TCP port P also accepts on the
//! abstract Unix socket `oxray-P`; a client of an address of this machine tries that socket
//! first and falls back to TCP. Abstract names belong to a network namespace, as ports do,
//! and vanish with the process that bound them, so `oxray-P` is always the process that
//! holds port P here.
//!
//! With TLS on (see `tls`), TCP connections are inside it; Unix ones stay plain.

use hyper_util::rt::TokioIo;
use std::io;
use std::net::IpAddr;
use std::os::linux::net::SocketAddrExt;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream, UnixStream};
use tokio_stream::{Stream, StreamExt};
use tonic::transport::server::Connected;
use tonic::transport::{Channel, Endpoint, Uri};

use crate::socket::{Socket, SocketStream};
use crate::stream::Stream as Wire;
use crate::tls::{self, Carries};

fn socket_name(port: u16) -> String {
    format!("oxray-{port}")
}

fn listen_beside(port: u16) -> io::Result<tokio::net::UnixListener> {
    let address = std::os::unix::net::SocketAddr::from_abstract_name(socket_name(port))?;
    let listener = std::os::unix::net::UnixListener::bind_addr(&address)?;
    listener.set_nonblocking(true)?;
    tokio::net::UnixListener::from_std(listener)
}

/// A connection a server accepted: over TCP, or over the Unix socket beside its port.
pub struct Conn(pub Wire);

impl AsyncRead for Conn {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl AsyncWrite for Conn {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.0.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

impl Connected for Conn {
    type ConnectInfo = ();

    fn connect_info(&self) -> Self::ConnectInfo {}
}

type Accepted = Pin<Box<dyn Stream<Item = io::Result<Conn>> + Send>>;

/// The connections a server on `listener` accepts: its TCP ones, with Nagle's algorithm
/// off (RPCs are small exchanges that must not wait for delayed ACKs) and inside TLS when
/// it is on, and those of the Unix socket beside its port.
pub fn incoming(listener: TcpListener) -> impl Stream<Item = io::Result<Conn>> {
    accepted(listener, None)
}

/// As `incoming`, and with TLS on, the TCP connections that open with something other than
/// a TLS handshake come out of the second stream rather than being dropped: for a server of
/// the little that clients which cannot speak TLS may ask (Ray's tools).
pub fn incoming_and_plain(
    listener: TcpListener,
) -> (impl Stream<Item = io::Result<Conn>>, impl Stream<Item = io::Result<Conn>>) {
    let (plain, plain_conns) = tokio::sync::mpsc::unbounded_channel();
    let plain_conns = tokio_stream::wrappers::UnboundedReceiverStream::new(plain_conns).map(Ok);
    (accepted(listener, Some(plain)), plain_conns)
}

/// The first byte of every TLS connection: a handshake record.
const TLS_HANDSHAKE: u8 = 0x16;

fn accepted(
    listener: TcpListener,
    plain: Option<tokio::sync::mpsc::UnboundedSender<Conn>>,
) -> impl Stream<Item = io::Result<Conn>> {
    let port = listener.local_addr().map(|a| a.port());
    let tcp = tokio_stream::wrappers::TcpListenerStream::new(listener).map(|conn| {
        let conn = conn?;
        conn.set_nodelay(true)?;
        Ok(SocketStream::new(Socket::from_tokio_tcp(conn)?))
    });
    let tcp: Accepted = match tls::required() {
        Ok(Some(tls)) => Box::pin(tls::handshaken(tcp, move |io: SocketStream| {
            let plain = plain.clone();
            async move {
                let peer = io.socket().peer();
                if let Some(plain) = plain {
                    match tokio::time::timeout(tls::HANDSHAKE_TIMEOUT, io.socket().peek()).await {
                        Ok(Ok(Some(TLS_HANDSHAKE))) => {}
                        Ok(Ok(Some(_))) => {
                            drop(plain.send(Conn(Wire::Plain(io))));
                            return None;
                        }
                        _ => return None,
                    }
                }
                match tls.accept(io).await {
                    Ok(stream) => Some(Ok(Conn(Wire::Tls(Box::new(stream))))),
                    Err(e) => {
                        tracing::warn!("a connection from {peer} failed its TLS handshake: {e}");
                        None
                    }
                }
            }
        })),
        Ok(None) => Box::pin(tcp.map(|conn| conn.map(|c| Conn(Wire::Plain(c))))),
        // Asked for and not usable: no other machine is served in the clear.
        Err(e) => {
            tracing::error!("connections from other machines are refused: {e}");
            Box::pin(tcp.filter_map(|_| None))
        }
    };
    let nearby: Accepted = match port.and_then(listen_beside) {
        Ok(listener) => Box::pin(
            tokio_stream::wrappers::UnixListenerStream::new(listener)
                .map(|conn| Ok(Conn(Wire::Plain(SocketStream::new(Socket::from_tokio_unix(conn?)?))))),
        ),
        Err(e) => {
            tracing::warn!("no Unix socket beside the port; local clients use TCP: {e}");
            Box::pin(tokio_stream::empty())
        }
    };
    tcp.merge(nearby)
}

/// Whether `host` is an address of this machine (in this network namespace): only then
/// does the Unix socket reach the process that listens at `host:port`.
fn is_here(host: &str) -> bool {
    let Ok(ip) = host.trim_start_matches('[').trim_end_matches(']').parse::<IpAddr>() else { return false };
    ip.is_loopback() || std::net::UdpSocket::bind((ip, 0)).is_ok()
}

type Io = TokioIo<Wire>;

/// Connects to the server at `host:port`, over its Unix socket when `here`.
async fn dial(host: &str, port: u16, here: bool) -> io::Result<Socket> {
    if here {
        // A leading NUL names an abstract socket.
        if let Ok(stream) = UnixStream::connect(format!("\0{}", socket_name(port))).await {
            return Socket::from_tokio_unix(stream);
        }
    }
    let stream = TcpStream::connect((host, port)).await?;
    stream.set_nodelay(true)?;
    Socket::from_tokio_tcp(stream)
}

/// A dialed connection, inside TLS when it went over TCP and TLS is on.
async fn secure(host: &str, carries: Carries, socket: Socket) -> io::Result<Wire> {
    let stream = SocketStream::new(socket);
    if stream.socket().is_unix() {
        return Ok(Wire::Plain(stream));
    }
    match tls::required()? {
        Some(tls) => Ok(Wire::Tls(Box::new(tls.connect(host, carries, stream).await?))),
        None => Ok(Wire::Plain(stream)),
    }
}

/// Connects to the server at `address` ("host:port") for what the connection `carries`,
/// over its Unix socket when it is on this machine.
pub async fn dial_address(address: &str, carries: Carries) -> io::Result<Wire> {
    let bad = || io::Error::new(io::ErrorKind::InvalidInput, format!("not a host:port address: {address}"));
    let (host, port) = address.rsplit_once(':').ok_or_else(bad)?;
    let port = port.parse().map_err(|_| bad())?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    secure(host, carries, dial(host, port, is_here(host)).await?).await
}

/// Dials a server's address, over its Unix socket when it is on this machine.
#[derive(Clone)]
struct Connector {
    host: String,
    port: u16,
    here: bool,
}

impl Connector {
    fn to(endpoint: &Endpoint) -> Self {
        let uri = endpoint.uri();
        let host = uri.host().unwrap_or_default().to_string();
        Self { here: is_here(&host), host, port: uri.port_u16().unwrap_or(80) }
    }
}

impl tower::Service<Uri> for Connector {
    type Response = Io;
    type Error = io::Error;
    type Future = Pin<Box<dyn std::future::Future<Output = io::Result<Io>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Uri) -> Self::Future {
        let (host, port, here) = (self.host.clone(), self.port, self.here);
        Box::pin(async move { Ok(TokioIo::new(secure(&host, Carries::Grpc, dial(&host, port, here).await?).await?)) })
    }
}

/// A channel that connects on first use, over the Unix socket when the server is on this
/// machine, else over TCP (and again so after the server went away).
pub fn connect_lazy(endpoint: Endpoint) -> Channel {
    let connector = Connector::to(&endpoint);
    endpoint.connect_with_connector_lazy(connector)
}

/// As `connect_lazy`, connected now.
pub async fn connect(endpoint: Endpoint) -> Result<Channel, tonic::transport::Error> {
    let connector = Connector::to(&endpoint);
    endpoint.connect_with_connector(connector).await
}

#[cfg(test)]
mod tests;
