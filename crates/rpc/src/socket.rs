//! Sockets that wake their runtime only for what they read.
//!
//! Linux reports a Unix stream socket writable again each time its peer reads from it, and
//! tokio registers a socket for both directions, edge-triggered: every message a process
//! sent woke it once more when the other side read it, for nothing. On a small machine a
//! wake-up is a large part of a call's cost. A `Socket` is registered for reading only;
//! writes go straight to it, from any thread, and room is watched for (through a second
//! descriptor of the same socket) only while it is full.

use std::io::{self, IoSlice, Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};

/// A connected stream socket, over TCP or Unix.
pub enum StdSocket {
    Tcp(std::net::TcpStream),
    Unix(std::os::unix::net::UnixStream),
}

impl StdSocket {
    fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Self::Tcp(s) => (&*s).read(buf),
            Self::Unix(s) => (&*s).read(buf),
        }
    }

    fn write(&self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        match self {
            Self::Tcp(s) => (&*s).write_vectored(bufs),
            Self::Unix(s) => (&*s).write_vectored(bufs),
        }
    }

    fn shutdown(&self) -> io::Result<()> {
        match self {
            Self::Tcp(s) => s.shutdown(std::net::Shutdown::Write),
            Self::Unix(s) => s.shutdown(std::net::Shutdown::Write),
        }
    }

    fn set_nonblocking(&self) -> io::Result<()> {
        match self {
            Self::Tcp(s) => s.set_nonblocking(true),
            Self::Unix(s) => s.set_nonblocking(true),
        }
    }
}

impl AsRawFd for StdSocket {
    fn as_raw_fd(&self) -> RawFd {
        match self {
            Self::Tcp(s) => s.as_raw_fd(),
            Self::Unix(s) => s.as_raw_fd(),
        }
    }
}

impl AsFd for StdSocket {
    fn as_fd(&self) -> BorrowedFd<'_> {
        match self {
            Self::Tcp(s) => s.as_fd(),
            Self::Unix(s) => s.as_fd(),
        }
    }
}

/// Registers a descriptor for `interest` with the current runtime.
fn register<T: AsRawFd>(owned: T, interest: Interest) -> io::Result<AsyncFd<T>> {
    // SAFETY: `owned` owns its descriptor, which stays open and the same until the AsyncFd
    // is dropped: it is lent out only by shared reference, never closed or replaced.
    Ok(unsafe { AsyncFd::register_with_interest(owned, interest) }?)
}

/// A socket registered with the runtime for reading only.
pub struct Socket(AsyncFd<StdSocket>);

/// Watches a full socket for room; dropped once there is some, so that the peer's reads
/// stop waking this side.
pub struct Room(AsyncFd<OwnedFd>);

impl Socket {
    /// Takes over a connected socket (inside a runtime).
    pub fn new(socket: StdSocket) -> io::Result<Self> {
        socket.set_nonblocking()?;
        Ok(Self(register(socket, Interest::READABLE)?))
    }

    pub fn from_tokio_unix(stream: tokio::net::UnixStream) -> io::Result<Self> {
        Self::new(StdSocket::Unix(stream.into_std()?))
    }

    pub fn from_tokio_tcp(stream: tokio::net::TcpStream) -> io::Result<Self> {
        Self::new(StdSocket::Tcp(stream.into_std()?))
    }

    /// Writes what fits now, without waiting, from any thread.
    pub fn try_write(&self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        self.0.get_ref().write(bufs)
    }

    /// A watcher for room to write, after `try_write` found the socket full. Room made
    /// since then is reported at once.
    pub fn room(&self) -> io::Result<Room> {
        Ok(Room(register(self.0.get_ref().as_fd().try_clone_to_owned()?, Interest::WRITABLE)?))
    }

    pub fn poll_read(&self, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        loop {
            let mut guard = ready!(self.0.poll_read_ready(cx))?;
            let unfilled = buf.initialize_unfilled();
            match guard.try_io(|socket| socket.get_ref().read(unfilled)) {
                Ok(Ok(n)) => {
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
                Ok(Err(e)) => return Poll::Ready(Err(e)),
                Err(_would_block) => continue,
            }
        }
    }

    /// Reads what has arrived into `buf`, waiting for something; 0 at the end.
    pub async fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        std::future::poll_fn(|cx| {
            let mut buf = ReadBuf::new(buf);
            ready!(self.poll_read(cx, &mut buf))?;
            Poll::Ready(Ok(buf.filled().len()))
        })
        .await
    }

    /// The first byte waiting to be read, left there; `None` at the end.
    pub async fn peek(&self) -> io::Result<Option<u8>> {
        loop {
            let mut guard = self.0.readable().await?;
            let mut byte = [0u8];
            let peeked = guard.try_io(|socket| {
                nix::sys::socket::recv(socket.as_raw_fd(), &mut byte, nix::sys::socket::MsgFlags::MSG_PEEK)
                    .map_err(io::Error::from)
            });
            match peeked {
                Ok(Ok(0)) => return Ok(None),
                Ok(Ok(_)) => return Ok(Some(byte[0])),
                Ok(Err(e)) => return Err(e),
                Err(_would_block) => continue,
            }
        }
    }

    pub fn shutdown(&self) -> io::Result<()> {
        self.0.get_ref().shutdown()
    }

    pub fn is_unix(&self) -> bool {
        matches!(self.0.get_ref(), StdSocket::Unix(_))
    }

    /// Who is at the other end, for messages.
    pub fn peer(&self) -> String {
        match self.0.get_ref() {
            StdSocket::Tcp(s) => s.peer_addr().map_or_else(|_| "an unknown address".into(), |a| a.to_string()),
            StdSocket::Unix(_) => "a local process".into(),
        }
    }
}

impl Room {
    pub fn poll_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut guard = ready!(self.0.poll_write_ready(cx))?;
        // Looked at again by the caller's next write; a full socket waits for a new edge.
        guard.clear_ready();
        Poll::Ready(Ok(()))
    }

    pub async fn ready(&self) -> io::Result<()> {
        std::future::poll_fn(|cx| self.poll_ready(cx)).await
    }
}

/// A `Socket` as the byte stream gRPC connections run over.
pub struct SocketStream {
    socket: Socket,
    full: Option<Room>,
}

impl SocketStream {
    pub fn new(socket: Socket) -> Self {
        Self { socket, full: None }
    }

    pub fn socket(&self) -> &Socket {
        &self.socket
    }

    pub fn into_socket(self) -> Socket {
        self.socket
    }
}

impl AsyncRead for SocketStream {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        self.socket.poll_read(cx, buf)
    }
}

impl AsyncWrite for SocketStream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        self.poll_write_vectored(cx, &[IoSlice::new(buf)])
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        loop {
            if let Some(room) = &this.full {
                ready!(room.poll_ready(cx))?;
            }
            match this.socket.try_write(bufs) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if this.full.is_none() {
                        this.full = Some(this.socket.room()?);
                    }
                }
                done => {
                    this.full = None;
                    return Poll::Ready(done);
                }
            }
        }
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(self.socket.shutdown())
    }
}
