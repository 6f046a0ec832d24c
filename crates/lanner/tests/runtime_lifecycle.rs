//! A server's life as its clients see it: a graceful shutdown (stop accepting, let the calls
//! in flight finish within a grace period, tell clients to go elsewhere), proxies that
//! reconnect when a server is back, and the connection limit.

use std::sync::Arc;
use std::time::Duration;

use lanner::{Client, ErrorKind, Object, Server};

mod common;

#[lanner::interface]
trait Slow {
    /// Answers after `millis`.
    async fn sleep_ms(&self, millis: u64) -> Result<u64, lanner::Error>;
    /// Waits until its caller is gone, then counts it in `SEEN_CANCELLED`.
    async fn until_cancelled(&self) -> Result<(), lanner::Error>;
}

/// Calls of `until_cancelled` that saw their cancellation.
static SEEN_CANCELLED: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

struct SlowService;

impl Slow for SlowService {
    async fn sleep_ms(&self, millis: u64) -> Result<u64, lanner::Error> {
        tokio::time::sleep(Duration::from_millis(millis)).await;
        Ok(millis)
    }

    async fn until_cancelled(&self) -> Result<(), lanner::Error> {
        let call = lanner::CallContext::current().expect("served");
        call.cancelled().await;
        SEEN_CANCELLED.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }
}

