//! TLS under load, and how connections judge a peer's liveness: the keepalive across slow
//! links and frozen ones (through a relay in front of the server), idle closes racing
//! calls, a damaged record, a TLS client at a plain server, and a client that never reads.

use std::sync::Arc;
use std::time::Duration;

use lanner::{Client, ClientAuth, Server, ServerAuth};

mod common;
use common::pki::{Pki, tls_client_config, tls_server_config};
use common::{Blobs, BlobsProxy};

async fn tls_pair(
    options: lanner::ConnectionOptions,
) -> (Server, lanner::Listening, Client, String) {
    let pki = Pki::new();
    let server = Server::with_options(options.clone())
        .with_auth(ServerAuth::tls(tls_server_config(&pki, true)));
    let (server, listening) = common::serve_at(
        "tcp://127.0.0.1:0",
        server,
        common::service_object(&Arc::new(common::Service::default())),
    )
    .await;
    let client = Client::with_options(options).with_auth(ClientAuth::tls(
        tls_client_config(&pki, Some("alice")),
        "localhost",
    ));
    let url = format!("{}/obj", listening.endpoint());
    (server, listening, client, url)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_large_payloads_both_ways_concurrently() {
    large_payloads_both_ways_concurrently().await;
}

#[tokio::test]
async fn tls_large_payloads_both_ways_concurrently_on_a_current_thread_runtime() {
    large_payloads_both_ways_concurrently().await;
}

async fn large_payloads_both_ways_concurrently() {
    let (_server, _listening, client, url) = tls_pair(lanner::ConnectionOptions::default()).await;
    let blobs: BlobsProxy = client.connect(&url).await.unwrap();
    let work = async {
        for round in 0..3u8 {
            let mut tasks = Vec::new();
            for i in 0..8u8 {
                let blobs = blobs.clone();
                tasks.push(tokio::spawn(async move {
                    let data = common::pattern((3 << 20) + usize::from(i) * 4099, i ^ round);
                    let back = blobs.echo(data.clone()).await.unwrap();
                    assert!(back == data);
                }));
            }
            for task in tasks {
                task.await.unwrap();
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(60), work)
        .await
        .expect("TLS transfers wedged");
}

/// Calls spaced around the idle timeout: every one must succeed (the proxy came from a
/// URL, so it reconnects after an idle close) and none may hang.
async fn calls_racing_idle_closes(tls: bool) {
    let options = lanner::ConnectionOptions::default().with_idle_timeout(Duration::from_millis(40));
    let (client, url, _keep) = if tls {
        let (server, listening, client, url) = tls_pair(options).await;
        (client, url, (Some(server), listening))
    } else {
        let server = Server::with_options(options.clone()).with_auth(ServerAuth::none());
        let (server, listening) = common::serve_at(
            "tcp://127.0.0.1:0",
            server,
            common::service_object(&Arc::new(common::Service::default())),
        )
        .await;
        let url = format!("{}/obj", listening.endpoint());
        (
            Client::with_options(options).with_auth(ClientAuth::none()),
            url,
            (Some(server), listening),
        )
    };
    let control: common::ControlProxy = client.connect(&url).await.unwrap();
    let mut failures = Vec::new();
    let mut seed = 12345u64;
    for i in 0..150u64 {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let wait = 30 + (seed >> 33) % 40; // 30..70 ms, around the timeout
        tokio::time::sleep(Duration::from_millis(wait)).await;
        match tokio::time::timeout(Duration::from_secs(10), common::Control::echo(&control, i))
            .await
        {
            Err(_) => panic!("call {i} hung"),
            Ok(Ok(v)) => assert_eq!(v, i),
            Ok(Err(e)) => {
                // A call that crossed the GOAWAY of an idle close may fail, but only
                // cleanly: not sent, so safe to retry (the next call reconnects).
                assert_eq!(e.kind(), lanner::ErrorKind::Unavailable, "call {i}: {e}");
                assert!(!e.may_have_executed(), "call {i}: {e}");
                assert!(e.message().contains("not sent"), "call {i}: {e}");
                failures.push(i);
                assert_eq!(
                    common::Control::echo(&control, i).await,
                    Ok(i),
                    "retry of {i}"
                );
            }
        }
    }
    assert!(
        failures.len() < 10,
        "{} calls failed: {failures:?}",
        failures.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_calls_racing_idle_closes_all_succeed() {
    calls_racing_idle_closes(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_calls_racing_idle_closes_all_succeed() {
    calls_racing_idle_closes(false).await;
}

/// A TCP relay in front of `back` (host:port) forwarding at most `chunk` bytes every 10 ms
/// each way, which stops forwarding altogether (keeping both sockets open) once `frozen`.
async fn relay(back: String, chunk: usize, frozen: Arc<std::sync::atomic::AtomicBool>) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let front = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let server = tokio::net::TcpStream::connect(&back).await.unwrap();
            let (cr, cw) = client.into_split();
            let (sr, sw) = server.into_split();
            for (mut from, mut to) in [(cr, sw), (sr, cw)] {
                let frozen = frozen.clone();
                tokio::spawn(async move {
                    let mut buffer = vec![0u8; chunk];
                    loop {
                        if frozen.load(std::sync::atomic::Ordering::SeqCst) {
                            tokio::time::sleep(Duration::from_millis(10)).await;
                            continue;
                        }
                        let n = match from.read(&mut buffer).await {
                            Ok(0) | Err(_) => break,
                            Ok(n) => n,
                        };
                        while frozen.load(std::sync::atomic::Ordering::SeqCst) {
                            tokio::time::sleep(Duration::from_millis(10)).await;
                        }
                        if to.write_all(&buffer[..n]).await.is_err() {
                            break;
                        }
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                    let _ = to.shutdown().await;
                    // Keep `from` open (a frozen peer does not close).
                    tokio::time::sleep(Duration::from_secs(30)).await;
                    drop(from);
                });
            }
        }
    });
    front
}

async fn tcp_pair(
    options: lanner::ConnectionOptions,
) -> (Server, lanner::Listening, Client, String) {
    let server = Server::with_options(options.clone()).with_auth(ServerAuth::none());
    let (server, listening) = common::serve_at(
        "tcp://127.0.0.1:0",
        server,
        common::service_object(&Arc::new(common::Service::default())),
    )
    .await;
    let url = format!("{}/obj", listening.endpoint());
    (
        server,
        listening,
        Client::with_options(options).with_auth(ClientAuth::none()),
        url,
    )
}

async fn behind_relay(
    tls: bool,
    options: lanner::ConnectionOptions,
    chunk: usize,
) -> (
    Server,
    lanner::Listening,
    Client,
    String,
    Arc<std::sync::atomic::AtomicBool>,
) {
    let (server, listening, client, url) = if tls {
        tls_pair(options).await
    } else {
        tcp_pair(options).await
    };
    let back = listening.endpoint().to_string().replace("tcp://", "");
    let frozen = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let front = relay(back.clone(), chunk, frozen.clone()).await;
    let url = url.replace(&back, &front);
    (server, listening, client, url, frozen)
}

/// A 3 MiB echo through a relay forwarding about 1.6 MB/s each way, with a keepalive of
/// 150 ms + 150 ms: the request (and later the answer) is taken by the kernel at once and
/// then takes some 2 s to reach the peer, which reads it as fast as it comes.
async fn slow_large_transfers_are_not_taken_for_a_dead_peer(tls: bool) {
    let options = lanner::ConnectionOptions::default()
        .with_keepalive(Duration::from_millis(150), Duration::from_millis(150));
    // 16 KiB per 10 ms: about 1.6 MB/s each way.
    let (_server, _listening, client, url, _frozen) = behind_relay(tls, options, 16 << 10).await;
    let blobs: BlobsProxy = client.connect(&url).await.unwrap();
    let data = common::pattern(3 << 20, 3);
    let back = tokio::time::timeout(Duration::from_secs(60), blobs.echo(data.clone()))
        .await
        .expect("hung")
        .expect("a slow transfer was taken for a dead peer");
    assert!(back == data);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_slow_large_transfers_are_not_taken_for_a_dead_peer() {
    slow_large_transfers_are_not_taken_for_a_dead_peer(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_slow_large_transfers_are_not_taken_for_a_dead_peer() {
    slow_large_transfers_are_not_taken_for_a_dead_peer(false).await;
}

async fn frozen_peer_is_detected(len: usize, freeze_after: Duration) {
    let options = lanner::ConnectionOptions::default()
        .with_keepalive(Duration::from_millis(150), Duration::from_millis(150));
    let (_server, _listening, client, url, frozen) = behind_relay(true, options, 16 << 10).await;
    let blobs: BlobsProxy = client.connect(&url).await.unwrap();
    let control: common::ControlProxy = client.connect(&url).await.unwrap();
    let data = common::pattern(len, 3);
    let call = tokio::spawn(async move {
        if len == 0 {
            common::Control::sleep_ms(&control, 5000, 1)
                .await
                .map(|_| lanner::Bytes::new())
        } else {
            blobs.echo(data).await
        }
    });
    tokio::time::sleep(freeze_after).await;
    frozen.store(true, std::sync::atomic::Ordering::SeqCst);
    let started = std::time::Instant::now();
    let result = tokio::time::timeout(Duration::from_secs(20), call)
        .await
        .expect("a frozen peer was never detected")
        .unwrap();
    let error = result.expect_err("the call cannot succeed through a frozen relay");
    assert_eq!(error.kind(), lanner::ErrorKind::Unavailable, "{error}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "took {:?}: {error}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_a_peer_frozen_mid_request_is_detected() {
    // 4 MiB at ~1.6 MB/s: frozen while the request is on its way.
    frozen_peer_is_detected(4 << 20, Duration::from_millis(700)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_a_peer_frozen_mid_answer_is_detected() {
    // 1 MiB goes in ~0.7 s; frozen while the answer comes back.
    frozen_peer_is_detected(1 << 20, Duration::from_millis(1000)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_a_peer_frozen_while_idle_fails_a_waiting_call() {
    frozen_peer_is_detected(0, Duration::from_millis(100)).await;
}

/// A TCP relay in front of `back` that flips one bit of the byte at `offset` of what the
/// server sends (a record damaged on the way).
async fn corrupting_relay(back: String, offset: usize) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let front = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let server = tokio::net::TcpStream::connect(&back).await.unwrap();
            let (mut cr, mut cw) = client.into_split();
            let (mut sr, mut sw) = server.into_split();
            tokio::spawn(async move {
                let _ = tokio::io::copy(&mut cr, &mut sw).await;
                let _ = sw.shutdown().await;
            });
            tokio::spawn(async move {
                let mut buffer = vec![0u8; 64 << 10];
                let mut at = 0usize;
                loop {
                    let n = match sr.read(&mut buffer).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => n,
                    };
                    if (at..at + n).contains(&offset) {
                        buffer[offset - at] ^= 0x10;
                    }
                    at += n;
                    if cw.write_all(&buffer[..n]).await.is_err() {
                        break;
                    }
                }
                let _ = cw.shutdown().await;
            });
        }
    });
    front
}

/// A record damaged on the way is a broken connection (`Unavailable`), not a refusal of
/// the client's credentials (`Unauthenticated`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_a_damaged_record_is_unavailable_not_unauthenticated() {
    let (_server, listening, client, url) = tls_pair(lanner::ConnectionOptions::default()).await;
    let back = listening.endpoint().to_string().replace("tcp://", "");
    // Well past the handshake and the WELCOME: inside the 1 MiB answer.
    let front = corrupting_relay(back.clone(), 600 << 10).await;
    let blobs: BlobsProxy = client.connect(&url.replace(&back, &front)).await.unwrap();
    let error = tokio::time::timeout(Duration::from_secs(20), blobs.make(1 << 20, 1))
        .await
        .expect("hung")
        .expect_err("a damaged record cannot decrypt");
    assert_eq!(error.kind(), lanner::ErrorKind::Unavailable, "{error}");
}

#[lanner::interface]
trait Tally {
    #[oneway]
    async fn slow_add(&self, n: u64) -> Result<(), lanner::Error>;
    async fn total(&self) -> Result<u64, lanner::Error>;
}

#[derive(Default)]
struct TallyService {
    total: std::sync::atomic::AtomicU64,
}

impl Tally for TallyService {
    async fn slow_add(&self, n: u64) -> Result<(), lanner::Error> {
        tokio::time::sleep(Duration::from_millis(20)).await;
        self.total.fetch_add(n, std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }

    async fn total(&self) -> Result<u64, lanner::Error> {
        Ok(self.total.load(std::sync::atomic::Ordering::SeqCst))
    }
}

/// One-way calls still queued at the server (an apartment runs them one at a time) when
/// the client's idle timeout passes: the client's idle close must not lose them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_idle_close_does_not_lose_one_way_calls_still_queued() {
    let service = Arc::new(TallyService::default());
    let server = Server::new().with_auth(ServerAuth::none());
    server.publish(
        "tally",
        lanner::Object::new(TallyStub::new(service.clone())).in_apartment(),
    );
    let listening = server.listen("tcp://127.0.0.1:0").await.unwrap();
    let url = listening.endpoint().object_url("tally");
    let options = lanner::ConnectionOptions::default().with_idle_timeout(Duration::from_millis(50));
    let client = Client::with_options(options).with_auth(ClientAuth::none());
    let tally: TallyProxy = client.connect(&url).await.unwrap();
    for n in 1..=30u64 {
        tally.slow_add(n).await.unwrap();
    }
    // 30 x 20 ms queued: ~600 ms of work, the client idle after 50 ms.
    tokio::time::sleep(Duration::from_millis(2000)).await;
    assert_eq!(service.total.load(std::sync::atomic::Ordering::SeqCst), 465);
}

/// A TLS client at a plain server: a clear error, soon.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_client_at_a_plain_server_gets_a_clear_error_soon() {
    let pki = Pki::new();
    let server = Server::new().with_auth(ServerAuth::none());
    let (_server, listening) = common::serve_at(
        "tcp://127.0.0.1:0",
        server,
        common::service_object(&Arc::new(common::Service::default())),
    )
    .await;
    let url = format!("{}/obj", listening.endpoint());
    let client = Client::new().with_auth(ClientAuth::tls(
        tls_client_config(&pki, Some("alice")),
        "localhost",
    ));
    let started = std::time::Instant::now();
    let error = tokio::time::timeout(Duration::from_secs(30), client.connect::<BlobsProxy>(&url))
        .await
        .expect("hung")
        .unwrap_err();
    assert_eq!(error.kind(), lanner::ErrorKind::Unavailable, "{error}");
    assert!(
        error.message().contains("does the peer speak TLS there?"),
        "{error}"
    );
    // Told by the server's first bytes, not by the handshake's timeout (5 s).
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "{:?}: {error}",
        started.elapsed()
    );
}

/// A raw client that asks for 1 MiB answers without ever reading, spending credits it
/// never received (it grants them to itself): the server must refuse it (a credit
/// violation) once its answers pile up, not queue an answer per request without bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_reads_cannot_pile_up_answers() {
    use lanner_proto::auth::{Mechanism, TransportAuthentication};
    use tokio::io::AsyncWriteExt;

    let server = Server::with_options(lanner::ConnectionOptions::default().with_credits(4))
        .with_auth(ServerAuth::none());
    let service = Arc::new(common::Service::default());
    server.publish(
        "blobs",
        lanner::Object::new(common::BlobsStub::new(service)),
    );
    let listening = server.listen("tcp://127.0.0.1:0").await.unwrap();
    let address = listening.endpoint().to_string().replace("tcp://", "");
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(64 << 10).unwrap();
    let mut socket = socket.connect(address.parse().unwrap()).await.unwrap();
    let (mut proto, hello) = lanner_proto::Connection::client_with(
        lanner_proto::Limits::default(),
        Box::new(TransportAuthentication::client(Mechanism::None)),
    );
    socket.write_all(&hello).await.unwrap();
    let welcome = common::read_frame(&mut socket).await.unwrap();
    assert!(matches!(
        proto.handle_frame(welcome),
        Ok(lanner_proto::Event::Established { .. })
    ));
    let handle = common::resolve_raw(&mut socket, &mut proto, "blobs").await;
    let make = <BlobsProxy as lanner::Proxy>::METHODS
        .iter()
        .find(|method| method.name == "make")
        .unwrap();
    let mut sent = 0;
    for i in 0..200u32 {
        if proto.send_credits() == 0 {
            // Credits it never received.
            let _ = proto.handle_frame(lanner_proto::frame::encode_credit(1));
        }
        let mut request =
            lanner_proto::MessageBuilder::request(handle, 0, make.ordinal, make.fingerprint);
        request
            .inline()
            .put_slice(&postcard::to_allocvec(&(1u32 << 20, i as u8)).unwrap());
        let (_, frame) = proto.send_request(request).map_err(|(e, _)| e).unwrap();
        match tokio::time::timeout(
            Duration::from_secs(2),
            socket.write_all(&frame.into_contiguous()),
        )
        .await
        {
            Ok(Ok(())) => sent += 1,
            _ => break,
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // Now read what the server sends: some answers, then its CLOSE.
    let mut answers = 0;
    // (The CLOSE is queued behind the answers the client does not read: the server may
    // drop the connection without it.)
    let close = loop {
        let frame = match tokio::time::timeout(
            Duration::from_secs(10),
            common::read_frame(&mut socket),
        )
        .await
        {
            Ok(Ok(frame)) => frame,
            Ok(Err(error)) => break format!("dropped: {error}"),
            Err(_) => panic!(
                "after {answers} answers of {sent} requests, the server neither closed nor answered"
            ),
        };
        match lanner_proto::frame::Frame::decode(frame).unwrap() {
            lanner_proto::frame::Frame::Response(_) => answers += 1,
            lanner_proto::frame::Frame::Close(close) => break format!("{close:?}"),
            _ => {}
        }
    };
    println!("{sent} requests sent, {answers} answers, then {close}");
    assert!(
        answers < 40,
        "{answers} answers queued for a client that did not read"
    );
}

async fn many_small_calls_in_flight() {
    let (_server, _listening, client, url) = tls_pair(lanner::ConnectionOptions::default()).await;
    let control: common::ControlProxy = client.connect(&url).await.unwrap();
    let work = async {
        let mut tasks = Vec::new();
        for t in 0..32u64 {
            let control = control.clone();
            tasks.push(tokio::spawn(async move {
                for i in 0..300u64 {
                    let v = t * 1_000_000 + i;
                    assert_eq!(common::Control::echo(&control, v).await, Ok(v));
                }
            }));
        }
        for task in tasks {
            task.await.unwrap();
        }
    };
    tokio::time::timeout(Duration::from_secs(60), work)
        .await
        .expect("small TLS calls wedged");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_many_small_calls_in_flight() {
    many_small_calls_in_flight().await;
}

#[tokio::test]
async fn tls_many_small_calls_in_flight_on_a_current_thread_runtime() {
    many_small_calls_in_flight().await;
}

/// A call in progress (a large transfer through a slow link, longer than the idle
/// timeout) is use: the idle close must not break it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_an_idle_timeout_spares_a_slow_transfer_in_progress() {
    let options =
        lanner::ConnectionOptions::default().with_idle_timeout(Duration::from_millis(100));
    let (_server, _listening, client, url, _frozen) = behind_relay(true, options, 16 << 10).await;
    let blobs: BlobsProxy = client.connect(&url).await.unwrap();
    let data = common::pattern(2 << 20, 9);
    let back = tokio::time::timeout(Duration::from_secs(60), blobs.echo(data.clone()))
        .await
        .expect("hung")
        .expect("an idle close broke a call in progress");
    assert!(back == data);
}
