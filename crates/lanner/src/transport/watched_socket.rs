//! A connected stream socket (TCP or Unix) that is in the reactor's epoll set only while
//! someone waits on it through the reactor.
//!
//! A socket in an epoll set costs something on every message, paid on the critical path:
//! the sender's `send` runs the epoll callback of the receiving socket (`sock_def_readable`
//! → `ep_poll_callback`, locks taken with interrupts off), and on Unix sockets the
//! receiver's `recv` runs the one of the sending socket as well (write space, on every
//! message consumed). Measured here (2-core VM, spinning ping-pong over a Unix socket
//! pair, alternating blocks): a round trip takes 0.10–0.17 µs longer with one side's
//! socket registered and 0.31–0.37 µs longer with both, against about 4.3 µs in all: a
//! quarter of what Lanner used to add to the raw round trip.
//!
//! A connection's reader does not need the reactor while it spins (it polls the socket
//! with non-blocking receives), so the socket is registered when a waiter is about to
//! sleep (the reader, or a writer that found the socket full) and deregistered when the
//! reader goes back to spinning ([`SocketReadHalf::stop_watching`]) and no writer waits.
//! Registering checks the socket's state at once, so data or room that came while it was
//! out of the set is not missed. A connection that does not spin (pure blocking) stays
//! registered: it waits through the reactor for every frame, and registering each time
//! would cost two system calls per frame.

use std::io::{self, IoSlice};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, ready};

use bytes::BytesMut;
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};

use super::lingering_close::close_lingering;
use super::stream::{StreamReadHalf, StreamWriteHalf};
use super::sys::{
    recv_nonblocking, recv_uninit_nonblocking, send_slices_nonblocking, shutdown_writes,
};

/// Splits a connected, non-blocking stream socket into halves that register it with the
/// reactor only while one of them waits (see the module docs). Must be called within a
/// tokio runtime: waits register with its reactor, whichever thread they start on.
pub(super) fn split(socket: OwnedFd) -> (SocketReadHalf, SocketWriteHalf) {
    let socket = Arc::new(WatchedSocket {
        watch: Mutex::new(Watch::default()),
        runtime: tokio::runtime::Handle::current(),
        raw: socket.as_raw_fd(),
        fd: Some(socket),
    });
    (
        SocketReadHalf {
            socket: socket.clone(),
        },
        SocketWriteHalf {
            socket,
            watching: false,
        },
    )
}

#[derive(Debug)]
struct WatchedSocket {
    /// `Drop` empties its registration before it lets go of `fd`: the socket leaves the
    /// epoll set before it is closed.
    watch: Mutex<Watch>,
    /// The runtime whose reactor the socket registers with.
    runtime: tokio::runtime::Handle,
    /// The descriptor, open as long as `self` (the halves use it through `raw`).
    /// Always there until `Drop` hands it to [`close_lingering`].
    fd: Option<OwnedFd>,
    /// `fd`'s number.
    raw: RawFd,
}

impl Drop for WatchedSocket {
    /// Both halves are gone, so the socket is shut down for writing (see
    /// [`SocketWriteHalf`]'s `Drop`): what was written, and the end of stream after it,
    /// are on their way. Closing it now with input unread (a frame the peer sent after
    /// the reader stopped: a keepalive PING, a RELEASE) would make TCP answer with a reset
    /// and throw away what the peer has not received yet, the tail of an answer and the
    /// CLOSE saying why. So the socket goes to [`close_lingering`].
    fn drop(&mut self) {
        // Out of the epoll set before the descriptor goes to the draining task.
        self.watch
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .registration = None;
        let Some(fd) = self.fd.take() else {
            return;
        };
        close_lingering(&self.runtime, fd);
    }
}

/// Who waits on the socket through the reactor, and its registration while anyone does.
#[derive(Debug, Default)]
struct Watch {
    registration: Option<AsyncFd<Descriptor>>,
    reader: bool,
    writer: bool,
}

/// The socket's descriptor as the registration sees it (it does not own it).
#[derive(Debug)]
struct Descriptor(RawFd);

impl AsRawFd for Descriptor {
    fn as_raw_fd(&self) -> RawFd {
        self.0
    }
}

impl WatchedSocket {
    fn watch(&self) -> MutexGuard<'_, Watch> {
        self.watch.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The socket's registration, made now if there is none.
    fn registration<'a>(&self, watch: &'a mut Watch) -> io::Result<&'a AsyncFd<Descriptor>> {
        if watch.registration.is_none() {
            let _runtime = self.runtime.enter();
            // SAFETY: the descriptor is `self.fd`, open until `self` is dropped; the
            // registration lives in `self.watch`, which `Drop` empties before it lets go
            // of `self.fd`.
            let registration = unsafe {
                AsyncFd::register_with_interest(
                    Descriptor(self.raw),
                    Interest::READABLE | Interest::WRITABLE,
                )
            };
            watch.registration = Some(registration.map_err(|error| error.into_parts().1)?);
        }
        Ok(watch.registration.as_ref().expect("registered just above"))
    }
}

