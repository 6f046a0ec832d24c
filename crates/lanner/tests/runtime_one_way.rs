//! One-way calls: the caller does not wait for an answer, the server runs the method and
//! returns the call's credit, so a flood of one-way calls is flow-controlled like any other.

#[path = "child/mod.rs"]
mod child;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use lanner::{Client, ConnectionOptions, Object, Proxy, Server};

#[lanner::interface]
trait Counter {
    /// Adds `n`; the caller does not wait.
    #[oneway]
    async fn add(&self, n: u64) -> Result<(), lanner::Error>;
    /// Fails; the caller never hears of it.
    #[oneway]
    async fn fail(&self) -> Result<(), lanner::Error>;
    /// Adds `n` after a moment: the method finishes on a task of its own, not where the
    /// call was received.
    #[oneway]
    async fn add_later(&self, n: u64) -> Result<(), lanner::Error>;
    /// Adds the length of `bulk`: a method with one bulk argument and no inline one, whose
    /// requests are stamped from their fields and (over shared memory) written without a
    /// header buffer.
    #[oneway]
    async fn add_len(&self, bulk: Bytes) -> Result<(), lanner::Error>;
    /// Adds one: a method without arguments, sent the same way.
    #[oneway]
    async fn tick(&self) -> Result<(), lanner::Error>;
    /// The sum so far.
    async fn total(&self) -> Result<u64, lanner::Error>;
}

#[derive(Default)]
struct CounterService {
    total: AtomicU64,
}

impl Counter for CounterService {
    async fn add(&self, n: u64) -> Result<(), lanner::Error> {
        self.total.fetch_add(n, Ordering::SeqCst);
        Ok(())
    }

    async fn fail(&self) -> Result<(), lanner::Error> {
        Err(lanner::Error::new(
            lanner::ErrorKind::Internal,
            "nobody hears this",
        ))
    }

    async fn add_later(&self, n: u64) -> Result<(), lanner::Error> {
        tokio::time::sleep(Duration::from_millis(2)).await;
        self.add(n).await
    }

    async fn add_len(&self, bulk: Bytes) -> Result<(), lanner::Error> {
        // Every byte is read: a payload that arrived garbled would change the sum.
        let marked = bulk.iter().filter(|&&byte| byte == MARK).count() as u64;
        self.add(marked).await
    }

    async fn tick(&self) -> Result<(), lanner::Error> {
        self.add(1).await
    }

    async fn total(&self) -> Result<u64, lanner::Error> {
        Ok(self.total.load(Ordering::SeqCst))
    }
}

/// The byte [`Counter::add_len`] counts.
const MARK: u8 = 0xa5;

/// Serves a counter at `endpoint` with `options`; the listener (keep it) and the service.
async fn publish_counter(
    endpoint: &str,
    options: ConnectionOptions,
) -> (lanner::Listening, Arc<CounterService>) {
    let server = Server::with_options(options);
    let service = Arc::new(CounterService::default());
    server.publish("counter", Object::new(CounterStub::new(service.clone())));
    (server.listen(endpoint).await.unwrap(), service)
}

/// [`publish_counter`], and a proxy of the counter.
async fn serve_counter(
    endpoint: &str,
    options: ConnectionOptions,
) -> (lanner::Listening, Arc<CounterService>, CounterProxy) {
    let (listening, service) = publish_counter(endpoint, options).await;
    let counter = Client::new()
        .connect(&listening.endpoint().object_url("counter"))
        .await
        .unwrap();
    (listening, service, counter)
}

async fn one_way_calls_run_in_order_and_return_their_credits(endpoint: &str) {
    // Few credits, many calls: the caller must get credits back from one-way calls.
    let (_listening, service, counter) =
        serve_counter(endpoint, ConnectionOptions::default().with_credits(4)).await;
    for n in 1..=1_000 {
        counter.add(n).await.unwrap();
        if n % 100 == 0 {
            counter.fail().await.unwrap();
        }
    }
    // Requests are served in arrival order and `add` completes without waiting, so the
    // two-way call after them sees every one.
    assert_eq!(counter.total().await, Ok(500_500));
    assert_eq!(service.total.load(Ordering::SeqCst), 500_500);
}

#[tokio::test]
async fn one_way_calls_in_memory() {
    one_way_calls_run_in_order_and_return_their_credits("mem://one-way").await;
}

