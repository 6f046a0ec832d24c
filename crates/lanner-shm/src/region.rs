//! The shared region: one mapping holding both rings of a connection, and both loan areas
//! (see [`crate::loans`]) with their returns rings.
//!
//! ```text
//! offset 0                 header line: magic u64 | version u32 | ring capacity u32
//! offset 256               ring 0 control (client → server): 4 cache lines
//! offset 512               ring 1 control (server → client): 4 cache lines
//! offset 768               returns 0 control (the server gives the client's loans back)
//! offset 1024              returns 1 control (the client gives the server's loans back)
//! offset 4096              ring 0 data, `capacity` bytes
//! + capacity               ring 1 data, `capacity` bytes
//! + capacity               returns 0 data, RETURNS_CAPACITY bytes
//! + RETURNS_CAPACITY       returns 1 data, RETURNS_CAPACITY bytes
//! + RETURNS_CAPACITY       area 0: the client's loans, `capacity` bytes
//! + capacity               area 1: the server's loans, `capacity` bytes
//! ```
//!
//! Populating (see [`Populator`]) faults in the rings only: a loan area's pages are
//! committed as loans first reach them.
//!
//! The server creates the region in a sealed memfd (its size cannot change, so the
//! client's accesses can never fault) and passes the descriptor to the client, which
//! checks the seals and size before mapping it and reads the header once.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use crate::area::AreaMemory;
use crate::loans::{LoanArea, LoanReceiver, NoWake, RETURNS_CAPACITY};
use crate::memory::{self, RingMemory};
use crate::ring::Wake;
use crate::ring::{Consumer, Producer};
use crate::sync::Arc;
use crate::sys::{self, Mapping};

const MAGIC: u64 = u64::from_le_bytes(*b"LANNRSHM");
/// The region's layout version: 5 since a ring's producer publishes by storing a record's
/// header, not a shared `tail` (see `ring.rs`), which a version-4 peer would wait for
/// forever (4: records take whole cache lines; 3: records may start with a prefix).
const VERSION: u32 = 5;
const CONTROL_OFFSETS: [usize; 2] = [256, 512];
const RETURNS_CONTROL_OFFSETS: [usize; 2] = [768, 1024];
const DATA_OFFSET: usize = 4096;

/// The smallest ring capacity accepted (4 KiB).
pub const MIN_CAPACITY: usize = 4096;
/// The largest ring capacity accepted (1 GiB).
pub const MAX_CAPACITY: usize = 1 << 30;

/// Which end of a connection this process is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The process that connected; it produces into ring 0 and consumes ring 1.
    Client,
    /// The process that created the region; it produces into ring 1 and consumes ring 0.
    Server,
}

/// A mapped region with both rings of one connection.
#[derive(Debug)]
pub struct Region {
    mapping: Arc<InUse>,
    capacity: usize,
}

/// The region's mapping as everything that reads or writes its contents holds it: the
/// rings, the loan areas, the populator, received records held in place. Arrival hints
/// (see [`crate::ring::ArrivalHint`]) hold the mapping itself, which keeps its addresses
/// and not its pages: when the last user lets go while hints remain (a connection that
/// ended, whose proxies keep its hint), the pages go back to the system at once (see
/// [`Mapping::release_pages`]) instead of staying as long as those proxies do.
#[derive(Debug)]
struct InUse(Arc<Mapping>);

impl std::ops::Deref for InUse {
    type Target = Mapping;

    fn deref(&self) -> &Mapping {
        &self.0
    }
}

impl Drop for InUse {
    fn drop(&mut self) {
        if Arc::strong_count(&self.0) > 1 {
            // SAFETY: every reader or writer of the region's contents holds an `InUse`,
            // and this is the last one; what else holds the mapping is arrival hints,
            // which only load a ring's header words atomically and accept any value.
            // A failure (no memory for the new mapping) aborts the process unless the
            // range is zeros anyway (see `release_pages`).
            unsafe { self.0.release_pages() };
        }
    }
}

