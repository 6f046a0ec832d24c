//! The offers a listener sent that their clients have not taken yet, counted per client
//! uid and bounded (see `docs/decisions.md`, "Offers a client never takes"). The `lanner`
//! runtime's `shm://` listener keeps one table, and so does the raw baseline of
//! `lanner serve`.
//!
//! An offer carries two descriptors (the region's memfd and the client's end of the space
//! doorbell). Until the client reads it, the kernel counts them in flight and charges them
//! to the user this process runs as; once that user has more in flight than its
//! `RLIMIT_NOFILE`, every `sendmsg` with descriptors fails (`ETOOMANYREFS`; a privileged
//! process is exempt), every later shared-memory offer of this server included. Closing
//! our end of the connection releases nothing: the offer sits in the client's receive
//! queue until the client reads it or closes its socket. A local client that connects
//! and never reads could otherwise lock everyone out.
//!
//! So a listener keeps a duplicate of each connection's setup socket here from the moment
//! it sends the offer ([`UntakenOffers::offer`]), through the end of the connection,
//! until [`sys::unread_by_peer`] says 0: the client has read everything sent on it (the
//! offer first) or closed its end. Entries are checked lazily, without a task each: those
//! of a uid when it connects again, all of them when the table is at its bound, and all
//! of them every [`SWEEP_INTERVAL`] while any are held, if the listener waits for
//! [`UntakenOffers::next_sweep`] beside the next connection (the runtime's does). A
//! connection is refused before its offer ([`UntakenOffers::offer`]) when its uid holds
//! [`MAX_UNTAKEN_OFFERS_PER_UID`] entries, or when the table is full. The duplicates are
//! closed on the closer thread ([`crate::closer`]): a peer may have queued descriptors on
//! the socket.
//!
//! An entry counts a connection whose client read its offer but left a doorbell ring
//! unread behind it as untaken too: it is counted against that client's own uid only.

use std::collections::HashMap;
use std::fmt;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::{Duration, Instant};

use crate::closer::ClosedLater;
use crate::region::Region;
use crate::{handoff, sys};

/// The most offers not taken yet one client uid may hold on one listener; a connection
/// beyond it is refused before any offer is sent.
///
/// An honest client takes its offer as it arrives (its connect waits for it), so its
/// untaken offers are the connections it is opening at that moment: 64 is more than the
/// runtime ever opens at once to one endpoint, and costs 128 descriptors in flight, an
/// eighth of the usual soft limit of 1024.
pub const MAX_UNTAKEN_OFFERS_PER_UID: usize = 64;

/// The most entries a listener's table holds, whatever `RLIMIT_NOFILE` allows (see
/// [`capacity_for`]): memory stays bounded even without a descriptor limit.
pub const MAX_UNTAKEN_OFFERS: usize = 4096;

/// How often the table's entries are all checked while it holds any, so that the
/// duplicates of connections whose offers were taken are closed within about that long
/// even when nobody connects.
pub const SWEEP_INTERVAL: Duration = Duration::from_secs(1);

/// The table's bound for a process whose soft `RLIMIT_NOFILE` is `open_files_limit`: a
/// quarter of it (at least 1), at most [`MAX_UNTAKEN_OFFERS`]. The offers of a full table
/// then hold half the limit in flight (two descriptors each), which leaves the other half
/// to the rest of this user's descriptor passing, and their duplicates a quarter of this
/// process's descriptors.
pub fn capacity_for(open_files_limit: u64) -> usize {
    let quarter = usize::try_from(open_files_limit / 4).unwrap_or(usize::MAX);
    quarter.clamp(1, MAX_UNTAKEN_OFFERS)
}

/// Why [`UntakenOffers::offer`] refused a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The uid holds [`MAX_UNTAKEN_OFFERS_PER_UID`] untaken offers.
    TooManyFromUid {
        /// Its untaken offers.
        held: usize,
    },
    /// The table is full, or holds all but its reserve for uids that hold none and this
    /// uid holds some.
    Full {
        /// Untaken offers of every uid.
        held: usize,
        /// This listener's bound.
        capacity: usize,
    },
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::TooManyFromUid { held } => write!(
                f,
                "this user's clients have {held} shared-memory offers not taken yet \
                 (connections that never read theirs), the most allowed"
            ),
            Refusal::Full { held, capacity } => write!(
                f,
                "{held} shared-memory offers are not taken yet (connections that never \
                 read theirs), of the {capacity} this listener allows"
            ),
        }
    }
}

/// One listener's table of the offers its clients have not taken yet (see the module's
/// docs).
pub struct UntakenOffers {
    /// Per client uid, a duplicate of each connection's setup socket whose offer may not
    /// be taken yet; no uid maps to an empty list.
    by_uid: HashMap<u32, Vec<ClosedLater>>,
    /// Entries of every uid.
    held: usize,
    /// The most entries held ([`capacity_for`]).
    capacity: usize,
    /// When every entry was last checked (or the first one recorded).
    last_sweep: Instant,
}