/// One-way calls without inline arguments (a bulk one, or none), the sizes chosen so that
/// some are queued for a batch (small, others in flight), some written at once (large),
/// some lent from the loan area over shared memory (256 KiB and more), and some that find
/// no credit at hand and wait for one: every one arrives, whole and in order.
async fn one_way_calls_without_inline_arguments_arrive_whole(endpoint: &str) {
    let (_listening, service, counter) =
        serve_counter(endpoint, ConnectionOptions::default().with_credits(4)).await;
    let sizes = [0, 1, 100, 4096, 40 * 1024, 64 * 1024, 300 * 1024];
    let mut expected = 0u64;
    for round in 0..40 {
        for size in sizes {
            let mut bulk = vec![0u8; size];
            // A mark at each end and one in the middle, where a garbled copy shows.
            for at in [0, size / 2, size.saturating_sub(1)] {
                if let Some(byte) = bulk.get_mut(at) {
                    *byte = MARK;
                }
            }
            expected += bulk.iter().filter(|&&byte| byte == MARK).count() as u64;
            counter.add_len(Bytes::from(bulk)).await.unwrap();
        }
        counter.tick().await.unwrap();
        expected += 1;
        if round % 10 == 0 {
            // A call that waits, between the streams.
            assert_eq!(counter.total().await, Ok(expected));
        }
    }
    assert_eq!(counter.total().await, Ok(expected));
    assert_eq!(service.total.load(Ordering::SeqCst), expected);
}