/// Makes `attempt` until it succeeds, within 10 s, waiting 10 ms between tries; each
/// failure must have kind `expected` (any kind if `None`). `what` names the awaited event.
async fn retry<T, F, Fut>(what: &str, expected: Option<ErrorKind>, mut attempt: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, lanner::Error>>,
{
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        match attempt().await {
            Ok(value) => return value,
            Err(error) => {
                if let Some(kind) = expected {
                    assert_eq!(error.kind(), kind, "{error}");
                }
                assert!(std::time::Instant::now() < deadline, "{what}: {error}");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}

async fn serve(endpoint: &str) -> (Server, lanner::Listening, SlowProxy) {
    let server = Server::new();
    server.publish("slow", Object::new(SlowStub::new(Arc::new(SlowService))));
    let listening = server.listen(endpoint).await.unwrap();
    let slow: SlowProxy = Client::new()
        .connect(&listening.endpoint().object_url("slow"))
        .await
        .unwrap();
    (server, listening, slow)
}

#[tokio::test]
async fn calls_in_flight_finish_and_new_calls_are_turned_away() {
    let (_server, listening, slow) = serve("mem://shutdown-graceful").await;
    let url = listening.endpoint().object_url("slow");
    let running = tokio::spawn({
        let slow = slow.clone();
        async move { slow.sleep_ms(200).await }
    });
    tokio::time::sleep(Duration::from_millis(20)).await;
    let shutdown = tokio::spawn(listening.shutdown(Duration::from_secs(30)));
    // Once the GOAWAY is in, a new call is refused without being sent.
    let refused = loop {
        match tokio::time::timeout(Duration::from_secs(5), slow.sleep_ms(0)).await {
            Ok(Ok(_)) => tokio::time::sleep(Duration::from_millis(1)).await,
            Ok(Err(error)) => break error,
            Err(_) => panic!("a call hung during the shutdown"),
        }
    };
    // Refused before sending: the proxy tried to reconnect, and nobody listens any more.
    assert_eq!(refused.kind(), ErrorKind::Unavailable, "{refused}");
    assert!(!refused.may_have_executed(), "{refused}");
    // The call that was running finishes normally.
    assert_eq!(running.await.unwrap(), Ok(200));
    let report = shutdown.await.unwrap();
    assert_eq!((report.connections, report.unfinished_calls), (1, 0));
    // Nobody listens any more.
    let error = Client::new().connect::<SlowProxy>(&url).await.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Unavailable, "{error}");
}

/// Starts a call of `slow` whose method runs for a minute (deaf to cancellation), and
/// gives it a moment to reach the server.
async fn a_minute_long_call(
    slow: &SlowProxy,
) -> tokio::task::JoinHandle<Result<u64, lanner::Error>> {
    let running = tokio::spawn({
        let slow = slow.clone();
        async move { slow.sleep_ms(60_000).await }
    });
    tokio::time::sleep(Duration::from_millis(20)).await;
    running
}

#[tokio::test]
async fn calls_still_running_after_the_grace_period_are_cut_off() {
    let (_server, listening, slow) = serve("mem://shutdown-cut").await;
    let running = a_minute_long_call(&slow).await;
    let report = listening.shutdown(Duration::from_millis(50)).await;
    assert_eq!(report.connections, 1);
    assert_eq!(report.unfinished_calls, 1);
    let error = tokio::time::timeout(Duration::from_secs(5), running)
        .await
        .expect("the cut-off call ends")
        .unwrap()
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Unavailable, "{error}");
    assert!(error.may_have_executed(), "{error}");
}

#[tokio::test]
async fn a_shutdown_does_not_wait_for_calls_of_connections_already_closed() {
    let (_server, listening, slow) = serve("mem://shutdown-closed-mid-call").await;
    // A call runs, then its client goes away: nobody can be answered any more.
    let running = a_minute_long_call(&slow).await;
    running.abort();
    drop(slow);
    let report = listening.shutdown(Duration::from_secs(10)).await;
    assert_eq!(report.unfinished_calls, 0);
}

#[tokio::test]
async fn durations_too_long_to_be_dates_mean_forever() {
    use lanner::Proxy;

    let server = Server::new();
    server.publish("slow", Object::new(SlowStub::new(Arc::new(SlowService))));
    let listening = server.listen("mem://lifecycle-forever").await.unwrap();
    let forever = lanner::ConnectionOptions::default()
        .with_handshake_timeout(Duration::MAX)
        .with_call_timeout(Duration::MAX);
    let slow: SlowProxy = Client::with_options(forever)
        .connect(&listening.endpoint().object_url("slow"))
        .await
        .unwrap();
    assert_eq!(slow.sleep_ms(1).await, Ok(1));
    assert_eq!(slow.with_timeout(Duration::MAX).sleep_ms(2).await, Ok(2));
    let report = listening.shutdown(Duration::MAX).await;
    assert_eq!(report.unfinished_calls, 0);
}

/// A slow service that says which server it is.
struct Numbered(u64);

impl Slow for Numbered {
    async fn sleep_ms(&self, millis: u64) -> Result<u64, lanner::Error> {
        Ok(self.0 + millis)
    }

    async fn until_cancelled(&self) -> Result<(), lanner::Error> {
        Ok(())
    }
}

async fn serve_numbered(endpoint: &str, number: u64) -> (Server, lanner::Listening) {
    let server = Server::new();
    server.publish(
        "slow",
        Object::new(SlowStub::new(Arc::new(Numbered(number)))),
    );
    let listening = server.listen(endpoint).await.unwrap();
    (server, listening)
}

#[tokio::test]
async fn a_proxy_to_a_name_reconnects_when_the_server_is_back() {
    let endpoint = "mem://shutdown-reconnect";
    let (_first, listening) = serve_numbered(endpoint, 1000).await;
    let slow: SlowProxy = Client::new()
        .connect(&listening.endpoint().object_url("slow"))
        .await
        .unwrap();
    let other = slow.clone();
    assert_eq!(slow.sleep_ms(1).await, Ok(1001));

    // The server goes away. A call racing the CLOSE may have been sent; once the client
    // knows, calls fail fast, unsent.
    listening.shutdown(Duration::ZERO).await;
    let racing = slow.sleep_ms(1).await.unwrap_err();
    assert_eq!(racing.kind(), ErrorKind::Unavailable, "{racing}");
    for _ in 0..3 {
        let error = slow.sleep_ms(1).await.unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Unavailable, "{error}");
        assert!(!error.may_have_executed(), "{error}");
    }

    // Another server takes the endpoint: the same proxies work again (after the backoff).
    let (_second, _listening) = serve_numbered(endpoint, 2000).await;
    let answer = retry("never reconnected", Some(ErrorKind::Unavailable), || {
        slow.sleep_ms(2)
    })
    .await;
    assert_eq!(answer, 2002);
    // A clone shares the reference, so it is reconnected too.
    assert_eq!(other.sleep_ms(3).await, Ok(2003));
}

