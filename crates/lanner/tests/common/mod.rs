//! Interfaces, implementations and helpers shared by the runtime tests. Every test serves
//! its objects on its own `mem://` endpoint, so tests run in parallel without interfering.

// Shared by several test crates, each of which uses only some of it; none has a public API.
#![allow(dead_code, unreachable_pub)]

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use lanner::{Bytes, Client, Listening, Object, Proxy, Server};
use serde::{Deserialize, Serialize};
use tokio::task::JoinHandle;

pub mod pki;

/// The application error of [`Calculator`]: typed variants plus the transport's errors.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum CalcError {
    DivideByZero { dividend: i64 },
    Overflow(String),
    Empty,
    Remote(lanner::Error),
}

impl From<lanner::Error> for CalcError {
    fn from(error: lanner::Error) -> Self {
        CalcError::Remote(error)
    }
}

/// A result with some structure to it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Stats {
    pub count: u32,
    pub min: i64,
    pub max: i64,
    pub sum: i128,
    pub label: Option<String>,
}

/// How [`Calculator::fail`] should fail.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum Failure {
    App,
    Panic,
}

#[lanner::interface]
pub trait Calculator {
    async fn add(&self, a: i64, b: i64) -> Result<i64, CalcError>;
    async fn divide(&self, a: i64, b: i64) -> Result<i64, CalcError>;
    async fn stats(&self, values: Vec<i64>, label: Option<String>) -> Result<Stats, CalcError>;
    async fn ping(&self) -> Result<(), lanner::Error>;
    async fn fail(&self, failure: Failure) -> Result<i64, CalcError>;
}

/// The application error of [`Blobs::mix`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum BlobError {
    TooMany { repeat: u32 },
    Remote(lanner::Error),
}

impl From<lanner::Error> for BlobError {
    fn from(error: lanner::Error) -> Self {
        BlobError::Remote(error)
    }
}

/// What [`Blobs::digest`] reports about a payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Digest {
    pub len: u64,
    pub hash: u64,
}

#[lanner::interface]
pub trait Blobs {
    async fn echo(&self, data: Bytes) -> Result<Bytes, lanner::Error>;
    async fn make(&self, len: u32, seed: u8) -> Result<Bytes, lanner::Error>;
    async fn digest(&self, data: Bytes) -> Result<Digest, lanner::Error>;
    async fn mix(
        &self,
        tag: String,
        first: Bytes,
        separator: u8,
        second: Bytes,
        repeat: u32,
        third: Bytes,
    ) -> Result<Bytes, BlobError>;
}

#[lanner::interface]
pub trait Control {
    async fn echo(&self, value: u64) -> Result<u64, lanner::Error>;
    async fn sleep_ms(&self, millis: u64, token: u64) -> Result<u64, lanner::Error>;
    async fn panic_now(&self, message: String) -> Result<u32, lanner::Error>;
    async fn panic_after_await(&self, message: String) -> Result<u32, lanner::Error>;
    async fn max_active(&self) -> Result<u32, lanner::Error>;
    async fn completed(&self) -> Result<u64, lanner::Error>;
}

/// Serves all three interfaces and counts what it does.
#[derive(Default)]
pub struct Service {
    active: AtomicU32,
    max_active: AtomicU32,
    completed: AtomicU64,
}

impl Service {
    pub fn max_active(&self) -> u32 {
        self.max_active.load(Ordering::SeqCst)
    }

    pub fn completed(&self) -> u64 {
        self.completed.load(Ordering::SeqCst)
    }
}

impl Calculator for Service {
    async fn add(&self, a: i64, b: i64) -> Result<i64, CalcError> {
        a.checked_add(b)
            .ok_or_else(|| CalcError::Overflow(format!("{a} + {b}")))
    }

    async fn divide(&self, a: i64, b: i64) -> Result<i64, CalcError> {
        if b == 0 {
            return Err(CalcError::DivideByZero { dividend: a });
        }
        a.checked_div(b)
            .ok_or_else(|| CalcError::Overflow(format!("{a} / {b}")))
    }

    async fn stats(&self, values: Vec<i64>, label: Option<String>) -> Result<Stats, CalcError> {
        if values.is_empty() {
            return Err(CalcError::Empty);
        }
        Ok(Stats {
            count: values.len() as u32,
            min: *values.iter().min().unwrap(),
            max: *values.iter().max().unwrap(),
            sum: values.iter().map(|v| i128::from(*v)).sum(),
            label,
        })
    }