/// Faults a region's pages in ahead of use. Until a connection's rings have wrapped once,
/// every 4 KiB of new records costs each side a page fault when it first touches the page
/// (a kernel entry on the message's path: the null-call p99 was 4.4 µs instead of 0.93 in
/// `lanner bench pingpong --transport shm` until the 4 MiB rings wrapped). Populating
/// takes a few milliseconds for two 4 MiB rings (allocating the pages, on the side that
/// created the region) and commits the rings' memory at once; run it off the latency path.
#[derive(Debug)]
pub struct Populator {
    mapping: Arc<InUse>,
    /// The rings' part of the region (the loan areas follow it).
    rings_len: usize,
}

impl Populator {
    /// Faults every page of the region's rings in (see [`Mapping::populate`]).
    pub fn populate(self) -> io::Result<()> {
        self.mapping.populate_prefix(self.rings_len)
    }
}

/// Whether `capacity` is a valid ring size (a power of two from [`MIN_CAPACITY`] to
/// [`MAX_CAPACITY`]): `InvalidInput` saying so otherwise.
pub fn check_capacity(capacity: usize) -> io::Result<()> {
    if capacity.is_power_of_two() && (MIN_CAPACITY..=MAX_CAPACITY).contains(&capacity) {
        Ok(())
    } else {
        Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "ring capacity {capacity} must be a power of two from {MIN_CAPACITY} to {MAX_CAPACITY}"
            ),
        ))
    }
}

impl Region {
    /// The size of a region whose rings hold `capacity` bytes each.
    pub fn len_for(capacity: usize) -> usize {
        Region::areas_offset(capacity) + 2 * capacity
    }

    /// Where the returns rings' data starts.
    fn returns_offset(capacity: usize) -> usize {
        DATA_OFFSET + 2 * capacity
    }

    /// Where the loan areas start: after the rings (which populating faults in).
    fn areas_offset(capacity: usize) -> usize {
        Region::returns_offset(capacity) + 2 * RETURNS_CAPACITY
    }

    /// Creates a region with two rings of `capacity` bytes (a power of two, at least
    /// [`MIN_CAPACITY`]); returns it and the sealed memfd to pass to the peer.
    pub fn create(capacity: usize) -> io::Result<(Region, OwnedFd)> {
        check_capacity(capacity)?;
        let fd = sys::create_sealed_memfd("lanner-shm", Region::len_for(capacity))?;
        let mapping = Mapping::map_shared(fd.as_fd(), Region::len_for(capacity))?;
        let region = Region {
            mapping: Arc::new(InUse(Arc::new(mapping))),
            capacity,
        };
        let capacity_word = u32::try_from(capacity).expect("checked above");
        region.write_header(MAGIC, VERSION, capacity_word);
        Ok((region, fd))
    }

    /// Maps a region received from the server, after checking that its memfd is sealed
    /// against resizing and has the size `capacity` implies, and that its header matches.
    pub fn open(fd: BorrowedFd<'_>, capacity: usize) -> io::Result<Region> {
        check_capacity(capacity)?;
        sys::check_peer_memfd(fd, Region::len_for(capacity))?;
        let mapping = Mapping::map_shared(fd, Region::len_for(capacity))?;
        let region = Region {
            mapping: Arc::new(InUse(Arc::new(mapping))),
            capacity,
        };
        let (magic, version, capacity_word) = region.read_header();
        if magic != MAGIC {
            return Err(invalid(
                "the shared region does not start with Lanner's magic",
            ));
        }
        if version != VERSION {
            return Err(invalid(&format!(
                "the shared region has layout version {version}; this build speaks {VERSION}"
            )));
        }
        if capacity_word as usize != capacity {
            return Err(invalid(&format!(
                "the shared region's header says ring capacity {capacity_word}, the setup message said {capacity}"
            )));
        }
        Ok(region)
    }