#[tokio::test]
async fn a_server_that_never_answers_holds_up_only_the_connects_to_it() {
    // A listener that takes connections and says nothing: a connect to it waits for the
    // handshake timeout, an hour here.
    let path = std::env::temp_dir().join(format!("lanner-silent-{}.sock", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let silent = tokio::net::UnixListener::bind(&path).unwrap();
    let silent_url = format!("unix://{}/slow", path.display());
    let (_server, listening) = serve_numbered("mem://silent-neighbour", 7).await;
    let client = Client::with_options(
        lanner::ConnectionOptions::default().with_handshake_timeout(Duration::from_secs(3600)),
    );
    let stuck = tokio::spawn({
        let client = client.clone();
        async move { client.connect::<SlowProxy>(&silent_url).await.map(drop) }
    });
    // Once the silent server has the connection, the stuck connect waits for its WELCOME.
    let (_socket, _) = silent.accept().await.unwrap();

    // The same client reaches another server meanwhile.
    let slow: SlowProxy = tokio::time::timeout(
        Duration::from_secs(30),
        client.connect(&listening.endpoint().object_url("slow")),
    )
    .await
    .expect("a connect to one server waited for another server's handshake")
    .unwrap();
    assert_eq!(slow.sleep_ms(1).await, Ok(8));
    assert!(!stuck.is_finished());
    stuck.abort();
    let _ = std::fs::remove_file(&path);
}

/// Callers that wait together for a server that accepts and never answers share the one
/// attempt that was under way: none waits for attempts of its own, one after another, and
/// the error says the server is unavailable.
#[tokio::test]
async fn callers_waiting_for_a_silent_server_share_one_failed_attempt() {
    let path = std::env::temp_dir().join(format!("lanner-silent-many-{}.sock", std::process::id()));
    let _ = std::fs::remove_file(&path);
    // Takes connections (the kernel completes them) and never answers.
    let _silent = tokio::net::UnixListener::bind(&path).unwrap();
    let url = format!("unix://{}/slow", path.display());
    let timeout = Duration::from_millis(500);
    let client =
        Client::with_options(lanner::ConnectionOptions::default().with_handshake_timeout(timeout));
    let started = std::time::Instant::now();
    let connects = (0..8).map(|_| client.connect::<SlowProxy>(&url));
    let results = futures_util::future::join_all(connects).await;
    let waited = started.elapsed();
    for result in results {
        let error = result.map(drop).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Unavailable, "{error}");
    }
    assert!(
        waited < timeout * 4,
        "eight callers took {waited:?} with a handshake timeout of {timeout:?}"
    );
    let _ = std::fs::remove_file(&path);
}

/// `server`, which must accept anonymous clients, serving `object` as `name` on a Unix
/// socket named after `tag`.
async fn listen_anonymous(
    server: Server,
    tag: &str,
    name: &str,
    object: Object,
) -> lanner::Listening {
    let path = std::env::temp_dir().join(format!("lanner-{tag}-{}.sock", std::process::id()));
    server.publish(name, object);
    server
        .listen(&format!("unix://{}", path.display()))
        .await
        .unwrap()
}

/// A raw client of `server` serving a `Blobs` object published as "blobs" (on a socket
/// named after `tag`): the listener, the client's socket and protocol state, and the
/// object's handle.
async fn raw_client_of_blobs(
    server: Server,
    tag: &str,
) -> (
    lanner::Listening,
    tokio::net::UnixStream,
    lanner_proto::Connection,
    u64,
) {
    let blobs = common::BlobsStub::new(Arc::new(common::Service::default()));
    let listening = listen_anonymous(server, tag, "blobs", Object::new(blobs)).await;
    let (mut socket, mut proto) = common::raw_unix_client(&listening).await;
    let handle = common::resolve_raw(&mut socket, &mut proto, "blobs").await;
    (listening, socket, proto, handle)
}

/// The `Blobs` method called `name`.
fn blobs_method(name: &str) -> &'static lanner::MethodInfo {
    <common::BlobsProxy as lanner::Proxy>::METHODS
        .iter()
        .find(|m| m.name == name)
        .unwrap()
}

