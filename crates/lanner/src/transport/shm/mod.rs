//! Shared memory between processes on one host (`shm://name`).
//!
//! Connection setup goes through a Unix stream socket in the abstract namespace
//! (`@lanner-shm/name`): the server learns the client's uid, gid and pid from
//! `SO_PEERCRED`, creates a region with one ring per direction in a sealed memfd, and
//! passes it to the client (the `setup` module). From then on frames travel through the rings: a
//! send copies the frame's segments into the outgoing ring (or fragments it if it is
//! larger than half the ring; a frame with 16 KiB or more of bulk data starts its record
//! with a short prefix that puts its payload where the source lies modulo a cache line,
//! which makes the copy faster), a receive takes the next record. No system call sits on
//! the path of a message while both sides are awake.
//!
//! The setup socket stays open for the life of the connection as its data doorbell, and a
//! socket pair passed with the region is its space doorbell: a half that announced it
//! sleeps (on its ring's flag) is woken by one byte sent to it, the receiving half on the
//! data doorbell, the sending half on the space doorbell, and each learns that the peer
//! died when the kernel closes the peer's end. (Eventfds passed to the peer would share
//! their open file description with it, so a hostile peer could make them blocking and
//! stall our thread. `MSG_DONTWAIT` keeps every call on a doorbell non-blocking whatever
//! its flags; the one end that was passed, the client's end of the space doorbell, could
//! still be shared by a server that kept a copy, which can then only disturb the wake-ups
//! of that connection or end it. See `lanner_shm::doorbell`.)
//!
//! Each side faults the whole region in on a blocking thread as soon as the connection is
//! set up (`MADV_POPULATE_WRITE`): otherwise every 4 KiB of new records costs both sides a
//! page fault until the rings have wrapped once. It takes a few milliseconds for the
//! default 4 MiB rings and commits their memory at connect time.
//!
//! Payloads built in this side's loan area ([`crate::ObjectRef::loan`]) are not copied
//! at all: the sink lends them (it sends their offset in the area, see the `lent` module)
//! and the peer reads them where they are, giving each back when it drops it. Other bulk
//! payloads of 256 KiB or more are copied into a block of the area and lent from there
//! (the one copy they would have had into the ring): a receiver that keeps one holds that
//! block, not the ring.
//!
//! Received frames of at least [`IN_PLACE_MIN`] bytes are handed to the runtime in place,
//! as a `Bytes` that keeps the frame's ring space until dropped; smaller frames are copied
//! out (a copy of a small frame costs less than tracking it). The peer can still write a
//! frame read in place, so the runtime decodes it as such (see [`lanner_proto::in_place`]):
//! nothing in it is read twice, and inline arguments are decoded from a copy. A receiver that keeps such
//! a payload for long holds back the ring behind it, so the sender waits once the ring
//! has come round: copy payloads you keep for long (those of 256 KiB or more come through
//! the loan area, unless it is full, and hold only their block).

pub(crate) mod lent;
mod setup;
mod sink;
mod source;
mod waiter;

use std::io;

pub use setup::{ShmListener, connect, connect_populating};

/// Bytes per ring (each direction) unless configured otherwise: 4 MiB, so that a 1 MiB
/// payload travels whole with room for another behind it.
pub const DEFAULT_RING_CAPACITY: usize = 4 << 20;

/// Received frames at least this large are handed over in place instead of copied.
pub const IN_PLACE_MIN: usize = 16 * 1024;

/// The abstract socket name of `shm://name`.
fn socket_name(name: &str) -> String {
    format!("lanner-shm/{name}")
}

fn ring_error(error: lanner_shm::RingError) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, error)
}
