//! In-process transport over channels, for tests and for embedding a server in the same
//! process as its clients.
//!
//! A channel carries whole frames as single buffers, so a frame with bulk segments is
//! joined into one buffer on send: this transport makes one copy of bulk payloads. It is a
//! test and embedding transport; the socket and shared-memory transports copy nothing.

use std::collections::HashMap;
use std::io;
use std::sync::{LazyLock, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use lanner_proto::{FrameError, FrameSplitter, HANDSHAKE_MAX_FRAME_SIZE, OutFrame};
use tokio::sync::mpsc;

use super::{FrameSink, FrameSource, Received, RecvError, Transport};

type Registry = Mutex<HashMap<String, mpsc::UnboundedSender<Transport>>>;

static LISTENERS: LazyLock<Registry> = LazyLock::new(|| Mutex::new(HashMap::new()));

/// Accepts in-process connections made to `mem://name`.
#[derive(Debug)]
pub struct MemListener {
    name: String,
    incoming: mpsc::UnboundedReceiver<Transport>,
}

impl MemListener {
    /// Registers `name`. Fails if another listener in this process holds it.
    pub fn bind(name: &str) -> io::Result<MemListener> {
        let mut listeners = LISTENERS.lock().unwrap_or_else(|e| e.into_inner());
        if listeners.get(name).is_some_and(|tx| !tx.is_closed()) {
            return Err(io::Error::new(
                io::ErrorKind::AddrInUse,
                format!("mem://{name} is already in use in this process"),
            ));
        }
        let (tx, incoming) = mpsc::unbounded_channel();
        listeners.insert(name.to_owned(), tx);
        Ok(MemListener {
            name: name.to_owned(),
            incoming,
        })
    }

    /// The name this listener is registered as.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The next connection.
    pub async fn accept(&mut self) -> io::Result<Transport> {
        self.incoming
            .recv()
            .await
            .ok_or_else(|| io::Error::other("mem listener closed"))
    }
}

impl Drop for MemListener {
    fn drop(&mut self) {
        // Close our end first, so that the registry entry is recognisably ours (closed)
        // rather than a newer listener's.
        self.incoming.close();
        let mut listeners = LISTENERS.lock().unwrap_or_else(|e| e.into_inner());
        if listeners.get(&self.name).is_some_and(|tx| tx.is_closed()) {
            listeners.remove(&self.name);
        }
    }
}

/// Connects to the listener registered as `name` in this process.
pub fn connect(name: &str) -> io::Result<Transport> {
    let listener = LISTENERS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(name)
        .cloned()
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::ConnectionRefused,
                format!("nothing listens on mem://{name}"),
            )
        })?;
    let (client, server) = pair(format!("mem://{name}"), "mem://client".into());
    listener.send(server).map_err(|_| {
        io::Error::new(
            io::ErrorKind::ConnectionRefused,
            format!("mem://{name} stopped listening"),
        )
    })?;
    Ok(client)
}

/// Two transports joined back to back: what one sends, the other receives.
pub fn pair(a_peer: String, b_peer: String) -> (Transport, Transport) {
    let (a_tx, b_rx) = mpsc::unbounded_channel();
    let (b_tx, a_rx) = mpsc::unbounded_channel();
    let a = Transport {
        sink: Box::new(MemSink { tx: a_tx }),
        source: Box::new(MemSource::new(a_rx)),
        peer: a_peer,
        // Both ends are this process.
        credentials: Some(lanner_shm::sys::process_credentials()),
        certificate_subject: None,
    };
    let b = Transport {
        sink: Box::new(MemSink { tx: b_tx }),
        source: Box::new(MemSource::new(b_rx)),
        peer: b_peer,
        credentials: Some(lanner_shm::sys::process_credentials()),
        certificate_subject: None,
    };
    (a, b)
}

/// Sending half of an in-memory transport.
#[derive(Debug)]
pub struct MemSink {
    tx: mpsc::UnboundedSender<Bytes>,
}

impl FrameSink for MemSink {
    fn poll_send(&mut self, _cx: &mut Context<'_>, frame: &mut OutFrame) -> Poll<io::Result<()>> {
        let bytes = std::mem::take(frame).into_contiguous();
        Poll::Ready(
            self.tx.send(bytes).map_err(|_| {
                io::Error::new(io::ErrorKind::BrokenPipe, "the in-memory peer is gone")
            }),
        )
    }
}

/// Receiving half of an in-memory transport.
#[derive(Debug)]
pub struct MemSource {
    rx: mpsc::UnboundedReceiver<Bytes>,
    splitter: FrameSplitter,
}

impl MemSource {
    fn new(rx: mpsc::UnboundedReceiver<Bytes>) -> MemSource {
        MemSource {
            rx,
            splitter: FrameSplitter::new(HANDSHAKE_MAX_FRAME_SIZE),
        }
    }
}

impl MemSource {
    fn check(&self, frame: Bytes) -> Result<Bytes, RecvError> {
        let limit = self.splitter.max_frame_size();
        if frame.len() as u64 > u64::from(limit) {
            return Err(RecvError::Frame(FrameError::TooLarge {
                len: frame.len() as u64,
                max: limit,
            }));
        }
        Ok(frame)
    }
}

impl FrameSource for MemSource {
    fn try_recv(&mut self) -> Result<Received, RecvError> {
        match self.rx.try_recv() {
            Ok(frame) => self.check(frame).map(Received::Frame),
            Err(mpsc::error::TryRecvError::Empty) => Ok(Received::Empty),
            Err(mpsc::error::TryRecvError::Disconnected) => Ok(Received::Closed),
        }
    }

    fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Result<Received, RecvError>> {
        match self.rx.poll_recv(cx) {
            Poll::Ready(Some(frame)) => Poll::Ready(self.check(frame).map(Received::Frame)),
            Poll::Ready(None) => Poll::Ready(Ok(Received::Closed)),
            Poll::Pending => Poll::Pending,
        }
    }

    fn set_max_frame_size(&mut self, max_frame_size: u32) {
        self.splitter.set_max_frame_size(max_frame_size);
    }
}