/// Asks the `Blobs` object `handle` for an 8 MiB answer and reads it `chunk` bytes at a
/// time, pausing `pause` after each read and calling `after_read` (the first call comes
/// once the answer is under way); checks that the answer is whole and `Ok`.
async fn read_a_large_answer_slowly(
    socket: &mut tokio::net::UnixStream,
    proto: &mut lanner_proto::Connection,
    handle: u64,
    (chunk, pause): (usize, Duration),
    mut after_read: impl FnMut(),
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let method = blobs_method("make");
    let mut make =
        lanner_proto::MessageBuilder::request(handle, 0, method.ordinal, method.fingerprint);
    make.inline()
        .put_slice(&postcard::to_allocvec(&(8u32 << 20, 7u8)).unwrap());
    let (_, frame) = proto.send_request(make).map_err(|(e, _)| e).unwrap();
    socket.write_all(&frame.into_contiguous()).await.unwrap();
    let mut received = Vec::new();
    let mut buffer = vec![0u8; chunk];
    let len = loop {
        let read = socket.read(&mut buffer).await.unwrap();
        assert!(
            read > 0,
            "the server hung up after {} bytes",
            received.len()
        );
        received.extend_from_slice(&buffer[..read]);
        after_read();
        if received.len() >= 4 {
            let len = u32::from_le_bytes(received[..4].try_into().unwrap()) as usize;
            if received.len() >= len {
                break len;
            }
        }
        tokio::time::sleep(pause).await;
    };
    match proto.handle_frame(lanner::Bytes::copy_from_slice(&received[..len])) {
        Ok(lanner_proto::Event::Response(response)) => {
            assert_eq!(response.status, lanner_proto::Status::Ok);
        }
        other => panic!("expected the answer, got {other:?}"),
    }
}

#[tokio::test]
async fn a_peer_reading_a_long_reply_slowly_is_not_taken_for_dead() {
    // Keepalive probes after 500 ms of silence, a peer declared dead 500 ms after one.
    let options = lanner::ConnectionOptions::default()
        .with_keepalive(Duration::from_millis(500), Duration::from_millis(500));
    let server = Server::with_options(options).with_auth(lanner::ServerAuth::none());
    let (_listening, mut socket, mut proto, handle) =
        raw_client_of_blobs(server, "slow-reader").await;

    // An 8 MiB reply, read 64 KiB every 20 ms (about 2.6 s in all), saying nothing.
    let slowly = (64 << 10, Duration::from_millis(20));
    read_a_large_answer_slowly(&mut socket, &mut proto, handle, slowly, || {}).await;
}

#[tokio::test]
async fn a_shutdown_lets_a_slow_reader_have_its_whole_answer_within_the_grace_period() {
    let server = Server::new().with_auth(lanner::ServerAuth::none());
    let (listening, mut socket, mut proto, handle) =
        raw_client_of_blobs(server, "slow-reader-shutdown").await;
    let mut listening = Some(listening);

    // An 8 MiB answer, read 16 KiB every 20 ms (about 10 s: longer than the wait for the
    // PING after the GOAWAY and the linger a CLOSE gives what is queued before it, 7 s
    // together), with a shutdown starting once it is under way and a grace period long
    // enough for all of it.
    let mut shutdown = None;
    let slowly = (16 << 10, Duration::from_millis(20));
    read_a_large_answer_slowly(&mut socket, &mut proto, handle, slowly, || {
        if let Some(listening) = listening.take() {
            shutdown = Some(tokio::spawn(listening.shutdown(Duration::from_secs(30))));
        }
    })
    .await;
    let report = shutdown.unwrap().await.unwrap();
    assert_eq!(report.unfinished_calls, 0);
}

#[tokio::test]
async fn an_idle_close_waits_for_a_reader_that_stopped_only_so_long() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    // An answer the client never reads: once answered, the connection is idle, and its
    // close waits for the answer to be written, but not for ever (no keepalive here to
    // declare the client dead): about 2 s for the PING, 5 s for the writes, 5 s of
    // linger after the CLOSE.
    let options = lanner::ConnectionOptions::default()
        .with_idle_timeout(Duration::from_millis(100))
        .without_keepalive();
    let server = Server::with_options(options).with_auth(lanner::ServerAuth::none());
    let (_listening, mut socket, mut proto, handle) =
        raw_client_of_blobs(server, "idle-stuck-reader").await;
    let method = blobs_method("make");
    let mut make =
        lanner_proto::MessageBuilder::request(handle, 0, method.ordinal, method.fingerprint);
    make.inline()
        .put_slice(&postcard::to_allocvec(&(8u32 << 20, 7u8)).unwrap());
    let (_, frame) = proto.send_request(make).map_err(|(e, _)| e).unwrap();
    socket.write_all(&frame.into_contiguous()).await.unwrap();
    // Reading nothing until the server has given up (12 s and a margin): what is left in
    // the socket then is what the kernel took before the close, not the whole answer.
    tokio::time::sleep(Duration::from_secs(14)).await;
    let mut received = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(30), socket.read_to_end(&mut received));
    read.await
        .expect("the connection ends once read")
        .expect("no error");
    assert!(
        received.len() < 8 << 20,
        "the server was still writing the answer after 14 s ({} bytes read)",
        received.len()
    );
}

