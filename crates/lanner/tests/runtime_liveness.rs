//! Liveness of a connection's send and receive paths (twenty-seventh session's review).

use std::sync::Arc;
use std::time::Duration;

use lanner::{Bytes, Client, ConnectionOptions, Error, ObjRef, Object, Proxy, Server};

mod common;
use common::*;

#[lanner::interface]
trait Bell {
    /// Returns once [`Bell::ring`] has been called (before or after).
    async fn wait(&self) -> Result<(), Error>;
    /// Lets one [`Bell::wait`] return.
    async fn ring(&self) -> Result<(), Error>;
    /// Answers at once.
    async fn nothing(&self) -> Result<(), Error>;
}

#[derive(Default)]
struct BellImpl {
    rung: tokio::sync::Notify,
}

impl Bell for BellImpl {
    async fn wait(&self) -> Result<(), Error> {
        self.rung.notified().await;
        Ok(())
    }

    async fn ring(&self) -> Result<(), Error> {
        self.rung.notify_one();
        Ok(())
    }

    async fn nothing(&self) -> Result<(), Error> {
        Ok(())
    }
}

#[lanner::interface]
trait Payloads {
    /// `len` bytes, at once.
    async fn make(&self, len: u32) -> Result<Bytes, Error>;
}

struct PayloadsImpl;

impl Payloads for PayloadsImpl {
    async fn make(&self, len: u32) -> Result<Bytes, Error> {
        Ok(pattern(len as usize, 7))
    }
}

#[lanner::interface]
trait Fetcher {
    /// Calls `from` back for `len` bytes and answers how many came.
    async fn fetch(&self, from: ObjRef<PayloadsProxy>, len: u32) -> Result<u64, Error>;
}

struct FetcherImpl;

impl Fetcher for FetcherImpl {
    async fn fetch(&self, from: ObjRef<PayloadsProxy>, len: u32) -> Result<u64, Error> {
        let data = from.into_proxy()?.make(len).await?;
        Ok(data.len() as u64)
    }
}

fn unix(tag: &str) -> String {
    let path =
        std::env::temp_dir().join(format!("lanner-liveness-{tag}-{}.sock", std::process::id()));
    format!("unix://{}", path.display())
}

