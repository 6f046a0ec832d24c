//! Doorbells: how one side wakes the other when it went to sleep.
//!
//! A connection's doorbell is the Unix stream socket it was set up over, which stays open
//! for the connection's life. Ringing sends one byte to the peer; the sleeping side waits
//! for its end to become readable and then [drains](Doorbell::drain) it. Rings are only
//! hints (the woken side re-checks its ring), so a full socket buffer means the peer has
//! rings waiting already and a ring may be dropped. The same socket tells the sleeper that
//! the peer died: the kernel closes the peer's end.
//!
//! Why a socket rather than eventfds: a passed descriptor shares its open file description
//! with the side that passed it, which could clear `O_NONBLOCK` on it and make a plain read
//! or write block a thread that serves other connections. Every call here passes
//! `MSG_DONTWAIT` instead, which holds whatever the file's flags say (the tests below run
//! on blocking sockets). That matters for the one end that was passed: the client's end of
//! the space doorbell, which the server made (`handoff::offer_region`) and could keep a
//! duplicate of. A server that does can ring it, drain its rings first, or shut it down:
//! lost or spurious wake-ups, or the end of that one connection, nothing worse. The
//! connection's own socket was never passed, so each of its ends is its owner's alone.
//!
//! A peer can also pass descriptors over a doorbell socket, and the one it passes may be
//! slow to close (a TCP socket lingering with unsent data): whoever ends up closing it
//! blocks. So a drain reads with room for every descriptor a message can carry (the
//! kernel would otherwise close them on the draining thread), takes any that came as the
//! peer breaking the protocol (an error: end the connection), and has them closed on the
//! closer thread ([`crate::closer`]). A dropped doorbell's socket is closed there too:
//! descriptors still queued on it are closed with it. Where the kernel has
//! `SO_PASSRIGHTS` (Linux 6.16), the sockets are set to refuse descriptors outright
//! ([`sys::refuse_passed_descriptors`]; see [`crate::handoff`]), and a peer's attempt fails
//! on its side.

use std::fmt;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};

use crate::closer::ClosedLater;
use crate::ring::Wake;
use crate::sys;

/// One end of a connected Unix stream socket, used as a doorbell. Dropping it hangs up
/// ([`Doorbell::hang_up`]) and closes the socket on the closer thread.
pub struct Doorbell {
    socket: ClosedLater,
}

/// What a drain found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Drained {
    /// The peer rang since the last drain.
    Rung,
    /// Nothing arrived.
    Quiet,
    /// The peer rang more than one drain reads ([`MAX_DRAIN_READS`] reads): more may be
    /// waiting. Counts as rung; the socket was not read to its end, so whoever waits on
    /// its readiness must not consider it drained.
    Flooded,
    /// The peer closed its end: it exited or dropped the connection.
    PeerGone,
}

impl Doorbell {
    /// Uses `socket` (a connected Unix stream socket) as a doorbell.
    pub fn new(socket: OwnedFd) -> Doorbell {
        Doorbell {
            socket: ClosedLater::new(socket),
        }
    }

    /// A new descriptor of the doorbell's socket (for a waiter to register, say). Drop it
    /// with [`crate::closer::close_later`], or wrap it in a [`ClosedLater`]: the last
    /// descriptor of the socket to be closed closes whatever descriptors the peer queued
    /// on it.
    pub fn try_clone_socket(&self) -> io::Result<OwnedFd> {
        self.socket.as_fd().try_clone_to_owned()
    }

    /// Reads whatever rings arrived, without blocking.
    pub fn drain(&self) -> io::Result<Drained> {
        drain(self.socket.as_fd())
    }

