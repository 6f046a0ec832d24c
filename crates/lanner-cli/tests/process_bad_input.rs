//! Bad input against a real server process: every malformed or hostile frame ends in a
//! clear error (a CLOSE frame or an error response), never a panic or a hang, and the
//! server keeps serving everyone else.

mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use lanner::Proxy;
use lanner_cli::services::{CalculatorProxy, Echo, EchoProxy};
use lanner_cli::transport_arg::TransportArg;
use lanner_proto::frame::{self, Frame};
use lanner_proto::{FrameSplitter, Hello, Limits, Mechanism, Status};
use support::{
    PATIENCE, STREAM_TRANSPORTS, client, connect, garbage, hello, plain_mechanism, request,
    runtime, server, still_serving, welcome,
};

trait Stream: Read + Write {}
impl<T: Read + Write> Stream for T {}

fn raw(endpoint: &str) -> Box<dyn Stream> {
    let timeout = Some(Duration::from_secs(5));
    if let Some(address) = endpoint.strip_prefix("tcp://") {
        let stream = TcpStream::connect(address).unwrap();
        stream.set_read_timeout(timeout).unwrap();
        Box::new(stream)
    } else {
        let stream = UnixStream::connect(endpoint.strip_prefix("unix://").unwrap()).unwrap();
        stream.set_read_timeout(timeout).unwrap();
        Box::new(stream)
    }
}

/// Reads the next frame; None at end of stream. Panics on a read timeout (a hang).
fn read_frame(stream: &mut dyn Stream, buffer: &mut BytesMut) -> Option<Frame> {
    let splitter = FrameSplitter::new(64 << 20);
    loop {
        if let Some(frame) = splitter.split(buffer).unwrap() {
            return Some(Frame::decode(frame).unwrap());
        }
        let mut chunk = [0u8; 65536];
        let n = stream
            .read(&mut chunk)
            .expect("the server answers within 5 s");
        if n == 0 {
            return None;
        }
        buffer.extend_from_slice(&chunk[..n]);
    }
}

/// Expects a CLOSE with `status` whose reason contains `needle`, then end of stream.
fn expect_close(stream: &mut dyn Stream, status: Status, needle: &str) {
    let mut buffer = BytesMut::new();
    match read_frame(stream, &mut buffer) {
        Some(Frame::Close(close)) => {
            assert_eq!(close.status, status, "{}", close.reason);
            assert!(
                close.reason.contains(needle),
                "reason {:?} lacks {needle:?}",
                close.reason
            );
        }
        other => panic!("expected a CLOSE frame, got {other:?}"),
    }
    assert!(
        read_frame(stream, &mut buffer).is_none(),
        "the connection stays open"
    );
}

/// A raw connection to `endpoint` that has been through HELLO and WELCOME, and its
/// receive buffer.
fn handshaken(endpoint: &str) -> (Box<dyn Stream>, BytesMut) {
    let mut stream = raw(endpoint);
    stream.write_all(&hello(endpoint)).unwrap();
    let mut buffer = BytesMut::new();
    assert!(matches!(
        read_frame(stream.as_mut(), &mut buffer),
        Some(Frame::Welcome(_))
    ));
    (stream, buffer)
}

fn expect_response(stream: &mut dyn Stream, buffer: &mut BytesMut, status: Status) -> Bytes {
    match read_frame(stream, buffer) {
        Some(Frame::Response(response)) => {
            let inline = response.payload.inline();
            assert_eq!(
                response.status,
                status,
                "{}",
                String::from_utf8_lossy(&inline)
            );
            inline
        }
        other => panic!("expected a RESPONSE, got {other:?}"),
    }
}

fn resolve(stream: &mut dyn Stream, buffer: &mut BytesMut, name: &str) -> u64 {
    let fingerprint =
        lanner::__private::method_fingerprint("resolve(String)->Result<ObjectRef,Error>");
    let inline = postcard::to_allocvec(&(name,)).unwrap();
    stream
        .write_all(&request(0, 0, 0, fingerprint, &inline))
        .unwrap();
    let reply = expect_response(stream, buffer, Status::Ok);
    let (handle, _interfaces): (u64, Vec<u128>) = postcard::from_bytes(&reply).unwrap();
    handle
}