#[tokio::test]
async fn a_shutdown_serves_requests_sent_before_the_client_read_its_goaway() {
    let server = Server::new().with_auth(lanner::ServerAuth::none());
    let slow = Object::new(SlowStub::new(Arc::new(SlowService)));
    let listening = listen_anonymous(server, "late-call", "slow", slow).await;
    let (mut socket, mut proto) = common::raw_unix_client(&listening).await;
    let handle = common::resolve_raw(&mut socket, &mut proto, "slow").await;

    // The server starts shutting down with nothing running; the client, not having read
    // the GOAWAY yet, sends a request.
    let shutdown = tokio::spawn(listening.shutdown(Duration::from_secs(10)));
    tokio::time::sleep(Duration::from_millis(50)).await;
    let call_id = send_sleep_raw(&mut socket, &mut proto, handle, 5).await;

    // It reads GOAWAY and the PING after it (answering it), then its answer, then CLOSE.
    let (seen, _) = read_until_close(&mut socket, &mut proto, call_id).await;
    assert!(
        seen.contains(&"answer"),
        "the request was cut off: {seen:?}"
    );
    assert_eq!(shutdown.await.unwrap().unfinished_calls, 0);
}

/// Sends `sleep_ms(ms)` to the `Slow` object `handle` over a raw connection; returns the
/// call's id.
async fn send_sleep_raw(
    socket: &mut tokio::net::UnixStream,
    proto: &mut lanner_proto::Connection,
    handle: u64,
    ms: u64,
) -> u64 {
    use tokio::io::AsyncWriteExt;
    let method = &<SlowProxy as lanner::Proxy>::METHODS[0];
    assert_eq!(method.name, "sleep_ms");
    let mut request =
        lanner_proto::MessageBuilder::request(handle, 0, method.ordinal, method.fingerprint);
    request
        .inline()
        .put_slice(&postcard::to_allocvec(&ms).unwrap());
    let (call_id, frame) = proto.send_request(request).map_err(|(e, _)| e).unwrap();
    socket.write_all(&frame.into_contiguous()).await.unwrap();
    call_id
}

/// Reads frames until a CLOSE, answering PINGs; returns what came, in order (GOAWAY,
/// PING, answer for an `Ok` answer to `call_id`, CLOSE), and the CLOSE's reason.
async fn read_until_close(
    socket: &mut tokio::net::UnixStream,
    proto: &mut lanner_proto::Connection,
    call_id: u64,
) -> (Vec<&'static str>, String) {
    use lanner_proto::Event;
    use tokio::io::AsyncWriteExt;
    let mut seen = Vec::new();
    loop {
        let frame = common::read_frame(socket).await.unwrap();
        match proto.handle_frame(frame) {
            Ok(Event::GoingAway) => seen.push("GOAWAY"),
            Ok(Event::Ping { pong }) => {
                seen.push("PING");
                socket.write_all(&pong).await.unwrap();
            }
            Ok(Event::Response(response)) => {
                assert_eq!(response.call_id, call_id);
                assert_eq!(response.status, lanner_proto::Status::Ok);
                seen.push("answer");
            }
            Ok(Event::Closed(close)) => {
                seen.push("CLOSE");
                return (seen, close.reason);
            }
            other => panic!("unexpected {other:?}"),
        }
    }
}