    /// Wakes the peer. Never blocks. Failures are ignored: a full socket means rings are
    /// already waiting for the peer, and a closed one means the peer is gone, which its
    /// side of the socket reports to whoever waits on it.
    pub fn ring(&self) {
        loop {
            match sys::send_nonblocking(self.socket.as_fd(), &[1]) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                _ => return,
            }
        }
    }

    /// Shuts the socket down in both directions: the peer sees end of file at once, even
    /// if other descriptors of the socket are still open in this process.
    pub fn hang_up(&self) {
        // Fails only if the socket is not connected any more, which is the goal anyway.
        let _ = sys::shutdown(self.socket.as_fd());
    }
}

/// Reads one drain makes at most, of up to a kilobyte each: an honest peer rings once per
/// sleep (one byte), and a peer that keeps writing to its end cannot keep the drainer in
/// its loop (the next drain reads on).
pub const MAX_DRAIN_READS: usize = 16;

/// Reads whatever rings arrived on a doorbell socket (any descriptor of it), without
/// blocking; at most [`MAX_DRAIN_READS`] reads ([`Drained::Flooded`] if more was there).
///
/// Fails with `InvalidData` if the peer passed descriptors with its rings: they are closed
/// on the closer thread, and the connection must end.
pub fn drain(socket: BorrowedFd<'_>) -> io::Result<Drained> {
    let mut buf = [0u8; 1024];
    let mut rung = false;
    for _ in 0..MAX_DRAIN_READS {
        match sys::recv_nonblocking(socket, &mut buf) {
            Ok(0) => return Ok(Drained::PeerGone),
            Ok(_) => rung = true,
            Err(e) => match e.kind() {
                io::ErrorKind::WouldBlock => {
                    return Ok(if rung { Drained::Rung } else { Drained::Quiet });
                }
                io::ErrorKind::Interrupted => {}
                io::ErrorKind::ConnectionReset => return Ok(Drained::PeerGone),
                io::ErrorKind::InvalidData => {
                    return Err(sys::annotate(e, format_args!("shared-memory doorbell")));
                }
                _ => return Err(e),
            },
        }
    }
    Ok(Drained::Flooded)
}

impl Drop for Doorbell {
    fn drop(&mut self) {
        // The peer learns of it now, not when the closer thread gets to the socket (it may
        // be held up) or when the socket's other descriptors (a waiter's) are closed.
        self.hang_up();
    }
}

impl Wake for Doorbell {
    fn wake(&self) {
        self.ring();
    }
}

impl AsFd for Doorbell {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.socket.as_fd()
    }
}

impl AsRawFd for Doorbell {
    fn as_raw_fd(&self) -> RawFd {
        self.socket.as_raw_fd()
    }
}

impl fmt::Debug for Doorbell {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Doorbell")
            .field("socket", &self.socket.as_raw_fd())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::net::UnixStream;

    use super::*;

    fn pair() -> (Doorbell, Doorbell) {
        let (a, b) = UnixStream::pair().unwrap();
        (Doorbell::new(a.into()), Doorbell::new(b.into()))
    }

    #[test]
    fn rings_are_drained_once() {
        let (a, b) = pair();
        assert_eq!(b.drain().unwrap(), Drained::Quiet);
        a.ring();
        a.ring();
        assert_eq!(b.drain().unwrap(), Drained::Rung);
        assert_eq!(b.drain().unwrap(), Drained::Quiet);
        (&a as &dyn Wake).wake();
        assert_eq!(b.drain().unwrap(), Drained::Rung);
    }

    #[test]
    fn ringing_a_full_socket_does_not_block() {
        let (a, b) = pair();
        for _ in 0..1_000_000 {
            a.ring();
        }
        assert_eq!(b.drain().unwrap(), Drained::Rung);
    }

