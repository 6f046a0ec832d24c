//! Sleeping until the peer rings, or goes away.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::task::{Context, Poll};

use lanner_shm::doorbell::{self, Drained};
use tokio::io::Interest;
use tokio::net::UnixStream;

/// The peer process closed the connection's socket: it exited or dropped the connection.
#[derive(Debug)]
pub(super) struct PeerGone;

/// One registration of the connection's socket (the doorbell) with the reactor. The
/// source and the sink each have their own, on a duplicate descriptor, since a
/// registration wakes one task.
#[derive(Debug)]
pub(super) struct Waiter {
    socket: UnixStream,
}

impl Waiter {
    pub(super) fn new(socket: OwnedFd) -> io::Result<Waiter> {
        let socket = std::os::unix::net::UnixStream::from(socket);
        socket.set_nonblocking(true)?;
        Ok(Waiter {
            socket: UnixStream::from_std(socket)?,
        })
    }

    /// Ready(Ok) once the peer rang (or on a spurious wake-up: the caller re-checks its
    /// ring either way); Ready(Err) once the peer has gone; Pending, with the waker
    /// registered, otherwise.
    pub(super) fn poll_rung(&self, cx: &mut Context<'_>) -> Poll<Result<(), PeerGone>> {
        loop {
            match self.socket.poll_read_ready(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(_)) => return Poll::Ready(Err(PeerGone)),
                Poll::Ready(Ok(())) => {}
            }
            // Drain to WouldBlock, so that the reactor's readiness is cleared, remembering
            // what was found.
            let mut drained = Drained::Quiet;
            let result = self.socket.try_io(Interest::READABLE, || {
                drained = doorbell::drain(self.socket.as_fd())?;
                match drained {
                    Drained::PeerGone => Ok(()),
                    Drained::Rung | Drained::Quiet => Err(io::ErrorKind::WouldBlock.into()),
                }
            });
            match (drained, result) {
                (Drained::PeerGone, _) => return Poll::Ready(Err(PeerGone)),
                (_, Err(e)) if e.kind() != io::ErrorKind::WouldBlock => {
                    return Poll::Ready(Err(PeerGone));
                }
                (Drained::Rung, _) => return Poll::Ready(Ok(())),
                // A spurious wake-up: poll again, which registers the waker.
                (Drained::Quiet, _) => {}
            }
        }
    }

    /// Tells the peer this side is done: it sees end of file at once, whatever other
    /// descriptors of the socket are still open here (held received payloads keep one).
    pub(super) fn hang_up(&self) {
        // Fails only if the socket is already disconnected.
        let _ = lanner_shm::sys::shutdown(self.socket.as_fd());
    }

    /// Checks without waiting whether the peer has gone (consuming any rings: callers
    /// re-check their ring anyway).
    pub(super) fn peer_gone(&self) -> bool {
        !matches!(
            doorbell::drain(self.socket.as_fd()),
            Ok(Drained::Rung | Drained::Quiet)
        )
    }
}