    /// Bytes per ring.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// A handle that faults the whole region in (see [`Populator`]); it keeps the mapping
    /// alive, so it may run on another thread while the rings are in use.
    pub fn populator(&self) -> Populator {
        Populator {
            mapping: self.mapping.clone(),
            rings_len: Region::areas_offset(self.capacity),
        }
    }

    /// This side's two ends: the producer of its outgoing ring and the consumer of its
    /// incoming ring. `wake_peer_receiver` wakes the peer when it sleeps waiting for
    /// messages; `wake_peer_sender` wakes it when it waits for ring space (two doorbells:
    /// see [`crate::handoff`]). Received messages of at least `in_place_min` bytes are
    /// handed out in place (see [`Consumer`]).
    pub fn split(
        self,
        side: Side,
        wake_peer_receiver: Arc<dyn Wake>,
        wake_peer_sender: Arc<dyn Wake>,
        in_place_min: usize,
    ) -> (Producer, Consumer) {
        let (outgoing, incoming) = match side {
            Side::Client => (0, 1),
            Side::Server => (1, 0),
        };
        (
            Producer::new(Arc::new(self.ring(outgoing)), wake_peer_receiver),
            Consumer::new(
                Arc::new(self.ring(incoming)),
                wake_peer_sender,
                in_place_min,
            ),
        )
    }

    /// This side's two ends of the loans (see [`crate::loans`]): its own area, whose
    /// loans it lends to the peer, and the peer's, whose lendings it receives.
    pub fn loans(&self, side: Side) -> (LoanArea, LoanReceiver) {
        let (own, peers) = match side {
            Side::Client => (0, 1),
            Side::Server => (1, 0),
        };
        let returns = |index: usize| {
            Arc::new(self.ring_memory(
                RETURNS_CONTROL_OFFSETS[index],
                Region::returns_offset(self.capacity) + index * RETURNS_CAPACITY,
                RETURNS_CAPACITY,
            ))
        };
        // Our area's returns come from the peer; we give the peer's area's back. Nobody
        // sleeps on a returns ring: the owner reads it when it needs room.
        let returns_in = Consumer::new(returns(own), Arc::new(NoWake), usize::MAX);
        let returns_out = Producer::new(returns(peers), Arc::new(NoWake));
        let area = LoanArea::new(self.area(own), returns_in);
        let receiver = LoanReceiver::new(self.area(peers), returns_out);
        (area, receiver)
    }

    /// Loan area `index`.
    fn area(&self, index: usize) -> AreaMemory {
        let offset = Region::areas_offset(self.capacity) + index * self.capacity;
        let base = self.mapping.as_ptr().wrapping_add(offset);
        // SAFETY: the area's `capacity` bytes lie inside the mapping (see the layout), and
        // the area keeps the mapping alive.
        unsafe { AreaMemory::in_mapping(base, self.capacity, Box::new(self.mapping.clone())) }
    }

    fn ring(&self, index: usize) -> RingMemory {
        self.ring_memory(
            CONTROL_OFFSETS[index],
            DATA_OFFSET + index * self.capacity,
            self.capacity,
        )
    }

    /// The ring whose control block is at `control` and whose `capacity` data bytes
    /// start at `data` (offsets in the mapping, from the layout above).
    fn ring_memory(&self, control: usize, data: usize, capacity: usize) -> RingMemory {
        let base = self.mapping.as_ptr();
        // SAFETY: every caller passes offsets of the layout: `control` is one of the
        // control offsets (64-byte aligned, four cache lines inside the first page) and
        // `data` (page-aligned) has `capacity` bytes inside the mapping, which is
        // `len_for(capacity)` bytes long; the ring keeps the mapping and its contents
        // alive through its clone of the `Arc<InUse>`, and the anchor, the mapping
        // itself, keeps the addresses mapped, later to zeros that atomic loads may read
        // (`InUse`'s drop).
        unsafe {
            RingMemory::in_mapping(
                base.wrapping_add(control),
                base.wrapping_add(data),
                capacity,
                Box::new(self.mapping.clone()),
                self.mapping.0.clone(),
            )
        }
    }

