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

use std::fmt;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};

use crate::ring::Wake;
use crate::sys;

/// One end of a connected Unix stream socket, used as a doorbell.
pub struct Doorbell {
    socket: OwnedFd,
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
        Doorbell { socket }
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
                _ => return Err(e),
            },
        }
    }
    Ok(Drained::Flooded)
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
        let mut flood = UnixStream::from(a.socket.try_clone().unwrap());
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
        let duplicate = a.socket.try_clone().unwrap();
        a.hang_up();
        assert_eq!(b.drain().unwrap(), Drained::PeerGone);
        drop(duplicate);
    }
}