impl Watch {
    /// Deregisters the socket if nobody waits on it any more.
    fn release_if_unused(&mut self) {
        if !self.reader && !self.writer {
            self.registration = None;
        }
    }
}

/// The receiving half: non-blocking receives straight on the socket while spinning,
/// through the reactor when waiting.
#[derive(Debug)]
pub(super) struct SocketReadHalf {
    socket: Arc<WatchedSocket>,
}

impl SocketReadHalf {
    /// The reader goes back to spinning: it no longer needs wake-ups, so the socket
    /// leaves the epoll set unless a writer waits for room.
    pub(super) fn stop_watching(&mut self) {
        let mut watch = self.socket.watch();
        if watch.reader {
            watch.reader = false;
            watch.release_if_unused();
        }
    }
}

impl StreamReadHalf for SocketReadHalf {
    #[inline]
    fn try_read(&mut self, buffer: &mut BytesMut) -> io::Result<usize> {
        recv_nonblocking(self.socket.raw, buffer)
    }

    fn stop_watching(&mut self) {
        SocketReadHalf::stop_watching(self);
    }
}

impl AsyncRead for SocketReadHalf {
    /// Registers the socket (if it is not) and reads once it is readable; the reader
    /// stays a watcher until [`SocketReadHalf::stop_watching`].
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let mut watch = self.socket.watch();
        watch.reader = true;
        let fresh = watch.registration.is_none();
        let registration = self.socket.registration(&mut watch)?;
        if fresh {
            // A new registration knows nothing of the socket's state until the reactor
            // turns: data that came since the reader's last try would wait for that.
            // SAFETY: `recv` writes at most `unfilled.len()` bytes into the unfilled part
            // and never reads it; exactly the bytes it reports are marked initialised.
            let unfilled = unsafe { buf.unfilled_mut() };
            match recv_uninit_nonblocking(self.socket.raw, unfilled) {
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => {}
                Err(error) => return Poll::Ready(Err(error)),
                Ok(received) => {
                    // SAFETY: the kernel initialised the first `received` bytes.
                    unsafe { buf.assume_init(received) };
                    buf.advance(received);
                    return Poll::Ready(Ok(()));
                }
            }
        }
        loop {
            let mut ready = ready!(registration.poll_read_ready(cx))?;
            // SAFETY: `recv` writes at most `unfilled.len()` bytes into the unfilled part
            // and never reads it; exactly the bytes it reports are marked initialised.
            let unfilled = unsafe { buf.unfilled_mut() };
            match ready
                .try_io(|descriptor| recv_uninit_nonblocking(descriptor.get_ref().0, unfilled))
            {
                Ok(Ok(received)) => {
                    // SAFETY: the kernel initialised the first `received` bytes.
                    unsafe { buf.assume_init(received) };
                    buf.advance(received);
                    return Poll::Ready(Ok(()));
                }
                Ok(Err(error)) => return Poll::Ready(Err(error)),
                // Not readable after all: the readiness was cleared, wait again.
                Err(_would_block) => continue,
            }
        }
    }
}

/// The sending half: non-blocking sends straight on the socket; when it is full, a wait
/// for room through the reactor, registered until the flusher has written everything
/// ([`StreamWriteHalf::stop_watching`]: a frame larger than the socket's buffer fills it
/// many times over, and registering afresh each time would cost two system calls and a
/// turn of the reactor per refill). Dropping it shuts the socket down for writing (as
/// tokio's halves do), so the peer reads the end of the stream.
#[derive(Debug)]
pub(super) struct SocketWriteHalf {
    socket: Arc<WatchedSocket>,
    /// This half registered to wait for room and has not stopped watching since.
    watching: bool,
}

impl StreamWriteHalf for SocketWriteHalf {
    #[inline]
    fn try_write_vectored(&mut self, slices: &[IoSlice<'_>]) -> io::Result<usize> {
        send_slices_nonblocking(self.socket.raw, slices)
    }

    fn unsent(&self) -> Option<usize> {
        super::sys::unsent_bytes(self.socket.raw)
    }

    fn stop_watching(&mut self) {
        if self.watching {
            self.watching = false;
            let mut watch = self.socket.watch();
            watch.writer = false;
            watch.release_if_unused();
        }
    }
}

impl AsyncWrite for SocketWriteHalf {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.poll_write_vectored(cx, &[IoSlice::new(buf)])
    }

