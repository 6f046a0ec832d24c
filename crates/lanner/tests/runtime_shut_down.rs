//! A connection outlives the runtime it was made on (a client kept across runtimes, as a
//! test harness or a library with short-lived runtimes does), and callers run elsewhere
//! (other runtimes, plain threads with `block_on`). The connection is served by its
//! runtime's tasks: once that runtime shuts down, the connection fails with a clear error,
//! objects it held are released, one-way calls queued before still arrive, and a proxy
//! made from a URL connects again on the runtime of its next call. A call used to wait
//! for ever there, or panic making its deadline's timer on the runtime that was gone; a
//! reconnect from a plain thread panicked.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use lanner::{Client, ConnectionOptions, Error, ErrorKind, ObjRef, Object, Proxy, Server};

mod common;
use common::*;

#[lanner::interface]
trait Probe {
    async fn next(&self) -> Result<u64, Error>;
    /// Answers after `millis`.
    async fn sleep_ms(&self, millis: u64) -> Result<u64, Error>;
    #[oneway]
    async fn add(&self, n: u64) -> Result<(), Error>;
    async fn total(&self) -> Result<u64, Error>;
    /// Keeps `listener`.
    async fn subscribe(&self, listener: ObjRef<ListenerProxy>) -> Result<(), Error>;
    /// Calls the kept listener.
    async fn ring(&self, value: u64) -> Result<u64, Error>;
    /// A counter object, handed out (counted in `live`).
    async fn make(&self) -> Result<ObjRef<ListenerProxy>, Error>;
}

#[lanner::interface]
trait Listener {
    async fn notify(&self, value: u64) -> Result<u64, Error>;
}

#[derive(Default)]
struct ProbeImpl {
    count: AtomicU64,
    total: Arc<AtomicU64>,
    listener: tokio::sync::Mutex<Option<ListenerProxy>>,
    live: Arc<AtomicI64>,
}

impl Probe for ProbeImpl {
    async fn next(&self) -> Result<u64, Error> {
        Ok(self.count.fetch_add(1, Ordering::SeqCst) + 1)
    }
    async fn sleep_ms(&self, millis: u64) -> Result<u64, Error> {
        tokio::time::sleep(Duration::from_millis(millis)).await;
        Ok(millis)
    }
    async fn add(&self, n: u64) -> Result<(), Error> {
        self.total.fetch_add(n, Ordering::SeqCst);
        Ok(())
    }
    async fn total(&self) -> Result<u64, Error> {
        Ok(self.total.load(Ordering::SeqCst))
    }
    async fn subscribe(&self, listener: ObjRef<ListenerProxy>) -> Result<(), Error> {
        *self.listener.lock().await = Some(listener.into_proxy()?);
        Ok(())
    }
    async fn ring(&self, value: u64) -> Result<u64, Error> {
        let listener = self.listener.lock().await.clone();
        match listener {
            Some(listener) => listener.notify(value).await,
            None => Err(Error::new(ErrorKind::NotFound, "no listener")),
        }
    }
    async fn make(&self) -> Result<ObjRef<ListenerProxy>, Error> {
        Ok(ObjRef::new(Object::new(ListenerStub::new(Arc::new(
            Counted::new(&self.live),
        )))))
    }
}

/// A listener counted in `live` while it exists.
struct Counted {
    live: Arc<AtomicI64>,
    heard: AtomicU64,
}

impl Counted {
    fn new(live: &Arc<AtomicI64>) -> Counted {
        live.fetch_add(1, Ordering::SeqCst);
        Counted {
            live: live.clone(),
            heard: AtomicU64::new(0),
        }
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.live.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Listener for Counted {
    async fn notify(&self, value: u64) -> Result<u64, Error> {
        self.heard.fetch_add(value, Ordering::SeqCst);
        Ok(value)
    }
}

fn endpoint(transport: &str, tag: &str) -> String {
    let name = format!("lanner-shut-down-{tag}-{}", std::process::id());
    match transport {
        "shm" => format!("shm://{name}"),
        _ => format!("unix://{}", std::env::temp_dir().join(name).display()),
    }
}

fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn multi_thread(workers: usize) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()
        .unwrap()
}

/// A server of a fresh `ProbeImpl` on its own thread; its total and live counts.
fn serve_probe(endpoint: String) -> (ServerThread, Arc<AtomicU64>, Arc<AtomicI64>) {
    let total = Arc::new(AtomicU64::new(0));
    let live = Arc::new(AtomicI64::new(0));
    let (t, l) = (total.clone(), live.clone());
    let server = ServerThread::start(endpoint, move || {
        Object::new(ProbeStub::new(Arc::new(ProbeImpl {
            total: t,
            live: l,
            ..ProbeImpl::default()
        })))
    });
    (server, total, live)
}

/// Runs `f` on a thread of its own, and its result if it ends within `limit` (Err: it
/// panicked, with the message; None: it did not end in time — the thread is left behind).
fn bounded<T: Send + 'static>(
    limit: Duration,
    f: impl FnOnce() -> T + Send + 'static,
) -> Option<Result<T, String>> {
    let (done, result) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).map_err(|panic| {
            panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default()
        });
        let _ = done.send(outcome);
    });
    result.recv_timeout(limit).ok()
}