#[test]
fn handshake_violations_are_refused_with_a_reason() {
    for transport in STREAM_TRANSPORTS {
        let server = server(transport);

        let mut bad_magic = hello(&server.lanner).to_vec();
        bad_magic[8..12].copy_from_slice(b"HTTP");
        let mut stream = raw(&server.lanner);
        stream.write_all(&bad_magic).unwrap();
        expect_close(stream.as_mut(), Status::Protocol, "magic");

        let mut stream = raw(&server.lanner);
        stream
            .write_all(&frame::encode_hello(&Hello {
                version_min: 7,
                version_max: 9,
                limits: Limits::default(),
                mechanism: plain_mechanism(&server.lanner),
                auth: Bytes::new(),
            }))
            .unwrap();
        expect_close(stream.as_mut(), Status::Protocol, "version");

        let mut stream = raw(&server.lanner);
        stream
            .write_all(&request(1, 0, 0, 0, b"before the handshake"))
            .unwrap();
        expect_close(stream.as_mut(), Status::Protocol, "awaiting HELLO");

        // A length announcing a huge frame before authentication: refused from the header.
        let mut stream = raw(&server.lanner);
        let mut huge = [0u8; 8];
        huge[0..4].copy_from_slice(&(100_000_000u32).to_le_bytes());
        huge[4] = 1;
        stream.write_all(&huge).unwrap();
        expect_close(
            stream.as_mut(),
            Status::Protocol,
            "exceeds the maximum frame size",
        );

        // Half a HELLO, then silence and a close: nothing breaks.
        let mut stream = raw(&server.lanner);
        stream.write_all(&hello(&server.lanner)[..10]).unwrap();
        drop(stream);

        still_serving(&server);
    }
}

#[test]
fn malformed_frames_after_the_handshake_close_only_that_connection() {
    for transport in STREAM_TRANSPORTS {
        let server = server(transport);

        // Oversized length field.
        let (mut stream, _) = handshaken(&server.lanner);
        let mut huge = [0u8; 8];
        huge[0..4].copy_from_slice(&u32::MAX.to_le_bytes());
        huge[4] = 3;
        stream.write_all(&huge).unwrap();
        expect_close(
            stream.as_mut(),
            Status::Protocol,
            "exceeds the maximum frame size",
        );

        // Unknown frame kind.
        let (mut stream, _) = handshaken(&server.lanner);
        stream.write_all(&[8, 0, 0, 0, 99, 0, 0, 0]).unwrap();
        expect_close(stream.as_mut(), Status::Protocol, "unknown frame kind 99");

        // A request whose bulk table lies about its lengths.
        let (mut stream, _) = handshaken(&server.lanner);
        let mut lying = request(5, 0, 0, 0, b"").to_vec();
        lying[6] = 1; // one bulk segment declared ...
        lying.extend_from_slice(&1000u32.to_le_bytes()); // ... of 1000 bytes, none present
        let len = lying.len() as u32;
        lying[0..4].copy_from_slice(&len.to_le_bytes());
        stream.write_all(&lying).unwrap();
        expect_close(stream.as_mut(), Status::Protocol, "bulk segment lengths");

        // A frame cut short, then the client goes away.
        let (mut stream, _) = handshaken(&server.lanner);
        stream
            .write_all(&request(1, 0, 0, 0, b"xyz")[..20])
            .unwrap();
        drop(stream);

        // Random garbage.
        let mut stream = raw(&server.lanner);
        let _ = stream.write_all(&garbage(4096, 13));
        let mut buffer = BytesMut::new();
        let mut frames = 0;
        while read_frame(stream.as_mut(), &mut buffer).is_some() {
            frames += 1;
            assert!(frames < 4, "garbage keeps the connection talking");
        }

        still_serving(&server);
    }
}

