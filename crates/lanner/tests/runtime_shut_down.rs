//! A connection outlives the runtime it was made on (a client kept across runtimes, as a
//! test harness or a library with short-lived runtimes does). The connection is served by
//! that runtime's tasks: once it shuts down, the connection fails with a clear error, and
//! a proxy made from a URL connects again on the runtime of its next call. A call used to
//! wait for ever there, or panic making its deadline's timer on the runtime that was gone.
//! A caller outside any runtime (`block_on` on a plain thread) reconnects on the
//! connection's runtime while it runs; making the new connection there panicked.

use std::sync::Arc;
use std::time::Duration;

use lanner::{Client, ConnectionOptions, Error, ErrorKind, ObjRef, Object, Proxy};

mod common;
use common::*;

#[lanner::interface]
trait Counter {
    /// One more than the last time.
    async fn next(&self) -> Result<u64, Error>;
}

#[derive(Default)]
struct CounterImpl {
    count: std::sync::atomic::AtomicU64,
}

impl Counter for CounterImpl {
    async fn next(&self) -> Result<u64, Error> {
        Ok(self
            .count
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            + 1)
    }
}

#[lanner::interface]
trait Counters {
    /// A new counter, handed over as a result (it cannot be reconnected to).
    async fn counter(&self) -> Result<ObjRef<CounterProxy>, Error>;
}

struct CountersImpl;

impl Counters for CountersImpl {
    async fn counter(&self) -> Result<ObjRef<CounterProxy>, Error> {
        Ok(ObjRef::new(Object::new(CounterStub::new(Arc::new(
            CounterImpl::default(),
        )))))
    }
}

fn endpoint(transport: &str, tag: &str) -> String {
    let name = format!("lanner-shut-down-{tag}-{}", std::process::id());
    match transport {
        "shm" => format!("shm://{name}"),
        _ => format!("unix://{}", std::env::temp_dir().join(name).display()),
    }
}

fn current_thread_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn serve_counter(transport: &str, tag: &str) -> ServerThread {
    serve_counter_at(&endpoint(transport, tag))
}

fn serve_counter_at(endpoint: &str) -> ServerThread {
    ServerThread::start(endpoint.to_owned(), || {
        Object::new(CounterStub::new(Arc::new(CounterImpl::default())))
    })
}

/// A proxy connected by URL on a runtime that has since shut down, and the count its call
/// there answered.
fn counter_of_a_runtime_gone(server: &ServerThread, spin: Duration) -> (CounterProxy, u64) {
    let first = current_thread_runtime();
    let options = ConnectionOptions::default().with_spin(spin);
    let counter: CounterProxy = first
        .block_on(Client::with_options(options).connect(&server.url))
        .unwrap();
    let count = first.block_on(counter.next()).unwrap();
    (counter, count)
}

/// With and without a spin budget (the caller spins for its reply, or waits for the
/// reader), and with and without a deadline (whose timer was made on the runtime gone).
#[test]
fn a_proxy_made_from_a_url_connects_again_on_the_runtime_of_its_next_call() {
    let _watchdog = watchdog(
        "a_proxy_made_from_a_url_connects_again_on_the_runtime_of_its_next_call",
        Duration::from_secs(60),
    );
    for transport in ["unix", "shm"] {
        let server = serve_counter(transport, "reconnects");
        for spin in [Duration::ZERO, Duration::from_micros(50)] {
            for deadline in [None, Some(Duration::from_secs(5))] {
                let (counter, count) = counter_of_a_runtime_gone(&server, spin);
                let counter = match deadline {
                    Some(deadline) => counter.with_timeout(deadline),
                    None => counter,
                };
                let second = current_thread_runtime();
                let next = second.block_on(async {
                    tokio::time::timeout(Duration::from_secs(10), counter.next()).await
                });
                assert_eq!(
                    next.map_err(|_| "no answer in 10 s"),
                    Ok(Ok(count + 1)),
                    "{transport}, spin {spin:?}, deadline {deadline:?}"
                );
            }
        }
    }
}

/// A reference handed over as a result names an object of that one connection: it
/// cannot connect again, and its calls end with the connection's error at once.
#[test]
fn a_reference_that_cannot_reconnect_fails_at_once() {
    let _watchdog = watchdog(
        "a_reference_that_cannot_reconnect_fails_at_once",
        Duration::from_secs(60),
    );
    let server = ServerThread::start(endpoint("unix", "handed-over"), || {
        Object::new(CountersStub::new(Arc::new(CountersImpl)))
    });
    let first = current_thread_runtime();
    let counter = first.block_on(async {
        let counters: CountersProxy = Client::new().connect(&server.url).await.unwrap();
        let counter = counters.counter().await.unwrap().into_proxy().unwrap();
        assert_eq!(counter.next().await.unwrap(), 1);
        counter
    });
    drop(first);
    let second = current_thread_runtime();
    for counter in [
        counter.clone(),
        counter.with_timeout(Duration::from_secs(5)),
    ] {
        let started = std::time::Instant::now();
        let next = second
            .block_on(async { tokio::time::timeout(Duration::from_secs(10), counter.next()).await })
            .expect("the call waited instead of failing");
        let error = next.unwrap_err();
        assert_error_contains(&error, ErrorKind::Unavailable, "runtime has shut down");
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "took {:?}",
            started.elapsed()
        );
    }
}