/// Waits (bounded) until `value()` is `want`; the last value seen.
fn settle<T: PartialEq + Copy>(want: T, limit: Duration, value: impl Fn() -> T) -> T {
    let until = Instant::now() + limit;
    loop {
        let now = value();
        if now == want || Instant::now() >= until {
            return now;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

// ---------------------------------------------------------------------------------------
// Deadlines timed on the caller's runtime.

/// A proxy connected on a runtime that runs (multi-thread), called with a deadline from
/// a thread that runs a runtime without timers (a runtime built for I/O only): the
/// deadline is timed on the connection's runtime while it runs. Timed on the caller's,
/// it panicked ("timers are disabled").
#[test]
fn a_deadline_works_for_a_caller_on_a_runtime_without_timers() {
    let _watchdog = watchdog(
        "a_deadline_works_for_a_caller_on_a_runtime_without_timers",
        Duration::from_secs(60),
    );
    let (server, _, _) = serve_probe(endpoint("unix", "no-timers"));
    let home = multi_thread(1);
    let probe: ProbeProxy = home.block_on(Client::new().connect(&server.url)).unwrap();
    assert_eq!(home.block_on(probe.next()), Ok(1));
    let probe = probe.with_timeout(Duration::from_millis(200));
    let outcome = bounded(Duration::from_secs(10), move || {
        let io_only = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .build()
            .unwrap();
        io_only
            .block_on(probe.sleep_ms(5_000))
            .map_err(|e| e.kind())
    });
    assert_eq!(
        outcome,
        Some(Ok(Err(ErrorKind::DeadlineExceeded))),
        "a caller on a runtime without timers"
    );
}

/// A proxy connected on a runtime that runs, called with a deadline by a thread that has
/// entered a current-thread runtime it does not drive (sync code under `enter()`, or
/// `futures::executor::block_on` inside a current-thread runtime's `block_on`). Timed on
/// that runtime, whose driver nobody runs, the deadline never came.
#[test]
fn a_deadline_works_for_a_caller_in_a_runtime_it_does_not_drive() {
    let _watchdog = watchdog(
        "a_deadline_works_for_a_caller_in_a_runtime_it_does_not_drive",
        Duration::from_secs(60),
    );
    let (server, _, _) = serve_probe(endpoint("unix", "not-driven"));
    let home = multi_thread(1);
    let probe: ProbeProxy = home.block_on(Client::new().connect(&server.url)).unwrap();
    assert_eq!(home.block_on(probe.next()), Ok(1));
    let probe = probe.with_timeout(Duration::from_millis(200));
    let outcome = bounded(Duration::from_secs(10), move || {
        let idle = current_thread();
        let _entered = idle.enter();
        block_on_plain_thread(probe.sleep_ms(5_000)).map_err(|e| e.kind())
    });
    assert_eq!(
        outcome,
        Some(Ok(Err(ErrorKind::DeadlineExceeded))),
        "a caller in an entered runtime it does not drive"
    );
    drop(home);
}

// ---------------------------------------------------------------------------------------
// Runtimes shut down in various ways.

#[derive(Clone, Copy, Debug)]
enum Ending {
    Drop,
    Background,
    Timeout,
}

fn end_runtime(runtime: tokio::runtime::Runtime, ending: Ending) {
    match ending {
        Ending::Drop => drop(runtime),
        Ending::Background => runtime.shutdown_background(),
        Ending::Timeout => runtime.shutdown_timeout(Duration::from_millis(100)),
    }
}

/// A server whose (multi-thread) runtime shuts down while clients on another runtime and
/// a plain thread have calls in flight: the calls end promptly with `Unavailable`, the
/// objects the server handed out over those connections are released, and so is the
/// callback a client handed the server.
#[test]
fn a_server_whose_runtime_ends_fails_its_clients_promptly_and_releases_objects() {
    let _watchdog = watchdog(
        "a_server_whose_runtime_ends_fails_its_clients_promptly_and_releases_objects",
        Duration::from_secs(120),
    );
    for transport in ["unix", "shm"] {
        for ending in [Ending::Drop, Ending::Background, Ending::Timeout] {
            let what = format!("{transport}, {ending:?}");
            let endpoint = endpoint(transport, &format!("server-ends-{ending:?}"));
            let live_server = Arc::new(AtomicI64::new(0));
            let served = multi_thread(1);
            let (server, listening) = served.block_on({
                let live = live_server.clone();
                async move {
                    let server = Server::new();
                    server.publish(
                        "obj",
                        Object::new(ProbeStub::new(Arc::new(ProbeImpl {
                            live,
                            ..ProbeImpl::default()
                        }))),
                    );
                    let listening = server.listen(&endpoint).await.unwrap();
                    (server, listening)
                }
            });
            let url = listening.endpoint().object_url("obj");
            let clients = multi_thread(1);
            let live_client = Arc::new(AtomicI64::new(0));
            let (probe, made, in_flight) = clients.block_on({
                let live_client = live_client.clone();
                async move {
                    let probe: ProbeProxy = Client::new().connect(&url).await.unwrap();
                    let mut made = Vec::new();
                    for _ in 0..10 {
                        made.push(probe.make().await.unwrap().into_proxy().unwrap());
                    }
                    let listener = ObjRef::new(Object::new(ListenerStub::new(Arc::new(
                        Counted::new(&live_client),
                    ))));
                    probe.subscribe(listener).await.unwrap();
                    assert_eq!(probe.ring(3).await, Ok(3));
                    let in_flight = [None, Some(Duration::from_secs(30))]
                        .into_iter()
                        .map(|deadline| {
                            let probe = match deadline {
                                Some(deadline) => probe.with_timeout(deadline),
                                None => probe.clone(),
                            };
                            tokio::spawn(async move {
                                let started = Instant::now();
                                (probe.sleep_ms(20_000).await, started.elapsed())
                            })
                        })
                        .collect::<Vec<_>>();
                    (probe, made, in_flight)
                }
            });
            let plain = {
                let probe = probe.with_timeout(Duration::from_secs(30));
                std::thread::spawn(move || {
                    let started = Instant::now();
                    (
                        block_on_plain_thread(probe.sleep_ms(20_000)),
                        started.elapsed(),
                    )
                })
            };
            assert_eq!(live_server.load(Ordering::SeqCst), 10, "{what}");
            std::thread::sleep(Duration::from_millis(100));
            let ended_at = Instant::now();
            end_runtime(served, ending);
            for task in in_flight {
                let (result, _) = clients
                    .block_on(async { tokio::time::timeout(Duration::from_secs(5), task).await })
                    .unwrap_or_else(|_| panic!("{what}: a call in flight did not end"))
                    .unwrap();
                assert_eq!(
                    result.map_err(|e| e.kind()),
                    Err(ErrorKind::Unavailable),
                    "{what}"
                );
            }
            let (result, _) = plain.join().unwrap();
            assert_eq!(
                result.map_err(|e| e.kind()),
                Err(ErrorKind::Unavailable),
                "{what}"
            );
            assert!(
                ended_at.elapsed() < Duration::from_secs(3),
                "{what}: took {:?}",
                ended_at.elapsed()
            );
            assert_eq!(
                settle(0, Duration::from_secs(5), || live_server
                    .load(Ordering::SeqCst)),
                0,
                "{what}: objects the server handed out were not released"
            );
            assert_eq!(
                settle(0, Duration::from_secs(5), || live_client
                    .load(Ordering::SeqCst)),
                0,
                "{what}: the callback the client handed over was not released"
            );
            // New calls fail at once too.
            let next = clients.block_on(async {
                tokio::time::timeout(Duration::from_secs(5), made[0].notify(1)).await
            });
            assert_eq!(
                next.map(|r| r.map_err(|e| e.kind())),
                Ok(Err(ErrorKind::Unavailable)),
                "{what}"
            );
            drop((server, listening));
            drop(made);
            drop(probe);
            end_runtime(clients, ending);
        }
    }
}

/// The client's runtime (the connection's) ends while callers on another runtime and on
/// plain threads wait for answers, with and without deadlines: they all end promptly
/// with `Unavailable`, nothing panics.
#[test]
fn calls_in_flight_from_elsewhere_end_when_the_connections_runtime_ends() {
    let _watchdog = watchdog(
        "calls_in_flight_from_elsewhere_end_when_the_connections_runtime_ends",
        Duration::from_secs(120),
    );
    for transport in ["unix", "shm"] {
        let (server, _, _) = serve_probe(endpoint(transport, "in-flight"));
        for ending in [Ending::Drop, Ending::Background, Ending::Timeout] {
            for spin in [Duration::ZERO, Duration::from_micros(50)] {
                let what = format!("{transport}, {ending:?}, spin {spin:?}");
                let home = multi_thread(1);
                let probe: ProbeProxy = home
                    .block_on(
                        Client::with_options(ConnectionOptions::default().with_spin(spin))
                            .connect(&server.url),
                    )
                    .unwrap();
                assert_eq!(home.block_on(probe.next()).map(|_| ()), Ok(()));
                let mut callers = Vec::new();
                for deadline in [None, Some(Duration::from_secs(30))] {
                    let probe = match deadline {
                        Some(deadline) => probe.with_timeout(deadline),
                        None => probe.clone(),
                    };
                    let on_plain = probe.clone();
                    callers.push(std::thread::spawn(move || {
                        block_on_plain_thread(on_plain.sleep_ms(20_000)).map_err(|e| e.kind())
                    }));
                    callers.push(std::thread::spawn(move || {
                        current_thread()
                            .block_on(probe.sleep_ms(20_000))
                            .map_err(|e| e.kind())
                    }));
                }
                std::thread::sleep(Duration::from_millis(100));
                let ended_at = Instant::now();
                end_runtime(home, ending);
                for caller in callers {
                    let outcome = bounded(Duration::from_secs(5), move || caller.join());
                    match outcome {
                        Some(Ok(Ok(result))) => {
                            assert_eq!(result, Err(ErrorKind::Unavailable), "{what}")
                        }
                        Some(Ok(Err(_))) => panic!("{what}: a caller panicked"),
                        _ => panic!("{what}: a caller did not end"),
                    }
                }
                assert!(ended_at.elapsed() < Duration::from_secs(3), "{what}");
                // And the URL proxy connects again on the caller's runtime.
                let next = current_thread().block_on(async {
                    tokio::time::timeout(Duration::from_secs(5), probe.next()).await
                });
                assert!(matches!(next, Ok(Ok(_))), "{what}: {next:?}");
            }
        }
    }
}

/// One-way calls made just before the client's runtime ends, with the proxy still held
/// (so the connection is not dropped, the reader's guard fails it): they all arrive,
/// lone ones and those deferred behind a call in flight.
#[test]
fn one_way_calls_queued_before_the_runtime_ends_all_arrive_with_the_proxy_held() {
    let _watchdog = watchdog(
        "one_way_calls_queued_before_the_runtime_ends_all_arrive_with_the_proxy_held",
        Duration::from_secs(120),
    );
    for transport in ["unix", "shm"] {
        for ending in [Ending::Drop, Ending::Background, Ending::Timeout] {
            for multi in [false, true] {
                for (behind_a_call, spin) in [
                    (false, Duration::from_micros(50)),
                    (true, Duration::from_micros(50)),
                    (true, Duration::from_secs(1)),
                ] {
                    let what = format!(
                        "{transport}, {ending:?}, multi {multi}, behind a call {behind_a_call}, spin {spin:?}"
                    );
                    let (server, total, _) = serve_probe(endpoint(transport, "one-way"));
                    let home = if multi {
                        multi_thread(1)
                    } else {
                        current_thread()
                    };
                    let options = ConnectionOptions::default().with_spin(spin);
                    let probe: ProbeProxy = home
                        .block_on(Client::with_options(options).connect(&server.url))
                        .unwrap();
                    // A call in flight from a plain thread (not dropped with the
                    // runtime, so nothing else writes on the connection meanwhile).
                    let in_flight = behind_a_call.then(|| {
                        let probe = probe.clone();
                        std::thread::spawn(move || block_on_plain_thread(probe.sleep_ms(3_000)))
                    });
                    home.block_on({
                        let probe = probe.clone();
                        async move {
                            // The reader wakes for the call in flight and spins (with a
                            // budget): the one-way calls below wait for its next batch.
                            tokio::time::sleep(Duration::from_millis(20)).await;
                            for n in 1..=200 {
                                probe.add(n).await.unwrap();
                            }
                        }
                    });
                    end_runtime(home, ending);
                    let expected = (1..=200).sum::<u64>();
                    assert_eq!(
                        settle(expected, Duration::from_secs(5), || total
                            .load(Ordering::SeqCst)),
                        expected,
                        "{what}"
                    );
                    let held = in_flight
                        .map(|caller| bounded(Duration::from_secs(5), move || caller.join()));
                    drop(held);
                    drop(probe);
                }
            }
        }
    }
}

/// A client hands the server a callback, then its runtime ends while it still holds its
/// proxies: the server's calls on the callback fail promptly, and the callback object is
/// released on the client's side.
#[test]
fn a_callback_of_a_client_whose_runtime_ended_fails_promptly_on_the_server() {
    let _watchdog = watchdog(
        "a_callback_of_a_client_whose_runtime_ended_fails_promptly_on_the_server",
        Duration::from_secs(60),
    );
    for transport in ["unix", "shm"] {
        let (server, _, _) = serve_probe(endpoint(transport, "callback"));
        let live = Arc::new(AtomicI64::new(0));
        let client = current_thread();
        let probe: ProbeProxy = client.block_on(Client::new().connect(&server.url)).unwrap();
        client.block_on(async {
            let listener = ObjRef::new(Object::new(ListenerStub::new(Arc::new(Counted::new(
                &live,
            )))));
            probe.subscribe(listener).await.unwrap();
            assert_eq!(probe.ring(7).await, Ok(7));
        });
        drop(client);
        assert_eq!(
            settle(0, Duration::from_secs(5), || live.load(Ordering::SeqCst)),
            0,
            "{transport}: the callback was not released"
        );
        // Another client asks the server to ring the dead client's callback.
        let other = current_thread();
        let rung = other.block_on(async {
            let other: ProbeProxy = Client::new().connect(&server.url).await.unwrap();
            let started = Instant::now();
            let rung = tokio::time::timeout(Duration::from_secs(5), other.ring(1)).await;
            (rung, started.elapsed())
        });
        assert!(
            matches!(&rung.0, Ok(Err(error)) if error.kind() == ErrorKind::Unavailable),
            "{transport}: {rung:?}"
        );
        drop(probe);
    }
}

/// An apartment object served on two runtimes (a listener on each): a call from a client
/// of the first holds the apartment (it waits), a call from a client of the second queues
/// behind it. The first runtime shuts down: its client's call fails promptly, the queued
/// call runs on the second runtime, and later calls are served.
#[test]
fn an_apartment_goes_on_when_the_runtime_of_the_call_it_ran_ends() {
    let _watchdog = watchdog(
        "an_apartment_goes_on_when_the_runtime_of_the_call_it_ran_ends",
        Duration::from_secs(60),
    );
    for ending in [Ending::Drop, Ending::Background, Ending::Timeout] {
        let what = format!("{ending:?}");
        let server = Server::new();
        server.publish(
            "obj",
            Object::new(ProbeStub::new(Arc::new(ProbeImpl::default()))).in_apartment(),
        );
        let first = multi_thread(1);
        let second = multi_thread(1);
        let listening_first = first
            .block_on(server.listen(&endpoint("unix", &format!("apt-a-{ending:?}"))))
            .unwrap();
        let listening_second = second
            .block_on(server.listen(&endpoint("unix", &format!("apt-b-{ending:?}"))))
            .unwrap();
        let clients = multi_thread(1);
        let (a, b): (ProbeProxy, ProbeProxy) = clients.block_on(async {
            (
                Client::new()
                    .connect(&listening_first.endpoint().object_url("obj"))
                    .await
                    .unwrap(),
                Client::new()
                    .connect(&listening_second.endpoint().object_url("obj"))
                    .await
                    .unwrap(),
            )
        });
        let holding = clients.spawn({
            let a = a.clone();
            async move { a.sleep_ms(10_000).await }
        });
        std::thread::sleep(Duration::from_millis(100));
        let queued = clients.spawn({
            let b = b.clone();
            async move { b.sleep_ms(10).await }
        });
        std::thread::sleep(Duration::from_millis(100));
        end_runtime(first, ending);
        let (held, queued) = clients.block_on(async {
            tokio::time::timeout(Duration::from_secs(5), async {
                (holding.await.unwrap(), queued.await.unwrap())
            })
            .await
            .unwrap_or_else(|_| panic!("{what}: the calls did not end"))
        });
        assert_eq!(
            held.map_err(|e| e.kind()),
            Err(ErrorKind::Unavailable),
            "{what}"
        );
        assert_eq!(queued, Ok(10), "{what}");
        let later = clients
            .block_on(async { tokio::time::timeout(Duration::from_secs(5), b.next()).await });
        assert!(matches!(later, Ok(Ok(_))), "{what}: {later:?}");
        drop((a, b, listening_first, listening_second, server));
        drop(clients);
        drop(second);
    }
}

/// A proxy connected by URL on a runtime that has since shut down, and the count its call
/// there answered.
fn probe_of_a_runtime_gone(server: &ServerThread, spin: Duration) -> (ProbeProxy, u64) {
    let first = current_thread();
    let options = ConnectionOptions::default().with_spin(spin);
    let probe: ProbeProxy = first
        .block_on(Client::with_options(options).connect(&server.url))
        .unwrap();
    let count = first.block_on(probe.next()).unwrap();
    (probe, count)
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
        let (server, _, _) = serve_probe(endpoint(transport, "reconnects"));
        for spin in [Duration::ZERO, Duration::from_micros(50)] {
            for deadline in [None, Some(Duration::from_secs(5))] {
                let (probe, count) = probe_of_a_runtime_gone(&server, spin);
                let probe = match deadline {
                    Some(deadline) => probe.with_timeout(deadline),
                    None => probe,
                };
                let second = current_thread();
                let next = second.block_on(async {
                    tokio::time::timeout(Duration::from_secs(10), probe.next()).await
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
    let (server, _, _) = serve_probe(endpoint("unix", "handed-over"));
    let first = current_thread();
    let listener = first.block_on(async {
        let probe: ProbeProxy = Client::new().connect(&server.url).await.unwrap();
        let listener = probe.make().await.unwrap().into_proxy().unwrap();
        assert_eq!(listener.notify(1).await, Ok(1));
        listener
    });
    drop(first);
    let second = current_thread();
    for listener in [
        listener.clone(),
        listener.with_timeout(Duration::from_secs(5)),
    ] {
        let started = std::time::Instant::now();
        let next = second
            .block_on(async {
                tokio::time::timeout(Duration::from_secs(10), listener.notify(2)).await
            })
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
    let server = serve_probe(endpoint("unix", "plain-thread")).0;
    let (probe, _) = probe_of_a_runtime_gone(&server, Duration::from_micros(50));
    for probe in [probe.clone(), probe.with_timeout(Duration::from_secs(5))] {
        let error = block_on_plain_thread(probe.next()).unwrap_err();
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
    let first = serve_probe(endpoint.clone()).0;
    let probe: ProbeProxy = runtime.block_on(Client::new().connect(&first.url)).unwrap();
    assert_eq!(runtime.block_on(probe.next()), Ok(1));
    drop(first);
    let _second = serve_probe(endpoint.clone()).0;
    // With a deadline: timed on the connection's runtime too.
    let probe = probe.with_timeout(Duration::from_secs(5));
    // The first call may find the old connection not yet known to be gone, and the
    // reconnect may back off a little.
    let mut answers = Vec::new();
    for _ in 0..50 {
        let next = block_on_plain_thread(probe.next());
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
    let first = serve_probe(endpoint.clone()).0;
    let old = current_thread();
    let probe: ProbeProxy = old.block_on(Client::new().connect(&first.url)).unwrap();
    assert_eq!(old.block_on(probe.next()), Ok(1));
    drop(first);
    // The old runtime runs until its connection is known to have ended, and a little
    // longer: its reader task ends too.
    let ended = old.block_on(async {
        for _ in 0..100 {
            if let Err(error) = probe.next().await {
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
    let probe = probe.with_timeout(Duration::from_secs(5));
    let error = block_on_plain_thread(probe.next()).unwrap_err();
    assert_error_contains(&error, ErrorKind::Unavailable, "outside a tokio runtime");

    let _second = serve_probe(endpoint.clone()).0;
    let next = current_thread().block_on(async {
        for _ in 0..50 {
            match probe.next().await {
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