/// A call with a deadline made where no runtime runs (`block_on` on a plain thread, as
/// `futures::executor::block_on` does), which waits for its answer or for a credit rather
/// than spinning for it, times its deadline on its connection's runtime: it used to
/// panic ("there is no reactor running") as it made its timer.
#[test]
fn a_call_with_a_deadline_can_wait_where_no_runtime_runs() {
    let _watchdog = watchdog(
        "a_call_with_a_deadline_can_wait_where_no_runtime_runs",
        Duration::from_secs(60),
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    // One credit: a second call waits for the first one's.
    let server = Server::with_options(ConnectionOptions::default().with_credits(1));
    let (_server, _listening, _service) =
        runtime.block_on(serve_service("liveness-deadline-plain", server));
    let control: ControlProxy = runtime.block_on(async {
        Client::new()
            .connect(&url("liveness-deadline-plain"))
            .await
            .unwrap()
    });
    let patient = control.with_timeout(Duration::from_secs(20));
    // Answered after the spin budget: the caller waits for the reader.
    assert_eq!(block_on_plain_thread(patient.sleep_ms(50, 1)), Ok(1));
    // The deadline comes first, and wakes this thread.
    let hasty = control.with_timeout(Duration::from_millis(100));
    let error = block_on_plain_thread(hasty.sleep_ms(300, 2)).unwrap_err();
    assert_eq!(error.kind(), lanner::ErrorKind::DeadlineExceeded, "{error}");
    // The only credit is taken: the call waits for it, with its deadline.
    let holder = runtime.spawn({
        let control = control.clone();
        async move { control.sleep_ms(200, 3).await }
    });
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(block_on_plain_thread(patient.sleep_ms(1, 4)), Ok(4));
    assert_eq!(runtime.block_on(holder).unwrap(), Ok(3));
}

/// A call made from another thread while a lone caller spins for its reply is not held
/// back for the spin. The other call is deferred to the connection's reader (it is not
/// alone), but the reader's thread is the spinning caller's (a current-thread runtime),
/// awake and unable to run: the spinning caller writes what is deferred, as the reader
/// would before it receives. Here the lone caller's reply waits for that very call; with
/// a spin budget of an hour, the deferred request went out only when the other caller
/// gave up on it (its CANCEL flushed the queue) or a PING from the server was answered.
#[test]
fn a_request_deferred_while_a_lone_caller_spins_on_the_readers_thread_goes_out() {
    let _watchdog = watchdog(
        "a_request_deferred_while_a_lone_caller_spins_on_the_readers_thread_goes_out",
        Duration::from_secs(60),
    );
    let server = ServerThread::start(unix("deferred-behind-spin"), || {
        Object::new(BellStub::new(Arc::new(BellImpl::default())))
    });
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let options = ConnectionOptions::default()
        .with_spin(Duration::from_secs(3600))
        .without_keepalive();
    let bell: BellProxy = runtime
        .block_on(Client::with_options(options).connect(&server.url))
        .unwrap();
    let started = std::time::Instant::now();
    let waited = runtime.block_on(async {
        // Sequential calls: this caller spins for its replies at once from now on.
        for _ in 0..3 {
            bell.nothing().await.unwrap();
        }
        let ringer = std::thread::spawn({
            let bell = bell.with_timeout(Duration::from_secs(5));
            move || {
                std::thread::sleep(Duration::from_millis(100));
                block_on_plain_thread(bell.ring())
            }
        });
        // A deadline bounds the test: the spin ends there, and the reader runs.
        let waited = bell.with_timeout(Duration::from_secs(5)).wait().await;
        (waited, ringer.join().unwrap())
    });
    let elapsed = started.elapsed();
    assert_eq!(waited, (Ok(()), Ok(())), "after {elapsed:?}");
    assert!(elapsed < Duration::from_secs(3), "took {elapsed:?}");
}

/// A lone caller spinning for its reply answers a callback whose answer the socket cannot
/// take at once: a flusher task must finish it, and it is spawned on the caller's own
/// thread (a current-thread runtime, or a multi-thread worker's next-task slot, which
/// other workers do not take). The server awaits that answer before it answers the
/// caller, so the spin ends when a flusher has to run, as it ends for a callback that
/// waits. With a spin budget of an hour the call ran into its deadline.
fn a_lone_caller_lets_the_flusher_run(tag: &'static str, runtime: tokio::runtime::Runtime) {
    let _watchdog = watchdog(tag, Duration::from_secs(60));
    let server = ServerThread::start(unix(tag), || {
        Object::new(FetcherStub::new(Arc::new(FetcherImpl)))
    });
    let options = ConnectionOptions::default()
        .with_spin(Duration::from_secs(3600))
        .without_keepalive();
    let fetcher: FetcherProxy = runtime
        .block_on(Client::with_options(options).connect(&server.url))
        .unwrap();
    let payloads = ObjRef::new(Object::new(PayloadsStub::new(Arc::new(PayloadsImpl))));
    // A deadline bounds the test: the spin ends there, and the flusher runs.
    let fetcher = fetcher.with_timeout(Duration::from_secs(5));
    let started = std::time::Instant::now();
    // In a task: on a multi-thread runtime, on a worker (`block_on`'s own future runs on
    // this thread, where the flusher is not spawned).
    let fetched = runtime.block_on(runtime.spawn(async move {
        let mut fetched = Vec::new();
        for len in [16, 4 << 20, 16, 4 << 20] {
            fetched.push((
                len,
                fetcher.fetch(payloads.clone(), len).await,
                started.elapsed(),
            ));
        }
        fetched
    }));
    for (len, fetched, after) in fetched.unwrap() {
        assert_eq!(fetched, Ok(u64::from(len)), "after {after:?}");
    }
    let elapsed = started.elapsed();
    assert!(elapsed < Duration::from_secs(3), "took {elapsed:?}");
}

#[test]
fn a_lone_caller_lets_the_flusher_of_a_large_callback_answer_run_on_a_current_thread_runtime() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    a_lone_caller_lets_the_flusher_run("flusher-current", runtime);
}

