//! Transports: how frames move between two peers.
//!
//! The edge is deliberately narrow. A [`FrameSink`] sends one message given as a list of
//! segments ([`OutFrame`]: a small header buffer plus the caller's bulk buffers), written
//! with one vectored write and never copied into a marshal buffer. A [`FrameSource`]
//! yields each received message as one [`Bytes`] whose payload slices the callee may keep,
//! again without a copy.
//!
//! Both traits are poll-based so the runtime can spin on them (try, yield, try again)
//! before sleeping, and so they can be used as trait objects without boxing a future per
//! message.
//!
//! Implementations: [`stream`] (TCP with `TCP_NODELAY`, Unix stream sockets), [`tls`]
//! (TLS 1.3 over TCP through the same stream plumbing; encryption means bulk payloads are
//! copied there), [`shm`] (rings in memory shared between processes) and [`mem`]
//! (in-process channels for tests).

use std::io;
use std::task::{Context, Poll};

use bytes::Bytes;
use lanner_proto::{FrameError, OutFrame};
pub use lanner_shm::sys::PeerCredentials;

pub mod mem;
pub mod shm;
pub mod stream;
pub mod tcp;
pub mod tls;
pub mod unix;

mod lingering_close;
mod listener;
mod page_padding;
mod recv_buffer;
mod released;
mod sys;
mod watched_socket;

pub use listener::{Incoming, Listener, SocketPath, connect, connect_tls, connect_with};
pub(crate) use released::Released;