    #[test]
    fn draining_a_flooded_socket_is_bounded() {
        let (a, b) = pair();
        // A peer writing large chunks to its end for as long as the socket takes them.
        let mut flood = UnixStream::from(a.try_clone_socket().unwrap());
        flood.set_nonblocking(true).unwrap();
        let chunk = vec![1u8; 64 * 1024];
        let mut written = 0;
        while let Ok(n) = std::io::Write::write(&mut flood, &chunk) {
            written += n;
        }
        assert!(written > MAX_DRAIN_READS * 1024, "only {written} bytes fit");
        // Each drain reads a bounded amount and says there may be more.
        assert_eq!(b.drain().unwrap(), Drained::Flooded);
        let mut drains = 1;
        let last = loop {
            match b.drain().unwrap() {
                Drained::Flooded => drains += 1,
                other => break other,
            }
            assert!(drains < 10_000, "the socket never ran dry");
        };
        assert!(drains > 1, "a full socket takes several drains");
        assert!(matches!(last, Drained::Rung | Drained::Quiet), "{last:?}");
        assert_eq!(b.drain().unwrap(), Drained::Quiet);
    }

    #[test]
    fn the_peer_going_away_is_seen_even_after_rings() {
        let (a, b) = pair();
        a.ring();
        drop(a);
        assert_eq!(b.drain().unwrap(), Drained::PeerGone);
        b.ring(); // no SIGPIPE, no error
    }

    #[test]
    fn hanging_up_is_seen_while_other_descriptors_stay_open() {
        let (a, b) = pair();
        let duplicate = a.try_clone_socket().unwrap();
        a.hang_up();
        assert_eq!(b.drain().unwrap(), Drained::PeerGone);
        drop(duplicate);
    }

    #[test]
    fn a_descriptor_passed_with_a_ring_fails_the_drain_and_is_closed_elsewhere() {
        let (a, b) = pair();
        let (passed, witness) = UnixStream::pair().unwrap();
        sys::send_with_fds(a.as_fd(), &[1], &[passed.as_fd()]).unwrap();
        drop(passed);
        let paused = crate::closer::pause();
        let error = b.drain().unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::InvalidData);
        assert!(error.to_string().contains("doorbell"), "{error}");
        assert!(error.to_string().contains("file descriptor"), "{error}");
        // Still open when the drain has returned: the kernel did not close it on this
        // thread...
        assert!(!crate::tests::closed_soon_within(&witness, 20));
        drop(paused);
        // ... the closer thread did, afterwards.
        assert!(crate::tests::closed_soon(&witness), "the descriptor leaked");
    }

    #[test]
    fn a_lingering_socket_passed_with_a_ring_does_not_hold_the_drain() {
        let (a, b) = pair();
        let linger = std::time::Duration::from_secs(2);
        let (lingering, reader) = sys::testing::lingering_tcp_socket(linger);
        sys::send_with_fds(a.as_fd(), &[1], &[lingering.as_fd()]).unwrap();
        drop(lingering);
        // Kept from the closer thread until the close no longer lingers: under valgrind,
        // which runs one thread at a time, its blocked close would stall this one too.
        let paused = crate::closer::pause();
        let started = std::time::Instant::now();
        assert!(b.drain().is_err());
        let took = started.elapsed();
        assert!(took < linger / 4, "the drain took {took:?}");
        // The reader's close resets the connection: the lingering close returns at once.
        drop(reader);
        drop(paused);
    }

    #[test]
    fn a_dropped_doorbell_hangs_up_at_once_and_closes_queued_descriptors_elsewhere() {
        let (a, b) = pair();
        let (passed, witness) = UnixStream::pair().unwrap();
        sys::send_with_fds(a.as_fd(), &[1], &[passed.as_fd()]).unwrap();
        drop(passed);
        let paused = crate::closer::pause();
        drop(b);
        // The peer sees the hang-up while the socket waits for the closer thread...
        assert_eq!(a.drain().unwrap(), Drained::PeerGone);
        assert!(!crate::tests::closed_soon_within(&witness, 20));
        drop(paused);
        // ... which closes the socket, and the descriptor queued on it with it.
        assert!(crate::tests::closed_soon(&witness), "the descriptor leaked");
    }
}
