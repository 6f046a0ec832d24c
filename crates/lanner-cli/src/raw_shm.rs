//! The raw shared-memory baseline: the same payload ping-ponged through the same rings
//! (`lanner-shm`, set up the same way, same 4 MiB capacity) with no Lanner code.
//!
//! Written with the same care as Lanner's transport: a message is one ring record built in
//! place (the stream baseline's 4-byte header word, then the payload); a received record
//! of at least 16 KiB is read in place, smaller ones are copied out (as Lanner does); the
//! echo server copies a request record into its outgoing ring (requests that arrived
//! together are echoed with one publication of the ring's position). Same wait strategy: poll
//! the ring (for a record, or for room) for the spin budget, then announce sleep on the
//! ring's flag and wait in `poll(2)` on the doorbell until the peer rings.
//!
//! A message whose header word has `ONE_WAY` set is taken without an answer (the
//! bandwidth benchmark streams those, then one ordinary message to learn that all
//! arrived). The flag is in the record, not the ring's `more` flag: `lanner-shm` copies
//! every `more` record out, which would make the server copy what Lanner reads in place.

use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use lanner::transport::shm::{DEFAULT_RING_CAPACITY, IN_PLACE_MIN};
use lanner_shm::doorbell::{self, Doorbell};
use lanner_shm::offers::UntakenOffers;
use lanner_shm::region::Side;
use lanner_shm::{Consumer, Producer};
use lanner_shm::{closer, handoff, sys};

use crate::raw::{
    BATCHED_ONE_WAY_MAX, HEADER_LEN, ONE_WAY, SpinBudget, decode_header, header, poll_fd,
};

fn address(name: &str) -> io::Result<SocketAddr> {
    SocketAddr::from_abstract_name(format!("lanner-raw-shm/{name}").as_bytes())
}

fn ring_error(error: lanner_shm::RingError) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, error)
}

/// One end of a raw ring connection.
pub struct RawShm {
    producer: Producer,
    consumer: Consumer,
    /// The data doorbell: the receiver sleeps on it.
    data: OwnedFd,
    /// The space doorbell: the sender waits on it.
    space: OwnedFd,
    /// How long to poll the ring before sleeping.
    spin: Duration,
}

impl RawShm {
    fn new(
        side: Side,
        (region, space): (lanner_shm::Region, OwnedFd),
        data: OwnedFd,
        spin: Duration,
    ) -> io::Result<RawShm> {
        // Faulted in ahead of use, as Lanner's transport does (best effort, as there).
        let _ = region.populator().populate();
        let (producer, consumer) = region.split(
            side,
            Arc::new(Doorbell::new(data.try_clone()?)),
            Arc::new(Doorbell::new(space.try_clone()?)),
            IN_PLACE_MIN,
        );
        Ok(RawShm {
            producer,
            consumer,
            data,
            space,
            spin,
        })
    }

    /// Connects to a raw shm echo server at `shm://name`; waits poll for `spin` before
    /// sleeping.
    pub fn connect(endpoint: &str, spin: Duration) -> io::Result<RawShm> {
        let name = endpoint.strip_prefix("shm://").ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("raw shm baseline cannot use {endpoint}"),
            )
        })?;
        let stream = UnixStream::connect_addr(&address(name)?)?;
        let offer = handoff::accept_region(stream.as_fd())?;
        stream.set_nonblocking(true)?;
        RawShm::new(Side::Client, offer, stream.into(), spin)
    }

    /// Sleeps until the peer rings `doorbell` (or goes away).
    fn sleep(doorbell: &OwnedFd) -> io::Result<()> {
        poll_fd(doorbell.as_raw_fd(), libc::POLLIN)?;
        match doorbell::drain(doorbell.as_fd())? {
            doorbell::Drained::PeerGone => Err(io::ErrorKind::UnexpectedEof.into()),
            _ => Ok(()),
        }
    }

    /// Sends `count` messages of `payload` the server takes without answering, one record
    /// each, published as Lanner publishes a batch of one-way calls: records of up to
    /// `BATCHED_ONE_WAY_MAX` bytes together, larger ones each at once.
    pub fn send_one_way_burst(&mut self, payload: &[u8], count: usize) -> io::Result<()> {
        let batched = HEADER_LEN + payload.len() <= BATCHED_ONE_WAY_MAX;
        let head = header(payload.len(), ONE_WAY);
        for _ in 0..count {
            self.send_record(&head, payload, !batched)?;
        }
        self.publish();
        Ok(())
    }

    /// Sends `head` and `body` as one record, built in place in the ring.
    pub(crate) fn send(&mut self, head: &[u8], body: &[u8]) -> io::Result<()> {
        self.send_record(head, body, true)
    }

    /// [`RawShm::send`], publishing the record at once only if `publish` (else it waits
    /// for [`RawShm::publish`], to publish a burst of records at once as Lanner does).
    pub(crate) fn send_record(
        &mut self,
        head: &[u8],
        body: &[u8],
        publish: bool,
    ) -> io::Result<()> {
        let len = head.len() + body.len();
        if len > self.producer.max_record_len() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "the raw shared-memory baseline sends a message as one record: {len} bytes do not fit (at most {} in its ring)",
                    self.producer.max_record_len()
                ),
            ));
        }
        let mut budget = SpinBudget::new(self.spin);
        loop {
            if let Some(mut reservation) = self.producer.try_reserve(len).map_err(ring_error)? {
                reservation.write(0, head);
                reservation.write(head.len(), body);
                if publish {
                    reservation.commit(false);
                } else {
                    reservation.commit_unpublished(false);
                }
                return Ok(());
            }
            self.producer.publish_pending();
            if !budget.keep_spinning() && self.producer.prepare_wait(len).map_err(ring_error)? {
                RawShm::sleep(&self.space)?;
                budget.restart();
            }
        }
    }

    /// Publishes the records sent unpublished.
    pub(crate) fn publish(&mut self) {
        self.producer.publish_pending();
    }

    /// Takes a message that has arrived, without waiting: (one-way, the record with its
    /// header word).
    pub(crate) fn try_receive(&mut self) -> io::Result<Option<(bool, Bytes)>> {
        let Some(record) = self.consumer.try_recv().map_err(ring_error)? else {
            return Ok(None);
        };
        let (_, one_way) = record
            .bytes
            .first_chunk::<HEADER_LEN>()
            .map(|word| decode_header(*word))
            .ok_or_else(|| {
                io::Error::new(io::ErrorKind::InvalidData, "a record without a header word")
            })?;
        Ok(Some((one_way, record.bytes)))
    }

    /// Receives one message: (one-way, the record with its header word). Polls for the
    /// spin budget, then sleeps.
    pub(crate) fn receive(&mut self) -> io::Result<(bool, Bytes)> {
        let mut budget = SpinBudget::new(self.spin);
        loop {
            if let Some(message) = self.try_receive()? {
                return Ok(message);
            }
            if !budget.keep_spinning() && self.consumer.prepare_sleep() {
                RawShm::sleep(&self.data)?;
                budget.restart();
            }
        }
    }

    /// One round trip; returns the length of the echo.
    pub fn round_trip(&mut self, payload: &[u8]) -> io::Result<usize> {
        self.send(&header(payload.len(), 0), payload)?;
        let (_, echo) = self.receive()?;
        Ok(echo.len() - HEADER_LEN)
    }
}

