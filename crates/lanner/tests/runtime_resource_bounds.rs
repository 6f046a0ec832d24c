//! Adversarial checks of the server's resource bounds (README, "Limits"): what a hostile
//! peer speaking the raw protocol can make a server hold beyond them.

use std::sync::Arc;
use std::time::Duration;

use lanner::{Object, Server};
use lanner_proto::Status;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

mod common;

/// A TCP socket whose receive buffer is small: what it does not read stays queued in the
/// server.
async fn small_receiver(address: &str) -> tokio::net::TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(64 << 10).unwrap();
    socket.connect(address.parse().unwrap()).await.unwrap()
}

/// Sends HELLO; `Ok` with the protocol state if the server welcomed the client, `Err`
/// with the CLOSE's status if it refused it.
async fn handshake(
    stream: &mut tokio::net::TcpStream,
) -> Result<lanner_proto::Connection, (Status, String)> {
    let (mut proto, hello) = lanner_proto::Connection::client(lanner_proto::Limits::default());
    stream.write_all(&hello).await.unwrap();
    let answer = common::read_frame(stream).await.unwrap();
    match proto.handle_frame(answer) {
        Ok(lanner_proto::Event::Established { .. }) => Ok(proto),
        Ok(lanner_proto::Event::Closed(close)) => Err((close.status, close.reason)),
        other => panic!("unexpected answer to HELLO: {other:?}"),
    }
}

fn method<P: lanner::Proxy>(name: &str) -> &'static lanner::MethodInfo {
    P::METHODS.iter().find(|m| m.name == name).unwrap()
}

/// Encodes a request for `method` of `handle` with postcard `args`.
fn request<A: serde::Serialize>(
    proto: &mut lanner_proto::Connection,
    handle: u64,
    method: &lanner::MethodInfo,
    args: &A,
) -> bytes::Bytes {
    let mut request =
        lanner_proto::MessageBuilder::request(handle, 0, method.ordinal, method.fingerprint);
    request
        .inline()
        .put_slice(&postcard::to_allocvec(args).unwrap());
    let (_, frame) = proto.send_request(request).map_err(|(e, _)| e).unwrap();
    frame.into_contiguous()
}

/// A connection the server ends while its answers are still queued for the peer lingers
/// (up to 5 s) with its socket and those answers: it must go on counting against
/// `max_connections` until it lets go of them. Otherwise a peer that gets each of its
/// connections closed (here by reusing a call id) while it reads nothing makes the server
/// hold any number of sockets and queued answers, whatever the limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lingering_connection_counts_against_the_connection_limit_until_it_lets_go() {
    let service = Arc::new(common::Service::default());
    let server = Server::new()
        .with_auth(lanner::ServerAuth::none())
        .with_max_connections(1);
    server.publish(
        "blobs",
        Object::new(common::BlobsStub::new(service.clone())),
    );
    server.publish("control", Object::new(common::ControlStub::new(service)));
    let listening = server.listen("tcp://127.0.0.1:0").await.unwrap();
    let address = listening.endpoint().to_string().replace("tcp://", "");

    let make = method::<common::BlobsProxy>("make");
    let sleep = method::<common::ControlProxy>("sleep_ms");
    let mut lingering = Vec::new();
    let mut admitted = 0;
    for _ in 0..4 {
        let mut socket = small_receiver(&address).await;
        let mut proto = match handshake(&mut socket).await {
            Ok(proto) => proto,
            Err((status, reason)) => {
                assert_eq!(status, Status::Overloaded, "{reason}");
                continue;
            }
        };
        admitted += 1;
        let blobs = common::resolve_raw(&mut socket, &mut proto, "blobs").await;
        let control = common::resolve_raw(&mut socket, &mut proto, "control").await;
        // An 8 MiB answer the client does not read: it stays queued in the server.
        let frame = request(&mut proto, blobs, make, &(8u32 << 20, 7u8));
        socket.write_all(&frame).await.unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
        // A call that is being served, then another with the same call id: a protocol
        // violation, and the server closes the connection (lingering for the answer).
        let frame = request(&mut proto, control, sleep, &(3_000u64, 1u64));
        socket.write_all(&frame).await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        socket.write_all(&frame).await.unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        lingering.push(socket);
    }

    // Each admitted connection's answer was still held by the server all along: read now,
    // it arrives whole, followed by the CLOSE.
    for socket in &mut lingering {
        let mut received = 0usize;
        let mut buffer = vec![0u8; 1 << 20];
        let read = tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                match socket.read(&mut buffer).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => received += n,
                }
            }
        })
        .await;
        assert!(read.is_ok(), "the server never ended the connection");
        assert!(received > 8 << 20, "only {received} bytes were held");
    }
    assert_eq!(
        admitted, 1,
        "with max_connections(1), the server admitted {admitted} connections while each \
         earlier one still held its socket and an 8 MiB answer"
    );
}