#[tokio::test]
async fn a_request_crossing_an_idle_close_is_served_and_the_socket_let_go_at_once() {
    let options =
        lanner::ConnectionOptions::default().with_idle_timeout(Duration::from_millis(100));
    let server = Server::with_options(options).with_auth(lanner::ServerAuth::none());
    let slow = Object::new(SlowStub::new(Arc::new(SlowService)));
    let listening = listen_anonymous(server, "idle-crossing", "slow", slow).await;
    let (mut socket, mut proto) = common::raw_unix_client(&listening).await;
    let handle = common::resolve_raw(&mut socket, &mut proto, "slow").await;

    // The connection goes idle; the client, reading nothing meanwhile, sends a request
    // after the server decided to close it.
    tokio::time::sleep(Duration::from_millis(400)).await;
    let call_id = send_sleep_raw(&mut socket, &mut proto, handle, 5).await;

    // It reads GOAWAY and the PING after it (answering it), then its answer, then CLOSE.
    let (seen, reason) = read_until_close(&mut socket, &mut proto, call_id).await;
    assert!(reason.contains("idle"), "{reason}");
    assert_eq!(seen, ["GOAWAY", "PING", "answer", "CLOSE"]);
    // The CLOSE was read: the server lets go of the socket at once, without lingering.
    let mut rest = Vec::new();
    let read = tokio::time::timeout(
        Duration::from_secs(2),
        tokio::io::AsyncReadExt::read_to_end(&mut socket, &mut rest),
    );
    assert!(
        matches!(read.await, Ok(Ok(0))),
        "the server kept the closed connection's socket"
    );
}

#[tokio::test]
async fn a_client_that_says_it_goes_away_still_counts_and_is_shut_down() {
    use tokio::io::AsyncWriteExt;

    let server = Server::new()
        .with_auth(lanner::ServerAuth::none())
        .with_max_connections(1);
    let slow = Object::new(SlowStub::new(Arc::new(SlowService)));
    let listening = listen_anonymous(server, "goaway", "slow", slow).await;

    // A client says GOAWAY (it may go on calling: only its own new calls stop), then
    // PING; the PONG says the server has read the GOAWAY.
    let (mut socket, mut proto) = common::raw_unix_client(&listening).await;
    socket.write_all(&proto.go_away().unwrap()).await.unwrap();
    socket
        .write_all(&lanner_proto::frame::encode_ping(1))
        .await
        .unwrap();
    let pong = common::read_frame(&mut socket).await.unwrap();
    assert_eq!(proto.handle_frame(pong), Ok(lanner_proto::Event::Pong(1)));

    // It still holds the one connection allowed.
    let url = listening.endpoint().object_url("slow");
    let refused = Client::new()
        .with_auth(lanner::ClientAuth::none())
        .connect::<SlowProxy>(&url)
        .await
        .unwrap_err();
    assert_eq!(refused.kind(), ErrorKind::Overloaded, "{refused}");

    // And a shutdown closes it.
    let report = listening.shutdown(Duration::ZERO).await;
    assert_eq!(report.connections, 1);
    // GOAWAY (and the PING after it), then CLOSE.
    loop {
        let frame = common::read_frame(&mut socket).await.unwrap();
        match proto.handle_frame(frame) {
            Ok(lanner_proto::Event::GoingAway | lanner_proto::Event::Ping { .. }) => {}
            Ok(lanner_proto::Event::Closed(_)) => break,
            other => panic!("expected GOAWAY, PING or CLOSE, got {other:?}"),
        }
    }
}

/// A slow service counting, in its own count, the calls that heard their cancellation.
struct CountsCancels(Arc<std::sync::atomic::AtomicU32>);

impl Slow for CountsCancels {
    async fn sleep_ms(&self, millis: u64) -> Result<u64, lanner::Error> {
        Ok(millis)
    }

    async fn until_cancelled(&self) -> Result<(), lanner::Error> {
        lanner::CallContext::current()
            .expect("served")
            .cancelled()
            .await;
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }
}