#[test]
fn bad_calls_get_error_replies_and_the_connection_stays_usable() {
    for transport in STREAM_TRANSPORTS {
        let server = server(transport);
        let (mut stream, mut buffer) = handshaken(&server.lanner);

        // An object handle never handed to this connection.
        stream
            .write_all(&request(0xdead_beef, 0, 0, 0, b""))
            .unwrap();
        let message = expect_response(stream.as_mut(), &mut buffer, Status::NotFound);
        assert!(String::from_utf8_lossy(&message).contains("no object with handle"));

        let calc = resolve(stream.as_mut(), &mut buffer, "calc");
        let add = &<CalculatorProxy as Proxy>::METHODS[0];

        // An interface slot the object does not have.
        stream
            .write_all(&request(calc, 9, 0, add.fingerprint, b""))
            .unwrap();
        expect_response(stream.as_mut(), &mut buffer, Status::NotFound);

        // The right ordinal with another signature's fingerprint.
        stream
            .write_all(&request(calc, 0, 0, add.fingerprint ^ 1, b""))
            .unwrap();
        let message = expect_response(stream.as_mut(), &mut buffer, Status::Unimplemented);
        assert!(
            String::from_utf8_lossy(&message).contains("incompatible method"),
            "{}",
            String::from_utf8_lossy(&message)
        );

        // An unknown method ordinal.
        stream
            .write_all(&request(calc, 0, 77, 0x1234_5678, b""))
            .unwrap();
        expect_response(stream.as_mut(), &mut buffer, Status::Unimplemented);

        // Arguments that are not (i64, i64).
        stream
            .write_all(&request(calc, 0, add.ordinal, add.fingerprint, &[0xff]))
            .unwrap();
        let message = expect_response(stream.as_mut(), &mut buffer, Status::InvalidArgument);
        assert!(String::from_utf8_lossy(&message).contains("arguments of add"));

        // Too many argument bytes.
        let mut args = postcard::to_allocvec(&(1i64, 2i64)).unwrap();
        args.extend_from_slice(b"extra");
        stream
            .write_all(&request(calc, 0, add.ordinal, add.fingerprint, &args))
            .unwrap();
        expect_response(stream.as_mut(), &mut buffer, Status::InvalidArgument);

        // After all that, a correct call on the same connection works.
        let args = postcard::to_allocvec(&(20i64, 22i64)).unwrap();
        stream
            .write_all(&request(calc, 0, add.ordinal, add.fingerprint, &args))
            .unwrap();
        let reply = expect_response(stream.as_mut(), &mut buffer, Status::Ok);
        assert_eq!(postcard::from_bytes::<i64>(&reply).unwrap(), 42);

        still_serving(&server);
    }
}

/// Handles are capabilities of the connection they were handed to: another connection
/// that names one, and the connection that held it once it released it, get exactly the
/// answer a handle that never existed gets.
#[test]
fn a_handle_is_callable_only_where_it_was_handed_over_and_until_released() {
    // The refusal, with the handle it names taken out.
    fn refusal(stream: &mut dyn Stream, buffer: &mut BytesMut, handle: u64) -> String {
        let message = expect_response(stream, buffer, Status::NotFound);
        String::from_utf8_lossy(&message).replace(&format!("{handle:#x}"), "HANDLE")
    }
    let add = &<CalculatorProxy as Proxy>::METHODS[0];
    let args = postcard::to_allocvec(&(20i64, 22i64)).unwrap();
    let call = |handle| request(handle, 0, add.ordinal, add.fingerprint, &args);
    for transport in STREAM_TRANSPORTS {
        let server = server(transport);
        let (mut holder, mut holder_buffer) = handshaken(&server.lanner);
        let calc = resolve(holder.as_mut(), &mut holder_buffer, "calc");
        holder.write_all(&call(calc)).unwrap();
        let sum = expect_response(holder.as_mut(), &mut holder_buffer, Status::Ok);
        assert_eq!(postcard::from_bytes::<i64>(&sum).unwrap(), 42);

        let (mut other, mut other_buffer) = handshaken(&server.lanner);
        other.write_all(&call(0xdead_beef)).unwrap();
        let never_existed = refusal(other.as_mut(), &mut other_buffer, 0xdead_beef);
        assert!(never_existed.contains("no object with handle HANDLE"));
        other.write_all(&call(calc)).unwrap();
        let elsewhere = refusal(other.as_mut(), &mut other_buffer, calc);
        assert_eq!(elsewhere, never_existed, "a handle of another connection");

        holder
            .write_all(&frame::encode_release(&[calc], false))
            .unwrap();
        holder.write_all(&call(calc)).unwrap();
        let released = refusal(holder.as_mut(), &mut holder_buffer, calc);
        assert_eq!(released, never_existed, "a released handle");

        still_serving(&server);
    }
}

