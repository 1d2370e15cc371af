//! A Unix stream that wakes its runtime only for what it reads.
//!
//! Linux reports a Unix stream socket writable again each time its peer reads from it, and
//! tokio registers a socket for both directions, edge-triggered: every message a process
//! sent woke it once more when the other side read it, for nothing. On a small machine a
//! wake-up is a large part of a call's cost. This stream is registered for reading only;
//! it writes straight to the socket, and watches for room (through a second descriptor of
//! the same socket) only while the socket is full.

use std::io::{self, IoSlice, Read, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream as StdStream;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};

pub struct LocalStream {
    socket: AsyncFd<StdStream>,
    /// Registered for writability while a write found the socket full.
    full: Option<AsyncFd<OwnedFd>>,
}

impl LocalStream {
    /// Takes over a connected stream (inside a runtime).
    pub fn new(stream: tokio::net::UnixStream) -> io::Result<Self> {
        let socket = stream.into_std()?;
        socket.set_nonblocking(true)?;
        Ok(Self { socket: register(socket, Interest::READABLE)?, full: None })
    }

    /// Writes with `write`, waiting for room while the socket is full.
    fn poll_with(
        &mut self,
        cx: &mut Context<'_>,
        mut write: impl FnMut(&StdStream) -> io::Result<usize>,
    ) -> Poll<io::Result<usize>> {
        loop {
            let Some(full) = &self.full else {
                match write(self.socket.get_ref()) {
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        // Registered after the failed write: room made meanwhile is
                        // reported at once.
                        let watch = self.socket.get_ref().as_fd().try_clone_to_owned()?;
                        self.full = Some(register(watch, Interest::WRITABLE)?);
                        continue;
                    }
                    done => return Poll::Ready(done),
                }
            };
            let done = {
                let mut guard = ready!(full.poll_write_ready(cx))?;
                match guard.try_io(|_| write(self.socket.get_ref())) {
                    Ok(done) => done,
                    Err(_would_block) => continue,
                }
            };
            // Room again: stop watching, or every read by the peer would wake us.
            self.full = None;
            return Poll::Ready(done);
        }
    }
}

/// Registers a descriptor for `interest` with the current runtime.
fn register<T: AsRawFd>(owned: T, interest: Interest) -> io::Result<AsyncFd<T>> {
    // SAFETY: `owned` owns its descriptor, which stays open and the same until the AsyncFd
    // is dropped: it is lent out only by shared reference, never closed or replaced.
    Ok(unsafe { AsyncFd::register_with_interest(owned, interest) }?)
}

impl AsyncRead for LocalStream {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        loop {
            let mut guard = ready!(self.socket.poll_read_ready(cx))?;
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
}

impl AsyncWrite for LocalStream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        self.get_mut().poll_with(cx, |mut socket| socket.write(buf))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.get_mut().poll_with(cx, |mut socket| socket.write_vectored(bufs))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(self.socket.get_ref().shutdown(std::net::Shutdown::Write))
    }
}