/// Connecting again needs a runtime to run the new connection: a caller outside any
/// (`block_on` on a plain thread) is told so.
#[test]
fn connecting_again_outside_any_runtime_is_refused_with_the_reason() {
    let _watchdog = watchdog(
        "connecting_again_outside_any_runtime_is_refused_with_the_reason",
        Duration::from_secs(60),
    );
    let server = serve_counter("unix", "plain-thread");
    let (counter, _) = counter_of_a_runtime_gone(&server, Duration::from_micros(50));
    for counter in [
        counter.clone(),
        counter.with_timeout(Duration::from_secs(5)),
    ] {
        let error = block_on_plain_thread(counter.next()).unwrap_err();
        assert_error_contains(&error, ErrorKind::Unavailable, "outside a tokio runtime");
    }
}

/// A proxy whose server went away and came back, called from a plain thread (`block_on`
/// outside any runtime) while the runtime its connection was made on still runs: the new
/// connection is made on that runtime. It panicked ("there is no reactor running").
#[test]
fn a_proxy_called_outside_any_runtime_reconnects_on_its_connections_runtime() {
    let _watchdog = watchdog(
        "a_proxy_called_outside_any_runtime_reconnects_on_its_connections_runtime",
        Duration::from_secs(60),
    );
    let endpoint = endpoint("unix", "back");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let first = serve_counter_at(&endpoint);
    let counter: CounterProxy = runtime.block_on(Client::new().connect(&first.url)).unwrap();
    assert_eq!(runtime.block_on(counter.next()), Ok(1));
    drop(first);
    let _second = serve_counter_at(&endpoint);
    // With a deadline: timed on the connection's runtime too.
    let counter = counter.with_timeout(Duration::from_secs(5));
    // The first call may find the old connection not yet known to be gone, and the
    // reconnect may back off a little.
    let mut answers = Vec::new();
    for _ in 0..50 {
        let next = block_on_plain_thread(counter.next());
        let done = next.is_ok();
        answers.push(next);
        if done {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(answers.last(), Some(&Ok(1)), "{answers:?}");
    for answer in &answers[..answers.len() - 1] {
        let error = answer.as_ref().unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Unavailable, "{error}");
    }
}

/// A proxy whose connection ended (its server went away) before the connection's runtime
/// shut down: with a deadline, a call on another runtime reconnects, timed there (timed
/// on the runtime that was gone, it panicked); outside any runtime it is told why it
/// cannot.
#[test]
fn a_connection_that_ended_before_its_runtime_is_replaced_on_the_callers() {
    let _watchdog = watchdog(
        "a_connection_that_ended_before_its_runtime_is_replaced_on_the_callers",
        Duration::from_secs(60),
    );
    let endpoint = endpoint("unix", "ended-first");
    let first = serve_counter_at(&endpoint);
    let old = current_thread_runtime();
    let counter: CounterProxy = old.block_on(Client::new().connect(&first.url)).unwrap();
    assert_eq!(old.block_on(counter.next()), Ok(1));
    drop(first);
    // The old runtime runs until its connection is known to have ended, and a little
    // longer: its reader task ends too.
    let ended = old.block_on(async {
        for _ in 0..100 {
            if let Err(error) = counter.next().await {
                tokio::time::sleep(Duration::from_millis(50)).await;
                return Some(error);
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        None
    });
    assert_eq!(
        ended.map(|error| error.kind()),
        Some(ErrorKind::Unavailable)
    );
    drop(old);
    let counter = counter.with_timeout(Duration::from_secs(5));
    let error = block_on_plain_thread(counter.next()).unwrap_err();
    assert_error_contains(&error, ErrorKind::Unavailable, "outside a tokio runtime");

    let _second = serve_counter_at(&endpoint);
    let next = current_thread_runtime().block_on(async {
        for _ in 0..50 {
            match counter.next().await {
                Ok(next) => return Ok(next),
                Err(error) if error.kind() == ErrorKind::Unavailable => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(error) => return Err(error),
            }
        }
        Err(Error::new(ErrorKind::Unavailable, "never reconnected"))
    });
    assert_eq!(next, Ok(1));
}