#[test]
fn a_lone_caller_lets_the_flusher_of_a_large_callback_answer_run_on_a_multi_thread_runtime() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    a_lone_caller_lets_the_flusher_run("flusher-multi", runtime);
}

/// Relays the one connection accepted at `front` to the server at `back`: what the
/// server sends goes on at once, what the client sends at about `rate` bytes a second
/// (a slow link), so that a large request keeps the client's writer waiting for room.
async fn slow_relay(front: tokio::net::UnixListener, back: std::path::PathBuf, rate: usize) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    const PIECE: usize = 16 * 1024;
    let (client, _) = front.accept().await.unwrap();
    let server = tokio::net::UnixStream::connect(back).await.unwrap();
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let upstream = tokio::spawn(async move {
        let mut piece = vec![0u8; PIECE];
        let pause = Duration::from_secs_f64(PIECE as f64 / rate as f64);
        loop {
            let read = client_read.read(&mut piece).await.unwrap_or(0);
            if read == 0 || server_write.write_all(&piece[..read]).await.is_err() {
                return;
            }
            tokio::time::sleep(pause).await;
        }
    });
    let _ = tokio::io::copy(&mut server_read, &mut client_write).await;
    upstream.abort();
}

/// A graceful shutdown does not wait longer than it takes a request on its way when the
/// GOAWAY went out to arrive: the client answers the PING that follows the GOAWAY after
/// everything it wrote before, so once the answer is here, so is the request. A client
/// writing a large request through a slow link (its writer waiting for room) dropped
/// that PING (PINGs are not queued behind a writer that waits for the peer to read), so
/// the server waited its whole bound for the answer (2 s) however soon the request was
/// in. The PONG is now owed, and written once the writer has written what it holds.
#[test]
fn a_shutdown_hears_the_goaway_answered_behind_a_large_request() {
    let _watchdog = watchdog(
        "a_shutdown_hears_the_goaway_answered_behind_a_large_request",
        Duration::from_secs(60),
    );
    let path = |end: &str| {
        std::env::temp_dir().join(format!(
            "lanner-liveness-slow-{end}-{}.sock",
            std::process::id()
        ))
    };
    let (back, front) = (path("server"), path("relay"));
    let (elsewhere, (_server, listening), listener) = serve_elsewhere_behind_a_relay(&back, &front);
    // 1 MiB at 4 MiB/s: about 0.25 s on its way, longer than the socket takes at once.
    elsewhere.spawn(slow_relay(listener, back, 4 << 20));
    let client_runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let outcome = client_runtime.block_on(async {
        let blobs: BlobsProxy = Client::new()
            .connect(&format!("unix://{}/obj", front.display()))
            .await
            .unwrap();
        let payload = pattern(1 << 20, 3);
        let expected = digest(&payload);
        // The connection stays open (its end would answer for it).
        let call = tokio::spawn({
            let blobs = blobs.clone();
            async move { blobs.digest(payload).await }
        });
        // The request is on its way, the client's writer waiting for room.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let shutdown = elsewhere.spawn(async move {
            let started = std::time::Instant::now();
            let report = listening.shutdown(Duration::from_secs(20)).await;
            (report.unfinished_calls, started.elapsed())
        });
        let digested = call.await.unwrap();
        let shutdown = shutdown.await.unwrap();
        drop(blobs);
        (digested, expected, shutdown)
    });
    elsewhere.shutdown_background();
    let _ = std::fs::remove_file(&front);
    let (digested, expected, (unfinished, took)) = outcome;
    assert_eq!(digested, Ok(expected));
    assert_eq!(unfinished, 0);
    assert!(
        took < Duration::from_millis(1500),
        "the shutdown took {took:?}: it waited its whole bound for an answer to its PING"
    );
}