/// Why receiving failed.
#[derive(Debug, thiserror::Error)]
pub enum RecvError {
    /// The transport failed.
    #[error("receive failed: {0}")]
    Io(#[from] io::Error),
    /// The peer sent bytes that do not split into valid frames (for example a length over
    /// the maximum frame size).
    #[error("{0}")]
    Frame(#[from] FrameError),
}

/// The sending half of a transport.
pub trait FrameSink: Send + 'static {
    /// Writes as much of `frame` as the transport takes now, advancing it. Ready(Ok) once
    /// the whole frame is written; Pending (with the waker registered) if the transport is
    /// full. A partially written frame must be finished before any other frame is started.
    fn poll_send(&mut self, cx: &mut Context<'_>, frame: &mut OutFrame) -> Poll<io::Result<()>>;

    /// Writes a whole frame given as its header and one bulk segment (empty if it has
    /// none) now, if this transport takes frames so and has room: true once written,
    /// false with nothing written otherwise (the caller then sends it as an [`OutFrame`]
    /// with [`FrameSink::poll_send`]). Called only when no frame is partly written. The
    /// default takes none: a stream's vectored write gains nothing from it.
    fn try_send_parts(&mut self, _head: &[u8], _bulk: &[u8]) -> io::Result<bool> {
        Ok(false)
    }

    /// [`FrameSink::try_send_parts`] for a frame that may wait for the next batch: written
    /// now but not yet shown to the peer, which sees it (with everything written before
    /// it) at the next frame sent, batch sent or [`FrameSink::publish_deferred`]. A
    /// transport that can write without publishing (shared memory: a record committed,
    /// the ring's position stored later) saves the frame a queue and a buffer. The
    /// default takes none.
    fn try_defer_parts(&mut self, _head: &[u8], _bulk: &[u8]) -> io::Result<bool> {
        Ok(false)
    }

    /// Shows the peer what [`FrameSink::try_defer_parts`] wrote. Does nothing by default.
    fn publish_deferred(&mut self) {}

    /// Writes as much of `frames`, in order, as the transport takes now, advancing each:
    /// the batch hook, through which many frames can go out in one operation (a stream
    /// writes them all with one vectored write). Ready(Ok) once every frame is written;
    /// Pending (with the waker registered) if the transport is full, with the frames
    /// written so far advanced to empty. Frames are never interleaved. The default sends
    /// them one by one with [`FrameSink::poll_send`].
    fn poll_send_batch(
        &mut self,
        cx: &mut Context<'_>,
        frames: &mut [OutFrame],
    ) -> Poll<io::Result<()>> {
        for frame in frames {
            std::task::ready!(self.poll_send(cx, frame))?;
        }
        Poll::Ready(Ok(()))
    }

    /// The area this side's loans come from, if the transport has one (shared memory):
    /// bulk segments frozen from its loans are sent by reference (see [`crate::Loan`]).
    fn loan_area(&self) -> Option<lanner_shm::LoanArea> {
        None
    }

    /// The connection's spin budget: a transport whose sink can watch for room without a
    /// system call (shared memory) polls for it that long, at most a few microseconds,
    /// before it waits to be told, as a receiver spins before it sleeps. Zero (the
    /// default until this is called) waits at once. Does nothing by default.
    fn set_room_spin(&mut self, spin: std::time::Duration) {
        let _ = spin;
    }

    /// Everything queued is written (the flusher is done): a transport that had the
    /// reactor watch for room may stop (see `watched_socket`). Called under the writer's
    /// lock, before anyone can find the transport full again.
    fn stop_watching(&mut self) {}

    /// Bytes the transport has taken that the peer has not yet (a socket's send queue:
    /// for TCP, what the peer has not acknowledged), if it can tell; None by default. The
    /// keepalive counts this shrinking as a sign of life: a frame the kernel took at once
    /// may take much longer than the keepalive's silence to reach a peer behind a slow
    /// link, and a PING behind it cannot be answered before it has.
    fn unsent(&self) -> Option<usize> {
        None
    }
}

/// The result of a receive attempt that does not wait.
#[derive(Debug)]
pub enum Received {
    /// A complete frame.
    Frame(Bytes),
    /// A complete frame in shared memory, to take with [`FrameSource::take_shared`]: read
    /// in place where the peer can still write it, or some of whose bulk segments the
    /// peer lent from its loan area (they arrive apart from the frame, read in place).
    /// Decoded as memory the peer writes (`lanner_proto::in_place::decode`). (Not carried
    /// here: the result of every receive attempt stays as small as a plain frame.)
    Shared,
    /// The peer closed cleanly between frames.
    Closed,
    /// Bytes arrived but no complete frame yet (a large frame is on its way).
    Partial,
    /// Nothing arrived.
    Empty,
}

/// A frame in shared memory (see [`Received::Shared`]).
#[derive(Debug)]
pub struct SharedFrame {
    /// The frame, without the bytes of the segments lent apart from it.
    pub frame: Bytes,
    /// The lent segments, by index (none for a frame only read in place).
    pub segments: lanner_proto::ExternalSegments,
}

/// Whether anything may have arrived since a receive last found the transport empty,
/// told without the source (and the lock that guards it): a spinning receiver asks before
/// each receive attempt, so an empty look must be cheap (a load or two, no I/O, no
/// read-modify-write). It may say something arrived when nothing did (that costs one
/// receive attempt), but never that nothing arrived when an honest peer's data is there.
pub trait ArrivalHint: Send + Sync {
    /// Whether something may have arrived.
    fn maybe_arrived(&self) -> bool;
}

impl ArrivalHint for lanner_shm::ring::ArrivalHint {
    fn maybe_arrived(&self) -> bool {
        lanner_shm::ring::ArrivalHint::maybe_arrived(self)
    }
}

/// The receiving half of a transport.
pub trait FrameSource: Send + 'static {
    /// Tries to receive a frame without waiting and without registering for wake-ups; may
    /// make a system call. The runtime calls this while spinning.
    fn try_recv(&mut self) -> Result<Received, RecvError>;

    /// Waits for the transport: Ready with a complete frame, with `Closed` when the peer
    /// closed cleanly between frames, or with `Partial` when bytes arrived but the frame is
    /// not complete yet (so a sleeping reader can go back to spinning while a large frame
    /// streams in). Pending, with the waker registered, only if nothing arrived. Never
    /// returns `Empty`.
    fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Result<Received, RecvError>>;

    /// Whether another complete frame is already here, so that the next
    /// [`FrameSource::try_recv`] returns it without waiting for the peer (frames that
    /// arrived together: the receiver holds back its answers until it has taken them
    /// all). Must be cheap and must not do I/O; false when unsure. A hint: a true may be
    /// followed by a receive that finds only part of a frame.
    fn frame_ready(&self) -> bool {
        false
    }

    /// How many complete frames are already here, counting up to `limit` (a hint, like
    /// [`FrameSource::frame_ready`]; 0 when unsure). The receiver reads it once per burst
    /// to tell a deep pipeline from a shallow one (see `connection/reader.rs`).
    fn frames_ready(&self, limit: usize) -> usize {
        let _ = limit;
        0
    }

    /// Whether the matching sink sends a batch for little more than its frames' own cost
    /// (shared memory: one store publishes it), so that a receiver may answer a shallow
    /// pipeline in smaller batches that keep both sides busy (see
    /// `connection/reader.rs`). False where each batch is a system call.
    fn batches_cheaply(&self) -> bool {
        false
    }

    /// A look at arrivals that spinning receivers take without the source (see
    /// [`ArrivalHint`]); `None` where the transport has none (sockets: only a receive
    /// tells).
    fn arrival_hint(&self) -> Option<Box<dyn ArrivalHint>> {
        None
    }

    /// Sets the largest frame accepted from now on. Larger frames fail with
    /// [`FrameError::TooLarge`] before any memory is reserved for them.
    fn set_max_frame_size(&mut self, max_frame_size: u32);

    /// The handshake has authenticated the peer: work this side defers until then, so
    /// that a peer that never authenticates cannot make it happen, may start (a
    /// shared-memory server faults its region in). Does nothing by default.
    fn peer_authenticated(&mut self) {}

    /// The frame a receive attempt announced as [`Received::Shared`], once. Transports
    /// without shared memory never announce one.
    fn take_shared(&mut self) -> Option<SharedFrame> {
        None
    }

    /// The receiver goes back to spinning ([`FrameSource::try_recv`]) after waiting with
    /// [`FrameSource::poll_recv`]: a transport that had itself watched by the reactor for
    /// the wait may stop (watching costs every message something; see
    /// `watched_socket`). Not called on connections that do not spin.
    fn stop_watching(&mut self) {}
}

/// Both halves of a connected transport, plus a description of the peer for messages.
pub struct Transport {
    /// Sending half.
    pub sink: Box<dyn FrameSink>,
    /// Receiving half.
    pub source: Box<dyn FrameSource>,
    /// Who is on the other side (an address or path), for error messages and logs.
    pub peer: String,
    /// The peer process's identity as the kernel vouches for it (`SO_PEERCRED`), on
    /// transports that know it (Unix sockets, shared memory and in-process): on a server
    /// the client's, on a client the server's.
    pub credentials: Option<PeerCredentials>,
    /// On the server side of a TLS connection whose client presented a certificate that
    /// the server's configuration accepted: the subject of the client's leaf certificate,
    /// such as `CN=alice, O=Acme` (see [`tls::accept`] for the exact form). None on every
    /// other transport and side.
    pub certificate_subject: Option<String>,
}

impl std::fmt::Debug for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transport")
            .field("peer", &self.peer)
            .field("credentials", &self.credentials)
            .field("certificate_subject", &self.certificate_subject)
            .finish()
    }
}