impl UntakenOffers {
    /// A table whose bound suits this process's `RLIMIT_NOFILE` as it is now
    /// ([`capacity_for`]; [`MAX_UNTAKEN_OFFERS`] if the limit cannot be read).
    pub fn new() -> UntakenOffers {
        let limit = sys::open_files_limit().unwrap_or(u64::MAX);
        UntakenOffers::with_capacity(capacity_for(limit))
    }

    /// A table of at most `capacity` entries.
    pub fn with_capacity(capacity: usize) -> UntakenOffers {
        UntakenOffers {
            by_uid: HashMap::new(),
            held: 0,
            capacity: capacity.max(1),
            last_sweep: Instant::now(),
        }
    }

    /// Entries held (as of the last check), of every uid.
    pub fn held(&self) -> usize {
        self.held
    }

    /// Entries reserved for uids that hold none: a quarter of the table. A uid that holds
    /// some is refused once only these are left, so that a few uids that never read
    /// cannot keep every other user out.
    fn reserve(&self) -> usize {
        self.capacity / 4
    }

    /// The entries a new connection is admitted below, its uid holding `own`: all of
    /// them, or all but the reserve if `own` is not 0.
    fn bound_for(&self, own: usize) -> usize {
        if own > 0 {
            self.capacity - self.reserve()
        } else {
            self.capacity
        }
    }

    /// Offers the client of `socket`, a new connection from `uid`, a region with rings of
    /// `capacity` bytes ([`handoff::offer_region`]), if its uid may hold one more offer not
    /// taken yet (see `admit`); keeps a duplicate of the socket until the
    /// offer is taken. Returns the region and the server's end of the space doorbell, or
    /// why the connection is refused (nothing sent).
    pub fn offer(
        &mut self,
        socket: BorrowedFd<'_>,
        uid: u32,
        capacity: usize,
    ) -> io::Result<Result<(Region, OwnedFd), Refusal>> {
        if let Err(refusal) = self.admit(uid) {
            return Ok(Err(refusal));
        }
        // Kept until the client has read the offer or closed its end, whatever becomes of
        // the connection meanwhile (a failed send may have sent part of it).
        let kept = socket.try_clone_to_owned()?;
        let offered = handoff::offer_region(socket, capacity);
        self.record(uid, kept);
        offered.map(Ok)
    }

    /// Whether a new connection from `uid` may be sent an offer, after checking that uid's
    /// entries (and everyone's if the table is at its bound). Refused when `uid` holds
    /// [`MAX_UNTAKEN_OFFERS_PER_UID`] untaken offers; when it holds some and only the
    /// reserve is left (a quarter of the table, kept for uids that hold none, so that a few
    /// uids that never read cannot keep every other user out); when the table is full.
    fn admit(&mut self, uid: u32) -> Result<(), Refusal> {
        self.sweep_uid(uid);
        let mut own = self.held_by(uid);
        if own >= MAX_UNTAKEN_OFFERS_PER_UID {
            return Err(Refusal::TooManyFromUid { held: own });
        }
        if self.held >= self.bound_for(own) {
            self.sweep();
            own = self.held_by(uid);
            if self.held >= self.bound_for(own) {
                return Err(Refusal::Full {
                    held: self.held,
                    capacity: self.capacity,
                });
            }
        }
        Ok(())
    }

    /// Keeps `socket`, a duplicate of the setup socket of a connection from `uid` on which
    /// an offer may have been sent, until the client has read everything on it or closed
    /// its end; at once if it has already (or nothing was sent).
    fn record(&mut self, uid: u32, socket: OwnedFd) {
        let socket = ClosedLater::new(socket);
        if taken(&socket) {
            return;
        }
        if self.held == 0 {
            self.last_sweep = Instant::now();
        }
        self.by_uid.entry(uid).or_default().push(socket);
        self.held += 1;
    }

    /// When every entry is to be checked next ([`UntakenOffers::sweep`]); `None` while
    /// there are none.
    pub fn next_sweep(&self) -> Option<Instant> {
        (self.held > 0).then(|| self.last_sweep + SWEEP_INTERVAL)
    }

    /// Checks every entry, closing (on the closer thread) those whose offers are taken.
    pub fn sweep(&mut self) {
        self.by_uid.retain(|_, sockets| {
            let before = sockets.len();
            sockets.retain(|socket| !taken(socket));
            self.held -= before - sockets.len();
            !sockets.is_empty()
        });
        self.last_sweep = Instant::now();
    }

    /// Checks the entries of `uid`.
    fn sweep_uid(&mut self, uid: u32) {
        if let Some(sockets) = self.by_uid.get_mut(&uid) {
            let before = sockets.len();
            sockets.retain(|socket| !taken(socket));
            self.held -= before - sockets.len();
            if sockets.is_empty() {
                self.by_uid.remove(&uid);
            }
        }
    }

