//! Shared memory between real processes: a server killed while calls are in flight, hostile
//! clients that write garbage into the shared region (each loses only its own connection,
//! and the server keeps serving everyone else), and a large reply held while more flow.

mod support;

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::fs::FileExt;
use std::os::unix::net::{SocketAddr, UnixStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use lanner::ErrorKind;
use lanner::transport::shm::DEFAULT_RING_CAPACITY;
use lanner_cli::server_process::ServerProcess;
use lanner_cli::services::{Echo, EchoProxy};
use lanner_cli::transport_arg::TransportArg;
use lanner_proto::frame::{Close, Frame};
use lanner_proto::{Mechanism, Status};
use lanner_shm::doorbell::Doorbell;
use lanner_shm::handoff;
use lanner_shm::{Consumer, Producer, Side};
use support::{
    PATIENCE, connect, connect_with, garbage, hello, hello_with, payload, request, runtime, server,
    signal, still_serving,
};

/// Where ring 0's data area (client → server) lives in the region (see
/// `lanner_shm::region`).
const RING0_DATA: u64 = 4096;

/// A connected setup socket to the server's `shm://` endpoint, before any setup message.
fn setup_socket(server: &ServerProcess) -> UnixStream {
    let name = server
        .lanner
        .strip_prefix("shm://")
        .expect("the server listens on shm://");
    let address = SocketAddr::from_abstract_name(format!("lanner-shm/{name}")).unwrap();
    let socket = UnixStream::connect_addr(&address).expect("the setup socket accepts");
    socket.set_read_timeout(Some(PATIENCE)).unwrap();
    socket
}

/// A client that talks to the server's rings directly, without the Lanner runtime.
struct Hostile {
    socket: UnixStream,
    producer: Producer,
    consumer: Consumer,
}

impl Hostile {
    fn connect(server: &ServerProcess) -> Hostile {
        let socket = setup_socket(server);
        let (region, space) =
            handoff::accept_region(socket.as_fd()).expect("the server offers a region");
        // Rings go to a duplicate of the setup socket (the data doorbell) and to the space
        // doorbell: the server wakes, and the setup socket stays ours to read.
        let data = Arc::new(Doorbell::new(socket.try_clone().unwrap().into()));
        let (producer, consumer) =
            region.split(Side::Client, data, Arc::new(Doorbell::new(space)), 1);
        Hostile {
            socket,
            producer,
            consumer,
        }
    }

    /// Publishes one record (a fragment of a longer message if `more`).
    fn send_record(&mut self, bytes: &[u8], more: bool) {
        let mut reservation = self
            .producer
            .try_reserve(bytes.len())
            .unwrap()
            .expect("a fresh ring has room");
        reservation.write(0, bytes);
        reservation.commit(more);
    }

    /// The server's next frame; panics if none comes within [`PATIENCE`].
    fn next_frame(&mut self) -> Frame {
        let deadline = Instant::now() + PATIENCE;
        while Instant::now() < deadline {
            if let Some(record) = self.consumer.try_recv().unwrap() {
                assert!(!record.more, "a small frame came in pieces");
                return Frame::decode(record.bytes).expect("the server sends valid frames");
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        panic!("no frame from the server within {PATIENCE:?}");
    }

    /// HELLO and WELCOME, through the rings.
    fn handshake(&mut self) {
        self.send_record(&hello_with(Mechanism::PeerCredentials), false);
        let welcome = self.next_frame();
        assert!(
            matches!(welcome, Frame::Welcome(_)),
            "expected a WELCOME, got {welcome:?}"
        );
    }

    /// Waits (up to `within`) for the server to hang up, then returns the CLOSE frame it
    /// left in the ring, if any.
    fn expect_hang_up_within(mut self, within: Duration) -> Option<Close> {
        expect_eof_within(&mut self.socket, within, "waiting for the hang-up");
        let mut close = None;
        // Bounded: the ring holds at most a few frames from the server.
        for _ in 0..16 {
            let Some(record) = self.consumer.try_recv().unwrap() else {
                break;
            };
            if let Ok(Frame::Close(frame)) = Frame::decode(record.bytes) {
                close = Some(frame);
            }
        }
        close
    }

    fn expect_hang_up(self) -> Option<Close> {
        self.expect_hang_up_within(PATIENCE)
    }
}

/// Reads the setup socket until end of file (doorbell rings come first). Panics, naming
/// `case`, if the server keeps it open for `within`.
fn expect_eof_within(socket: &mut UnixStream, within: Duration, case: &str) {
    let deadline = Instant::now() + within;
    let mut buf = [0u8; 256];
    while Instant::now() < deadline {
        socket
            .set_read_timeout(Some(
                deadline
                    .saturating_duration_since(Instant::now())
                    .max(Duration::from_millis(1)),
            ))
            .unwrap();
        match socket.read(&mut buf) {
            Ok(0) => return,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return,
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(e) => panic!("reading the setup socket failed: {e}"),
        }
    }
    panic!("{case}: the server did not close the connection within {within:?}");
}

fn assert_closed_with(close: Option<Close>, status: Status, needle: &str) {
    let close = close.unwrap_or_else(|| panic!("expected a CLOSE frame about {needle:?}"));
    assert_eq!(close.status, status, "{}", close.reason);
    assert!(
        close.reason.contains(needle),
        "reason {:?} lacks {needle:?}",
        close.reason
    );
}

#[test]
fn killing_the_server_fails_a_large_call_in_flight_with_unavailable() {
    let mut server = server(TransportArg::Shm);
    runtime().block_on(async {
        let echo: EchoProxy = connect(&server, "echo").await;
        let sent = payload(5 << 20, 1);
        assert!(echo.echo(sent.clone()).await.expect("a first echo") == sent);
        // A stopped server drains nothing: a 5 MiB request (far larger than the ring)
        // fills the ring and waits for room, so it is certainly in flight, half written,
        // when the server dies. (Killing a server that runs left the call's state to
        // timing: the kill could fall between two calls.)
        signal(server.pid(), libc::SIGSTOP);
        let mut call = Box::pin(echo.echo(sent.clone()));
        assert!(
            futures_util::poll!(call.as_mut()).is_pending(),
            "a call to a stopped server does not complete"
        );
        // Whatever the first poll left for the connection's tasks to write goes now.
        tokio::time::sleep(Duration::from_millis(50)).await;
        server.kill();
        let error = tokio::time::timeout(PATIENCE, call)
            .await
            .expect("the call in flight fails within 5 s of the kill")
            .expect_err("a call to a killed server fails");
        assert_eq!(error.kind(), ErrorKind::Unavailable, "{error}");
        assert!(error.may_have_executed(), "the call was in flight: {error}");
        a_call_to_the_dead_server_fails_fast(&echo).await;
    });
}

/// Echoes `sent` again and again, counting successes, until a call fails (its error) or
/// 100,000 calls succeeded (`None`).
async fn echo_until_failure(
    echo: EchoProxy,
    sent: Bytes,
    completed: Arc<AtomicUsize>,
) -> Option<lanner::Error> {
    for _ in 0..100_000 {
        match echo.echo(sent.clone()).await {
            Ok(echoed) => {
                assert!(echoed == sent, "an echo came back different");
                completed.fetch_add(1, Ordering::Relaxed);
            }
            Err(error) => return Some(error),
        }
    }
    None
}

/// After the server died, a new call fails with `Unavailable` at once.
async fn a_call_to_the_dead_server_fails_fast(echo: &EchoProxy) {
    let start = Instant::now();
    let next = tokio::time::timeout(PATIENCE, echo.echo(payload(1 << 20, 0)))
        .await
        .expect("a call after the kill fails instead of hanging");
    let error = next.expect_err("a call to a dead server fails");
    assert_eq!(error.kind(), ErrorKind::Unavailable, "{error}");
    assert!(
        start.elapsed() < Duration::from_secs(1),
        "a call to a dead server took {:?}",
        start.elapsed()
    );
}

/// Busy-poll mode (readers never sleep; a spinning reader looks for the peer's death
/// every few hundred empty polls of the ring, about once a millisecond): calls of every
/// size work, and the server's death fails the next call with `Unavailable` promptly, as
/// in the default mode.
#[test]
fn a_busy_polling_client_calls_and_notices_the_servers_death() {
    let mut server = server(TransportArg::Shm);
    runtime().block_on(async {
        let options = lanner::ConnectionOptions::default().busy_poll();
        let echo: EchoProxy = connect_with(&server.lanner, "echo", options)
            .await
            .expect("a busy-polling client connects");
        for (seed, len) in [0usize, 1, 100, 20_000, 100_000, 5 << 20]
            .into_iter()
            .enumerate()
        {
            let sent = payload(len, seed);
            assert!(
                echo.echo(sent.clone()).await.expect("an echo") == sent,
                "{len} bytes"
            );
        }
        server.kill();
        a_call_to_the_dead_server_fails_fast(&echo).await;
    });
}

#[test]
fn killing_the_server_fails_every_call_in_flight_with_unavailable() {
    let mut server = server(TransportArg::Shm);
    runtime().block_on(async {
        let echo: EchoProxy = connect(&server, "echo").await;
        let completed = Arc::new(AtomicUsize::new(0));
        // Sixteen tasks keep 1 MiB echoes in flight, so the kill lands mid-call (some
        // frames half written, some replies half received).
        let tasks: Vec<_> = (0..16)
            .map(|task| {
                tokio::spawn(echo_until_failure(
                    echo.clone(),
                    payload(1 << 20, task),
                    completed.clone(),
                ))
            })
            .collect();
        let deadline = Instant::now() + PATIENCE;
        while completed.load(Ordering::Relaxed) < 64 {
            assert!(Instant::now() < deadline, "the echo calls do not progress");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        server.kill();
        let deadline = tokio::time::Instant::now() + PATIENCE;
        for task in tasks {
            let error = tokio::time::timeout_at(deadline, task)
                .await
                .expect("every call in flight fails within 5 s of the kill")
                .expect("the task does not panic")
                .expect("the calls stop succeeding");
            assert_eq!(error.kind(), ErrorKind::Unavailable, "{error}");
        }
        a_call_to_the_dead_server_fails_fast(&echo).await;
    });
}

#[test]
fn garbage_records_before_the_handshake_close_only_that_connection() {
    let server = server(TransportArg::Shm);

    // Bytes that are not a Lanner frame at all.
    let mut hostile = Hostile::connect(&server);
    hostile.send_record(&garbage(4096, 13), false);
    let close = hostile.expect_hang_up();
    assert_eq!(close.map(|c| c.status), Some(Status::Protocol));

    // A HELLO whose length word disagrees with the record holding it.
    let mut hostile = Hostile::connect(&server);
    let mut lying = hello(&server.lanner).to_vec();
    lying[0..4].copy_from_slice(&100u32.to_le_bytes());
    hostile.send_record(&lying, false);
    assert_eq!(
        hostile.expect_hang_up().map(|c| c.status),
        Some(Status::Protocol)
    );

    // The first piece of a fragmented frame announcing a huge length.
    let mut hostile = Hostile::connect(&server);
    let mut huge = [0u8; 64];
    huge[0..4].copy_from_slice(&u32::MAX.to_le_bytes());
    huge[4] = 1;
    hostile.send_record(&huge, true);
    assert_closed_with(
        hostile.expect_hang_up(),
        Status::Protocol,
        "exceeds the maximum frame size",
    );

    // A whole record larger than a handshake frame may be.
    let mut hostile = Hostile::connect(&server);
    let mut big = vec![0u8; 1 << 20];
    big[0..4].copy_from_slice(&(1u32 << 20).to_le_bytes());
    big[4] = 1;
    hostile.send_record(&big, false);
    assert_closed_with(
        hostile.expect_hang_up(),
        Status::Protocol,
        "exceeds the maximum frame size",
    );

    still_serving(&server);
}

#[test]
fn malformed_frames_after_the_handshake_close_only_that_connection() {
    let server = server(TransportArg::Shm);

    // Unknown frame kind.
    let mut hostile = Hostile::connect(&server);
    hostile.handshake();
    hostile.send_record(&[8, 0, 0, 0, 99, 0, 0, 0], false);
    assert_closed_with(
        hostile.expect_hang_up(),
        Status::Protocol,
        "unknown frame kind 99",
    );

    // A request whose length word claims more than the record holds.
    let mut hostile = Hostile::connect(&server);
    hostile.handshake();
    let mut lying = request(1, 0, 0, 0, b"xyz").to_vec();
    let len = lying.len() as u32 + 16;
    lying[0..4].copy_from_slice(&len.to_le_bytes());
    hostile.send_record(&lying, false);
    assert_eq!(
        hostile.expect_hang_up().map(|c| c.status),
        Some(Status::Protocol)
    );

    // A request fragmented into pieces that add up to more than its length word says.
    let mut hostile = Hostile::connect(&server);
    hostile.handshake();
    let whole = request(1, 0, 0, 0, &[7u8; 64]);
    hostile.send_record(&whole, true);
    hostile.send_record(&whole, false);
    assert_eq!(
        hostile.expect_hang_up().map(|c| c.status),
        Some(Status::Protocol)
    );

    // Random bytes in a record.
    let mut hostile = Hostile::connect(&server);
    hostile.handshake();
    hostile.send_record(&garbage(65536, 11), false);
    assert_eq!(
        hostile.expect_hang_up().map(|c| c.status),
        Some(Status::Protocol)
    );

    still_serving(&server);
}

#[test]
fn lent_records_naming_bytes_outside_the_area_close_only_that_connection() {
    let server = server(TransportArg::Shm);
    let frame = request(1, 0, 0, 0, b"");
    for (count, index, len, offset) in [
        (1u32, 0u16, 64u32, 1u64 << 40), // outside the area
        (1, 0, u32::MAX, 0),             // longer than the area
        (0, 0, 0, 0),                    // lends nothing
        (2, 0, 64, 0),                   // says two, describes one
        (1, 5, 64, 0),                   // a segment the frame does not have
    ] {
        let mut hostile = Hostile::connect(&server);
        hostile.handshake();
        // A record lending payloads: a zero word, then the count (see lanner's
        // transport/shm/lent.rs).
        let mut record = vec![0; 4];
        record.extend_from_slice(&count.to_le_bytes());
        record.extend_from_slice(&index.to_le_bytes());
        record.extend_from_slice(&[0; 2]);
        record.extend_from_slice(&len.to_le_bytes());
        record.extend_from_slice(&offset.to_le_bytes());
        record.extend_from_slice(&frame);
        hostile.send_record(&record, false);
        hostile.expect_hang_up();
    }
    still_serving(&server);
}

/// A record lending `segments` payloads, each `len` bytes from the start of the client's
/// loan area (lendings may overlap), for a request whose length field counts only the
/// frame's own bytes, not the lent ones.
fn lending_record_understating_its_size(segments: u16, len: u32) -> Vec<u8> {
    let (mut conn, _) = lanner_proto::Connection::client(lanner_proto::Limits::default());
    conn.handle_frame(support::welcome(
        lanner_proto::PROTOCOL_VERSION,
        Mechanism::None,
    ))
    .unwrap();
    let mut message = lanner_proto::MessageBuilder::request(1, 0, 0, 0);
    for _ in 0..segments {
        message.push_segment(Bytes::from_static(b"x"));
    }
    let (_, out) = conn.send_request(message).map_err(|(e, _)| e).unwrap();
    // The frame's own bytes end with its segment table: each entry becomes `len`.
    let mut frame = out.parts().0.to_vec();
    let own_bytes = frame.len();
    for entry in frame[own_bytes - 4 * usize::from(segments)..].chunks_exact_mut(4) {
        entry.copy_from_slice(&len.to_le_bytes());
    }
    frame[..4].copy_from_slice(&(own_bytes as u32).to_le_bytes());
    // A zero word, the count, then one descriptor per segment (see lanner's
    // transport/shm/lent.rs): index, two bytes of padding, length, offset.
    let mut record = vec![0; 4];
    record.extend_from_slice(&u32::from(segments).to_le_bytes());
    for index in 0..segments {
        record.extend_from_slice(&index.to_le_bytes());
        record.extend_from_slice(&[0; 2]);
        record.extend_from_slice(&len.to_le_bytes());
        record.extend_from_slice(&0u64.to_le_bytes());
    }
    record.extend_from_slice(&frame);
    record
}

#[test]
fn a_lent_frame_over_the_size_limit_is_refused_whatever_its_length_field_says() {
    let server = server(TransportArg::Shm);
    // 32 lendings of 1 MiB: a 32 MiB request, twice the default limit. Its length field
    // claims only the frame's own bytes, as a peer rewriting it while the frame is read in
    // place could show the receiver's first look: the size that counts is what arrived.
    let mut hostile = Hostile::connect(&server);
    hostile.handshake();
    hostile.send_record(&lending_record_understating_its_size(32, 1 << 20), false);
    assert_closed_with(
        hostile.expect_hang_up(),
        Status::Protocol,
        "exceeds the maximum frame size",
    );
    still_serving(&server);
}

#[test]
fn loaned_payloads_cross_to_the_server_process_by_reference() {
    let server = server(TransportArg::Shm);
    runtime().block_on(async {
        let echo: EchoProxy = connect(&server, "echo").await;
        use lanner::Proxy;
        for round in 0..30u8 {
            let mut loan = echo.object().loan(1 << 20);
            assert!(loan.is_shared(), "round {round}: no block came back");
            loan.copy_from_slice(&payload(1 << 20, round.into()));
            let sent = loan.freeze();
            let echoed = echo.echo(sent.clone()).await.unwrap();
            assert!(echoed == sent, "round {round} came back different");
        }
        assert_eq!(echo.object().traffic().payloads_lent, 30);
    });
    still_serving(&server);
}

/// A client that maps the region itself and writes anywhere in its own ring, bypassing
/// the ring protocol.
struct Scribbler {
    socket: UnixStream,
    memfd: File,
    capacity: u64,
}

impl Scribbler {
    /// Receives the server's offer by hand (16 bytes: magic, version, ring capacity; the
    /// memfd and the space doorbell attached), keeping the memfd to write through.
    fn connect(server: &ServerProcess) -> Scribbler {
        let socket = setup_socket(server);
        let mut offer = [0u8; 16];
        let (len, fds) = lanner_shm::sys::recv_with_fds(socket.as_fd(), &mut offer)
            .expect("the server offers a region");
        assert_eq!(len, 16, "the offer is 16 bytes");
        assert_eq!(&offer[..6], b"LNRSHM");
        let capacity = u32::from_le_bytes(offer[12..16].try_into().unwrap()) as u64;
        let [memfd, _space] =
            <[_; 2]>::try_from(fds).expect("the offer carries the memfd and the space doorbell");
        Scribbler {
            socket,
            memfd: File::from(memfd),
            capacity,
        }
    }

    fn write(&self, offset: u64, bytes: &[u8]) {
        self.memfd.write_all_at(bytes, offset).unwrap();
    }

    /// Rings the server's doorbell: it looks at ring 0, whose record headers are the
    /// arrival flags (there is no shared tail to set). The server may have hung up
    /// already, having found the scribble while it polled.
    fn wake(&mut self) {
        match self.socket.write_all(&[1]) {
            Ok(()) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset
                ) => {}
            Err(e) => panic!("ringing the server failed: {e}"),
        }
    }
}

/// How soon a connection the server refuses for what it found in the ring must be closed:
/// well before the handshake's deadline (5 s), which closes a silent one anyway.
const REFUSED_AT_ONCE: Duration = Duration::from_secs(2);

#[test]
fn scribbling_over_the_region_closes_only_that_connection() {
    let server = server(TransportArg::Shm);
    // The server offers rings of the default size (each scribbler checks it).
    let capacity = DEFAULT_RING_CAPACITY as u64;
    let lines = capacity as usize / 64;
    let empty_fragment_line = [header(0, MORE | WRITTEN), vec![0; 56]].concat();
    // Each write puts record headers (or garbage) where the server looks for the first
    // record, and each connection must be closed for it at once, not at the handshake's
    // deadline (5 s), which would close it anyway.
    let cases: [(&str, Vec<u8>); 8] = [
        (
            "a length far beyond the ring",
            header(u32::MAX - 7, WRITTEN),
        ),
        ("a header without its written flag", header(16, 0)),
        (
            "a record running past the ring's end",
            header(capacity as u32, WRITTEN),
        ),
        (
            "a record more than a ring ahead of the consumer",
            header(capacity as u32 - 8, WRITTEN),
        ),
        (
            "flags this version does not know",
            header(0, 0x80 | WRITTEN),
        ),
        (
            "padding over the whole ring, which no producer writes",
            header(capacity as u32 - 8, PADDING | WRITTEN),
        ),
        (
            "garbage over the whole data area",
            garbage(capacity as u32, 9),
        ),
        (
            // They add nothing to a message: republished lap after lap, they would keep
            // the server's receiver taking them.
            "a ring of empty fragments",
            empty_fragment_line.repeat(lines),
        ),
    ];
    for (case, bytes) in cases {
        let mut scribbler = Scribbler::connect(&server);
        assert_eq!(scribbler.capacity, capacity, "the offered ring's size");
        scribbler.write(RING0_DATA, &bytes);
        scribbler.wake();
        expect_eof_within(&mut scribbler.socket, REFUSED_AT_ONCE, case);
    }

    still_serving(&server);
}

/// Record header flags (see `lanner_shm::ring`): padding, a fragment, and the flag every
/// header carries.
const PADDING: u32 = 1;
const MORE: u32 = 2;
const WRITTEN: u32 = 8;

/// A ring record header: `len`, then `flags`, each a little-endian `u32`.
fn header(len: u32, flags: u32) -> Vec<u8> {
    [len.to_le_bytes(), flags.to_le_bytes()].concat()
}

#[test]
fn idle_clients_do_not_stop_the_server() {
    let server = server(TransportArg::Shm);
    // One connects and never reads its offer; one maps its region and never says HELLO.
    let mut silent = setup_socket(&server);
    let idle = Hostile::connect(&server);
    still_serving(&server);
    runtime().block_on(async {
        let echo: EchoProxy = connect(&server, "echo").await;
        for size in [1usize, 1 << 16, 3 << 20] {
            let sent = payload(size, size);
            let echoed = tokio::time::timeout(PATIENCE, echo.echo(sent.clone()))
                .await
                .expect("the server answers while idle clients hang around")
                .unwrap();
            assert!(
                echoed == sent,
                "payload of {size} bytes came back different"
            );
        }
    });
    // The server gives up on both after its handshake timeout (5 s).
    let grace = 2 * PATIENCE;
    assert!(
        idle.expect_hang_up_within(grace).is_none(),
        "no CLOSE for a silent peer"
    );
    let mut offer = [0u8; 16];
    let (len, _memfd) = lanner_shm::sys::recv_with_fds(silent.as_fd(), &mut offer).unwrap();
    assert_eq!(len, 16, "the silent client was offered a region");
    expect_eof_within(&mut silent, grace, "a client silent after the offer");
}

#[test]
fn a_held_reply_stays_intact_while_fifty_more_flow() {
    let server = server(TransportArg::Shm);
    runtime().block_on(async {
        let echo: EchoProxy = connect(&server, "echo").await;
        let original = payload(1 << 20, 0);
        let kept = echo.echo(original.clone()).await.unwrap();
        for round in 1..=50 {
            let sent = payload(1 << 20, round);
            let echoed = tokio::time::timeout(PATIENCE, echo.echo(sent.clone()))
                .await
                .unwrap_or_else(|_| panic!("call {round} hangs while a 1 MiB reply is held"))
                .unwrap();
            assert!(echoed == sent, "call {round} came back different");
        }
        assert!(kept == original, "the held reply changed under our feet");
    });
}

#[test]
fn clients_that_never_authenticate_do_not_make_the_server_commit_memory() {
    let server = server(TransportArg::Shm);
    still_serving(&server);
    let resident =
        || lanner_cli::procfs::status_kib(&server.pid().to_string(), "VmRSS").unwrap() * 1024;
    let before = resident();
    // Sixteen clients take their region's descriptor and say nothing. Faulted in, their
    // rings would be 8 MiB each (two of `DEFAULT_RING_CAPACITY`), 128 MiB in all.
    let clients: Vec<_> = (0..16)
        .map(|_| {
            let socket = setup_socket(&server);
            let offer = handoff::accept_region(socket.as_fd()).expect("the server offers");
            (socket, offer)
        })
        .collect();
    // Faulting 8 MiB in takes a few milliseconds; give it plenty.
    std::thread::sleep(Duration::from_millis(500));
    let grown = resident().saturating_sub(before);
    assert!(
        grown < 32 << 20,
        "the server's memory grew by {} MiB for clients that never authenticated",
        grown >> 20
    );
    drop(clients);
    still_serving(&server);
}
