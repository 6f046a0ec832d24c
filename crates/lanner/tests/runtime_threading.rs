//! Threading models: a free-threaded object (the default) runs its calls concurrently; an
//! object in an apartment runs them one at a time, in the order they arrived.

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};

use futures_util::future::join_all;
use lanner::{Client, Error, Object, Proxy, Server};

mod child;

/// Records how calls overlap.
#[lanner::interface]
trait Recorder {
    /// Enters, waits until `peers` calls are inside at once (or gives up after a while),
    /// leaves; returns how many were inside at most.
    async fn gather(&self, peers: u32) -> Result<u32, Error>;
    /// Enters, yields to the runtime a few times, records `seq`, leaves.
    async fn record(&self, seq: u32) -> Result<(), Error>;
    /// Like `gather`, but, once inside, spins on its thread without yielding to the
    /// runtime (for at most two seconds): only calls running on other threads at the
    /// same time can come in while it waits. Returns whether `peers` calls were inside at
    /// once.
    async fn gather_spinning(&self, peers: u32) -> Result<bool, Error>;
}

#[derive(Default)]
struct Overlap {
    inside: AtomicU32,
    most: AtomicU32,
    order: Mutex<Vec<u32>>,
}

impl Overlap {
    fn enter(&self) -> u32 {
        let now = self.inside.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
        now
    }