    async fn ping(&self) -> Result<(), lanner::Error> {
        Ok(())
    }

    async fn fail(&self, failure: Failure) -> Result<i64, CalcError> {
        match failure {
            Failure::App => Err(CalcError::Overflow("asked to fail".into())),
            Failure::Panic => panic!("calculator asked to panic"),
        }
    }
}

impl Blobs for Service {
    async fn echo(&self, data: Bytes) -> Result<Bytes, lanner::Error> {
        Ok(data)
    }

    async fn make(&self, len: u32, seed: u8) -> Result<Bytes, lanner::Error> {
        Ok(pattern(len as usize, seed))
    }

    async fn digest(&self, data: Bytes) -> Result<Digest, lanner::Error> {
        Ok(digest(&data))
    }

    async fn mix(
        &self,
        tag: String,
        first: Bytes,
        separator: u8,
        second: Bytes,
        repeat: u32,
        third: Bytes,
    ) -> Result<Bytes, BlobError> {
        if repeat > 16 {
            return Err(BlobError::TooMany { repeat });
        }
        Ok(expected_mix(
            &tag, &first, separator, &second, repeat, &third,
        ))
    }
}

impl Control for Service {
    async fn echo(&self, value: u64) -> Result<u64, lanner::Error> {
        self.completed.fetch_add(1, Ordering::SeqCst);
        Ok(value)
    }

    async fn sleep_ms(&self, millis: u64, token: u64) -> Result<u64, lanner::Error> {
        let now = self.active.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_active.fetch_max(now, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(millis)).await;
        self.active.fetch_sub(1, Ordering::SeqCst);
        self.completed.fetch_add(1, Ordering::SeqCst);
        Ok(token)
    }

    async fn panic_now(&self, message: String) -> Result<u32, lanner::Error> {
        panic!("{message}")
    }

    async fn panic_after_await(&self, message: String) -> Result<u32, lanner::Error> {
        tokio::time::sleep(Duration::from_millis(5)).await;
        panic!("{message}")
    }

    async fn max_active(&self) -> Result<u32, lanner::Error> {
        Ok(self.max_active())
    }

    async fn completed(&self) -> Result<u64, lanner::Error> {
        Ok(self.completed())
    }
}

