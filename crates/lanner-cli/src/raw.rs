//! The raw baseline: the same payload ping-ponged over the same socket with no Lanner code.
//!
//! Written with the same care as Lanner: `TCP_NODELAY`, one vectored write per message
//! (4-byte header word + payload), reads of at least `MIN_READ` bytes into a buffer kept
//! across messages (so a small message arrives whole in one system call and a large one is
//! read straight into place, as Lanner's stream transport does), and the same wait strategy
//! (poll the non-blocking socket for the spin budget, then sleep in `poll(2)`).
//!
//! A message's header word is its payload length; one with `ONE_WAY` set is taken
//! without an answer (the bandwidth benchmark streams those, then one ordinary message to
//! learn that all arrived). The shared-memory baseline uses the same header word.

use std::io::{self, IoSlice, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::ops::Range;
use std::os::fd::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Header-word flag of a message the echo server takes without answering.
pub(crate) const ONE_WAY: u32 = 1 << 31;

/// Bytes of a message's header word.
pub(crate) const HEADER_LEN: usize = 4;

/// The largest one-way message the baseline batches with others, as Lanner batches one-way
/// calls up to this size (`BATCHED_ONE_WAY_MAX` in the runtime's calls module).
pub(crate) const BATCHED_ONE_WAY_MAX: usize = 32 * 1024;

/// Read at least this much at a time (Lanner's stream transport reads as much).
const MIN_READ: usize = 64 * 1024;

/// The largest message the raw baseline takes (payload and header): more than any frame
/// Lanner's side sends with its default limits (16 MiB), so no benchmark meets it, and a
/// bound on what a peer's length word can make the echo server allocate.
pub(crate) const MAX_MESSAGE: usize = 64 << 20;

/// Raw echo connections a server serves at once (a thread each); more are refused.
const MAX_RAW_CONNECTIONS: usize = 64;

/// Empty polls between two clock reads while spinning (Lanner reads its clock every 8
/// tries as well).
const POLLS_PER_CLOCK_READ: u32 = 8;

/// The header word of a message of `len` payload bytes; `flags` is 0 or `ONE_WAY`.
pub(crate) fn header(len: usize, flags: u32) -> [u8; HEADER_LEN] {
    (len as u32 | flags).to_le_bytes()
}

/// Decodes a header word: (payload length, one-way).
pub(crate) fn decode_header(word: [u8; HEADER_LEN]) -> (usize, bool) {
    let word = u32::from_le_bytes(word);
    ((word & !ONE_WAY) as usize, word & ONE_WAY != 0)
}

/// The spin half of the spin-then-sleep wait strategy: poll until the spin budget has
/// passed since the last progress, then sleep. The clock is read only every
/// [`POLLS_PER_CLOCK_READ`] empty polls, and not at all when the data is already there.
pub(crate) struct SpinBudget {
    spin: Duration,
    deadline: Option<Instant>,
    polls: u32,
    spent: bool,
}

impl SpinBudget {
    /// A full budget of `spin`.
    pub(crate) fn new(spin: Duration) -> SpinBudget {
        SpinBudget {
            spin,
            deadline: None,
            polls: 0,
            spent: spin.is_zero(),
        }
    }

    /// Progress was made, or the waiter woke up: the budget starts again.
    pub(crate) fn restart(&mut self) {
        *self = SpinBudget::new(self.spin);
    }

    /// After a poll that found nothing: true to poll again, false to sleep.
    pub(crate) fn keep_spinning(&mut self) -> bool {
        if self.spent {
            return false;
        }
        self.polls = self.polls.wrapping_add(1);
        if self.polls % POLLS_PER_CLOCK_READ == 0 {
            let now = Instant::now();
            match self.deadline {
                None => self.deadline = Some(now + self.spin),
                Some(deadline) if now >= deadline => {
                    self.spent = true;
                    return false;
                }
                Some(_) => {}
            }
        }
        std::hint::spin_loop();
        true
    }
}

/// A connected socket, either kind.
pub(crate) enum Socket {
    /// TCP with `TCP_NODELAY`.
    Tcp(TcpStream),
    /// Unix stream socket.
    Unix(UnixStream),
}

impl Socket {
    pub(crate) fn fd(&self) -> i32 {
        match self {
            Socket::Tcp(s) => s.as_raw_fd(),
            Socket::Unix(s) => s.as_raw_fd(),
        }
    }

    fn set_nonblocking(&self) -> io::Result<()> {
        match self {
            Socket::Tcp(s) => s.set_nonblocking(true),
            Socket::Unix(s) => s.set_nonblocking(true),
        }
    }

    pub(crate) fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Socket::Tcp(s) => s.read(buf),
            Socket::Unix(s) => s.read(buf),
        }
    }

    pub(crate) fn write_vectored(&mut self, slices: &[IoSlice<'_>]) -> io::Result<usize> {
        match self {
            Socket::Tcp(s) => s.write_vectored(slices),
            Socket::Unix(s) => s.write_vectored(slices),
        }
    }

    /// Writes a message (header word, then `payload`) with vectored writes, waiting in
    /// poll(2) when the socket is full.
    fn write_message(&mut self, payload: &[u8], flags: u32) -> io::Result<()> {
        self.write_parts(&header(payload.len(), flags), payload)
    }

    /// Writes all of `bytes`, waiting in poll(2) while the socket is full.
    pub(crate) fn write_all(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.write_parts(bytes, &[])
    }

    /// Writes all of `slices` with vectored writes, waiting in poll(2) when the socket is
    /// full.
    fn write_all_vectored(&mut self, mut slices: &mut [IoSlice<'_>]) -> io::Result<()> {
        // Empty slices in front are dropped first: nothing at all to write is done at once.
        IoSlice::advance_slices(&mut slices, 0);
        while !slices.is_empty() {
            match self.write_vectored(slices) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => IoSlice::advance_slices(&mut slices, n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    poll_fd(self.fd(), libc::POLLOUT)?
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Writes `first`, then `second`, with vectored writes, waiting in poll(2) when the
    /// socket is full.
    fn write_parts(&mut self, first: &[u8], second: &[u8]) -> io::Result<()> {
        self.write_all_vectored(&mut [IoSlice::new(first), IoSlice::new(second)])
    }
}

/// Received bytes not yet taken as messages: `buffer[start..end]`.
#[derive(Default)]
pub(crate) struct Inbox {
    pub(crate) buffer: Vec<u8>,
    start: usize,
    end: usize,
}

impl Inbox {
    /// Takes the next message if it is all in: (one-way, payload range in `buffer`).
    /// Otherwise makes room for the rest of it and returns None; an error if the message
    /// is larger than [`MAX_MESSAGE`].
    fn take(&mut self) -> io::Result<Option<(bool, Range<usize>)>> {
        match self.take_complete() {
            Ok(message) => Ok(Some(message)),
            Err(need) if need > MAX_MESSAGE => Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("a raw message of {need} bytes: the baseline takes {MAX_MESSAGE} at most"),
            )),
            Err(need) => {
                self.make_room(need);
                Ok(None)
            }
        }
    }

    /// Takes the next message if it is all in, without moving anything (so ranges taken
    /// before stay valid); otherwise the bytes the message needs from `start`.
    pub(crate) fn take_complete(&mut self) -> Result<(bool, Range<usize>), usize> {
        let pending = &self.buffer[self.start..self.end];
        match pending.first_chunk::<HEADER_LEN>() {
            Some(&word) => {
                let (len, one_way) = decode_header(word);
                let total = HEADER_LEN + len;
                if pending.len() >= total {
                    let payload = self.start + HEADER_LEN..self.start + total;
                    self.start += total;
                    return Ok((one_way, payload));
                }
                Err(total)
            }
            None => Err(HEADER_LEN),
        }
    }

    /// Whether the next message is an ordinary request (not one-way), as far as its
    /// header word is in.
    pub(crate) fn next_is_request(&self) -> bool {
        self.buffer[self.start..self.end]
            .first_chunk::<HEADER_LEN>()
            .is_some_and(|&word| !decode_header(word).1)
    }

    /// Makes room for a message of `need` bytes from `start`, and at least `MIN_READ`.
    /// Moves the received part of the message only when it does not fit where it is.
    fn make_room(&mut self, need: usize) {
        if self.start == self.end {
            (self.start, self.end) = (0, 0);
        }
        let need = need.max(MIN_READ);
        if self.buffer.len() - self.start < need {
            self.buffer.copy_within(self.start..self.end, 0);
            (self.start, self.end) = (0, self.end - self.start);
            if self.buffer.len() < need {
                self.buffer.resize(need, 0);
            }
        }
    }
}

/// Serves one raw echo connection (`serve`) on a thread of its own, counted in `serving`
/// among [`MAX_RAW_CONNECTIONS`] (refused beyond, with a message). Its failure is
/// reported on stderr (`what` names the baseline), unless the peer just left.
pub(crate) fn spawn_counted(
    serving: &Arc<AtomicUsize>,
    what: &'static str,
    serve: impl FnOnce() -> io::Result<()> + Send + 'static,
) {
    let Some(connection) = Counted::admit(serving) else {
        eprintln!("{what}: {MAX_RAW_CONNECTIONS} connections already; one more refused");
        return;
    };
    std::thread::spawn(move || {
        let _connection = connection;
        if let Err(error) = serve()
            && !peer_left(&error)
        {
            eprintln!("{what}: a connection failed: {error}");
        }
    });
}

/// Whether a raw connection's error is only its peer going away (the end of every
/// benchmark's connection), not worth a message.
fn peer_left(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::UnexpectedEof | io::ErrorKind::ConnectionReset | io::ErrorKind::BrokenPipe
    )
}

/// One raw echo connection counted among [`MAX_RAW_CONNECTIONS`]; counted out when
/// dropped.
struct Counted(Arc<AtomicUsize>);

impl Counted {
    /// Counts one more connection in `serving`, if there is room.
    fn admit(serving: &Arc<AtomicUsize>) -> Option<Counted> {
        serving
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                (n < MAX_RAW_CONNECTIONS).then_some(n + 1)
            })
            .ok()
            .map(|_| Counted(serving.clone()))
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A connected raw stream, either kind, with its receive buffer.
pub struct RawStream {
    pub(crate) socket: Socket,
    pub(crate) inbox: Inbox,
    /// How long to poll the socket before sleeping.
    spin: Duration,
}

impl RawStream {
    fn new(socket: Socket, spin: Duration) -> io::Result<RawStream> {
        socket.set_nonblocking()?;
        Ok(RawStream {
            socket,
            inbox: Inbox::default(),
            spin,
        })
    }

    /// One end of a connected Unix socket pair (tests); waits poll for `spin`.
    pub fn from_unix(socket: UnixStream, spin: Duration) -> io::Result<RawStream> {
        RawStream::new(Socket::Unix(socket), spin)
    }

    /// Connects to a `tcp://host:port` or `unix:///path` endpoint; waits poll for `spin`
    /// before sleeping.
    pub fn connect(endpoint: &str, spin: Duration) -> io::Result<RawStream> {
        let socket = if let Some(address) = endpoint.strip_prefix("tcp://") {
            let stream = TcpStream::connect(address)?;
            stream.set_nodelay(true)?;
            Socket::Tcp(stream)
        } else if let Some(path) = endpoint.strip_prefix("unix://") {
            Socket::Unix(UnixStream::connect(path)?)
        } else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("raw baseline cannot use {endpoint}"),
            ));
        };
        RawStream::new(socket, spin)
    }

    /// Receives the next message: (one-way, payload range in the inbox's buffer). Spins
    /// on the non-blocking socket for the spin budget after the last progress, then
    /// sleeps in poll(2).
    pub(crate) fn receive(&mut self) -> io::Result<(bool, Range<usize>)> {
        let mut budget = SpinBudget::new(self.spin);
        loop {
            if let Some(message) = self.inbox.take()? {
                return Ok(message);
            }
            let inbox = &mut self.inbox;
            match self.socket.read(&mut inbox.buffer[inbox.end..]) {
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(n) => {
                    inbox.end += n;
                    budget.restart();
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if !budget.keep_spinning() {
                        poll_fd(self.socket.fd(), libc::POLLIN)?;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Writes a message the server takes without answering.
    pub fn write_one_way(&mut self, payload: &[u8]) -> io::Result<()> {
        self.socket.write_message(payload, ONE_WAY)
    }

    /// Writes `count` messages of `payload` the server takes without answering, batched
    /// as Lanner batches a stream of one-way calls: up to `BATCHED_ONE_WAY_MAX` bytes
    /// each, all of them in one write; larger ones with a write each.
    pub fn write_one_way_burst(&mut self, payload: &[u8], count: usize) -> io::Result<()> {
        if HEADER_LEN + payload.len() > BATCHED_ONE_WAY_MAX {
            return (0..count).try_for_each(|_| self.write_one_way(payload));
        }
        // From the caller's buffer, as Lanner writes a payload: no copy.
        let head = header(payload.len(), ONE_WAY);
        let mut slices: Vec<IoSlice<'_>> = (0..count)
            .flat_map(|_| [IoSlice::new(&head), IoSlice::new(payload)])
            .collect();
        self.socket.write_all_vectored(&mut slices)
    }

    /// One round trip: send `payload`, receive the echo; returns the echo's length.
    pub fn round_trip(&mut self, payload: &[u8]) -> io::Result<usize> {
        self.socket.write_message(payload, 0)?;
        let (_, echo) = self.receive()?;
        Ok(echo.len())
    }

    /// Serves one echo connection until the peer goes away (an error then). Requests that arrived
    /// together are answered together, with one write (see `RawStream::echo_batch`).
    pub fn serve_echo(mut self) -> io::Result<()> {
        loop {
            let (one_way, request) = self.receive()?;
            if one_way {
                continue;
            }
            match self.echo_batch(request.start - HEADER_LEN)? {
                Some(batch) => self.socket.write_all(&self.inbox.buffer[batch])?,
                None => self.socket.write_message(&self.inbox.buffer[request], 0)?,
            }
        }
    }
}

/// Waits in poll(2) until `fd` has one of `events`.
pub(crate) fn poll_fd(fd: i32, events: i16) -> io::Result<()> {
    let mut pollfd = libc::pollfd {
        fd,
        events,
        revents: 0,
    };
    loop {
        // SAFETY: `pollfd` is a valid, initialised pollfd and we pass a count of 1.
        let rc = unsafe { libc::poll(&mut pollfd, 1, -1) };
        if rc >= 0 {
            return Ok(());
        }
        let error = io::Error::last_os_error();
        if error.kind() != io::ErrorKind::Interrupted {
            return Err(error);
        }
    }
}

/// A raw echo server listening on a TCP port or a Unix socket.
pub enum RawListener {
    /// TCP.
    Tcp(TcpListener),
    /// Unix socket (file removed on drop).
    Unix(UnixListener, PathBuf),
}

impl RawListener {
    /// Binds a free TCP port on 127.0.0.1, or a Unix socket at `path`.
    pub fn bind(tcp: bool, path: PathBuf) -> io::Result<RawListener> {
        if tcp {
            Ok(RawListener::Tcp(TcpListener::bind("127.0.0.1:0")?))
        } else {
            let _ = std::fs::remove_file(&path);
            Ok(RawListener::Unix(UnixListener::bind(&path)?, path))
        }
    }

    /// The endpoint URL.
    pub fn endpoint(&self) -> io::Result<String> {
        Ok(match self {
            RawListener::Tcp(l) => format!("tcp://{}", l.local_addr()?),
            RawListener::Unix(_, path) => format!("unix://{}", path.display()),
        })
    }

    /// Serves echo connections forever, one thread each.
    pub fn serve(self, spin: Duration) {
        let serving = Arc::new(AtomicUsize::new(0));
        loop {
            let socket = match &self {
                RawListener::Tcp(l) => l.accept().and_then(|(s, _)| {
                    s.set_nodelay(true)?;
                    Ok(Socket::Tcp(s))
                }),
                RawListener::Unix(l, _) => l.accept().map(|(s, _)| Socket::Unix(s)),
            };
            match socket {
                Ok(socket) => spawn_counted(&serving, "raw echo", move || {
                    RawStream::new(socket, spin)?.serve_echo()
                }),
                Err(error) => {
                    eprintln!("raw accept failed: {error}");
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
        }
    }
}

impl Drop for RawListener {
    fn drop(&mut self) {
        if let RawListener::Unix(_, path) = self {
            let _ = std::fs::remove_file(path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_longer_than_the_bound_is_an_error_not_an_allocation() {
        let (mut client, mut server) = connected_pair();
        let claimed = u32::try_from(MAX_MESSAGE).unwrap();
        client.socket.write_all(&claimed.to_le_bytes()).unwrap();
        let error = server.receive().unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::InvalidData, "{error}");
        assert!(server.inbox.buffer.len() <= 2 * MIN_READ, "the buffer grew");
    }

    #[test]
    fn raw_connections_are_counted_up_to_the_bound() {
        let serving = Arc::new(AtomicUsize::new(0));
        let admitted: Vec<Counted> = (0..MAX_RAW_CONNECTIONS)
            .map(|_| Counted::admit(&serving).unwrap())
            .collect();
        assert!(Counted::admit(&serving).is_none());
        drop(admitted);
        assert_eq!(serving.load(Ordering::Relaxed), 0);
        assert!(Counted::admit(&serving).is_some());
    }

    /// Two ends of a Unix socket pair, spinning 50 us before they sleep.
    fn connected_pair() -> (RawStream, RawStream) {
        let (client, server) = UnixStream::pair().unwrap();
        let spin = Duration::from_micros(50);
        (
            RawStream::new(Socket::Unix(client), spin).unwrap(),
            RawStream::new(Socket::Unix(server), spin).unwrap(),
        )
    }

    #[test]
    fn small_messages_arrive_together_and_large_ones_in_place() {
        let (mut client, mut server) = connected_pair();
        client.write_one_way(b"first").unwrap();
        client.socket.write_message(b"", 0).unwrap();
        let large = vec![7u8; 3 * MIN_READ + 5];
        let writer = std::thread::spawn(move || {
            client.write_one_way(&large).unwrap();
            client
        });
        let (one_way, first) = server.receive().unwrap();
        assert!(one_way);
        assert_eq!(&server.inbox.buffer[first], b"first");
        let (one_way, empty) = server.receive().unwrap();
        assert!(!one_way && empty.is_empty());
        let (one_way, large) = server.receive().unwrap();
        assert!(one_way);
        assert_eq!(large.len(), 3 * MIN_READ + 5);
        assert!(server.inbox.buffer[large].iter().all(|&b| b == 7));
        let mut client = writer.join().unwrap();
        std::thread::spawn(move || server.serve_echo());
        assert_eq!(client.round_trip(&[1, 2, 3]).unwrap(), 3);
        assert_eq!(client.round_trip(&[]).unwrap(), 0);
    }

    #[test]
    fn a_burst_of_one_way_messages_arrives_whole_small_or_large() {
        let (mut client, mut server) = connected_pair();
        let large = vec![9u8; BATCHED_ONE_WAY_MAX + 1];
        let writer = std::thread::spawn(move || {
            client.write_one_way_burst(b"small", 3).unwrap();
            client.write_one_way_burst(&large, 2).unwrap();
        });
        for expected in [5, 5, 5, BATCHED_ONE_WAY_MAX + 1, BATCHED_ONE_WAY_MAX + 1] {
            let (one_way, message) = server.receive().unwrap();
            assert!(one_way);
            assert_eq!(message.len(), expected);
        }
        writer.join().unwrap();
    }
}