    /// Entries of `uid`.
    fn held_by(&self, uid: u32) -> usize {
        self.by_uid.get(&uid).map_or(0, Vec::len)
    }
}

impl Default for UntakenOffers {
    /// [`UntakenOffers::new`].
    fn default() -> UntakenOffers {
        UntakenOffers::new()
    }
}

impl fmt::Debug for UntakenOffers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UntakenOffers")
            .field("held", &self.held)
            .field("uids", &self.by_uid.len())
            .field("capacity", &self.capacity)
            .finish()
    }
}

/// Whether the client has read everything sent on `socket` or closed its end. A socket
/// the kernel cannot say this of (`SIOCOUTQ` does not fail on a Unix stream socket) counts
/// as taken: its entry would otherwise stay for good.
fn taken(socket: &ClosedLater) -> bool {
    sys::unread_by_peer(socket.as_fd()).map_or(true, |unread| unread == 0)
}

#[cfg(test)]
mod tests {
    use std::os::unix::net::UnixStream;

    use super::*;

    /// A connection from a client that has not read what was sent: (our socket, theirs).
    fn untaken() -> (OwnedFd, UnixStream) {
        let (ours, theirs) = UnixStream::pair().unwrap();
        let memfd = sys::create_sealed_memfd("lanner-test", 4096).unwrap();
        sys::send_with_fds(ours.as_fd(), b"offer", &[memfd.as_fd()]).unwrap();
        (ours.into(), theirs)
    }

    #[test]
    fn the_bound_follows_the_open_files_limit() {
        assert_eq!(capacity_for(1024), 256);
        assert_eq!(capacity_for(64), 16);
        assert_eq!(capacity_for(2), 1);
        assert_eq!(capacity_for(1 << 20), MAX_UNTAKEN_OFFERS);
        assert_eq!(capacity_for(u64::MAX), MAX_UNTAKEN_OFFERS);
    }

    #[test]
    fn a_uid_at_its_bound_is_refused_until_its_clients_read_or_close() {
        let mut table = UntakenOffers::with_capacity(MAX_UNTAKEN_OFFERS);
        let mut clients = Vec::new();
        for _ in 0..MAX_UNTAKEN_OFFERS_PER_UID {
            table.admit(7).expect("below the bound");
            let (ours, theirs) = untaken();
            table.record(7, ours);
            clients.push(theirs);
        }
        assert_eq!(
            table.admit(7),
            Err(Refusal::TooManyFromUid {
                held: MAX_UNTAKEN_OFFERS_PER_UID
            })
        );
        table.admit(8).expect("another uid is not held up");
        // One client reads its offer, another closes its socket: room for two.
        sys::recv_with_fds(clients[0].as_fd(), &mut [0; 5]).unwrap();
        drop(clients.remove(1));
        table.admit(7).expect("taken offers leave the table");
        assert_eq!(table.held(), MAX_UNTAKEN_OFFERS_PER_UID - 2);
    }

    #[test]
    fn a_full_table_keeps_a_reserve_for_uids_that_hold_none() {
        let mut table = UntakenOffers::with_capacity(8);
        let mut clients = Vec::new();
        for uid in [1, 1, 1, 2, 2, 2] {
            table.admit(uid).expect("below the reserve");
            let (ours, theirs) = untaken();
            table.record(uid, ours);
            clients.push(theirs);
        }
        assert!(matches!(table.admit(1), Err(Refusal::Full { held: 6, .. })));
        for uid in [3, 4] {
            table.admit(uid).expect("the reserve");
            let (ours, theirs) = untaken();
            table.record(uid, ours);
            clients.push(theirs);
        }
        assert!(matches!(table.admit(5), Err(Refusal::Full { held: 8, .. })));
        // A sweep finds the offer taken: room again.
        drop(clients.pop());
        table.admit(5).expect("the sweep freed an entry");
        assert_eq!(table.held(), 7);
    }

    #[test]
    fn taken_offers_are_not_kept_and_sweeps_close_the_rest_once_taken() {
        let mut table = UntakenOffers::with_capacity(8);
        assert_eq!(table.next_sweep(), None);
        let (ours, theirs) = UnixStream::pair().unwrap();
        table.record(1, ours.into());
        assert_eq!(table.held(), 0, "nothing was sent: nothing to keep");
        drop(theirs);
        let (ours, theirs) = untaken();
        table.record(1, ours);
        assert_eq!(table.held(), 1);
        assert!(table.next_sweep().is_some());
        table.sweep();
        assert_eq!(table.held(), 1, "not taken yet");
        drop(theirs);
        table.sweep();
        assert_eq!((table.held(), table.next_sweep()), (0, None));
    }
}