#[tokio::test]
async fn one_way_calls_without_inline_arguments_in_memory() {
    one_way_calls_without_inline_arguments_arrive_whole("mem://one-way-plain").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_way_calls_without_inline_arguments_over_a_unix_socket() {
    let path =
        std::env::temp_dir().join(format!("lanner-one-way-plain-{}.sock", std::process::id()));
    let _ = std::fs::remove_file(&path);
    one_way_calls_without_inline_arguments_arrive_whole(&format!("unix://{}", path.display()))
        .await;
    let _ = std::fs::remove_file(&path);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_way_calls_without_inline_arguments_over_shared_memory() {
    let name = format!("lanner-one-way-plain-{}", std::process::id());
    one_way_calls_without_inline_arguments_arrive_whole(&format!("shm://{name}")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_way_calls_over_a_unix_socket() {
    let path = std::env::temp_dir().join(format!("lanner-one-way-{}.sock", std::process::id()));
    let _ = std::fs::remove_file(&path);
    one_way_calls_run_in_order_and_return_their_credits(&format!("unix://{}", path.display()))
        .await;
    let _ = std::fs::remove_file(&path);
}

/// The server holds the credits of one-way calls to give them back together (a quarter
/// of the window at a time while calls keep coming): one it holds alone, with nothing else
/// going back to the client, still comes back once the server runs out of work (else the
/// client's window would stay that much smaller for good), whether the method finished
/// where the call was received or (`later`) on a task of its own.
async fn a_credit_held_alone_comes_back(endpoint: &str, options: ConnectionOptions, later: bool) {
    // Eight credits: they come back two at a time.
    let (_listening, service, counter) = serve_counter(endpoint, options.with_credits(8)).await;
    let before = counter.object().traffic();
    if later {
        counter.add_later(7).await.unwrap();
    } else {
        counter.add(7).await.unwrap();
    }
    let patience = Instant::now() + Duration::from_secs(10);
    while counter.object().traffic().messages_received == before.messages_received
        && Instant::now() < patience
    {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert_eq!(
        counter.object().traffic().messages_received,
        before.messages_received + 1,
        "the credit came back, in one frame"
    );
    assert_eq!(service.total.load(Ordering::SeqCst), 7);
    assert_eq!(counter.total().await, Ok(7));
}

#[tokio::test]
async fn a_held_credit_comes_back_in_memory() {
    for later in [false, true] {
        let endpoint = format!("mem://one-way-held-{later}");
        a_credit_held_alone_comes_back(&endpoint, ConnectionOptions::default(), later).await;
    }
}

/// Without a spin budget the server's reader sleeps as soon as it finds nothing more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_credit_comes_back_from_a_server_that_does_not_spin() {
    for later in [false, true] {
        let endpoint = format!("mem://one-way-held-blocking-{later}");
        let options = ConnectionOptions::default().with_spin(Duration::ZERO);
        a_credit_held_alone_comes_back(&endpoint, options, later).await;
    }
}

/// A busy-polling server never sleeps: the credit comes back once it has polled a while
/// with nothing arriving, also when the method finishes after the reader began polling
/// without anything to do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_credit_comes_back_from_a_busy_polling_server() {
    for later in [false, true] {
        let endpoint = format!("mem://one-way-held-busy-{later}");
        let options = ConnectionOptions::default().busy_poll();
        a_credit_held_alone_comes_back(&endpoint, options, later).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_credit_comes_back_over_a_unix_socket() {
    for later in [false, true] {
        let path = std::env::temp_dir().join(format!(
            "lanner-one-way-held-{later}-{}.sock",
            std::process::id()
        ));
        let _ = std::fs::remove_file(&path);
        let endpoint = format!("unix://{}", path.display());
        a_credit_held_alone_comes_back(&endpoint, ConnectionOptions::default(), later).await;
        let _ = std::fs::remove_file(&path);
    }
}

/// A one-way call that finds a credit at hand is sent when its future is first polled,
/// which is then ready: the future holds no state of waiting for a credit (boxed when
/// needed), as it is moved at every `.await` it crosses (1,448 bytes before).
#[tokio::test]
async fn a_one_way_call_future_stays_small() {
    let (_listening, _service, counter) =
        serve_counter("mem://one-way-small", ConnectionOptions::default()).await;
    let add = counter.add(5);
    let size = std::mem::size_of_val(&add);
    assert!(size <= 256, "a one-way call's future is {size} bytes");
    add.await.unwrap();
    assert_eq!(counter.total().await, Ok(5));
}

/// The environment variable that makes [`child_sends_one_way_calls_and_ends`] run: the
/// counter's URL.
const CHILD_COUNTER: &str = "LANNER_TEST_ONE_WAY_CHILD";

/// One-way calls in a stream are queued and written together; a client process that ends
/// right after them (its runtime dropped, nothing awaited) still sends every one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_way_calls_made_just_before_the_client_ends_all_arrive() {
    let path =
        std::env::temp_dir().join(format!("lanner-one-way-exit-{}.sock", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let endpoint = format!("unix://{}", path.display());
    let (listening, service) = publish_counter(&endpoint, ConnectionOptions::default()).await;
    let url = listening.endpoint().object_url("counter");
    let (mut child, ready) = child::spawn(
        "child_sends_one_way_calls_and_ends",
        (CHILD_COUNTER, &url),
        "sent",
    )
    .await;
    assert_eq!(ready.as_deref(), Some("sent"));
    // Its exit status says nothing here: its test harness fails to print its summary to
    // the pipe nobody reads any more.
    tokio::task::spawn_blocking(move || child.wait())
        .await
        .unwrap()
        .unwrap();
    let expected = 1 + (1..=200).sum::<u64>();
    let patience = Instant::now() + Duration::from_secs(10);
    while service.total.load(Ordering::SeqCst) != expected && Instant::now() < patience {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(service.total.load(Ordering::SeqCst), expected);
    let _ = std::fs::remove_file(&path);
}

/// Not a test of its own: the client process of
/// [`one_way_calls_made_just_before_the_client_ends_all_arrive`]. Without its environment
/// variable it does nothing.
#[tokio::test]
async fn child_sends_one_way_calls_and_ends() {
    let Ok(url) = std::env::var(CHILD_COUNTER) else {
        return;
    };
    let client = Client::new();
    let counter: CounterProxy = client.connect(&url).await.unwrap();
    // A lone one-way call goes out at once; the burst behind it, made without the
    // runtime getting a turn, waits for a batch.
    counter.add(1).await.unwrap();
    for n in 1..=200 {
        counter.add(n).await.unwrap();
    }
    println!("sent");
    // The test returns: its runtime, and the connection's tasks with it, are dropped.
}

/// A sender that ran out of credits takes those the server has returned meanwhile on its
/// own thread: its next call goes out at its first poll, without yielding to the reader
/// (which, on a current-thread runtime, cannot run while the sender does not yield).
fn a_sender_out_of_credits_takes_the_returned_ones_itself(endpoint: &str) {
    let server_runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let (listening, service) = server_runtime.block_on(publish_counter(
        endpoint,
        ConnectionOptions::default().with_credits(4),
    ));
    let client_runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    client_runtime.block_on(async {
        let counter: CounterProxy = Client::new()
            .connect(&listening.endpoint().object_url("counter"))
            .await
            .unwrap();
        // Long enough for the client's reader to go to sleep: the calls below are then
        // written at once rather than queued for it.
        tokio::time::sleep(Duration::from_millis(20)).await;
        for n in 1..=4 {
            counter.add(n).await.unwrap();
        }
        // The four credits are spent. The server runs the calls and returns them while
        // this thread, which does not yield, keeps the reader from taking them in.
        let patience = Instant::now() + Duration::from_secs(10);
        while service.total.load(Ordering::SeqCst) != 10 && Instant::now() < patience {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(service.total.load(Ordering::SeqCst), 10);
        std::thread::sleep(Duration::from_millis(50));
        let mut fifth = std::pin::pin!(counter.add(5));
        let first_poll = fifth
            .as_mut()
            .poll(&mut std::task::Context::from_waker(std::task::Waker::noop()));
        assert!(
            matches!(first_poll, std::task::Poll::Ready(Ok(()))),
            "the returned credits were taken in by the sender: {first_poll:?}"
        );
        assert_eq!(counter.total().await, Ok(15));
    });
    drop(listening);
}

#[test]
fn a_sender_out_of_credits_takes_the_returned_ones_itself_over_shared_memory() {
    let name = format!("lanner-one-way-credits-{}", std::process::id());
    a_sender_out_of_credits_takes_the_returned_ones_itself(&format!("shm://{name}"));
}

#[test]
fn a_sender_out_of_credits_takes_the_returned_ones_itself_over_a_unix_socket() {
    let path = std::env::temp_dir().join(format!(
        "lanner-one-way-credits-{}.sock",
        std::process::id()
    ));
    let _ = std::fs::remove_file(&path);
    a_sender_out_of_credits_takes_the_returned_ones_itself(&format!("unix://{}", path.display()));
    let _ = std::fs::remove_file(&path);
}

/// A stream of small one-way calls over shared memory: those made while earlier ones are
/// out are written into the ring unpublished for the reader's next batch. With credits
/// enough to fill a small ring that way before any is shown, every call still arrives,
/// whether the sender yields between calls (multi-thread) or only when its credits run
/// out (current-thread).
async fn a_one_way_stream_fills_a_small_ring(name: &str) {
    let options = ConnectionOptions::default()
        .with_shm_ring_size(64 * 1024)
        .with_credits(1024);
    let endpoint = format!("shm://lanner-one-way-ring-{}-{name}", std::process::id());
    let (listening, _service) = publish_counter(&endpoint, options.clone()).await;
    let counter: CounterProxy = Client::with_options(options)
        .connect(&listening.endpoint().object_url("counter"))
        .await
        .unwrap();
    let stream = async {
        let mut expected = 0u64;
        for round in 0..20u64 {
            for i in 0..2_000u64 {
                let size = ((i * 7919 + round * 31) % 2_000) as usize;
                let mut bulk = vec![0u8; size];
                if let Some(byte) = bulk.last_mut() {
                    *byte = MARK;
                    expected += 1;
                }
                counter.add_len(Bytes::from(bulk)).await.unwrap();
                counter.tick().await.unwrap();
                expected += 1;
            }
            assert_eq!(counter.total().await, Ok(expected), "round {round}");
        }
    };
    tokio::time::timeout(Duration::from_secs(60), stream)
        .await
        .expect("a one-way stream through a small ring stalled");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_one_way_stream_fills_a_small_ring_on_a_multi_thread_runtime() {
    a_one_way_stream_fills_a_small_ring("mt").await;
}

#[tokio::test]
async fn a_one_way_stream_fills_a_small_ring_on_a_current_thread_runtime() {
    a_one_way_stream_fills_a_small_ring("ct").await;
}

/// One-way calls made without the runtime getting a turn, over shared memory, by a client
/// whose runtime is then dropped (nothing awaited): those written into the ring
/// unpublished for the reader's batch are shown as the connection drops, and all arrive.
#[test]
fn one_way_calls_written_unpublished_arrive_when_the_client_runtime_ends() {
    let server_runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let endpoint = format!(
        "shm://lanner-one-way-unpublished-end-{}",
        std::process::id()
    );
    let (listening, service) =
        server_runtime.block_on(publish_counter(&endpoint, ConnectionOptions::default()));
    let url = listening.endpoint().object_url("counter");
    let client_runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    client_runtime.block_on(async {
        // A busy-polling reader never sleeps: the calls behind the first are left to its
        // next batch (written unpublished), and this thread never lets it run.
        let counter: CounterProxy = Client::with_options(ConnectionOptions::default().busy_poll())
            .connect(&url)
            .await
            .unwrap();
        counter.tick().await.unwrap();
        // The reader gets a turn, and stays awake from then on.
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        // Plain requests (no inline argument): those are the ones written unpublished.
        for _ in 0..200 {
            counter.tick().await.unwrap();
        }
    });
    drop(client_runtime);
    let expected = 201;
    let patience = Instant::now() + Duration::from_secs(10);
    while service.total.load(Ordering::SeqCst) != expected && Instant::now() < patience {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(service.total.load(Ordering::SeqCst), expected);
    drop(listening);
}