/// A raw shm echo server.
pub struct RawShmListener {
    listener: UnixListener,
    name: String,
}

impl RawShmListener {
    /// Listens on the raw abstract socket for `name`.
    pub fn bind(name: &str) -> io::Result<RawShmListener> {
        Ok(RawShmListener {
            listener: UnixListener::bind_addr(&address(name)?)?,
            name: name.to_owned(),
        })
    }

    /// The endpoint URL.
    pub fn endpoint(&self) -> String {
        format!("shm://{}", self.name)
    }

    /// Serves echo connections forever, one thread each. Offers are sent from this
    /// thread, bounded as the runtime's listener bounds them ([`UntakenOffers`]; checked
    /// when clients connect, not on a timer): a connection from a user whose clients hold
    /// too many offers not taken yet is closed without one. The descriptors of unread
    /// offers are charged to this process's user, whose other listener (Lanner's) would
    /// otherwise be locked out with it.
    pub fn serve(self, spin: Duration) {
        let serving = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let mut offers = UntakenOffers::new();
        let mut refused: u64 = 0;
        loop {
            match self.listener.accept() {
                Ok((stream, _)) => {
                    if offers.next_sweep().is_some_and(|at| at <= Instant::now()) {
                        offers.sweep();
                    }
                    match offer(&mut offers, &stream) {
                        Ok(offer) => {
                            let socket = ShutDownWhenDropped(stream);
                            crate::raw::spawn_counted(&serving, "raw shm echo", move || {
                                echo_connection(socket.0.try_clone()?, offer, spin)
                            })
                        }
                        Err(error) => {
                            refused += 1;
                            // Powers of two: a client cannot flood stderr.
                            if refused.is_power_of_two() {
                                eprintln!(
                                    "raw shm echo: a connection failed its setup ({error}); \
                                     {refused} so far"
                                );
                            }
                            // It may hold descriptors the client queued.
                            let _ = sys::shutdown(stream.as_fd());
                            closer::close_later([OwnedFd::from(stream)]);
                        }
                    }
                }
                Err(error) => {
                    eprintln!("raw shm accept failed: {error}");
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
        }
    }
}

/// A connection's socket, shut down when dropped (with the thread that serves it, or
/// unserved): the table of offers keeps a duplicate of it, so closing it would not tell the
/// client that the connection is over.
struct ShutDownWhenDropped(UnixStream);

impl Drop for ShutDownWhenDropped {
    fn drop(&mut self) {
        let _ = self.0.shutdown(std::net::Shutdown::Both);
    }
}

/// Sends `stream`'s client a region, if its user may have one more offer not taken yet
/// (`offers` keeps the socket until it is taken).
fn offer(
    offers: &mut UntakenOffers,
    stream: &UnixStream,
) -> io::Result<(lanner_shm::Region, OwnedFd)> {
    let uid = sys::peer_credentials(stream.as_fd())?.uid;
    offers
        .offer(stream.as_fd(), uid, DEFAULT_RING_CAPACITY)?
        .map_err(|refusal| io::Error::other(format!("refused: {refusal}")))
}

fn echo_connection(
    stream: UnixStream,
    offer: (lanner_shm::Region, OwnedFd),
    spin: Duration,
) -> io::Result<()> {
    stream.set_nonblocking(true)?;
    let mut end = RawShm::new(Side::Server, offer, stream.into(), spin)?;
    let mut burst = Vec::new();
    loop {
        // Every record that has arrived is taken before the echoes go out, as Lanner's
        // reader drains what arrived before its answers are flushed.
        // (One-way records are dropped at once, releasing their ring space.)
        let mut message = Some(end.receive()?);
        while let Some((one_way, request)) = message {
            if !one_way {
                burst.push(request);
            }
            message = end.try_receive()?;
        }
        if let [request] = &burst[..] {
            // The request record, header word and all, is the echo.
            end.send(&[], request)?;
        } else {
            // A burst is echoed with one publication, as Lanner publishes its batches.
            for request in &burst {
                end.send_record(&[], request, false)?;
            }
            end.publish();
        }
        burst.clear();
    }
}