/// `len` bytes that differ from one position to the next and from one seed to the next.
pub fn pattern(len: usize, seed: u8) -> Bytes {
    (0..len)
        .map(|i| {
            let x = (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ u64::from(seed);
            (x >> 29) as u8 ^ (i as u8)
        })
        .collect::<Vec<u8>>()
        .into()
}

/// FNV-1a over the bytes, with the length.
pub fn digest(data: &[u8]) -> Digest {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in data {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    Digest {
        len: data.len() as u64,
        hash,
    }
}

/// Calls `mix` (separator `|`) and asserts its answer is [`expected_mix`]'s.
pub async fn assert_mix(
    blobs: &BlobsProxy,
    tag: &str,
    first: &Bytes,
    second: &Bytes,
    repeat: u32,
    third: &Bytes,
) {
    let mixed = blobs
        .mix(
            tag.into(),
            first.clone(),
            b'|',
            second.clone(),
            repeat,
            third.clone(),
        )
        .await
        .unwrap();
    assert!(
        mixed == expected_mix(tag, first, b'|', second, repeat, third),
        "tag of {} bytes, bulk of {}, {} and {} bytes",
        tag.len(),
        first.len(),
        second.len(),
        third.len()
    );
}

/// What [`Blobs::mix`] returns for these arguments.
pub fn expected_mix(
    tag: &str,
    first: &[u8],
    separator: u8,
    second: &[u8],
    repeat: u32,
    third: &[u8],
) -> Bytes {
    let mut out = Vec::new();
    out.extend_from_slice(tag.as_bytes());
    out.push(b'|');
    out.extend_from_slice(first);
    out.push(separator);
    for _ in 0..repeat {
        out.extend_from_slice(second);
    }
    out.push(separator);
    out.extend_from_slice(third);
    out.extend_from_slice(&repeat.to_le_bytes());
    out.into()
}

/// An object implementing all three interfaces over one shared `Service`.
pub fn service_object(service: &Arc<Service>) -> Object {
    Object::new(CalculatorStub::new(service.clone()))
        .with(BlobsStub::new(service.clone()))
        .with(ControlStub::new(service.clone()))
}

/// A server publishing `object` as `obj`, listening on `endpoint` (a URL of any transport).
pub async fn serve_at(endpoint: &str, server: Server, object: Object) -> (Server, Listening) {
    server.publish("obj", object);
    let listening = server
        .listen(endpoint)
        .await
        .unwrap_or_else(|error| panic!("listen on {endpoint}: {error}"));
    (server, listening)
}

/// A server publishing `object` as `obj`, listening on `mem://<endpoint>`.
pub async fn serve(endpoint: &str, server: Server, object: Object) -> (Server, Listening) {
    serve_at(&format!("mem://{endpoint}"), server, object).await
}

/// Like [`serve`], with the [`service_object`] of a fresh [`Service`], which it also returns.
pub async fn serve_service(endpoint: &str, server: Server) -> (Server, Listening, Arc<Service>) {
    let service = Arc::new(Service::default());
    let (server, listening) = serve(endpoint, server, service_object(&service)).await;
    (server, listening, service)
}

/// The URL of the object `serve` published.
pub fn url(endpoint: &str) -> String {
    format!("mem://{endpoint}/obj")
}

/// A proxy for the object `serve` published, over a new client's connection.
pub async fn connect<P: Proxy>(endpoint: &str) -> P {
    Client::new()
        .connect(&url(endpoint))
        .await
        .unwrap_or_else(|error| panic!("connect to {}: {error}", url(endpoint)))
}

/// Runs `call(proxy.clone(), item)` on a task of its own for every item.
pub fn spawn_each<P, I, F, Fut>(proxy: &P, items: I, call: F) -> Vec<JoinHandle<Fut::Output>>
where
    P: Clone,
    I: IntoIterator,
    F: Fn(P, I::Item) -> Fut,
    Fut: Future + Send + 'static,
    Fut::Output: Send + 'static,
{
    items
        .into_iter()
        .map(|item| tokio::spawn(call(proxy.clone(), item)))
        .collect()
}

/// The outputs of `tasks`, in order; a task that panicked fails the test.
pub async fn await_all<T>(tasks: Vec<JoinHandle<T>>) -> Vec<T> {
    let mut outputs = Vec::with_capacity(tasks.len());
    for task in tasks {
        outputs.push(task.await.expect("a spawned task panicked"));
    }
    outputs
}

/// Asserts that `error` is of `kind` and its message starts with `prefix`.
#[track_caller]
pub fn assert_error(error: &lanner::Error, kind: lanner::ErrorKind, prefix: &str) {
    assert_eq!(error.kind(), kind, "{error}");
    assert!(
        error.message().starts_with(prefix),
        "expected a message starting with {prefix:?}, got {error}"
    );
}

/// Asserts that `error` is of `kind` and its message contains `part`.
#[track_caller]
pub fn assert_error_contains(error: &lanner::Error, kind: lanner::ErrorKind, part: &str) {
    assert_eq!(error.kind(), kind, "{error}");
    assert!(
        error.message().contains(part),
        "expected a message containing {part:?}, got {error}"
    );
}

/// A raw client of the Unix socket listener `listening` (which must accept anonymous
/// clients), past the handshake: the socket and the client's protocol state, for tests
/// that speak the protocol without the runtime.
pub async fn raw_unix_client(
    listening: &Listening,
) -> (tokio::net::UnixStream, lanner_proto::Connection) {
    use tokio::io::AsyncWriteExt;

    let path = listening.endpoint().to_string().replace("unix://", "");
    let mut socket = tokio::net::UnixStream::connect(&path).await.unwrap();
    let (mut proto, hello) = lanner_proto::Connection::client(lanner_proto::Limits::default());
    socket.write_all(&hello).await.unwrap();
    let welcome = read_frame(&mut socket).await.unwrap();
    assert!(matches!(
        proto.handle_frame(welcome),
        Ok(lanner_proto::Event::Established { .. })
    ));
    (socket, proto)
}

/// Reads one Lanner frame from a raw stream (its length, then the rest): for tests that
/// speak the protocol without the runtime.
pub async fn read_frame<S>(stream: &mut S) -> std::io::Result<Bytes>
where
    S: tokio::io::AsyncRead + Unpin,
{
    use tokio::io::AsyncReadExt;
    let mut len = [0u8; 4];
    stream.read_exact(&mut len).await?;
    let declared = u32::from_le_bytes(len);
    let mut frame = vec![0u8; (declared as usize).max(4)];
    frame[..4].copy_from_slice(&declared.to_le_bytes());
    stream.read_exact(&mut frame[4..]).await?;
    Ok(frame.into())
}

/// The handle of the object published as `name`, from the root's `resolve` over a raw
/// stream (postcard: the name's length, then its bytes; the answer starts with the
/// handle, a varint): for tests that speak the protocol without the runtime.
pub async fn resolve_raw<S>(stream: &mut S, proto: &mut lanner_proto::Connection, name: &str) -> u64
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    use tokio::io::AsyncWriteExt;

    let fingerprint =
        lanner::__private::method_fingerprint("resolve(String)->Result<ObjectRef,Error>");
    let mut resolve = lanner_proto::MessageBuilder::request(0, 0, 0, fingerprint);
    let name = postcard::to_allocvec(name).unwrap();
    resolve.inline().put_slice(&name);
    let (_, frame) = proto.send_request(resolve).map_err(|(e, _)| e).unwrap();
    stream.write_all(&frame.into_contiguous()).await.unwrap();
    let response = match proto.handle_frame(read_frame(stream).await.unwrap()) {
        Ok(lanner_proto::Event::Response(response)) => response,
        other => panic!("expected a response, got {other:?}"),
    };
    postcard::take_from_bytes::<u64>(response.payload.inline_slice())
        .unwrap()
        .0
}

/// Ends the test process with a message if the guard it returns is still alive after
/// `limit`: for tests whose failure is a thread stuck in a loop that never yields, which
/// neither a timeout future nor the runtime's shutdown can stop.
pub fn watchdog(what: &'static str, limit: std::time::Duration) -> Watchdog {
    let (done, waiting) = std::sync::mpsc::channel::<()>();
    std::thread::spawn(move || {
        if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = waiting.recv_timeout(limit) {
            eprintln!("{what}: not done within {limit:?}; stopping the test process");
            std::process::exit(101);
        }
    });
    Watchdog(done)
}

/// See [`watchdog`]: dropping it (when the test is done) calls the watchdog off.
pub struct Watchdog(std::sync::mpsc::Sender<()>);

/// Polls `future` to its end on this thread, which runs no runtime, parking it between
/// polls (as `futures::executor::block_on` does).
pub fn block_on_plain_thread<F: std::future::Future>(future: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl std::task::Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = std::task::Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = std::task::Context::from_waker(&waker);
    let mut future = std::pin::pin!(future);
    loop {
        if let std::task::Poll::Ready(output) = future.as_mut().poll(&mut cx) {
            return output;
        }
        std::thread::park();
    }
}

/// A server on a thread and runtime of its own (as in another process), serving `object`
/// as `obj` at `endpoint` until dropped (its thread is then joined): it answers while the
/// test's threads are held by spinning callers.
pub struct ServerThread {
    /// The object's URL.
    pub url: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ServerThread {
    /// Starts serving `object()` (made on the server's thread) as `obj` at `endpoint`.
    pub fn start(
        endpoint: String,
        object: impl FnOnce() -> Object + Send + 'static,
    ) -> ServerThread {
        let (url_sender, url) = std::sync::mpsc::channel();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let server = Server::new();
                server.publish("obj", object());
                let listening = server.listen(&endpoint).await.unwrap();
                url_sender
                    .send(listening.endpoint().object_url("obj"))
                    .unwrap();
                let _ = stopped.await;
            });
        });
        ServerThread {
            url: url.recv().unwrap(),
            stop: Some(stop),
            thread: Some(thread),
        }
    }
}

impl Drop for ServerThread {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Serves a [`Service`] as `obj` at the unix socket `back`, on a runtime of its own (its
/// own thread: answers arrive while the test's thread spins or blocks), and binds `front`
/// beside it for a relay between client and server, which the test spawns on that
/// runtime. Keep the runtime last: it outlives the server dropped before it.
pub fn serve_elsewhere_behind_a_relay(
    back: &std::path::Path,
    front: &std::path::Path,
) -> (
    tokio::runtime::Runtime,
    (Server, Listening),
    tokio::net::UnixListener,
) {
    let _ = std::fs::remove_file(front);
    let elsewhere = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let served = elsewhere.block_on(serve_at(
        &format!("unix://{}", back.display()),
        Server::new(),
        service_object(&Arc::new(Service::default())),
    ));
    let relay = elsewhere
        .block_on(async { tokio::net::UnixListener::bind(front) })
        .unwrap();
    (elsewhere, served, relay)
}