    fn write_header(&self, magic: u64, version: u32, capacity: u32) {
        let mut header = [0u8; 16];
        header[..8].copy_from_slice(&magic.to_le_bytes());
        header[8..12].copy_from_slice(&version.to_le_bytes());
        header[12..16].copy_from_slice(&capacity.to_le_bytes());
        // SAFETY: the mapping is at least a page long and not shared with the peer yet.
        unsafe { memory::copy_to_shared(self.mapping.as_ptr(), &header) }
    }

    fn read_header(&self) -> (u64, u32, u32) {
        let mut header = [0u8; 16];
        // SAFETY: the mapping is at least a page long and lives as long as `self`.
        unsafe { memory::copy_from_shared(self.mapping.as_ptr(), &mut header) }
        let word = |range: std::ops::Range<usize>| {
            let mut bytes = [0u8; 4];
            bytes.copy_from_slice(&header[range]);
            u32::from_le_bytes(bytes)
        };
        let mut magic = [0u8; 8];
        magic.copy_from_slice(&header[..8]);
        (u64::from_le_bytes(magic), word(8..12), word(12..16))
    }
}

fn invalid(message: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message.to_owned())
}

#[cfg(test)]
mod tests {
    //! What a region's mapping holds is told by counting this thread's releases and
    //! unmappings, and by reading the header through its address while something keeps
    //! that mapped: `/proc/self/maps` reads differently under valgrind, and a range
    //! unmapped may be mapped again at once by another test's thread.

    use std::os::fd::AsFd;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::{Duration, Instant};

    use super::*;
    use crate::tests::send;

    /// Calls of `Mapping::release_pages` on this thread so far.
    fn pages_released() -> usize {
        sys::PAGES_RELEASED.with(std::cell::Cell::get)
    }

    /// Mappings unmapped on this thread so far.
    fn mappings_unmapped() -> usize {
        sys::MAPPINGS_UNMAPPED.with(std::cell::Cell::get)
    }

    /// The first word of the region at `base` (its magic while its pages are there).
    ///
    /// # Safety
    /// Something must keep the mapping at `base` alive (a user, or a hint).
    unsafe fn first_word(base: *const u8) -> u64 {
        let mut word = [0u8; 8];
        // SAFETY: the caller keeps the mapping, at least a page long, alive.
        unsafe { memory::copy_from_shared(base, &mut word) };
        u64::from_le_bytes(word)
    }

    /// Both ends of a connection's region in this process: (server, client).
    fn connected(capacity: usize) -> (Region, Region) {
        let (server, memfd) = Region::create(capacity).unwrap();
        let client = Region::open(memfd.as_fd(), capacity).unwrap();
        (server, client)
    }

    #[test]
    fn an_arrival_hint_keeps_its_regions_addresses_and_not_its_pages() {
        let (server, client) = connected(4 * MIN_CAPACITY);
        let base = server.mapping.as_ptr();
        server.populator().populate().unwrap();
        let (mut client_producer, _client_consumer) =
            client.split(Side::Client, Arc::new(NoWake), Arc::new(NoWake), usize::MAX);
        let (server_producer, server_consumer) =
            server.split(Side::Server, Arc::new(NoWake), Arc::new(NoWake), usize::MAX);
        let hint = server_consumer.arrival_hint();
        send(&mut client_producer, b"ping", false);
        assert!(hint.maybe_arrived());
        // SAFETY: the server's ends keep the mapping.
        assert_eq!(unsafe { first_word(base) }, MAGIC);

        // The server's side ends (its connection released its transport); its hint stays.
        let (released, unmapped) = (pages_released(), mappings_unmapped());
        drop((server_producer, server_consumer));
        assert_eq!(
            pages_released(),
            released + 1,
            "the region's pages are let go"
        );
        assert_eq!(mappings_unmapped(), unmapped, "its addresses are not");
        // SAFETY: the hint keeps the addresses mapped.
        assert_eq!(unsafe { first_word(base) }, 0, "zeros where the region was");
        // The released header words read zero, "nothing arrived" (a receive would find
        // the connection's end): no fault.
        assert!(!hint.maybe_arrived());
        // The client's side is untouched by it.
        send(&mut client_producer, b"pong", false);

        drop(hint);
        assert_eq!(
            mappings_unmapped(),
            unmapped + 1,
            "the last holder unmaps it"
        );
    }

