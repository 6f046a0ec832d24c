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
    /// Pending, with the waker registered, otherwise, and also (woken at once) when a
    /// drain stopped with more rings waiting.
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
            // More may be waiting (a peer writing to its end without pause): yield, with
            // the readiness kept, rather than drain on in the caller's loop.
            (Drained::Flooded, _) => {
                cx.waker().wake_by_ref();
                Poll::Pending
            }
            // Even when nothing was left to drain (a liveness check may have drained the
            // ring): the caller re-checks its ring either way.
            (Drained::Rung | Drained::Quiet, _) => Poll::Ready(Ok(())),
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

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    #[tokio::test]
    async fn a_flooded_doorbell_yields_rather_than_draining_on() {
        let (ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
        let waiter = Waiter::new(ours.into()).unwrap();
        // A peer writing to its end for as long as the socket takes it.
        let mut flood = theirs;
        flood.set_nonblocking(true).unwrap();
        let chunk = vec![1u8; 64 * 1024];
        let mut written = 0;
        while let Ok(n) = flood.write(&chunk) {
            written += n;
        }
        assert!(
            written > doorbell::MAX_DRAIN_READS * 1024,
            "only {written} bytes fit"
        );
        waiter.socket.readable().await.unwrap();
        // One bounded drain, then Pending (woken at once): the caller's loop yields.
        let first = std::future::poll_fn(|cx| Poll::Ready(waiter.poll_rung(cx))).await;
        assert!(first.is_pending(), "{first:?}");
        // Later polls drain the rest, and then report the ring.
        let mut polls = 1;
        let last = loop {
            match std::future::poll_fn(|cx| Poll::Ready(waiter.poll_rung(cx))).await {
                Poll::Pending => polls += 1,
                Poll::Ready(result) => break result,
            }
            assert!(polls < 10_000, "the socket never ran dry");
        };
        assert!(last.is_ok());
        drop(flood);
    }
}