/// The connection limit holds for connections whose handshakes run at once: a client
/// that opens many connections before saying HELLO on any must not have them all
/// admitted because none had finished its handshake when each was accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_handshaking_together_do_not_exceed_the_connection_limit() {
    let service = Arc::new(common::Service::default());
    let server = Server::new()
        .with_auth(lanner::ServerAuth::none())
        .with_max_connections(2);
    server.publish("blobs", Object::new(common::BlobsStub::new(service)));
    let listening = server.listen("tcp://127.0.0.1:0").await.unwrap();
    let address = listening.endpoint().to_string().replace("tcp://", "");

    let mut sockets = Vec::new();
    for _ in 0..20 {
        sockets.push(tokio::net::TcpStream::connect(&address).await.unwrap());
    }
    // Every one accepted, its handshake waiting for the HELLO.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut established = Vec::new();
    for socket in &mut sockets {
        match handshake(socket).await {
            Ok(proto) => established.push((socket, proto)),
            Err((status, reason)) => assert_eq!(status, Status::Overloaded, "{reason}"),
        }
    }
    // Those beyond the limit may be closed right after their handshake (CLOSE,
    // `Overloaded`); the others stay open.
    let mut admitted = 0;
    for (socket, mut proto) in established {
        match tokio::time::timeout(Duration::from_millis(300), common::read_frame(socket)).await {
            Err(_) => admitted += 1,
            Ok(frame) => match proto.handle_frame(frame.unwrap()) {
                Ok(lanner_proto::Event::Closed(close)) => {
                    assert_eq!(close.status, Status::Overloaded, "{}", close.reason)
                }
                other => panic!("unexpected frame: {other:?}"),
            },
        }
    }
    assert!(
        admitted <= 2,
        "with max_connections(2), {admitted} connections were admitted at once"
    );
}

/// The root's `resolve` of a name nobody published answers `NotFound` naming it: the name
/// is the peer's, up to a frame long, and written escaped (`{:?}`), each control character
/// as five. Echoed whole, a 4 MiB request made the server build and queue a 20 MiB answer
/// (for a client that accepts frames that large): five times the request, beyond the
/// bound of `credits × max frame size` a connection can pin.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_name_is_not_echoed_whole_in_the_error() {
    let server = Server::new().with_auth(lanner::ServerAuth::none());
    let listening = server.listen("tcp://127.0.0.1:0").await.unwrap();
    let address = listening.endpoint().to_string().replace("tcp://", "");
    let mut socket = tokio::net::TcpStream::connect(&address).await.unwrap();
    let (mut proto, hello) = lanner_proto::Connection::client(lanner_proto::Limits {
        max_frame_size: 64 << 20,
        credits: 16,
    });
    socket.write_all(&hello).await.unwrap();
    let welcome = common::read_frame(&mut socket).await.unwrap();
    assert!(matches!(
        proto.handle_frame(welcome),
        Ok(lanner_proto::Event::Established { .. })
    ));

    let name = "\u{1}".repeat(4 << 20);
    let fingerprint =
        lanner::__private::method_fingerprint("resolve(String)->Result<ObjectRef,Error>");
    let mut resolve = lanner_proto::MessageBuilder::request(0, 0, 0, fingerprint);
    resolve
        .inline()
        .put_slice(&postcard::to_allocvec(&name).unwrap());
    let (_, frame) = proto.send_request(resolve).map_err(|(e, _)| e).unwrap();
    let frame = frame.into_contiguous();
    let request_len = frame.len();
    socket.write_all(&frame).await.unwrap();
    let answer = common::read_frame(&mut socket).await.unwrap();
    assert!(
        answer.len() <= 64 << 10,
        "a {request_len}-byte request was answered with {} bytes",
        answer.len()
    );
}