    fn leave(&self) {
        self.inside.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Recorder for Overlap {
    async fn gather(&self, peers: u32) -> Result<u32, Error> {
        self.enter();
        // Bounded: in an apartment the others never come in while this one waits.
        for _ in 0..200 {
            if self.inside.load(Ordering::SeqCst) >= peers {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        self.leave();
        Ok(self.most.load(Ordering::SeqCst))
    }

    async fn gather_spinning(&self, peers: u32) -> Result<bool, Error> {
        // One yield before going in (see the test below): the call goes on in a task of
        // its own, and the worker passes through its scheduler, which lets the other
        // worker take the other connection's reader. From then on it never yields.
        tokio::task::yield_now().await;
        self.enter();
        let give_up = std::time::Instant::now() + std::time::Duration::from_secs(2);
        let mut met = false;
        // The most ever inside at once, not the number inside now: the last to come in
        // sees them all and may leave before the others look again.
        while !met && std::time::Instant::now() < give_up {
            met = self.most.load(Ordering::SeqCst) >= peers;
            std::hint::spin_loop();
        }
        self.leave();
        Ok(met)
    }

    async fn record(&self, seq: u32) -> Result<(), Error> {
        self.enter();
        for _ in 0..3 {
            tokio::task::yield_now().await;
        }
        self.order.lock().unwrap().push(seq);
        self.leave();
        Ok(())
    }
}

async fn serve(
    endpoint: &str,
    apartment: bool,
) -> (lanner::Listening, Arc<Overlap>, RecorderProxy) {
    let overlap = Arc::new(Overlap::default());
    let object = Object::new(RecorderStub::new(overlap.clone()));
    let object = if apartment {
        object.in_apartment()
    } else {
        object
    };
    let server = Server::new();
    server.publish("recorder", object);
    let listening = server.listen(endpoint).await.unwrap();
    let proxy = Client::new()
        .connect(&listening.endpoint().object_url("recorder"))
        .await
        .unwrap();
    (listening, overlap, proxy)
}

/// Truly in parallel, not only interleaved at awaits: two calls that spin without
/// yielding meet inside the object, each on one of the server's two worker threads (with
/// one worker, each waits alone and gives up). They come from two clients on two threads
/// of their own, on two connections: a connection's reader runs the calls it receives, so
/// a method that computes without awaiting holds back the calls behind it on the same
/// connection.
///
/// The method yields once before it spins. Without that, when both requests arrived
/// together the worker that took the first reader's request could hold the second
/// reader too: tokio puts a task woken on a worker in that worker's LIFO slot, which the
/// other worker does not steal, so the second call waited until the first gave up. That
/// happened about one run in fifteen on a quiet machine and one in two with another
/// process busy on one of the two cores (the calls never met in three tries). A call that
/// waits goes on in a task of its own, and the worker goes through its scheduler, which
/// wakes the idle worker to take what it can; the calls then meet every time (8 of 8
/// runs with the other process busy). The spin itself still never yields.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_free_threaded_object_runs_calls_in_parallel_on_the_servers_threads() {
    let server_runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let path = std::env::temp_dir().join(format!("lanner-parallel-{}.sock", std::process::id()));
    let endpoint = format!("unix://{}", path.display());
    let listening = server_runtime
        .spawn(async move {
            let server = Server::new();
            let overlap = Arc::new(Overlap::default());
            server.publish("recorder", Object::new(RecorderStub::new(overlap)));
            server.listen(&endpoint).await.unwrap()
        })
        .await
        .unwrap();
    let url = listening.endpoint().object_url("recorder");
    // Both connections are set up before either call starts (a handshake queued behind a
    // spinning call on the same worker would wait for it). A caller that waited alone
    // tries again, up to three times, in case the scheduler still leaves one reader
    // behind the other's call. Once the calls have met, the object remembers it and every
    // later call answers at once; with one worker they never meet, and every try gives
    // up.
    let ready = Arc::new(std::sync::Barrier::new(2));
    let callers: Vec<_> = (0..2)
        .map(|_| {
            let url = url.clone();
            let ready = ready.clone();
            std::thread::spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                runtime.block_on(async {
                    let recorder: RecorderProxy = Client::new().connect(&url).await.unwrap();
                    ready.wait();
                    for _ in 0..3 {
                        if recorder.gather_spinning(2).await? {
                            return Ok(true);
                        }
                    }
                    Ok::<_, Error>(false)
                })
            })
        })
        .collect();
    let results: Vec<_> = callers.into_iter().map(|c| c.join().unwrap()).collect();
    assert_eq!(results, [Ok(true), Ok(true)]);
    drop(listening);
    server_runtime.shutdown_background();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_free_threaded_object_runs_its_calls_concurrently() {
    let (_listening, overlap, recorder) = serve("mem://threading-free", false).await;
    // Four calls that each wait until all four are inside: only true concurrency lets
    // them all see four.
    let results = join_all((0..4).map(|_| recorder.gather(4))).await;
    assert!(results.iter().all(|r| *r == Ok(4)), "{results:?}");
    assert_eq!(overlap.most.load(Ordering::SeqCst), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_apartment_runs_calls_one_at_a_time_in_arrival_order() {
    let (_listening, overlap, recorder) = serve("mem://threading-apartment", true).await;
    // The same four calls never overlap.
    let results = join_all((0..4).map(|_| recorder.gather(4))).await;
    assert!(results.iter().all(|r| *r == Ok(1)), "{results:?}");

    // Calls sent in order run in that order, though each yields in the middle.
    let sent = 200;
    let results = join_all((0..sent).map(|seq| recorder.record(seq))).await;
    assert!(results.iter().all(Result::is_ok));
    assert_eq!(
        *overlap.order.lock().unwrap(),
        (0..sent).collect::<Vec<_>>()
    );
    assert_eq!(overlap.most.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_whose_callers_gave_up_while_queued_in_an_apartment_do_not_run() {
    use lanner::Proxy;

    let (_listening, overlap, recorder) = serve("mem://threading-abandoned", true).await;
    // Three calls hold the apartment for about 200 ms each (their peers never come in).
    let holding = tokio::spawn({
        let recorder = recorder.clone();
        async move { join_all((0..3).map(|_| recorder.gather(2))).await }
    });
    while overlap.inside.load(Ordering::SeqCst) == 0 {
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
    // Calls queued behind it whose callers stop waiting long before their turn.
    let impatient = recorder.with_timeout(std::time::Duration::from_millis(20));
    let results = join_all((0..5).map(|seq| impatient.record(seq))).await;
    for result in results {
        let error = result.unwrap_err();
        assert_eq!(error.kind(), lanner::ErrorKind::DeadlineExceeded, "{error}");
    }
    assert_eq!(holding.await.unwrap(), [Ok(1), Ok(1), Ok(1)]);
    // When their turn comes they are answered without running; the next call runs.
    assert_eq!(recorder.record(99).await, Ok(()));
    assert_eq!(*overlap.order.lock().unwrap(), [99]);
}

/// `server` serving `recorder` in an apartment and `free` free-threaded at `endpoint`,
/// both reached through one client (so over one connection), with one call holding the
/// apartment for a few hundred milliseconds (its peer never comes in).
struct HeldApartment {
    listening: lanner::Listening,
    overlap: Arc<Overlap>,
    recorder: RecorderProxy,
    free: RecorderProxy,
    holding: tokio::task::JoinHandle<Result<u32, Error>>,
}

async fn hold_an_apartment(server: Server, endpoint: &str) -> HeldApartment {
    let overlap = Arc::new(Overlap::default());
    server.publish(
        "recorder",
        Object::new(RecorderStub::new(overlap.clone())).in_apartment(),
    );
    server.publish(
        "free",
        Object::new(RecorderStub::new(Arc::new(Overlap::default()))),
    );
    let listening = server.listen(endpoint).await.unwrap();
    let client = Client::new();
    let recorder: RecorderProxy = client
        .connect(&listening.endpoint().object_url("recorder"))
        .await
        .unwrap();
    let free: RecorderProxy = client
        .connect(&listening.endpoint().object_url("free"))
        .await
        .unwrap();
    let holding = tokio::spawn({
        let recorder = recorder.clone();
        async move { recorder.gather(2).await }
    });
    while overlap.inside.load(Ordering::SeqCst) == 0 {
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
    HeldApartment {
        listening,
        overlap,
        recorder,
        free,
        holding,
    }
}

/// A call given up while it waits for its turn is answered at once, not when its turn
/// comes: until then its caller would not get its credit back, and a few such calls
/// behind a long one would use up the caller's window, holding up its calls to every
/// other object on the connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_given_up_while_queued_in_an_apartment_give_their_credits_back_at_once() {
    use lanner::Proxy;

    // One connection with four credits: one call holds the apartment, three more queue
    // behind it, and their callers give up.
    let server = Server::with_options(lanner::ConnectionOptions::default().with_credits(4));
    let HeldApartment {
        listening: _listening,
        overlap,
        recorder,
        free,
        holding,
    } = hold_an_apartment(server, "mem://threading-credits").await;
    let impatient = recorder.with_timeout(std::time::Duration::from_millis(20));
    for result in join_all((0..3).map(|seq| impatient.record(seq))).await {
        let error = result.unwrap_err();
        assert_eq!(error.kind(), lanner::ErrorKind::DeadlineExceeded, "{error}");
    }
    // Their credits are back: a call to the other object goes out and is answered while
    // the apartment is still held.
    let other = free.with_timeout(std::time::Duration::from_millis(100));
    assert_eq!(other.record(0).await, Ok(()));
    assert!(!holding.is_finished(), "the holding call ended first");
    assert_eq!(holding.await.unwrap(), Ok(1));
    // The calls given up never ran.
    assert!(overlap.order.lock().unwrap().is_empty());
}

/// A call the stub refuses (here, one the access policy denies) runs nothing of the
/// object: it is answered at once, not after the apartment's running call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_call_does_not_wait_for_its_apartment() {
    let server = Server::new().with_access(
        lanner::AccessPolicy::allow_by_default()
            .deny(lanner::Target::object("recorder").method("record"), ["*"]),
    );
    let HeldApartment {
        listening: _listening,
        recorder,
        holding,
        ..
    } = hold_an_apartment(server, "mem://threading-refused").await;
    let error = recorder.record(0).await.unwrap_err();
    assert_eq!(error.kind(), lanner::ErrorKind::PermissionDenied, "{error}");
    assert!(
        !holding.is_finished(),
        "the refusal waited for the running call"
    );
    assert_eq!(holding.await.unwrap(), Ok(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_apartment_is_shared_by_every_connection_and_interface() {
    let (listening, overlap, first) = serve("mem://threading-shared", true).await;
    let second: RecorderProxy = Client::new()
        .connect(&listening.endpoint().object_url("recorder"))
        .await
        .unwrap();
    let calls = (0..8).map(|i| {
        let proxy = if i % 2 == 0 {
            first.clone()
        } else {
            second.clone()
        };
        async move { proxy.gather(2).await }
    });
    let results = join_all(calls).await;
    assert!(results.iter().all(|r| *r == Ok(1)), "{results:?}");
    assert_eq!(overlap.most.load(Ordering::SeqCst), 1);
}

/// A server may serve connections on several runtimes (one per core, say), and an
/// apartment's task runs on the runtime of the connection whose call it runs. When that
/// runtime shuts down, the calls queued from connections on other runtimes still run:
/// they were stranded behind a task that would never run again, and the apartment stayed
/// busy for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_apartment_carries_on_when_the_runtime_running_it_shuts_down() {
    let overlap = Arc::new(Overlap::default());
    let server = Server::new();
    server.publish(
        "recorder",
        Object::new(RecorderStub::new(overlap.clone())).in_apartment(),
    );
    // One listener on a runtime of its own, which will be shut down; one on the test's.
    let doomed = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let doomed_listening = doomed
        .spawn({
            let server = server.clone();
            async move { server.listen("mem://threading-doomed").await.unwrap() }
        })
        .await
        .unwrap();
    let listening = server.listen("mem://threading-surviving").await.unwrap();
    let client = Client::new();
    let on_doomed: RecorderProxy = client
        .connect(&doomed_listening.endpoint().object_url("recorder"))
        .await
        .unwrap();
    let on_surviving: RecorderProxy = client
        .connect(&listening.endpoint().object_url("recorder"))
        .await
        .unwrap();
    // A call over the doomed runtime's connection holds the apartment (for at least 200
    // ms: its peer never comes in), so the apartment's task runs there.
    let holding = tokio::spawn({
        let recorder = on_doomed.clone();
        async move { recorder.gather(2).await }
    });
    while overlap.inside.load(Ordering::SeqCst) == 0 {
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
    // Queued behind it: another call over that connection, then one over the other.
    let doomed_queued = tokio::spawn({
        let recorder = on_doomed.clone();
        async move { recorder.record(1).await }
    });
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    let surviving = tokio::spawn({
        let recorder = on_surviving.clone();
        async move { recorder.record(2).await }
    });
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    assert!(
        overlap.order.lock().unwrap().is_empty() && !holding.is_finished(),
        "the apartment was held all along"
    );
    doomed.shutdown_background();
    let answer = tokio::time::timeout(std::time::Duration::from_secs(10), surviving)
        .await
        .expect("the call queued over the surviving runtime's connection was answered")
        .unwrap();
    assert_eq!(answer, Ok(()));
    // The doomed runtime's calls went with it.
    assert_eq!(*overlap.order.lock().unwrap(), [2]);
    // The apartment is idle again: a later call runs at once.
    assert_eq!(on_surviving.record(3).await, Ok(()));
    assert_eq!(*overlap.order.lock().unwrap(), [2, 3]);
    holding.abort();
    doomed_queued.abort();
}

/// A log whose state is not `Sync`: a plain `Vec` and a `Cell`, opened without a lock.
#[lanner::interface]
trait Journal {
    /// Appends `line` in two steps with awaits between them; returns the length after.
    async fn append(&self, line: u32) -> Result<u64, Error>;
    async fn lines(&self) -> Result<Vec<u32>, Error>;
}

#[derive(Default)]
struct JournalState {
    lines: Vec<u32>,
    /// Half-written entries: never seen by another call in an apartment.
    pending: std::cell::Cell<u32>,
}

#[derive(Default)]
struct UnlockedJournal(lanner::ApartmentCell<JournalState>);

impl Journal for UnlockedJournal {
    async fn append(&self, line: u32) -> Result<u64, Error> {
        self.0.with(|state| {
            assert_eq!(
                state.pending.get(),
                0,
                "another call saw a half-written entry"
            );
            state.pending.set(1);
        });
        for _ in 0..3 {
            tokio::task::yield_now().await;
        }
        Ok(self.0.with(|state| {
            state.pending.set(0);
            state.lines.push(line);
            state.lines.len() as u64
        }))
    }

    async fn lines(&self) -> Result<Vec<u32>, Error> {
        Ok(self.0.with(|state| state.lines.clone()))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_apartment_object_keeps_state_that_is_not_sync_without_locks() {
    let server = Server::new();
    let journal = Arc::new(UnlockedJournal::default());
    server.publish(
        "journal",
        Object::new(JournalStub::new(journal.clone())).in_apartment(),
    );
    // The same state published free-threaded cannot be opened.
    server.publish("unsafe", Object::new(JournalStub::new(journal)));
    let listening = server.listen("mem://threading-cell").await.unwrap();
    // Two connections, 50 concurrent calls each.
    let mut calls = Vec::new();
    for _ in 0..2 {
        let proxy: JournalProxy = Client::new()
            .connect(&listening.endpoint().object_url("journal"))
            .await
            .unwrap();
        for line in 0..50 {
            let proxy = proxy.clone();
            calls.push(tokio::spawn(async move { proxy.append(line).await }));
        }
    }
    let mut lengths: Vec<u64> = join_all(calls)
        .await
        .into_iter()
        .map(|joined| joined.unwrap().unwrap())
        .collect();
    lengths.sort_unstable();
    assert_eq!(lengths, (1..=100).collect::<Vec<u64>>());

    let proxy: JournalProxy = Client::new()
        .connect(&listening.endpoint().object_url("journal"))
        .await
        .unwrap();
    assert_eq!(proxy.lines().await.unwrap().len(), 100);
    let free: JournalProxy = Client::new()
        .connect(&listening.endpoint().object_url("unsafe"))
        .await
        .unwrap();
    let refused = free.lines().await.unwrap_err();
    assert_eq!(refused.kind(), lanner::ErrorKind::Internal, "{refused}");
    assert!(
        refused
            .message()
            .contains("reachable only from a call its apartment object runs"),
        "{refused}"
    );
}

/// State in an `ApartmentCell` passes to a new apartment once the one that owned it is
/// gone: the same implementation published again, in an apartment of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_apartment_cell_passes_to_a_new_apartment_once_its_owner_is_gone() {
    let server = Server::new();
    let journal = Arc::new(UnlockedJournal::default());
    server.publish(
        "first",
        Object::new(JournalStub::new(journal.clone())).in_apartment(),
    );
    // Another apartment that exists may not open it.
    server.publish(
        "rival",
        Object::new(JournalStub::new(journal.clone())).in_apartment(),
    );
    let listening = server.listen("mem://threading-cell-passes").await.unwrap();
    let connect = |name: &str| {
        let url = listening.endpoint().object_url(name);
        async move { Client::new().connect::<JournalProxy>(&url).await.unwrap() }
    };
    assert_eq!(connect("first").await.append(1).await, Ok(1));
    let rival = connect("rival").await.lines().await.unwrap_err();
    assert_eq!(rival.kind(), lanner::ErrorKind::Internal, "{rival}");
    assert!(rival.message().contains("another apartment"), "{rival}");
    // Both gone: unpublished, and their clients' connections closed.
    drop(server.unpublish("first"));
    drop(server.unpublish("rival"));
    server.publish(
        "second",
        Object::new(JournalStub::new(journal)).in_apartment(),
    );
    let second = connect("second").await;
    let mut appended = second.append(2).await;
    for _ in 0..100 {
        if appended.is_ok() {
            break;
        }
        // The old apartments' last holders (their connections' tasks) are going away.
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        appended = second.append(2).await;
    }
    assert_eq!(appended, Ok(2));
    assert_eq!(second.lines().await, Ok(vec![1, 2]));
}

/// An apartment object that calls its caller back.
#[lanner::interface]
trait Host {
    /// Calls `back` and returns once it has answered.
    async fn run(&self, back: lanner::ObjRef<PokeProxy>) -> Result<(), Error>;
    async fn get(&self) -> Result<u32, Error>;
}

/// A callback.
#[lanner::interface]
trait Poke {
    async fn poke(&self) -> Result<(), Error>;
}

struct Hosting;

impl Host for Hosting {
    async fn run(&self, back: lanner::ObjRef<PokeProxy>) -> Result<(), Error> {
        back.into_proxy()?.poke().await
    }

    async fn get(&self) -> Result<u32, Error> {
        Ok(7)
    }
}

/// A callback that calls back into the host.
struct CallsTheHost(HostProxy);

impl Poke for CallsTheHost {
    async fn poke(&self) -> Result<(), Error> {
        self.0.get().await.map(drop)
    }
}

/// An apartment method waiting for a callback that calls the same apartment waits behind
/// itself (no re-entrancy); once its caller gives up, the calls it waits on are given up
/// down the chain, and the apartment is free again, even with no deadline anywhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_back_into_a_waiting_apartment_ends_when_the_first_caller_gives_up() {
    let server = Server::new();
    server.publish(
        "host",
        Object::new(HostStub::new(Arc::new(Hosting))).in_apartment(),
    );
    let listening = server.listen("mem://threading-reentry").await.unwrap();
    let host: HostProxy = Client::new()
        .connect(&listening.endpoint().object_url("host"))
        .await
        .unwrap();
    let back = Object::new(PokeStub::new(Arc::new(CallsTheHost(host.clone()))));
    let stuck = tokio::time::timeout(
        std::time::Duration::from_millis(300),
        host.run(lanner::ObjRef::new(back)),
    )
    .await;
    assert!(stuck.is_err(), "the call back was served: {stuck:?}");
    // The caller gave up (its call dropped): the host's method is free again.
    use lanner::Proxy;
    let patient = host.with_timeout(std::time::Duration::from_secs(2));
    assert_eq!(patient.get().await, Ok(7));
}

/// The environment variable that makes [`child_queues_a_call_in_the_apartment`] run.
const CHILD_URL: &str = "LANNER_TEST_THREADING_CHILD";

/// The calls of a connection that ended while they waited for their apartment are
/// answered (to nobody) at once: they do not keep their place in the server's limit of
/// suspended calls, and their connection's memory, until their turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_of_a_dead_connection_waiting_in_an_apartment_let_go_at_once() {
    let path = std::env::temp_dir().join(format!("lanner-dead-queue-{}.sock", std::process::id()));
    let server = Server::new().with_max_suspended_calls(4);
    // The call holding the apartment is one suspended call.
    let HeldApartment {
        listening,
        free,
        holding,
        ..
    } = hold_an_apartment(server, &format!("unix://{}", path.display())).await;
    // Three processes each queue a call behind it and die without a word: the limit's
    // other three places.
    let url = listening.endpoint().object_url("recorder");
    for _ in 0..3 {
        let (mut dead, ready) = child::spawn(
            "child_queues_a_call_in_the_apartment",
            (CHILD_URL, &url),
            "sent",
        )
        .await;
        assert_eq!(ready.as_deref(), Some("sent"));
        dead.kill().unwrap();
        dead.wait().unwrap();
    }
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    // A call that suspends (it yields) finds a place while the apartment is still held.
    assert_eq!(free.record(0).await, Ok(()));
    assert!(!holding.is_finished(), "the holding call ended first");
    assert_eq!(holding.await.unwrap(), Ok(1));
    let _ = std::fs::remove_file(&path);
}

/// Not a test of its own: a process of
/// [`calls_of_a_dead_connection_waiting_in_an_apartment_let_go_at_once`]. Without its
/// environment variable it does nothing.
#[tokio::test]
async fn child_queues_a_call_in_the_apartment() {
    let Ok(url) = std::env::var(CHILD_URL) else {
        return;
    };
    let recorder: RecorderProxy = Client::new().connect(&url).await.unwrap();
    let mut call = std::pin::pin!(recorder.record(7));
    assert!(futures_util::poll!(call.as_mut()).is_pending());
    // Give the request time to be written and queued.
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    println!("sent");
    // Bounded: the parent kills this process long before.
    tokio::time::sleep(std::time::Duration::from_secs(60)).await;
}

/// An apartment object that keeps what it is handed.
#[lanner::interface]
trait Board {
    /// Holds the apartment for `millis`.
    async fn hold(&self, millis: u64) -> Result<(), Error>;
    /// Keeps `note`.
    async fn take(&self, note: lanner::ObjRef<NoteProxy>) -> Result<(), Error>;
}

/// What a [`Board`] is handed.
#[lanner::interface]
trait Note {
    async fn ping(&self) -> Result<(), Error>;
}

#[derive(Default)]
struct Pinboard {
    holding: AtomicU32,
    taken: AtomicU32,
    kept: Mutex<Vec<NoteProxy>>,
}

impl Board for Pinboard {
    async fn hold(&self, millis: u64) -> Result<(), Error> {
        self.holding.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(std::time::Duration::from_millis(millis)).await;
        Ok(())
    }

    async fn take(&self, note: lanner::ObjRef<NoteProxy>) -> Result<(), Error> {
        self.taken.fetch_add(1, Ordering::SeqCst);
        if let Ok(note) = note.into_proxy() {
            self.kept.lock().unwrap().push(note);
        }
        Ok(())
    }
}

struct Sticky;

impl Note for Sticky {
    async fn ping(&self) -> Result<(), Error> {
        Ok(())
    }
}

/// A call whose request hands over a reference runs even when its caller gave it up
/// (only its answer can tell the caller whether the reference was taken), but not once
/// its connection has ended while it waited for its apartment: no answer can be sent,
/// and running it would give the method a proxy of a dead connection, which would keep
/// that connection's memory for as long as the object keeps the proxy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_handing_over_a_reference_does_not_run_once_its_connection_ended() {
    let path = std::env::temp_dir().join(format!("lanner-dead-ref-{}.sock", std::process::id()));
    let board = Arc::new(Pinboard::default());
    let server = Server::new();
    server.publish(
        "board",
        Object::new(BoardStub::new(board.clone())).in_apartment(),
    );
    let listening = server
        .listen(&format!("unix://{}", path.display()))
        .await
        .unwrap();
    let url = listening.endpoint().object_url("board");
    let holder: BoardProxy = Client::new().connect(&url).await.unwrap();
    let holding = tokio::spawn({
        let holder = holder.clone();
        async move { holder.hold(1_000).await }
    });
    while board.holding.load(Ordering::SeqCst) == 0 {
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
    // Another client, on a runtime of its own, queues a call behind the holding one and
    // goes away with its runtime.
    let doomed = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let doomed_board: BoardProxy = std::thread::spawn({
        // Not from this test's runtime: a runtime cannot be driven from inside another.
        let (handle, url) = (doomed.handle().clone(), url.clone());
        move || handle.block_on(Client::new().connect::<BoardProxy>(&url))
    })
    .join()
    .unwrap()
    .unwrap();
    let note = lanner::ObjRef::new(Object::new(NoteStub::new(Arc::new(Sticky))));
    doomed.spawn({
        let board = doomed_board.clone();
        async move { board.take(note).await }
    });
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    std::thread::spawn(move || drop(doomed)).join().unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert!(!holding.is_finished(), "the holding call ended first");
    assert_eq!(holding.await.unwrap(), Ok(()));
    // Its turn has come and gone.
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let taken = board.taken.load(Ordering::SeqCst);
    let kept = board.kept.lock().unwrap().len();
    drop(doomed_board);
    let _ = std::fs::remove_file(&path);
    assert_eq!(
        (taken, kept),
        (0, 0),
        "the call of a connection that had ended ran (and kept a proxy of it)"
    );
}

/// An argument whose drop panics (a user type's bug, as a method's panic is).
/// Armed only as decoded (on the server).
#[derive(serde::Serialize, serde::Deserialize)]
struct Bomb {
    #[serde(skip, default = "armed")]
    armed: bool,
}

fn armed() -> bool {
    true
}

impl Drop for Bomb {
    fn drop(&mut self) {
        if self.armed && !std::thread::panicking() {
            panic!("bomb dropped");
        }
    }
}

#[lanner::interface]
trait Holder {
    /// Holds the apartment for `ms`.
    async fn hold(&self, ms: u64) -> Result<(), Error>;
    /// Takes `bomb` (its drop panics once the method is done with it).
    async fn take(&self, bomb: Bomb) -> Result<(), Error>;
    async fn ping(&self) -> Result<u32, Error>;
}

struct Holding;

impl Holder for Holding {
    async fn hold(&self, ms: u64) -> Result<(), Error> {
        tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
        Ok(())
    }

    async fn take(&self, bomb: Bomb) -> Result<(), Error> {
        std::mem::forget(bomb);
        Ok(())
    }

    async fn ping(&self) -> Result<u32, Error> {
        Ok(5)
    }
}

/// A call given up while queued in an apartment is answered without running, and its
/// arguments are dropped then: a drop that panics there is the call's failure, not the
/// connection's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_argument_whose_drop_panics_in_a_call_given_up_while_queued_fails_only_that_call() {
    let server = Server::new();
    server.publish(
        "holder",
        Object::new(HolderStub::new(Arc::new(Holding))).in_apartment(),
    );
    let listening = server.listen("mem://threading-bomb").await.unwrap();
    let url = listening.endpoint().object_url("holder");
    let holder: HolderProxy = Client::new().connect(&url).await.unwrap();
    let holding = tokio::spawn({
        let holder = holder.clone();
        async move { holder.hold(300).await }
    });
    tokio::time::sleep(std::time::Duration::from_millis(30)).await;
    let impatient = holder.with_timeout(std::time::Duration::from_millis(30));
    let error = impatient.take(Bomb { armed: false }).await.unwrap_err();
    assert_eq!(error.kind(), lanner::ErrorKind::DeadlineExceeded, "{error}");
    tokio::time::sleep(std::time::Duration::from_millis(30)).await;
    // The connection still serves.
    let patient = holder.with_timeout(std::time::Duration::from_secs(2));
    assert_eq!(holding.await.unwrap(), Ok(()));
    assert_eq!(patient.ping().await, Ok(5));
}