    /// Registers the socket (if it is not) and writes once it has room; the writer stays
    /// a watcher until [`StreamWriteHalf::stop_watching`].
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        slices: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        this.watching = true;
        let mut watch = this.socket.watch();
        watch.writer = true;
        let fresh = watch.registration.is_none();
        let registration = this.socket.registration(&mut watch)?;
        if fresh {
            // A new registration knows nothing of the socket's state until the reactor
            // turns: room that came since the caller's last try goes unused until then.
            match send_slices_nonblocking(this.socket.raw, slices) {
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => {}
                done => return Poll::Ready(done),
            }
        }
        loop {
            let mut ready = ready!(registration.poll_write_ready(cx))?;
            match ready.try_io(|descriptor| send_slices_nonblocking(descriptor.get_ref().0, slices))
            {
                Ok(result) => return Poll::Ready(result),
                Err(_would_block) => continue,
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
        Poll::Ready(shutdown_writes(self.socket.raw))
    }
}

impl Drop for SocketWriteHalf {
    fn drop(&mut self) {
        let _ = shutdown_writes(self.socket.raw);
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::os::unix::net::UnixStream;
    use std::time::Duration;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    fn pair() -> ((SocketReadHalf, SocketWriteHalf), UnixStream) {
        let (ours, theirs) = UnixStream::pair().unwrap();
        ours.set_nonblocking(true).unwrap();
        (split(ours.into()), theirs)
    }

    fn registered(half: &SocketReadHalf) -> bool {
        half.socket.watch().registration.is_some()
    }

    #[tokio::test]
    async fn a_waiting_reader_is_woken_and_spinning_needs_no_registration() {
        let ((mut reader, _writer), mut peer) = pair();
        let mut buffer = BytesMut::with_capacity(64);
        assert_eq!(
            reader.try_read(&mut buffer).unwrap_err().kind(),
            io::ErrorKind::WouldBlock
        );
        assert!(!registered(&reader), "spinning registers nothing");
        let sender = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            peer.write_all(b"late").unwrap();
            peer
        });
        let mut received = [0u8; 4];
        reader.read_exact(&mut received).await.unwrap();
        assert_eq!(&received, b"late");
        assert!(registered(&reader), "the wait registered the socket");
        reader.stop_watching();
        assert!(!registered(&reader), "back to spinning: deregistered");
        let mut peer = sender.join().unwrap();
        peer.write_all(b"more").unwrap();
        assert_eq!(reader.try_read(&mut buffer).unwrap(), 4);
        assert_eq!(&buffer[..], b"more");
        // Data that came while the socket was out of the epoll set wakes a new wait.
        peer.write_all(b"again").unwrap();
        let mut received = [0u8; 5];
        tokio::time::timeout(Duration::from_secs(5), reader.read_exact(&mut received))
            .await
            .expect("data already there is seen when registering")
            .unwrap();
    }

    #[tokio::test]
    async fn a_writer_waits_for_room_and_lets_go_once_the_flusher_is_done() {
        let ((reader, mut writer), mut peer) = pair();
        let chunk = vec![7u8; 64 * 1024];
        // Fill the socket.
        let mut filled = 0;
        while let Ok(written) = writer.try_write_vectored(&[IoSlice::new(&chunk)]) {
            filled += written;
        }
        let drain = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            let mut sink = vec![0u8; 64 * 1024];
            let mut total = 0;
            while total < filled + sink.len() {
                total += peer.read(&mut sink).unwrap();
            }
            peer
        });
        tokio::time::timeout(Duration::from_secs(5), writer.write_all(&chunk))
            .await
            .expect("room came")
            .unwrap();
        assert!(registered(&reader), "the full socket was watched for room");
        let _peer = drain.join().unwrap();
        writer.try_write_vectored(&[IoSlice::new(b"x")]).unwrap();
        assert!(registered(&reader), "watched until the flusher is done");
        writer.stop_watching();
        assert!(!registered(&reader), "the flusher is done: deregistered");
    }

    #[tokio::test]
    async fn the_registration_stays_while_either_half_waits() {
        let ((mut reader, mut writer), mut peer) = pair();
        {
            let mut watch = reader.socket.watch();
            watch.reader = true;
            reader.socket.registration(&mut watch).unwrap();
        }
        writer.watching = true;
        writer.socket.watch().writer = true;
        reader.stop_watching();
        assert!(registered(&reader), "the writer still waits");
        writer.try_write_vectored(&[IoSlice::new(b"x")]).unwrap();
        writer.stop_watching();
        assert!(!registered(&reader));
        let mut byte = [0u8; 1];
        peer.read_exact(&mut byte).unwrap();
    }

    #[tokio::test]
    async fn dropping_the_write_half_ends_the_peers_stream() {
        let ((_reader, writer), mut peer) = pair();
        drop(writer);
        let mut rest = Vec::new();
        assert_eq!(peer.read_to_end(&mut rest).unwrap(), 0);
    }

    #[tokio::test]
    async fn shutting_down_the_write_half_ends_the_peers_stream() {
        let ((_reader, mut writer), mut peer) = pair();
        writer.write_all(b"bye").await.unwrap();
        writer.shutdown().await.unwrap();
        let mut rest = Vec::new();
        peer.read_to_end(&mut rest).unwrap();
        assert_eq!(rest, b"bye");
    }
}
