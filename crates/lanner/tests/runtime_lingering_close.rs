//! A TCP (or TLS) connection the server closes while its client still reads a large
//! answer, and after the client sent something the server no longer reads: the client
//! still gets the whole answer, the CLOSE and a clean end of stream. Closed with input
//! unread, a TCP socket answers with a reset that throws away what the peer has not
//! received yet, so Lanner reads a closed socket until its peer's end of stream before it
//! lets go of it (see `transport::lingering_close`).

use std::sync::Arc;
use std::time::Duration;

use lanner::{Object, Server};
use lanner_proto::auth::{Mechanism, TransportAuthentication};
use lanner_proto::frame::FrameKind;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

mod common;

/// A TCP socket whose receive buffer is small: what its reader has not read stays in the
/// server's send buffer, as it does for a client far away or busy.
async fn small_receiver(address: &str) -> tokio::net::TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(64 << 10).unwrap();
    socket.connect(address.parse().unwrap()).await.unwrap()
}

/// Sends HELLO (asking for `mechanism`) on `stream` and takes the WELCOME: a client
/// speaking the raw protocol.
async fn establish<S>(stream: &mut S, mechanism: Mechanism) -> lanner_proto::Connection
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let (mut proto, hello) = lanner_proto::Connection::client_with(
        lanner_proto::Limits::default(),
        Box::new(TransportAuthentication::client(mechanism)),
    );
    stream.write_all(&hello).await.unwrap();
    let welcome = common::read_frame(stream).await.unwrap();
    let established = proto.handle_frame(welcome);
    assert!(
        matches!(established, Ok(lanner_proto::Event::Established { .. })),
        "{established:?}"
    );
    proto
}

/// A server publishing `blobs` on loopback TCP, with `auth`; its address (`host:port`).
async fn blobs_server(auth: lanner::ServerAuth) -> (lanner::Listening, String) {
    let server = Server::new().with_auth(auth);
    let blobs = common::BlobsStub::new(Arc::new(common::Service::default()));
    server.publish("blobs", Object::new(blobs));
    let listening = server.listen("tcp://127.0.0.1:0").await.unwrap();
    let address = listening.endpoint().to_string().replace("tcp://", "");
    (listening, address)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_reader_that_sent_a_frame_after_the_close_still_gets_its_answer_and_the_close() {
    let (listening, address) = blobs_server(lanner::ServerAuth::none()).await;
    let mut socket = small_receiver(&address).await;
    let proto = establish(&mut socket, Mechanism::None).await;
    read_slowly_across_shutdown(listening, socket, proto).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_tls_reader_that_sent_a_record_after_the_close_still_gets_its_answer_and_the_close()
{
    let pki = common::pki::Pki::new();
    let auth = lanner::ServerAuth::tls(common::pki::tls_server_config(&pki, true));
    let (listening, address) = blobs_server(auth).await;
    let connector =
        tokio_rustls::TlsConnector::from(common::pki::tls_client_config(&pki, Some("reader")));
    let name = lanner::rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let mut socket = connector
        .connect(name, small_receiver(&address).await)
        .await
        .unwrap();
    let proto = establish(&mut socket, Mechanism::Tls).await;
    read_slowly_across_shutdown(listening, socket, proto).await;
}

/// Asks for an 8 MiB answer without reading it, lets the server shut down, sends a frame
/// the server no longer reads, then reads slowly: the whole answer, the CLOSE and the end
/// of the stream must arrive.
async fn read_slowly_across_shutdown<S>(
    listening: lanner::Listening,
    mut socket: S,
    mut proto: lanner_proto::Connection,
) where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let handle = common::resolve_raw(&mut socket, &mut proto, "blobs").await;

    // An 8 MiB answer, which the client does not read yet.
    let make = <common::BlobsProxy as lanner::Proxy>::METHODS
        .iter()
        .find(|method| method.name == "make")
        .unwrap();
    let mut request =
        lanner_proto::MessageBuilder::request(handle, 0, make.ordinal, make.fingerprint);
    request
        .inline()
        .put_slice(&postcard::to_allocvec(&(8u32 << 20, 7u8)).unwrap());
    let (_, frame) = proto.send_request(request).map_err(|(e, _)| e).unwrap();
    socket.write_all(&frame.into_contiguous()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;

    // The server shuts down: once the grace has passed it sends CLOSE and stops reading,
    // lingering (5 s) while the answer's tail and the CLOSE wait for the client.
    let shutdown = tokio::spawn(listening.shutdown(Duration::from_millis(200)));
    tokio::time::sleep(Duration::from_millis(1000)).await;
    // A frame the server will never read (a keepalive PING; a RELEASE or CREDIT would do).
    socket
        .write_all(&lanner_proto::frame::encode_ping(42))
        .await
        .unwrap();

    // Read at about 3 MB/s: the 8 MiB take some 2.6 s, well inside the linger.
    let mut received = Vec::new();
    let mut buffer = vec![0u8; 64 << 10];
    let ended = loop {
        match socket.read(&mut buffer).await {
            Ok(0) => break Ok(()),
            Ok(read) => received.extend_from_slice(&buffer[..read]),
            // TLS: the end of the stream without a `close_notify`, which the server sends
            // only if its socket has room for it as it lets go (it does not wait): a
            // clean end for Lanner, which frames its messages.
            Err(error) if error.kind() == std::io::ErrorKind::UnexpectedEof => break Ok(()),
            Err(error) => break Err(error.to_string()),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let _ = shutdown.await;
    let mut kinds = Vec::new();
    let mut answer_len = 0;
    let mut rest = &received[..];
    while rest.len() >= 8 {
        let len = u32::from_le_bytes(rest[..4].try_into().unwrap()) as usize;
        if rest.len() < len {
            break;
        }
        kinds.push(rest[4]);
        if rest[4] == FrameKind::Response as u8 {
            answer_len = len;
        }
        rest = &rest[len..];
    }
    assert_eq!(
        ended,
        Ok(()),
        "reading ended in an error after {} bytes (frame kinds {kinds:?})",
        received.len()
    );
    assert!(
        answer_len > 8 << 20,
        "the answer came cut short: {answer_len}"
    );
    assert_eq!(kinds.last(), Some(&(FrameKind::Close as u8)), "{kinds:?}");
}
