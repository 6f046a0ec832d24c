//! Many calls outstanding on one connection, over every transport between processes
//! (here inside one process): requests are written in batches, a burst of frames is read
//! and answered together, and every caller still gets its own answer.

mod common;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use futures_util::stream::{FuturesUnordered, StreamExt};
use lanner::{Client, ClientAuth, Proxy, Server, ServerAuth};

/// Calls kept outstanding at once.
const OUTSTANDING: usize = 64;
/// Calls made in all.
const CALLS: usize = 3_000;

/// Serves a `Service` at `endpoint` (a URL without a name) and returns the object's URL.
async fn serve_on(endpoint: &str) -> (Server, lanner::Listening, String) {
    let server = if endpoint.starts_with("tcp://") {
        Server::new().with_auth(ServerAuth::none())
    } else {
        Server::new()
    };
    let (server, listening) = serve_at(endpoint, server, service_object(&Arc::default())).await;
    let url = format!("{}/obj", listening.endpoint());
    (server, listening, url)
}

fn client_for(url: &str) -> Client {
    if url.starts_with("tcp://") {
        Client::new().with_auth(ClientAuth::none())
    } else {
        Client::new()
    }
}

type Check = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Call number `index`: an addition, a bulk echo (frames of several segments) or a typed
/// error, each checking its own answer.
fn call(calc: &CalculatorProxy, blobs: &BlobsProxy, index: usize) -> Check {
    let a = index as i64 * 1_000;
    match index % 3 {
        0 => {
            let calc = calc.clone();
            Box::pin(async move { assert_eq!(calc.add(a, 7).await, Ok(a + 7), "call {index}") })
        }
        1 => {
            let blobs = blobs.clone();
            Box::pin(async move {
                let payload = pattern(index % 3_000, index as u8);
                let echoed = blobs.echo(payload.clone()).await.unwrap();
                assert!(
                    echoed == payload,
                    "call {index}: the payload came back different"
                );
            })
        }
        _ => {
            let calc = calc.clone();
            Box::pin(async move {
                let answer = calc.divide(a, 0).await;
                assert_eq!(answer, Err(CalcError::DivideByZero { dividend: a }));
            })
        }
    }
}

/// How long the calls may take in all before the test fails (a request left unwritten in a
/// batch would otherwise hang it).
const PATIENCE: Duration = Duration::from_secs(60);

/// Keeps [`OUTSTANDING`] calls in flight from one task until [`CALLS`] have completed.
async fn many_outstanding_calls(url: &str) {
    tokio::time::timeout(PATIENCE, outstanding_calls(url))
        .await
        .expect("every call is answered in time");
}

async fn outstanding_calls(url: &str) {
    let calc: CalculatorProxy = client_for(url).connect(url).await.unwrap();
    let blobs: BlobsProxy = calc.query().unwrap();
    let mut in_flight: FuturesUnordered<Check> = (0..OUTSTANDING)
        .map(|index| call(&calc, &blobs, index))
        .collect();
    let mut started = OUTSTANDING;
    let mut completed = 0;
    while in_flight.next().await.is_some() {
        completed += 1;
        if started < CALLS {
            in_flight.push(call(&calc, &blobs, started));
            started += 1;
        }
    }
    assert_eq!(completed, CALLS);
    // And a lone call afterwards still gets its answer at once (written unbatched).
    assert_eq!(calc.add(1, 1).await, Ok(2));
}

