//! Sleeping until the peer rings, or goes away.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::task::{Context, Poll};

use lanner_shm::closer;
use lanner_shm::doorbell::{self, Drained};
use tokio::io::Interest;
use tokio::net::UnixStream;

/// Why a doorbell says the connection is over.
#[derive(Debug)]
pub(super) enum Ended {
    /// The peer process closed the connection's socket: it exited or dropped the
    /// connection.
    PeerGone,
    /// The doorbell failed, or the peer broke the protocol on it (it passed file
    /// descriptors): the error says which.
    Failed(io::Error),
}

/// A doorbell socket registered with the reactor, for the one half of the connection that
/// sleeps on it (the source on the data doorbell, the sink on the space doorbell). Its
/// descriptor is closed on the closer thread ([`lanner_shm::closer`]): if it is the
/// socket's last, the close also closes whatever descriptors the peer queued on it, and a
/// peer can make those slow to close.
#[derive(Debug)]
pub(super) struct Waiter {
    socket: ClosedApart,
}

impl Waiter {
    /// Registers `socket` (made non-blocking) with the reactor.
    pub(super) fn new(socket: OwnedFd) -> io::Result<Waiter> {
        let socket = std::os::unix::net::UnixStream::from(socket);
        socket.set_nonblocking(true)?;
        Ok(Waiter {
            socket: ClosedApart::new(UnixStream::from_std(socket)?),
        })
    }

    /// Ready(Ok) once the socket was readable (the peer rang, for this half or the other
    /// one: the caller re-checks its ring either way); Ready(Err) once the connection is
    /// over; Pending, with the waker registered, otherwise, and also (woken at once) when
    /// a drain stopped with more rings waiting.
    pub(super) fn poll_rung(&self, cx: &mut Context<'_>) -> Poll<Result<(), Ended>> {
        let socket = self.socket.get();
        match socket.poll_read_ready(cx) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(Err(e)) => return Poll::Ready(Err(Ended::Failed(e))),
            Poll::Ready(Ok(())) => {}
        }
        // Drain to WouldBlock, so that the reactor's readiness is cleared, remembering
        // whether the peer hung up. A drain cut short (a peer flooding the socket) keeps
        // the readiness: the socket is not empty, and no new edge may come to say so.
        let mut drained = Drained::Quiet;
        let result = socket.try_io(Interest::READABLE, || {
            drained = doorbell::drain(socket.as_fd())?;
            match drained {
                Drained::PeerGone | Drained::Flooded => Ok(()),
                Drained::Rung | Drained::Quiet => Err(io::ErrorKind::WouldBlock.into()),
            }
        });
        match (drained, result) {
            (Drained::PeerGone, _) => Poll::Ready(Err(Ended::PeerGone)),
            (_, Err(e)) if e.kind() != io::ErrorKind::WouldBlock => {
                Poll::Ready(Err(Ended::Failed(e)))
            }
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

    /// Checks without waiting whether the connection is over (consuming any rings:
    /// callers re-check their ring anyway).
    pub(super) fn check(&self) -> Result<(), Ended> {
        match doorbell::drain(self.socket.get().as_fd()) {
            Ok(Drained::Rung | Drained::Quiet | Drained::Flooded) => Ok(()),
            Ok(Drained::PeerGone) => Err(Ended::PeerGone),
            Err(e) => Err(Ended::Failed(e)),
        }
    }
}

/// A socket registered with the reactor that is closed on the closer thread when dropped
/// ([`lanner_shm::closer`]): the close of a socket closes the descriptors queued on it, and
/// a peer can make those slow to close.
#[derive(Debug)]
pub(super) struct ClosedApart {
    /// Always `Some` until the drop (or [`ClosedApart::into_inner`]) takes it.
    socket: Option<UnixStream>,
}

impl ClosedApart {
    pub(super) fn new(socket: UnixStream) -> ClosedApart {
        ClosedApart {
            socket: Some(socket),
        }
    }

    pub(super) fn get(&self) -> &UnixStream {
        self.socket
            .as_ref()
            .expect("the socket is taken only when dropped")
    }

    /// Gives the socket back, to be closed as its new owner decides.
    pub(super) fn into_inner(mut self) -> UnixStream {
        self.socket
            .take()
            .expect("the socket is taken only when dropped")
    }
}

impl Drop for ClosedApart {
    fn drop(&mut self) {
        // Deregistered here; only a failure to deregister closes it on this thread.
        if let Some(Ok(socket)) = self.socket.take().map(UnixStream::into_std) {
            closer::close_later([OwnedFd::from(socket)]);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::time::{Duration, Instant};

    use super::*;
    use lanner_shm::sys::testing::{lingering_tcp_socket, under_valgrind};

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
        waiter.socket.get().readable().await.unwrap();
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

    /// A waiter whose peer (the socket returned with it) passed, without SO_PASSRIGHTS (as
    /// on kernels before 6.16), a TCP socket whose close lingers for `linger`; and the
    /// reader at the other end of that socket, whose close ends the linger.
    fn waiter_with_a_lingering_socket_queued(
        linger: Duration,
    ) -> (Waiter, std::os::unix::net::UnixStream, std::net::TcpStream) {
        let (ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
        let waiter = Waiter::new(ours.into()).unwrap();
        let (lingering, reader) = lingering_tcp_socket(linger);
        lanner_shm::sys::send_with_fds(theirs.as_fd(), &[1], &[lingering.as_fd()]).unwrap();
        (waiter, theirs, reader)
    }

    #[tokio::test]
    async fn a_descriptor_passed_on_a_doorbell_ends_the_connection_without_blocking() {
        let linger = Duration::from_secs(2);
        let (waiter, _theirs, reader) = waiter_with_a_lingering_socket_queued(linger);
        waiter.socket.get().readable().await.unwrap();
        let started = Instant::now();
        let ended = std::future::poll_fn(|cx| Poll::Ready(waiter.poll_rung(cx))).await;
        let took = started.elapsed();
        // The reader's close resets the connection: the lingering close returns at once.
        drop(reader);
        // The lingering close went to the closer thread, not this one.
        assert!(
            took < linger / 4 || under_valgrind(),
            "the wake-up took {took:?}"
        );
        match ended {
            Poll::Ready(Err(Ended::Failed(error))) => {
                assert_eq!(error.kind(), io::ErrorKind::InvalidData, "{error}");
                assert!(error.to_string().contains("file descriptor"), "{error}");
            }
            other => panic!("the connection goes on: {other:?}"),
        }
        // The check a spinning receiver makes sees it the same way.
        let (ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
        let waiter = Waiter::new(ours.into()).unwrap();
        lanner_shm::sys::send_with_fds(theirs.as_fd(), &[1], &[theirs.as_fd()]).unwrap();
        assert!(matches!(waiter.check(), Err(Ended::Failed(_))));
    }

    #[tokio::test]
    async fn a_waiter_dropped_with_a_descriptor_queued_is_closed_apart() {
        // Its socket's last descriptor: closing it closes the lingering socket queued on it.
        let linger = Duration::from_secs(2);
        let (waiter, _theirs, reader) = waiter_with_a_lingering_socket_queued(linger);
        let started = Instant::now();
        drop(waiter);
        let took = started.elapsed();
        // The reader's close resets the connection: the lingering close returns at once.
        drop(reader);
        assert!(
            took < linger / 4 || under_valgrind(),
            "the drop took {took:?}"
        );
    }
}