/// A fake server for client-side tests: runs `behave` on the first accepted connection.
fn fake_server(
    behave: impl FnOnce(UnixStream) + Send + 'static,
) -> (String, std::thread::JoinHandle<()>) {
    let path = std::env::temp_dir().join(format!(
        "lanner-fake-{}-{}.sock",
        std::process::id(),
        rand_suffix()
    ));
    let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    let url = format!("unix://{}/echo", path.display());
    let handle = std::thread::spawn(move || {
        let (stream, _) = listener.accept().unwrap();
        behave(stream);
        let _ = std::fs::remove_file(&path);
    });
    (url, handle)
}

fn rand_suffix() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

#[test]
fn a_client_refuses_bad_servers_with_clear_errors() {
    // A server speaking another protocol version.
    let (url, server) = fake_server(|mut stream| {
        let mut hello = [0u8; frame::HELLO_LEN];
        stream.read_exact(&mut hello).unwrap();
        let welcome = welcome(
            lanner_proto::PROTOCOL_VERSION + 1,
            Mechanism::PeerCredentials,
        );
        stream.write_all(&welcome).unwrap();
        let _ = stream.read(&mut [0u8; 16]);
    });
    let error = runtime()
        .block_on(client(&url).connect::<EchoProxy>(&url))
        .unwrap_err();
    assert_eq!(error.kind(), lanner::ErrorKind::Protocol, "{error}");
    assert!(error.message().contains("version"), "{error}");
    server.join().unwrap();

    // A server that is not a Lanner server at all.
    let (url, server) = fake_server(|mut stream| {
        let _ = stream.write_all(b"HTTP/1.1 400 Bad Request\r\n\r\n");
        let _ = stream.read(&mut [0u8; 64]);
    });
    let error = runtime()
        .block_on(client(&url).connect::<EchoProxy>(&url))
        .unwrap_err();
    assert_eq!(error.kind(), lanner::ErrorKind::Protocol, "{error}");
    server.join().unwrap();

    // A server that never answers: the handshake times out, and the server is unavailable
    // (as one that does not accept at all).
    let (url, server) = fake_server(|mut stream| {
        std::thread::sleep(Duration::from_millis(800));
        let _ = stream.read(&mut [0u8; 64]);
    });
    let options =
        lanner::ConnectionOptions::default().with_handshake_timeout(Duration::from_millis(200));
    let error = runtime()
        .block_on(lanner::Client::with_options(options).connect::<EchoProxy>(&url))
        .unwrap_err();
    assert_eq!(error.kind(), lanner::ErrorKind::Unavailable, "{error}");
    assert!(
        error.message().contains("did not complete within"),
        "{error}"
    );
    server.join().unwrap();
}

/// The server process's resident memory, in bytes.
fn resident_bytes(pid: u32) -> u64 {
    lanner_cli::procfs::status_kib(&pid.to_string(), "VmRSS").unwrap() * 1024
}

/// An echo REQUEST with call id `call_id` carrying `payload` as its bulk argument.
fn echo_request(handle: u64, call_id: u64, payload: &Bytes) -> Vec<u8> {
    bulk_request(handle, "echo", false, call_id, payload)
}

/// A REQUEST of the Echo method `name` (`one_way`, as that method is declared, or not)
/// with call id `call_id`, carrying `payload` as its bulk argument.
fn bulk_request(handle: u64, name: &str, one_way: bool, call_id: u64, payload: &Bytes) -> Vec<u8> {
    let method = <EchoProxy as Proxy>::METHODS
        .iter()
        .find(|method| method.name == name)
        .expect("an Echo method");
    let mut message =
        lanner_proto::MessageBuilder::request(handle, 0, method.ordinal, method.fingerprint);
    message.push_segment(payload.clone());
    if one_way {
        message.set_one_way();
    }
    let (mut conn, _) = lanner_proto::Connection::client(Limits::default());
    conn.handle_frame(welcome(lanner_proto::PROTOCOL_VERSION, Mechanism::None))
        .unwrap();
    let (_, out) = conn.send_request(message).map_err(|(e, _)| e).unwrap();
    let mut frame = out.into_contiguous().to_vec();
    frame[8..16].copy_from_slice(&call_id.to_le_bytes());
    frame
}

