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

/// A doorbell socket registered with the reactor, for the one half of the connection that
/// sleeps on it (the source on the data doorbell, the sink on the space doorbell).
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

    /// Ready(Ok) once the socket was readable (the peer rang, for this half or the other
    /// one: the caller re-checks its ring either way); Ready(Err) once the peer has gone;
    /// Pending, with the waker registered, otherwise.
    pub(super) fn poll_rung(&self, cx: &mut Context<'_>) -> Poll<Result<(), PeerGone>> {
        match self.socket.poll_read_ready(cx) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(Err(_)) => return Poll::Ready(Err(PeerGone)),
            Poll::Ready(Ok(())) => {}
        }
        // Drain to WouldBlock, so that the reactor's readiness is cleared, remembering
        // whether the peer hung up. A drain cut short (a peer flooding the socket) keeps
        // the readiness: the socket is not empty, and no new edge may come to say so.
        let mut drained = Drained::Quiet;
        let result = self.socket.try_io(Interest::READABLE, || {
            drained = doorbell::drain(self.socket.as_fd())?;
            match drained {
                Drained::PeerGone | Drained::Flooded => Ok(()),
                Drained::Rung | Drained::Quiet => Err(io::ErrorKind::WouldBlock.into()),
            }
        });
        match (drained, result) {
            (Drained::PeerGone, _) => Poll::Ready(Err(PeerGone)),
            (_, Err(e)) if e.kind() != io::ErrorKind::WouldBlock => Poll::Ready(Err(PeerGone)),
            // Even when nothing was left to drain (a liveness check may have drained the
            // ring): the caller re-checks its ring either way.
            (Drained::Rung | Drained::Quiet | Drained::Flooded, _) => Poll::Ready(Ok(())),
        }
    }

    /// Checks without waiting whether the peer has gone (consuming any rings: callers
    /// re-check their ring anyway).
    pub(super) fn peer_gone(&self) -> bool {
        !matches!(
            doorbell::drain(self.socket.as_fd()),
            Ok(Drained::Rung | Drained::Quiet | Drained::Flooded)
        )
    }
}
