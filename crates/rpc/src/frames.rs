//! Protobuf messages framed on a socket: an 8-byte little-endian length, then the message.
//!
//! A `Sender` is written by whichever thread has a message (a Python thread submitting a
//! call, a worker's main thread finishing a task): a whole frame goes straight into the
//! socket, with no hand-off to another thread. What does not fit waits in a backlog, in
//! order, which a task of the runtime writes out as room comes; a frame is never split
//! between a thread's write and another's.
//!
//! Inside TLS a connection has one session state, which no two threads can write at once:
//! frames go to a task of the runtime that writes them in order.

use crate::socket::{Socket, SocketStream};
use crate::stream::Stream;
use std::io::{self, IoSlice};
use std::sync::{Arc, Mutex, Weak};
use tokio::io::{AsyncReadExt, AsyncWriteExt, ReadHalf, WriteHalf};
use tokio::sync::mpsc;

type TlsIo = Box<tokio_rustls::TlsStream<SocketStream>>;

/// Where a connection's frames are read from.
pub enum Reads {
    Socket(Arc<Socket>),
    Tls(ReadHalf<TlsIo>),
}

impl Reads {
    async fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Reads::Socket(socket) => socket.read(buf).await,
            Reads::Tls(half) => half.read(buf).await,
        }
    }
}

/// Where a connection's frames are written to.
pub enum Writes {
    Socket(Arc<Socket>),
    Tls(WriteHalf<TlsIo>),
}

/// A connection's two directions.
pub fn split(stream: Stream) -> (Reads, Writes) {
    match stream {
        Stream::Plain(s) => {
            let socket = Arc::new(s.into_socket());
            (Reads::Socket(socket.clone()), Writes::Socket(socket))
        }
        Stream::Tls(s) => {
            let (reads, writes) = tokio::io::split(s);
            (Reads::Tls(reads), Writes::Tls(writes))
        }
    }
}

/// How the first frame of a connection is limited before its peer is known.
pub const HELLO_LIMIT: u64 = 64 * 1024;

pub fn encode(message: &impl prost::Message) -> Vec<u8> {
    let len = message.encoded_len();
    let mut frame = Vec::with_capacity(8 + len);
    frame.extend_from_slice(&(len as u64).to_le_bytes());
    message.encode(&mut frame).expect("a Vec grows as needed");
    frame
}

pub struct Sender {
    runtime: tokio::runtime::Handle,
    state: Mutex<SendState>,
}

#[derive(Clone)]
enum Out {
    Socket(Arc<Socket>),
    /// To the task that writes a TLS connection.
    Queue(mpsc::UnboundedSender<Vec<u8>>),
}

struct SendState {
    /// `None` until connected: frames wait in the backlog meanwhile.
    out: Option<Out>,
    backlog: Vec<u8>,
    flushing: bool,
    broken: Option<String>,
}

/// Writes as much of `bytes` as fits now; how much that was.
fn write_some(socket: &Socket, bytes: &[u8]) -> io::Result<usize> {
    let mut written = 0;
    while written < bytes.len() {
        match socket.try_write(&[IoSlice::new(&bytes[written..])]) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => written += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) => return Err(e),
        }
    }
    Ok(written)
}

impl Sender {
    /// A sender whose socket comes later (`connect`); `prefix` goes first.
    pub fn pending(runtime: tokio::runtime::Handle, prefix: &[u8]) -> Arc<Self> {
        let state = SendState { out: None, backlog: prefix.to_vec(), flushing: false, broken: None };
        Arc::new(Self { runtime, state: Mutex::new(state) })
    }

    pub fn connected(runtime: tokio::runtime::Handle, writes: Writes) -> Arc<Self> {
        let sender = Self::pending(runtime, &[]);
        sender.connect(writes);
        sender
    }