fn shm_endpoint(test: &str) -> String {
    format!("shm://lanner-test-{}-{test}", std::process::id())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_outstanding_calls_over_tcp_all_get_their_answers() {
    let (_server, _listening, url) = serve_on("tcp://127.0.0.1:0").await;
    many_outstanding_calls(&url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_outstanding_calls_over_unix_all_get_their_answers() {
    let path = std::env::temp_dir().join(format!("lanner-batching-{}.sock", std::process::id()));
    let (_server, _listening, url) = serve_on(&format!("unix://{}", path.display())).await;
    many_outstanding_calls(&url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_outstanding_calls_over_shm_all_get_their_answers() {
    let (_server, _listening, url) = serve_on(&shm_endpoint("batching")).await;
    many_outstanding_calls(&url).await;
}

/// Client, server and both readers on one thread: deferred requests must be written by
/// the reader without anyone else's help.
#[tokio::test(flavor = "current_thread")]
async fn many_outstanding_calls_on_one_thread_all_get_their_answers() {
    let (_server, _listening, url) = serve_on("tcp://127.0.0.1:0").await;
    many_outstanding_calls(&url).await;
    let (_server, _listening, url) = serve_on(&shm_endpoint("batching-one-thread")).await;
    many_outstanding_calls(&url).await;
}

/// Many tasks, each with calls of its own, on a shared connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_tasks_share_a_batched_connection() {
    let (_server, _listening, url) = serve_on("tcp://127.0.0.1:0").await;
    let calc: CalculatorProxy = client_for(&url).connect(&url).await.unwrap();
    let tasks = spawn_each(&calc, 0..32i64, |calc, task| async move {
        for call in 0..100i64 {
            let a = task * 1_000_000 + call;
            assert_eq!(calc.add(a, call).await, Ok(a + call));
        }
    });
    await_all(tasks).await;
}

/// A private client's proxies use a connection of their own; the shared client's proxies
/// keep sharing theirs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_private_client_has_connections_of_its_own() {
    let (_server, _listening, url) = serve_on("tcp://127.0.0.1:0").await;
    let shared = client_for(&url);
    let first: CalculatorProxy = shared.connect(&url).await.unwrap();
    let second: CalculatorProxy = shared.connect(&url).await.unwrap();
    let private = shared.private();
    let own: CalculatorProxy = private.connect(&url).await.unwrap();
    let own_again: CalculatorProxy = private.connect(&url).await.unwrap();
    let sent = |proxy: &CalculatorProxy| proxy.object().traffic().messages_sent;
    let (shared_before, private_before) = (sent(&first), sent(&own));
    for i in 0..10 {
        assert_eq!(own.add(i, 1).await, Ok(i + 1));
    }
    assert_eq!(sent(&own), private_before + 10);
    assert_eq!(
        sent(&own_again),
        sent(&own),
        "one private connection for both"
    );
    assert_eq!(
        sent(&first),
        shared_before,
        "the shared connection saw none of them"
    );
    assert_eq!(second.add(2, 2).await, Ok(4));
    assert_eq!(sent(&first), shared_before + 1);
}

/// Calls joined in one task (`join_all`): every answer wakes the task, which polls them
/// all, and a call whose answer has not come returns without looking it up (see
/// `connection/delivery_marks.rs`). Answered in reverse order of sending, rounds of them
/// back to back, each call still gets its own answer and none is left waiting.
async fn joined_calls_answered_out_of_order(url: &str) {
    let control: ControlProxy = client_for(url).connect(url).await.unwrap();
    for round in 0..20u64 {
        let calls = (0..8u64).map(|index| {
            let control = control.clone();
            let token = round * 100 + index;
            // The first sent sleeps longest, so the answers come back last to first.
            async move { (token, control.sleep_ms(8 - index, token).await) }
        });
        let answers = tokio::time::timeout(PATIENCE, futures_util::future::join_all(calls))
            .await
            .expect("every joined call is answered");
        for (token, answer) in answers {
            assert_eq!(answer, Ok(token));
        }
    }
}

#[tokio::test(flavor = "current_thread")]
async fn joined_calls_answered_out_of_order_all_complete() {
    let (_server, _listening, url) = serve_on("tcp://127.0.0.1:0").await;
    joined_calls_answered_out_of_order(&url).await;
    let (_server, _listening, url) = serve_on(&shm_endpoint("joined")).await;
    joined_calls_answered_out_of_order(&url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn joined_calls_answered_out_of_order_all_complete_across_threads() {
    let path = std::env::temp_dir().join(format!("lanner-joined-{}.sock", std::process::id()));
    let (_server, _listening, url) = serve_on(&format!("unix://{}", path.display())).await;
    joined_calls_answered_out_of_order(&url).await;
}

/// Calls each joined caller makes in [`joined_calls_of_a_sequential_caller_overlap`]: more
/// than the connection lets its remembered lone caller make before checking it again.
const JOINED_CALLS_EACH: u64 = 2_500;

/// Futures joined in a task that made calls alone before share its waker, which the
/// connection remembers as a sequential caller's: each of them finding the connection idle
/// may spin for its reply at once. They must still overlap: the remembered caller is
/// checked again periodically, and its siblings then start. (Before that check, the first
/// joined caller made all its calls, each answered within the spin budget, before its
/// sibling made one.) The server runs on other threads, so a spinning caller gets its
/// answers while it spins.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn joined_calls_of_a_sequential_caller_overlap() {
    let path = std::env::temp_dir().join(format!("lanner-overlap-{}.sock", std::process::id()));
    let (_server, _listening, url) = serve_on(&format!("unix://{}", path.display())).await;
    // A spin budget no call outlasts: a caller never falls back to waiting (which would
    // let its siblings run whatever the connection remembers).
    let options = lanner::ConnectionOptions::default().with_spin(Duration::from_millis(200));
    let control: ControlProxy = Client::with_options(options).connect(&url).await.unwrap();
    // Sequential calls from this task: the connection remembers its waker.
    for value in 0..3 {
        assert_eq!(control.echo(value).await, Ok(value));
    }
    let finished = std::sync::atomic::AtomicU64::new(0);
    let caller = || async {
        let mut order = Vec::new();
        for value in 0..JOINED_CALLS_EACH {
            assert_eq!(control.echo(value).await, Ok(value));
            order.push(finished.fetch_add(1, std::sync::atomic::Ordering::SeqCst));
        }
        order
    };
    let (first, second) =
        tokio::time::timeout(PATIENCE, async { tokio::join!(caller(), caller()) })
            .await
            .expect("the joined calls finish");
    let (first_done, second_started) = (first[first.len() - 1], second[0]);
    assert!(
        second_started < first_done,
        "the second caller's first call ended after all of the first caller's ({second_started} vs {first_done}): the joined callers ran one after the other"
    );
}

/// `len` bytes of a pattern, starting `offset` bytes past a 4 KiB boundary.
fn pattern_in_page_at(len: usize, offset: usize) -> bytes::Bytes {
    let buffer = pattern(len + 8192, 3).to_vec();
    let start = (offset + 4096 - buffer.as_ptr() as usize % 4096) % 4096;
    bytes::Bytes::from(buffer).slice(start..start + len)
}

/// A TCP sink puts PONG frames before a large payload whose copy into the kernel's page
/// fragments would alias (16 bytes into a page behind a 44-byte head), and none before
/// one that would not (44): either way the payload arrives whole, both ways, and the
/// connection goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_payloads_over_tcp_arrive_whole_padded_or_not() {
    let (_server, _listening, url) = serve_on("tcp://127.0.0.1:0").await;
    let blobs: BlobsProxy = client_for(&url).connect(&url).await.unwrap();
    for offset in [16, 44, 16] {
        let payload = pattern_in_page_at(512 * 1024, offset);
        assert_eq!(blobs.echo(payload.clone()).await.unwrap(), payload);
        assert_eq!(
            blobs.digest(payload.clone()).await.unwrap(),
            digest(&payload)
        );
    }
    assert_eq!(blobs.echo(bytes::Bytes::new()).await.unwrap().len(), 0);
}