/// A client that shuts its reading side and goes on sending one-way calls: the server's
/// writes to it fail (the calls' credits cannot go back), so it stops writing to that
/// connection, but it still runs every call that arrives, and serves everyone else.
#[test]
fn a_client_that_stops_reading_still_has_its_one_way_calls_run() {
    const CALLS: u64 = 8;
    const BYTES: usize = 1000;
    let server = server(TransportArg::Unix);
    let mut stream = UnixStream::connect(server.lanner.strip_prefix("unix://").unwrap()).unwrap();
    stream.set_read_timeout(Some(PATIENCE)).unwrap();
    stream.write_all(&hello(&server.lanner)).unwrap();
    let mut buffer = BytesMut::new();
    assert!(matches!(
        read_frame(&mut stream, &mut buffer),
        Some(Frame::Welcome(_))
    ));
    let echo = resolve(&mut stream, &mut buffer, "echo");
    stream.shutdown(std::net::Shutdown::Read).unwrap();
    let payload = Bytes::from(vec![7u8; BYTES]);
    for call in 0..CALLS {
        stream
            .write_all(&bulk_request(echo, "sink", true, call + 10, &payload))
            .unwrap();
        // Apart, so that the server's first failed write comes before the later calls.
        std::thread::sleep(Duration::from_millis(20));
    }
    // Another client sees what they did.
    let sunk = runtime().block_on(async {
        let echo: EchoProxy = connect(&server, "echo").await;
        let deadline = std::time::Instant::now() + PATIENCE;
        loop {
            let sunk = echo.sunk().await.unwrap();
            if sunk >= CALLS * BYTES as u64 || std::time::Instant::now() > deadline {
                return sunk;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    });
    assert_eq!(
        sunk,
        CALLS * BYTES as u64,
        "calls sent after the client stopped reading"
    );
    drop(stream);
    still_serving(&server);
}

#[test]
fn a_client_that_stops_reading_costs_the_server_bounded_memory() {
    const PAYLOAD: usize = 256 << 10;
    let credits = Limits::default().credits as u64;
    let server = server(TransportArg::Unix);
    let (mut stream, mut buffer) = handshaken(&server.lanner);
    let echo = resolve(stream.as_mut(), &mut buffer, "echo");
    let before = resident_bytes(server.pid());
    let payload = support::payload(PAYLOAD, 7);
    // Every credit spent on a large echo, and not one answer read: the answers pile up in
    // the server, which may hold at most `credits` of them.
    for call_id in 1..=credits {
        stream
            .write_all(&echo_request(echo, call_id, &payload))
            .unwrap();
    }
    std::thread::sleep(Duration::from_millis(300));
    let peak = resident_bytes(server.pid());
    let bound = credits * PAYLOAD as u64 + (32 << 20);
    assert!(
        peak.saturating_sub(before) < bound,
        "the server grew by {} MiB for {credits} unread answers of {} KiB",
        (peak - before) >> 20,
        PAYLOAD >> 10
    );
    // One request more than the credits allow ends the connection instead of growing.
    // What was queued for this peer that does not read is dropped, so it sees some
    // answers, then the end (the CLOSE saying why, if it fit in the socket).
    let _ = stream.write_all(&echo_request(echo, credits + 1, &payload));
    let mut answers = 0;
    let close = loop {
        match read_frame(stream.as_mut(), &mut buffer) {
            Some(Frame::Response(_)) => answers += 1,
            other => break other,
        }
    };
    assert!(
        answers <= credits,
        "{answers} answers for {credits} credits"
    );
    match close {
        Some(Frame::Close(close)) => assert_eq!(close.status, Status::Overloaded, "{close:?}"),
        None => {}
        other => panic!("expected the end of the connection, got {other:?}"),
    }
    still_serving(&server);
}