    /// Gives the sender its connection; what waited goes out.
    pub fn connect(self: &Arc<Self>, writes: Writes) {
        let mut state = self.lock();
        match writes {
            Writes::Socket(socket) => {
                state.out = Some(Out::Socket(socket));
                self.flush_later(&mut state);
            }
            Writes::Tls(half) => {
                let (queue, frames) = mpsc::unbounded_channel();
                let backlog = std::mem::take(&mut state.backlog);
                if !backlog.is_empty() {
                    drop(queue.send(backlog));
                }
                state.out = Some(Out::Queue(queue));
                self.runtime.spawn(write_out(Arc::downgrade(self), frames, half));
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, SendState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sends a message, from any thread; an error says why the connection is unusable.
    pub fn send(self: &Arc<Self>, message: &impl prost::Message) -> Result<(), String> {
        let frame = encode(message);
        let mut state = self.lock();
        if let Some(reason) = &state.broken {
            return Err(reason.clone());
        }
        let mut written = 0;
        match (&state.out, state.backlog.is_empty()) {
            (Some(Out::Queue(queue)), _) => {
                return match queue.send(frame) {
                    Ok(()) => Ok(()),
                    Err(_) => Err(Self::break_with(&mut state, io::ErrorKind::BrokenPipe.into())),
                }
            }
            (Some(Out::Socket(socket)), true) => match write_some(socket, &frame) {
                Ok(n) => written = n,
                Err(e) => return Err(Self::break_with(&mut state, e)),
            },
            _ => {}
        }
        if written < frame.len() {
            state.backlog.extend_from_slice(&frame[written..]);
            self.flush_later(&mut state);
        }
        Ok(())
    }

    /// Marks the connection unusable; later sends fail with `reason`.
    pub fn close(&self, reason: &str) {
        let mut state = self.lock();
        state.broken.get_or_insert_with(|| reason.to_string());
        state.backlog = Vec::new();
        if matches!(state.out, Some(Out::Queue(_))) {
            // Ends the writing task once it wrote what was queued.
            state.out = None;
        }
    }

    fn break_with(state: &mut SendState, error: io::Error) -> String {
        let reason = format!("the connection broke: {error}");
        state.broken = Some(reason.clone());
        state.backlog = Vec::new();
        reason
    }

    fn flush_later(self: &Arc<Self>, state: &mut SendState) {
        if matches!(state.out, Some(Out::Socket(_))) && !state.backlog.is_empty() && !state.flushing {
            state.flushing = true;
            self.runtime.spawn(self.clone().flush());
        }
    }

    /// Writes the backlog out as the socket makes room.
    async fn flush(self: Arc<Self>) {
        loop {
            let socket = {
                let mut state = self.lock();
                let Some(Out::Socket(socket)) = state.out.clone() else { unreachable!("flushing a socket's sender") };
                if state.broken.is_some() {
                    state.flushing = false;
                    return;
                }
                match write_some(&socket, &state.backlog) {
                    Ok(n) => drop(state.backlog.drain(..n)),
                    Err(e) => {
                        Self::break_with(&mut state, e);
                    }
                }
                if state.backlog.is_empty() {
                    state.flushing = false;
                    return;
                }
                socket
            };
            let room = match socket.room() {
                Ok(room) => room,
                Err(e) => return drop(Self::break_with(&mut self.lock(), e)),
            };
            if let Err(e) = room.ready().await {
                Self::break_with(&mut self.lock(), e);
            }
        }
    }
}

/// Writes a TLS connection's frames in order, a burst at a time; ends when the sender is
/// gone or closed, or the connection broke (which the sender is told).
async fn write_out(sender: Weak<Sender>, mut frames: mpsc::UnboundedReceiver<Vec<u8>>, mut half: WriteHalf<TlsIo>) {
    while let Some(frame) = frames.recv().await {
        let mut written = half.write_all(&frame).await;
        while written.is_ok() {
            match frames.try_recv() {
                Ok(frame) => written = half.write_all(&frame).await,
                Err(_) => break,
            }
        }
        if let Err(e) = written.and(half.flush().await) {
            if let Some(sender) = sender.upgrade() {
                Sender::break_with(&mut sender.lock(), e);
            }
            return;
        }
    }
}

const BUFFER: usize = 64 * 1024;

/// The receiving side: whole messages, in order.
pub struct Receiver {
    reads: Reads,
    buf: Vec<u8>,
    start: usize,
    filled: usize,
}

impl Receiver {
    pub fn new(reads: Reads) -> Self {
        Self { reads, buf: vec![0; BUFFER], start: 0, filled: 0 }
    }

    /// Waits until `n` bytes are buffered; false at a clean end before any of them.
    async fn fill(&mut self, n: usize) -> io::Result<bool> {
        if self.start == self.filled && self.buf.len() > 16 * BUFFER {
            // A large message came through: give its room back.
            self.buf = vec![0; BUFFER];
        }
        while self.filled - self.start < n {
            if self.start + n > self.buf.len() {
                self.buf.copy_within(self.start..self.filled, 0);
                self.filled -= self.start;
                self.start = 0;
                if n > self.buf.len() {
                    self.buf.resize(n, 0);
                }
            }
            let read = self.reads.read(&mut self.buf[self.filled..]).await?;
            if read == 0 {
                return match self.filled - self.start {
                    0 => Ok(false),
                    _ => Err(io::ErrorKind::UnexpectedEof.into()),
                };
            }
            self.filled += read;
        }
        Ok(true)
    }

    fn take(&mut self, n: usize) -> &[u8] {
        let taken = &self.buf[self.start..self.start + n];
        self.start += n;
        if self.start == self.filled {
            (self.start, self.filled) = (0, 0);
        }
        taken
    }

    /// Reads exactly `n` raw bytes (a connection's prefix).
    pub async fn exact(&mut self, n: usize) -> io::Result<Vec<u8>> {
        if !self.fill(n).await? {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        Ok(self.take(n).to_vec())
    }

    /// The next message, of at most `limit` bytes; `None` once the peer closed the
    /// connection between messages.
    pub async fn recv<M: prost::Message + Default>(&mut self, limit: u64) -> io::Result<Option<M>> {
        if !self.fill(8).await? {
            return Ok(None);
        }
        let len = u64::from_le_bytes(self.take(8).try_into().expect("8 bytes"));
        if len > limit {
            return Err(io::Error::new(io::ErrorKind::InvalidData, format!("a message of {len} bytes is too large")));
        }
        let len = usize::try_from(len).map_err(|_| io::Error::from(io::ErrorKind::InvalidData))?;
        if !self.fill(len).await? {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        M::decode(self.take(len)).map(Some).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
    }
}

#[cfg(test)]
mod tests;
