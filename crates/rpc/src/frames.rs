//! Protobuf messages framed on a socket: an 8-byte little-endian length, then the message.
//!
//! A `Sender` is written by whichever thread has a message (a Python thread submitting a
//! call, a worker's main thread finishing a task): a whole frame goes straight into the
//! socket, with no hand-off to another thread. What does not fit waits in a backlog, in
//! order, which a task of the runtime writes out as room comes; a frame is never split
//! between a thread's write and another's.

use crate::socket::Socket;
use std::io::{self, IoSlice};
use std::sync::{Arc, Mutex};

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

struct SendState {
    /// `None` until connected: frames wait in the backlog meanwhile.
    socket: Option<Arc<Socket>>,
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
        let state = SendState { socket: None, backlog: prefix.to_vec(), flushing: false, broken: None };
        Arc::new(Self { runtime, state: Mutex::new(state) })
    }

    pub fn connected(runtime: tokio::runtime::Handle, socket: Arc<Socket>) -> Arc<Self> {
        let sender = Self::pending(runtime, &[]);
        sender.connect(socket);
        sender
    }

    /// Gives the sender its socket; what waited goes out.
    pub fn connect(self: &Arc<Self>, socket: Arc<Socket>) {
        let mut state = self.lock();
        state.socket = Some(socket);
        self.flush_later(&mut state);
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
        if let (Some(socket), true) = (&state.socket, state.backlog.is_empty()) {
            match write_some(socket, &frame) {
                Ok(n) => written = n,
                Err(e) => return Err(Self::break_with(&mut state, e)),
            }
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
    }

    fn break_with(state: &mut SendState, error: io::Error) -> String {
        let reason = format!("the connection broke: {error}");
        state.broken = Some(reason.clone());
        state.backlog = Vec::new();
        reason
    }

    fn flush_later(self: &Arc<Self>, state: &mut SendState) {
        if state.socket.is_some() && !state.backlog.is_empty() && !state.flushing {
            state.flushing = true;
            self.runtime.spawn(self.clone().flush());
        }
    }

    /// Writes the backlog out as the socket makes room.
    async fn flush(self: Arc<Self>) {
        loop {
            let socket = {
                let mut state = self.lock();
                let socket = state.socket.clone().expect("flushing a connected sender");
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

const BUFFER: usize = 64 * 1024;

/// The receiving side: whole messages, in order.
pub struct Receiver {
    socket: Arc<Socket>,
    buf: Vec<u8>,
    start: usize,
    filled: usize,
}

impl Receiver {
    pub fn new(socket: Arc<Socket>) -> Self {
        Self { socket, buf: vec![0; BUFFER], start: 0, filled: 0 }
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
            let read = self.socket.read(&mut self.buf[self.filled..]).await?;
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