    #[test]
    fn pages_are_released_only_while_hints_remain() {
        // The last user of the region is a ring (the consumer, dropped last), whose
        // memory also holds the mapping's addresses for the hints it could give.
        let (server, _client) = connected(MIN_CAPACITY);
        let (producer, consumer) =
            server.split(Side::Server, Arc::new(NoWake), Arc::new(NoWake), usize::MAX);
        let (released, unmapped) = (pages_released(), mappings_unmapped());
        drop(producer);
        drop(consumer);
        assert_eq!(
            pages_released(),
            released,
            "no hint remains: the mapping is unmapped, not first replaced"
        );
        assert_eq!(mappings_unmapped(), unmapped + 1);

        let (server, _client) = connected(MIN_CAPACITY);
        let (producer, consumer) =
            server.split(Side::Server, Arc::new(NoWake), Arc::new(NoWake), usize::MAX);
        let hint = consumer.arrival_hint();
        let (released, unmapped) = (pages_released(), mappings_unmapped());
        drop(producer);
        drop(consumer);
        assert_eq!(
            pages_released(),
            released + 1,
            "a hint remains: pages given back"
        );
        assert_eq!(mappings_unmapped(), unmapped);
        drop(hint);
        assert_eq!(mappings_unmapped(), unmapped + 1);
    }

    /// Sets its flag when dropped: a spinning thread told to stop even if the test panics.
    struct StopOnDrop(Arc<AtomicBool>);

    impl Drop for StopOnDrop {
        fn drop(&mut self) {
            self.0.store(true, Ordering::Relaxed);
        }
    }

    #[test]
    fn hints_read_on_while_the_pages_are_released_under_them() {
        for _ in 0..10 {
            let (server, client) = connected(MIN_CAPACITY);
            let base = server.mapping.as_ptr();
            let (mut client_producer, _client_consumer) =
                client.split(Side::Client, Arc::new(NoWake), Arc::new(NoWake), usize::MAX);
            let (server_producer, mut server_consumer) =
                server.split(Side::Server, Arc::new(NoWake), Arc::new(NoWake), usize::MAX);
            send(&mut client_producer, b"ping", false);
            assert!(server_consumer.try_recv().unwrap().is_some());
            let hint = server_consumer.arrival_hint();
            let stop = StopOnDrop(Arc::new(AtomicBool::new(false)));
            let spinner = {
                let (hint, stop) = (hint.clone(), stop.0.clone());
                // Bounded: stops when told (the guard tells it on a panic too), or after
                // a minute whatever happens.
                std::thread::spawn(move || {
                    let started = Instant::now();
                    while !stop.load(Ordering::Relaxed)
                        && started.elapsed() < Duration::from_secs(60)
                    {
                        for _ in 0..64 {
                            std::hint::black_box(hint.maybe_arrived());
                        }
                    }
                })
            };
            // The spinner reads before the release and after it (where threads run at
            // once: under valgrind, which runs one at a time, perhaps only on one side).
            std::thread::sleep(Duration::from_millis(2));
            let released = pages_released();
            drop((server_producer, server_consumer));
            assert_eq!(pages_released(), released + 1);
            // SAFETY: the hints keep the addresses mapped.
            assert_eq!(unsafe { first_word(base) }, 0);
            std::thread::sleep(Duration::from_millis(2));
            drop(stop);
            spinner.join().unwrap();
        }
    }
}
