//! Closing a stream socket without resetting its connection: a "lingering close".
//!
//! A socket closed with input unread makes TCP answer with a reset and throw away what the
//! peer has not received yet. When Lanner lets go of a connection it has shut down for
//! writing, the peer may well have sent something meanwhile (a keepalive PING, a RELEASE,
//! a CREDIT, a TLS record) that nobody reads any more, while the tail of an answer and the
//! CLOSE saying why still wait in the send queue. So such a socket is handed to
//! [`close_lingering`], which reads it, discarding what arrives, until the peer ends its
//! stream (at once, for a peer that got our end of stream) or for [`CLOSE_DRAIN`] at
//! most, and only then closes it, as web servers do.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::io::Interest;
use tokio::io::unix::AsyncFd;

use super::sys::{recv_slice_nonblocking, shutdown_writes};

/// How long a socket handed to [`close_lingering`] is still read, what arrives thrown
/// away, before it is closed.
const CLOSE_DRAIN: std::time::Duration = std::time::Duration::from_secs(2);

/// Sockets of the process being drained at most at once; beyond that a socket is closed at
/// once. The connections a server counts against its limit end before their sockets
/// drain: without a bound of its own, a peer that gets connection after connection closed
/// (with garbage, say) and then keeps each socket open and trickling would make the
/// process hold sockets beyond that limit.
const MAX_DRAINING: usize = 1024;

/// Sockets being drained now.
static DRAINING: AtomicUsize = AtomicUsize::new(0);

/// Closes `socket`, a connected stream socket nobody writes to any more: shuts it down for
/// writing (if its user has not: the peer may be waiting for our end of stream before it
/// ends its own), then drains its input on a task of `runtime` before closing it (see
/// the module docs). The socket must not be in any reactor's epoll set. On a runtime that
/// has shut down, or with [`MAX_DRAINING`] sockets draining already, it is closed at once.
pub(super) fn close_lingering(runtime: &tokio::runtime::Handle, socket: OwnedFd) {
    if shutdown_writes(socket.as_raw_fd()).is_err() {
        // Not a connected stream socket any more (reset, say): nothing to drain.
        return;
    }
    if DRAINING.fetch_add(1, Ordering::Relaxed) >= MAX_DRAINING {
        DRAINING.fetch_sub(1, Ordering::Relaxed);
        return;
    }
    // On a runtime that has shut down the task never runs: the descriptor is closed at
    // once, dropped with it (and the count with its guard).
    let draining = Draining;
    drop(runtime.spawn(async move {
        drain_then_close(socket).await;
        drop(draining);
    }));
}

/// One of [`DRAINING`], given back when dropped.
struct Draining;

impl Drop for Draining {
    fn drop(&mut self) {
        DRAINING.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Reads `socket` until its peer ends the stream, or for [`CLOSE_DRAIN`], discarding
/// what arrives; the socket is closed as this returns.
async fn drain_then_close(socket: OwnedFd) {
    // SAFETY: the registration owns the descriptor, so it stays open as long as the
    // registration does.
    let Ok(socket) = (unsafe { AsyncFd::register_with_interest(socket, Interest::READABLE) })
    else {
        return;
    };
    let mut scratch = [0u8; 4096];
    let drained = async {
        loop {
            let mut ready = socket.readable().await?;
            match ready.try_io(|socket| recv_slice_nonblocking(socket.as_raw_fd(), &mut scratch)) {
                Ok(Ok(0)) => return Ok(()),
                // Something arrived, thrown away; or nothing after all (`try_io` cleared
                // the readiness).
                Ok(Ok(_)) | Err(_) => {}
                Ok(Err(error)) => return Err::<(), io::Error>(error),
            }
        }
    };
    let _ = tokio::time::timeout(CLOSE_DRAIN, drained).await;
}