#[tokio::test]
async fn a_call_id_reused_while_its_call_is_served_closes_the_connection() {
    use lanner_proto::{Event, MessageBuilder};
    use tokio::io::AsyncWriteExt;

    let cancelled = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let server = Server::new().with_auth(lanner::ServerAuth::none());
    let service = CountsCancels(cancelled.clone());
    let slow = Object::new(SlowStub::new(Arc::new(service)));
    let listening = listen_anonymous(server, "reused", "slow", slow).await;
    let (mut socket, mut proto) = common::raw_unix_client(&listening).await;

    let handle = common::resolve_raw(&mut socket, &mut proto, "slow").await;

    // The same request twice, one call id: a method that waits until it is cancelled.
    let method = &<SlowProxy as lanner::Proxy>::METHODS[1];
    assert_eq!(method.name, "until_cancelled");
    let request = MessageBuilder::request(handle, 0, method.ordinal, method.fingerprint);
    let (_, frame) = proto.send_request(request).map_err(|(e, _)| e).unwrap();
    let frame = frame.into_contiguous();
    socket.write_all(&frame).await.unwrap();
    socket.write_all(&frame).await.unwrap();

    // The server closes the connection saying why, and both methods hear that nobody
    // waits for them any more.
    let closed = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let frame = common::read_frame(&mut socket).await.unwrap();
            if let Ok(Event::Closed(close)) = proto.handle_frame(frame) {
                return close;
            }
        }
    })
    .await
    .expect("the connection is closed");
    assert!(
        closed.reason.contains("still being served"),
        "{}",
        closed.reason
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while cancelled.load(std::sync::atomic::Ordering::SeqCst) < 2 {
        assert!(
            std::time::Instant::now() < deadline,
            "a method was never told"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test]
async fn connections_beyond_the_limit_are_refused_with_overloaded() {
    let server = Server::new().with_max_connections(2);
    server.publish("slow", Object::new(SlowStub::new(Arc::new(SlowService))));
    let listening = server
        .listen("mem://shutdown-max-connections")
        .await
        .unwrap();
    let url = listening.endpoint().object_url("slow");
    let first: SlowProxy = Client::new().connect(&url).await.unwrap();
    let second: SlowProxy = Client::new().connect(&url).await.unwrap();
    let refused = Client::new().connect::<SlowProxy>(&url).await.unwrap_err();
    assert_eq!(refused.kind(), ErrorKind::Overloaded, "{refused}");
    assert!(
        refused.message().contains("too many connections"),
        "{refused}"
    );
    assert_eq!(first.sleep_ms(1).await, Ok(1));
    assert_eq!(second.sleep_ms(1).await, Ok(1));
    // A client that leaves makes room.
    drop(first);
    let third: SlowProxy = retry("no room was made", Some(ErrorKind::Overloaded), || async {
        Client::new().connect(&url).await
    })
    .await;
    assert_eq!(third.sleep_ms(2).await, Ok(2));
}

#[tokio::test]
async fn idle_connections_are_closed_and_proxies_reconnect() {
    let options =
        lanner::ConnectionOptions::default().with_idle_timeout(Duration::from_millis(100));
    // One connection at a time: a second client gets in only once the first was closed.
    let server = Server::with_options(options).with_max_connections(1);
    server.publish("slow", Object::new(SlowStub::new(Arc::new(SlowService))));
    let listening = server.listen("mem://lifecycle-idle").await.unwrap();
    let url = listening.endpoint().object_url("slow");
    let first: SlowProxy = Client::new().connect(&url).await.unwrap();
    // A call longer than the idle timeout is use, not idleness.
    assert_eq!(first.sleep_ms(300).await, Ok(300));
    assert_eq!(
        Client::new()
            .connect::<SlowProxy>(&url)
            .await
            .unwrap_err()
            .kind(),
        ErrorKind::Overloaded,
        "the first connection is still open"
    );
    let second: SlowProxy = retry(
        "the idle connection stayed",
        Some(ErrorKind::Overloaded),
        || async { Client::new().connect(&url).await },
    )
    .await;
    assert_eq!(second.sleep_ms(1).await, Ok(1));
    // The first client's proxy reconnects once the second connection has gone idle too.
    let answer = retry("never reconnected", None, || first.sleep_ms(2)).await;
    assert_eq!(answer, 2);
}

#[tokio::test]
async fn calls_beyond_the_servers_limit_are_turned_away_unexecuted() {
    let server = Server::new().with_max_suspended_calls(2);
    server.publish("slow", Object::new(SlowStub::new(Arc::new(SlowService))));
    let listening = server.listen("mem://lifecycle-max-calls").await.unwrap();
    let url = listening.endpoint().object_url("slow");
    // Two clients, two connections: the limit is the server's, not a connection's.
    let first: SlowProxy = Client::new().connect(&url).await.unwrap();
    let second: SlowProxy = Client::new().connect(&url).await.unwrap();
    let long = [
        tokio::spawn({
            let first = first.clone();
            async move { first.sleep_ms(300).await }
        }),
        tokio::spawn({
            let second = second.clone();
            async move { second.sleep_ms(300).await }
        }),
    ];
    tokio::time::sleep(Duration::from_millis(50)).await;
    let refused = first.sleep_ms(1).await.unwrap_err();
    assert_eq!(refused.kind(), ErrorKind::Overloaded, "{refused}");
    assert!(!refused.may_have_executed(), "{refused}");
    for call in long {
        assert_eq!(call.await.unwrap(), Ok(300));
    }
    // Room again once they are done.
    assert_eq!(second.sleep_ms(1).await, Ok(1));
}

#[tokio::test]
async fn an_apartment_object_turns_calls_away_at_once_when_the_server_is_full() {
    let server = Server::new().with_max_suspended_calls(1);
    let slow = Object::new(SlowStub::new(Arc::new(SlowService))).in_apartment();
    server.publish("slow", slow);
    let listening = server
        .listen("mem://lifecycle-full-apartment")
        .await
        .unwrap();
    let proxy: SlowProxy = Client::new()
        .connect(&listening.endpoint().object_url("slow"))
        .await
        .unwrap();
    let long = tokio::spawn({
        let proxy = proxy.clone();
        async move { proxy.sleep_ms(500).await }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    // The refusal is not queued behind the apartment's running call.
    let refused = proxy.sleep_ms(1);
    tokio::pin!(long);
    tokio::select! {
        refused = refused => {
            let refused = refused.unwrap_err();
            assert_eq!(refused.kind(), ErrorKind::Overloaded, "{refused}");
        }
        _ = &mut long => panic!("the refusal waited for the apartment's call"),
    }
    assert_eq!(long.await.unwrap(), Ok(500));
}

#[tokio::test]
async fn a_closed_connection_cancels_the_calls_it_was_serving() {
    let server = Server::new().with_max_suspended_calls(1);
    server.publish("slow", Object::new(SlowStub::new(Arc::new(SlowService))));
    let listening = server
        .listen("mem://lifecycle-cancel-on-close")
        .await
        .unwrap();
    let slow: SlowProxy = Client::new()
        .connect(&listening.endpoint().object_url("slow"))
        .await
        .unwrap();
    let before = SEEN_CANCELLED.load(std::sync::atomic::Ordering::SeqCst);
    let waiting = tokio::spawn(async move { slow.until_cancelled().await });
    tokio::time::sleep(Duration::from_millis(20)).await;
    let report = listening.shutdown(Duration::from_millis(20)).await;
    assert_eq!(report.unfinished_calls, 1);
    assert!(waiting.await.unwrap().is_err(), "the cut-off call fails");
    // The method hears that nobody waits any more, and its slot in the limit frees.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while SEEN_CANCELLED.load(std::sync::atomic::Ordering::SeqCst) == before {
        assert!(
            std::time::Instant::now() < deadline,
            "the method was never told"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let again = server
        .listen("mem://lifecycle-cancel-on-close-2")
        .await
        .unwrap();
    let slow: SlowProxy = Client::new()
        .connect(&again.endpoint().object_url("slow"))
        .await
        .unwrap();
    assert_eq!(slow.sleep_ms(1).await, Ok(1));
}

#[tokio::test]
async fn a_request_without_the_bulk_argument_its_method_takes_is_answered_and_the_connection_goes_on()
 {
    use tokio::io::AsyncWriteExt;

    let server = Server::new().with_auth(lanner::ServerAuth::none());
    let (_listening, mut socket, mut proto, handle) = raw_client_of_blobs(server, "no-bulk").await;
    let method = blobs_method("echo");

    // `echo(data: Bytes)`, right ordinal and fingerprint, no segment; then with one.
    let mut answers = Vec::new();
    for segment in [None, Some(lanner::Bytes::from_static(b"still here"))] {
        let mut echo =
            lanner_proto::MessageBuilder::request(handle, 0, method.ordinal, method.fingerprint);
        if let Some(segment) = segment {
            echo.push_segment(segment);
        }
        let (_, frame) = proto.send_request(echo).map_err(|(e, _)| e).unwrap();
        socket.write_all(&frame.into_contiguous()).await.unwrap();
        match proto.handle_frame(common::read_frame(&mut socket).await.unwrap()) {
            Ok(lanner_proto::Event::Response(response)) => answers.push(response),
            other => panic!("expected a response, got {other:?}"),
        }
    }
    assert_eq!(answers[0].status, lanner_proto::Status::InvalidArgument);
    assert_eq!(
        String::from_utf8_lossy(answers[0].payload.inline_slice()),
        "the request carries 0 bulk arguments, the method expects at least 1"
    );
    assert_eq!(answers[1].status, lanner_proto::Status::Ok);
    assert_eq!(answers[1].payload.segment(0).unwrap(), &b"still here"[..]);
}
