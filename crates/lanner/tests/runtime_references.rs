//! Object references as values: a server hands out new objects, a client passes a
//! callback that the server calls back on the same connection, a reference handed back to
//! its owner is its own object again, and what cannot be handed is refused clearly.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use lanner::{ClassId, Client, Error, ErrorKind, ObjRef, Object, Proxy, Server};
use tokio::sync::Mutex;

mod child;
mod common;

/// A counter, handed out by the factory.
#[lanner::interface]
trait Counter {
    async fn increment(&self) -> Result<u64, Error>;
}

/// What a client hands the factory to hear about counters.
#[lanner::interface]
trait Listener {
    async fn notify(&self, value: u64) -> Result<(), Error>;
}

/// Makes counters and calls listeners back.
#[lanner::interface]
trait Factory {
    async fn counter(&self, start: u64) -> Result<ObjRef<CounterProxy>, Error>;
    /// Calls `listener` back `times` times before answering.
    async fn count_to(&self, listener: ObjRef<ListenerProxy>, times: u64) -> Result<u64, Error>;
    /// Keeps `listener` for [`Factory::ring`].
    async fn subscribe(&self, listener: ObjRef<ListenerProxy>) -> Result<(), Error>;
    /// Notifies the subscribed listener.
    async fn ring(&self, value: u64) -> Result<(), Error>;
    /// Reads a counter this factory made, handed back to it.
    async fn peek(&self, counter: ObjRef<CounterProxy>) -> Result<bool, Error>;
    /// Makes a counter, and answers with it after `millis` milliseconds.
    async fn counter_later(&self, millis: u64) -> Result<ObjRef<CounterProxy>, Error>;
    /// Returns once [`Factory::bell`] has been called (before or after).
    async fn wait_for_bell(&self) -> Result<(), Error>;
    /// Lets one [`Factory::wait_for_bell`] return.
    async fn bell(&self) -> Result<(), Error>;
}

struct CounterImpl(AtomicU64, Option<Arc<AtomicI64>>);

impl Drop for CounterImpl {
    fn drop(&mut self) {
        if let Some(live) = &self.1 {
            live.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

impl Counter for CounterImpl {
    async fn increment(&self) -> Result<u64, Error> {
        Ok(self.0.fetch_add(1, Ordering::Relaxed) + 1)
    }
}

#[derive(Default)]
struct FactoryImpl {
    subscriber: Mutex<Option<ListenerProxy>>,
    rung: tokio::sync::Notify,
    /// Counters alive now.
    live: Arc<AtomicI64>,
}

impl Factory for FactoryImpl {
    async fn counter(&self, start: u64) -> Result<ObjRef<CounterProxy>, Error> {
        self.live.fetch_add(1, Ordering::Relaxed);
        let counter = Arc::new(CounterImpl(AtomicU64::new(start), Some(self.live.clone())));
        Ok(ObjRef::new(Object::new(CounterStub::new(counter))))
    }

    async fn count_to(&self, listener: ObjRef<ListenerProxy>, times: u64) -> Result<u64, Error> {
        let listener = listener.into_proxy()?;
        for value in 1..=times {
            listener.notify(value).await?;
        }
        Ok(times)
    }

    async fn subscribe(&self, listener: ObjRef<ListenerProxy>) -> Result<(), Error> {
        *self.subscriber.lock().await = Some(listener.into_proxy()?);
        Ok(())
    }

    async fn ring(&self, value: u64) -> Result<(), Error> {
        let listener = self.subscriber.lock().await.clone();
        match listener {
            Some(listener) => listener.notify(value).await,
            None => Err(Error::new(ErrorKind::NotFound, "nobody subscribed")),
        }
    }

    async fn peek(&self, counter: ObjRef<CounterProxy>) -> Result<bool, Error> {
        Ok(counter.local().is_some())
    }

    async fn counter_later(&self, millis: u64) -> Result<ObjRef<CounterProxy>, Error> {
        let counter = self.counter(0).await;
        tokio::time::sleep(Duration::from_millis(millis)).await;
        counter
    }

    async fn wait_for_bell(&self) -> Result<(), Error> {
        self.rung.notified().await;
        Ok(())
    }

    async fn bell(&self) -> Result<(), Error> {
        self.rung.notify_one();
        Ok(())
    }
}

#[derive(Default)]
struct Heard(std::sync::Mutex<Vec<u64>>);

/// A listener whose method waits (once) before it records: served on a task of its own.
#[derive(Default)]
struct HeardLater(std::sync::Mutex<Vec<u64>>);

impl Listener for HeardLater {
    async fn notify(&self, value: u64) -> Result<(), Error> {
        tokio::task::yield_now().await;
        self.0.lock().unwrap().push(value);
        Ok(())
    }
}

impl Listener for Heard {
    async fn notify(&self, value: u64) -> Result<(), Error> {
        self.0.lock().unwrap().push(value);
        Ok(())
    }
}

async fn serve_factory(endpoint: &str) -> (lanner::Listening, FactoryProxy) {
    let (listening, factory, _) = serve_counted(endpoint).await;
    (listening, factory)
}

/// Like [`serve_factory`], also returning the count of the factory's counters alive.
async fn serve_counted(endpoint: &str) -> (lanner::Listening, FactoryProxy, Arc<AtomicI64>) {
    let implementation = Arc::new(FactoryImpl::default());
    let live = implementation.live.clone();
    let server = Server::new();
    server.publish("factory", Object::new(FactoryStub::new(implementation)));
    let listening = server.listen(endpoint).await.unwrap();
    let proxy = Client::new()
        .connect(&listening.endpoint().object_url("factory"))
        .await
        .unwrap();
    (listening, proxy, live)
}

/// Waits (a few seconds at most) until no counter is alive; returns how many still are.
async fn settle(live: &AtomicI64) -> i64 {
    settle_at(live, 0).await
}

/// Waits (a few seconds at most) until `live` is `count`; returns what it is then.
async fn settle_at(live: &AtomicI64, count: i64) -> i64 {
    for _ in 0..500 {
        if live.load(Ordering::Relaxed) == count {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    live.load(Ordering::Relaxed)
}

/// Waits until `count` counters are alive.
async fn until_live(live: &AtomicI64, count: i64) {
    while live.load(Ordering::Relaxed) != count {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

fn unix(tag: &str) -> String {
    let path = std::env::temp_dir().join(format!("lanner-refs-{tag}-{}.sock", std::process::id()));
    format!("unix://{}", path.display())
}

#[tokio::test]
async fn a_server_hands_out_new_objects() {
    let (_listening, factory) = serve_factory(&unix("new")).await;
    let five = factory.counter(5).await.unwrap().into_proxy().unwrap();
    let ten = factory.counter(10).await.unwrap().into_proxy().unwrap();
    assert_eq!(five.increment().await, Ok(6));
    assert_eq!(five.increment().await, Ok(7));
    assert_eq!(ten.increment().await, Ok(11));
    // Both live behind the factory's connection: no new connection was opened.
    assert_eq!(five.object().peer(), factory.object().peer());
}

#[tokio::test]
async fn a_callback_is_called_back_on_the_same_connection_during_and_after_the_call() {
    let (_listening, factory) = serve_factory(&unix("callback")).await;
    let heard = Arc::new(Heard::default());
    let listener = ObjRef::new(Object::new(ListenerStub::new(heard.clone())));
    // During the call: the server calls back three times before answering.
    assert_eq!(factory.count_to(listener.clone(), 3).await, Ok(3));
    assert_eq!(*heard.0.lock().unwrap(), vec![1, 2, 3]);
    // After it: the server keeps the reference and calls whenever it likes.
    factory.subscribe(listener).await.unwrap();
    factory.ring(42).await.unwrap();
    factory.ring(43).await.unwrap();
    assert_eq!(*heard.0.lock().unwrap(), vec![1, 2, 3, 42, 43]);
}

/// A factory served on a thread and runtime of its own (see `common::ServerThread`).
struct FactoryThread(common::ServerThread);

impl FactoryThread {
    fn start(tag: &str) -> FactoryThread {
        FactoryThread(common::ServerThread::start(unix(tag), || {
            Object::new(FactoryStub::new(Arc::new(FactoryImpl::default())))
        }))
    }

    /// Connects to the factory with a client of `options`.
    async fn connect(&self, options: lanner::ConnectionOptions) -> FactoryProxy {
        Client::with_options(options)
            .connect(&self.0.url)
            .await
            .unwrap()
    }
}

/// A caller spinning for its own reply (here with a spin budget of an hour) takes the
/// server's callbacks as they arrive; one whose method waits goes on in a task that can
/// run only on the caller's thread (a current-thread runtime). The caller must let it run
/// at once, or the server, which awaits the callback before it answers, does not answer
/// until the spin ends.
#[tokio::test]
async fn a_spinning_caller_lets_a_callback_that_waits_run() {
    let _watchdog = common::watchdog(
        "a_spinning_caller_lets_a_callback_that_waits_run",
        Duration::from_secs(60),
    );
    let server = FactoryThread::start("spin-callback");
    let factory = server
        .connect(lanner::ConnectionOptions::default().with_spin(Duration::from_secs(3600)))
        .await;
    let heard = Arc::new(HeardLater::default());
    let listener = ObjRef::new(Object::new(ListenerStub::new(heard.clone())));
    for round in 1..=20u64 {
        assert_eq!(
            factory.count_to(listener.clone(), 3).await,
            Ok(3),
            "round {round}"
        );
    }
    assert_eq!(heard.0.lock().unwrap().len(), 60);
}

/// Makes `rounds` calls of `count_to(listener, 3)` from this thread, which runs no
/// runtime (`block_on_plain_thread`), to a factory on a thread of its own; the caller spins
/// for its replies (a budget of an hour), so it receives every callback itself. Each call
/// must count to 3.
fn count_to_from_a_plain_thread(what: &'static str, listener: Object, rounds: u64) {
    let _watchdog = common::watchdog(what, Duration::from_secs(60));
    let server = FactoryThread::start(what);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let factory =
        runtime
            .block_on(server.connect(
                lanner::ConnectionOptions::default().with_spin(Duration::from_secs(3600)),
            ));
    let listener = ObjRef::new(listener);
    for round in 1..=rounds {
        let counted = common::block_on_plain_thread(factory.count_to(listener.clone(), 3));
        assert_eq!(counted, Ok(3), "{what}, round {round}");
    }
}

/// A callback that waits, received by a caller spinning for its reply where no runtime
/// runs (`block_on` on a plain thread), goes on as a task of its connection's runtime.
#[test]
fn a_callback_that_waits_goes_on_on_its_connections_runtime_whatever_polls_the_caller() {
    let heard = Arc::new(HeardLater::default());
    count_to_from_a_plain_thread(
        "spin-callback-no-runtime",
        Object::new(ListenerStub::new(heard.clone())),
        20,
    );
    assert_eq!(heard.0.lock().unwrap().len(), 60);
}

/// A listener whose method sleeps on a tokio timer before it records: its first poll
/// needs a runtime entered.
#[derive(Default)]
struct HeardAfterSleep(std::sync::Mutex<Vec<u64>>);

impl Listener for HeardAfterSleep {
    async fn notify(&self, value: u64) -> Result<(), Error> {
        tokio::time::sleep(Duration::from_millis(1)).await;
        self.0.lock().unwrap().push(value);
        Ok(())
    }
}

/// A callback received by a caller spinning for its reply where no runtime runs is polled
/// first inside its connection's runtime: a method that starts a timer (or spawns, or
/// makes a call with a deadline) on its first poll works there too.
#[test]
fn a_callback_received_where_no_runtime_runs_is_first_polled_in_its_connections_runtime() {
    let heard = Arc::new(HeardAfterSleep::default());
    count_to_from_a_plain_thread(
        "spin-callback-timer",
        Object::new(ListenerStub::new(heard.clone())),
        5,
    );
    assert_eq!(heard.0.lock().unwrap().len(), 15);
}

/// A caller spinning for its own reply (busy-poll mode) whose answer waits for another
/// task of its thread, which Lanner knows nothing of (here, a call on another
/// connection): the spin ends after a while, however long the budget, and that task runs.
#[tokio::test]
async fn a_busy_polling_caller_lets_the_other_tasks_of_its_thread_run() {
    let _watchdog = common::watchdog(
        "a_busy_polling_caller_lets_the_other_tasks_of_its_thread_run",
        Duration::from_secs(60),
    );
    let server = FactoryThread::start("busy-other-task");
    let waiter = server
        .connect(lanner::ConnectionOptions::default().busy_poll())
        .await;
    let ringer = server.connect(lanner::ConnectionOptions::default()).await;
    for _ in 0..3 {
        let ringing = tokio::spawn({
            let ringer = ringer.clone();
            async move {
                tokio::time::sleep(Duration::from_millis(5)).await;
                ringer.bell().await
            }
        });
        assert_eq!(waiter.wait_for_bell().await, Ok(()));
        assert_eq!(ringing.await.unwrap(), Ok(()));
    }
}

#[tokio::test]
async fn a_reference_handed_back_to_its_owner_is_its_own_object() {
    let (_listening, factory) = serve_factory("mem://refs-back").await;
    let counter = factory.counter(1).await.unwrap();
    assert!(counter.proxy().is_some());
    assert_eq!(factory.peek(counter).await, Ok(true));
}

#[tokio::test]
async fn what_cannot_be_handed_is_refused_before_sending() {
    let (_listening, factory) = serve_factory("mem://refs-refused").await;
    // An object that does not implement the interface the parameter names.
    let counter_object = Object::new(CounterStub::new(Arc::new(CounterImpl(
        AtomicU64::new(0),
        None,
    ))));
    let error = factory
        .subscribe(ObjRef::new(counter_object))
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InvalidArgument, "{error}");
    assert!(error.message().contains("does not implement"), "{error}");
    assert!(!error.may_have_executed());

    // A reference made locally is no proxy.
    let local: ObjRef<CounterProxy> = ObjRef::new(Object::new(CounterStub::new(Arc::new(
        CounterImpl(AtomicU64::new(0), None),
    ))));
    assert_eq!(
        local.into_proxy().unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
}

// Two workers: client and server each spin on their own thread, as across processes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_references_release_their_objects_in_batches() {
    let (_listening, factory, live) = serve_counted(&unix("cycles")).await;
    const CYCLES: u64 = 100_000;
    for i in 0..CYCLES {
        let counter = factory.counter(i).await.unwrap().into_proxy().unwrap();
        if i % 1000 == 0 {
            assert_eq!(counter.increment().await, Ok(i + 1));
        }
    }
    assert_eq!(settle(&live).await, 0, "counters leaked");

    // Many references dropped at once go out in a few messages, not one each.
    let before = factory.object().traffic();
    let mut counters = Vec::new();
    for i in 0..1000 {
        counters.push(factory.counter(i).await.unwrap());
    }
    assert_eq!(live.load(Ordering::Relaxed), 1000);
    drop(counters);
    assert_eq!(settle(&live).await, 0);
    let sent = factory.object().traffic().messages_sent - before.messages_sent;
    assert!(
        sent < 1000 + 10,
        "{sent} messages for 1000 calls and their releases"
    );
}

#[tokio::test]
async fn references_in_the_answer_to_an_abandoned_call_are_released() {
    let (_listening, factory, live) = serve_counted(&unix("abandoned")).await;
    // The caller gives up once the counter exists, before the answer carrying it comes.
    let call = factory.counter_later(200);
    let gave_up = tokio::time::timeout(Duration::from_secs(5), async {
        tokio::pin!(call);
        tokio::select! {
            _ = &mut call => panic!("the answer came before the counter was seen"),
            _ = until_live(&live, 1) => {}
        }
    })
    .await;
    assert!(gave_up.is_ok(), "the factory made no counter");
    // The answer still arrives; decoding and dropping it releases the counter.
    assert_eq!(
        settle(&live).await,
        0,
        "the abandoned call's counter leaked"
    );

    // The same when the call's deadline passes.
    let hurried = factory.with_timeout(Duration::from_millis(50));
    let error = hurried.counter_later(200).await.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::DeadlineExceeded);
    let made = tokio::time::timeout(Duration::from_secs(5), until_live(&live, 1)).await;
    assert!(made.is_ok(), "the factory made no counter");
    assert_eq!(settle(&live).await, 0, "the late answer's counter leaked");

    // The connection still works, and what is held stays held.
    let kept = factory.counter(7).await.unwrap().into_proxy().unwrap();
    assert_eq!(kept.increment().await, Ok(8));
    assert_eq!(live.load(Ordering::Relaxed), 1);
}

/// A listener that counts itself while alive.
struct CountedListener(Arc<AtomicI64>);

impl Drop for CountedListener {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Listener for CountedListener {
    async fn notify(&self, _value: u64) -> Result<(), Error> {
        Ok(())
    }
}

#[tokio::test]
async fn references_among_the_arguments_of_a_refused_call_are_released() {
    let server = Server::new().with_access(
        lanner::AccessPolicy::allow_by_default()
            .deny(lanner::Target::object("factory").method("subscribe"), ["*"]),
    );
    server.publish(
        "factory",
        Object::new(FactoryStub::new(Arc::new(FactoryImpl::default()))),
    );
    let listening = server.listen(&unix("refused")).await.unwrap();
    let factory: FactoryProxy = Client::new()
        .connect(&listening.endpoint().object_url("factory"))
        .await
        .unwrap();
    let live = Arc::new(AtomicI64::new(1));
    let listener = Object::new(ListenerStub::new(Arc::new(CountedListener(live.clone()))));

    let error = factory.subscribe(ObjRef::new(listener)).await.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::PermissionDenied, "{error}");
    // The server decoded the arguments before refusing, and dropping them released the
    // listener it was handed: nothing else holds it.
    assert_eq!(settle(&live).await, 0, "the refused call's listener leaked");
    assert_eq!(factory.counter(1).await.map(|_| ()), Ok(()));
}

#[tokio::test]
async fn a_client_that_dies_releases_everything_it_held() {
    let (_listening, factory, live) = serve_counted(&unix("death")).await;
    let url = factory.object().peer().to_owned();
    drop(factory);
    let live_there = live.clone();
    // A client on a runtime of its own, holding counters when its runtime goes away: no
    // RELEASE is ever sent, only the connection ends (with the runtime that served it,
    // while the proxies are still held).
    let held = tokio::task::spawn_blocking(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let counters = runtime.block_on(async {
            let factory: FactoryProxy = Client::new()
                .connect(&format!("{url}/factory"))
                .await
                .unwrap();
            let mut counters = Vec::new();
            for i in 0..100 {
                counters.push(factory.counter(i).await.unwrap().into_proxy().unwrap());
            }
            counters
        });
        assert_eq!(live_there.load(Ordering::Relaxed), 100);
        drop(runtime);
        counters
    })
    .await
    .unwrap();
    assert_eq!(settle(&live).await, 0, "the dead client's counters leaked");
    drop(held);
}

const COUNTER_CLASS: ClassId = ClassId::named("lanner.tests.Counter");

#[tokio::test]
async fn a_client_creates_instances_of_a_registered_class() {
    let live = Arc::new(AtomicI64::new(0));
    let server = Server::new();
    let counted = live.clone();
    server.register_class(COUNTER_CLASS, move || {
        counted.fetch_add(1, Ordering::Relaxed);
        let counter = CounterImpl(AtomicU64::new(100), Some(counted.clone()));
        Object::new(CounterStub::new(Arc::new(counter)))
    });
    let listening = server.listen("mem://refs-classes").await.unwrap();
    let endpoint = listening.endpoint().to_string();
    let client = Client::new();

    let first: CounterProxy = client.create(&endpoint, COUNTER_CLASS).await.unwrap();
    let second: CounterProxy = client.create(&endpoint, COUNTER_CLASS).await.unwrap();
    assert_eq!(first.increment().await, Ok(101));
    assert_eq!(first.increment().await, Ok(102));
    assert_eq!(second.increment().await, Ok(101));
    assert_eq!(live.load(Ordering::Relaxed), 2);
    // An instance lives as long as references to it.
    drop(first);
    drop(second);
    assert_eq!(settle(&live).await, 0);

    let error = client
        .create::<CounterProxy>(&endpoint, ClassId::named("nobody"))
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::NotFound, "{error}");
    assert!(error.message().contains("no class"), "{error}");
    let error = client
        .create::<ListenerProxy>(&endpoint, COUNTER_CLASS)
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Unimplemented, "{error}");
    assert!(error.message().contains("do not implement"), "{error}");
    assert_eq!(
        settle(&live).await,
        0,
        "the refused instance was not dropped"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_instance_of_an_abandoned_activation_is_released() {
    let live = Arc::new(AtomicI64::new(0));
    let made = Arc::new(AtomicI64::new(0));
    let server = Server::new();
    let counted = live.clone();
    let making = made.clone();
    server.register_class(COUNTER_CLASS, move || {
        // Slow: the caller gives up first, and the answer comes after.
        std::thread::sleep(Duration::from_millis(200));
        making.fetch_add(1, Ordering::Relaxed);
        counted.fetch_add(1, Ordering::Relaxed);
        let counter = CounterImpl(AtomicU64::new(0), Some(counted.clone()));
        Object::new(CounterStub::new(Arc::new(counter)))
    });
    let listening = server.listen("mem://refs-classes-abandoned").await.unwrap();
    let endpoint = listening.endpoint().to_string();
    let client = Client::new();
    let gave_up = tokio::time::timeout(
        Duration::from_millis(50),
        client.create::<CounterProxy>(&endpoint, COUNTER_CLASS),
    )
    .await;
    assert!(gave_up.is_err(), "the activation finished in time");
    // (Counted apart from those alive: the instance may come and go between two looks.)
    let instance_made = tokio::time::timeout(Duration::from_secs(5), until_live(&made, 1)).await;
    assert!(instance_made.is_ok(), "the factory made no instance");
    assert_eq!(
        settle(&live).await,
        0,
        "the abandoned activation's instance leaked"
    );
    // The connection still creates instances.
    let counter: CounterProxy = client.create(&endpoint, COUNTER_CLASS).await.unwrap();
    assert_eq!(counter.increment().await, Ok(1));
}

/// Registers [`COUNTER_CLASS`] on `server` with a factory that counts its runs in `made`.
fn register_counted_class(server: &Server, made: &Arc<AtomicI64>) {
    let counted = made.clone();
    server.register_class(COUNTER_CLASS, move || {
        counted.fetch_add(1, Ordering::Relaxed);
        Object::new(CounterStub::new(Arc::new(CounterImpl(
            AtomicU64::new(0),
            None,
        ))))
    });
}

#[tokio::test]
async fn an_activation_the_policy_refuses_never_runs_the_factory() {
    let made = Arc::new(AtomicI64::new(0));
    let server = Server::new().with_access(lanner::AccessPolicy::allow_by_default().deny(
        lanner::Target::everything().interface::<CounterProxy>(),
        ["*"],
    ));
    register_counted_class(&server, &made);
    let listening = server.listen("mem://refs-classes-denied").await.unwrap();
    let error = Client::new()
        .create::<CounterProxy>(&listening.endpoint().to_string(), COUNTER_CLASS)
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::PermissionDenied, "{error}");
    assert!(error.message().contains("may not use interface"), "{error}");
    assert_eq!(made.load(Ordering::Relaxed), 0, "the factory ran");
}

#[tokio::test]
async fn an_activation_for_an_interface_the_class_lacks_runs_the_factory_once_at_most() {
    let made = Arc::new(AtomicI64::new(0));
    let server = Server::new();
    register_counted_class(&server, &made);
    let listening = server.listen("mem://refs-classes-lacking").await.unwrap();
    let endpoint = listening.endpoint().to_string();
    let client = Client::new();
    // Until an instance is made, what the class implements is unknown: the first request
    // makes one, and learns it.
    for _ in 0..3 {
        let error = client
            .create::<FactoryProxy>(&endpoint, COUNTER_CLASS)
            .await
            .unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Unimplemented, "{error}");
        assert!(error.message().contains("do not implement"), "{error}");
    }
    assert_eq!(made.load(Ordering::Relaxed), 1);
    let counter = client
        .create::<CounterProxy>(&endpoint, COUNTER_CLASS)
        .await
        .unwrap();
    assert_eq!(counter.increment().await, Ok(1));
    assert_eq!(made.load(Ordering::Relaxed), 2);
}

#[tokio::test]
async fn a_reference_handed_back_stays_alive_until_its_call_is_made() {
    let (_listening, factory) = serve_factory("mem://refs-back-late").await;
    let counter = factory.counter(1).await.unwrap();
    // The call is built (its arguments encoded, the reference moved into it) long before
    // it is sent: the reference's release must not reach the server first.
    let call = factory.peek(counter);
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(call.await, Ok(true));
}

/// Gives back the reference it is given.
#[lanner::interface]
trait Mirror {
    async fn reflect(&self, counter: ObjRef<CounterProxy>) -> Result<ObjRef<CounterProxy>, Error>;
    /// Gives it back beside a value whose encoding panics.
    async fn reflect_badly(
        &self,
        counter: ObjRef<CounterProxy>,
    ) -> Result<(ObjRef<CounterProxy>, Bomb), Error>;
    /// A new counter of this server's.
    async fn counter(&self) -> Result<ObjRef<CounterProxy>, Error>;
    /// Takes a counter and a value.
    async fn take(&self, counter: ObjRef<CounterProxy>, bomb: Bomb) -> Result<(), Error>;
    /// Takes a counter and drops it.
    async fn ignore(&self, counter: ObjRef<CounterProxy>) -> Result<(), Error>;
}

/// A value whose encoding panics (a user's `Serialize` may).
#[derive(Debug, serde::Deserialize)]
struct Bomb;

impl serde::Serialize for Bomb {
    fn serialize<S: serde::Serializer>(&self, _: S) -> Result<S::Ok, S::Error> {
        panic!("the bomb went off")
    }
}

/// Counts its counters alive in `made`.
struct MirrorImpl {
    made: Arc<AtomicI64>,
}

impl Mirror for MirrorImpl {
    async fn reflect(&self, counter: ObjRef<CounterProxy>) -> Result<ObjRef<CounterProxy>, Error> {
        Ok(counter)
    }

    async fn reflect_badly(
        &self,
        counter: ObjRef<CounterProxy>,
    ) -> Result<(ObjRef<CounterProxy>, Bomb), Error> {
        Ok((counter, Bomb))
    }

    async fn counter(&self) -> Result<ObjRef<CounterProxy>, Error> {
        Ok(ObjRef::new(live_counter(&self.made)))
    }

    async fn take(&self, _counter: ObjRef<CounterProxy>, _bomb: Bomb) -> Result<(), Error> {
        Ok(())
    }

    async fn ignore(&self, _counter: ObjRef<CounterProxy>) -> Result<(), Error> {
        Ok(())
    }
}

/// A proxy for a [`Mirror`] served at `endpoint`, and a counter object counted in the
/// returned count while alive.
async fn mirror_and_counter(
    endpoint: &str,
) -> (lanner::Listening, MirrorProxy, Object, Arc<AtomicI64>) {
    let (listening, mirror, _) = serve_mirror(endpoint).await;
    let live = Arc::new(AtomicI64::new(1));
    let counter = Object::new(CounterStub::new(Arc::new(CounterImpl(
        AtomicU64::new(0),
        Some(live.clone()),
    ))));
    (listening, mirror, counter, live)
}

/// A proxy for a [`Mirror`] served at `endpoint`, and the count of its counters alive.
async fn serve_mirror(endpoint: &str) -> (lanner::Listening, MirrorProxy, Arc<AtomicI64>) {
    let made = Arc::new(AtomicI64::new(0));
    let server = Server::new();
    let mirror = MirrorImpl { made: made.clone() };
    server.publish("mirror", Object::new(MirrorStub::new(Arc::new(mirror))));
    let listening = server.listen(endpoint).await.unwrap();
    let mirror: MirrorProxy = Client::new()
        .connect(&listening.endpoint().object_url("mirror"))
        .await
        .unwrap();
    (listening, mirror, made)
}

#[tokio::test]
async fn a_reference_handed_back_in_arguments_whose_encoding_panics_is_released() {
    let (_listening, mirror, made) = serve_mirror("mem://refs-mirror-arguments-panic").await;
    let counter = mirror.counter().await.unwrap();
    assert_eq!(made.load(Ordering::Relaxed), 1);
    // The call's arguments are encoded on this thread (the test's runtime has one) when
    // the task first polls it, and panic there.
    let call = tokio::spawn(async move { mirror.take(counter, Bomb).await });
    assert!(call.await.unwrap_err().is_panic());
    // The reference went nowhere and nothing else is encoded on this thread: released.
    assert_eq!(settle(&made).await, 0, "the server's counter leaked");
}

#[tokio::test]
async fn a_reference_handed_back_in_a_result_whose_encoding_panics_is_released() {
    let (_listening, mirror, counter, live) = mirror_and_counter("mem://refs-mirror-panic").await;
    let error = mirror
        .reflect_badly(ObjRef::new(counter.clone()))
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Internal, "{error}");
    assert!(error.message().contains("the bomb went off"), "{error}");
    drop(counter);
    // Nothing else is encoded on this thread from now on: the server's reference, handed
    // back by the reply that never was, is released all the same.
    assert_eq!(settle(&live).await, 0, "the counter leaked");
}

/// The callback a [`Mirror`] handed back: found, and our own object, not a proxy.
fn our_own(answer: Result<ObjRef<CounterProxy>, Error>) -> ObjRef<CounterProxy> {
    let back = answer.expect("the handed-back callback was found");
    assert!(
        back.local().is_some(),
        "arrived as a proxy, not our own object"
    );
    back
}

#[tokio::test]
async fn a_callback_handed_back_in_a_result_is_the_callers_own_object_and_is_released_after() {
    let (_listening, mirror, counter, live) = mirror_and_counter("mem://refs-mirror").await;
    for _ in 0..100 {
        // The server held the callback while it ran and dropped it after encoding the
        // result: its release must not overtake the result naming the same handle.
        our_own(mirror.reflect(ObjRef::new(counter.clone())).await);
    }
    drop(counter);
    // Once the server's releases are in, nothing holds the counter.
    assert_eq!(settle(&live).await, 0, "the counter leaked");
}

#[tokio::test]
async fn a_callback_handed_back_is_found_even_when_its_release_is_read_before_the_result() {
    let (_listening, mirror, counter, _live) =
        mirror_and_counter("mem://refs-mirror-release-first").await;
    let mut call = std::pin::pin!(mirror.reflect(ObjRef::new(counter.clone())));
    // Sent; the answer is not taken until the server's release of the callback (which
    // follows its answer by a millisecond) has been read by the connection too.
    assert!(futures_util::poll!(call.as_mut()).is_pending());
    tokio::time::sleep(Duration::from_millis(50)).await;
    let _back = our_own(call.await);
}

#[tokio::test]
async fn callbacks_handed_back_are_found_however_late_their_answers_are_taken_and_released_after() {
    let (_listening, mirror, counter, live) = mirror_and_counter("mem://refs-mirror-late").await;
    let mut first = std::pin::pin!(mirror.reflect(ObjRef::new(counter.clone())));
    let mut second = std::pin::pin!(mirror.reflect(ObjRef::new(counter.clone())));
    assert!(futures_util::poll!(first.as_mut()).is_pending());
    assert!(futures_util::poll!(second.as_mut()).is_pending());
    // Both answers and the server's releases of both callbacks arrive, and the answers
    // wait in their slots far longer than any time limit would have allowed: the
    // releases wait for them to be decoded, not for a while.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    for call in [first, second] {
        our_own(call.await);
    }
    drop(counter);
    // The releases that waited were applied once the answers were decoded.
    assert_eq!(settle(&live).await, 0, "the counter leaked");
}

#[tokio::test]
async fn a_callback_handed_back_to_a_call_given_up_is_released_all_the_same() {
    let (_listening, mirror, counter, live) =
        mirror_and_counter("mem://refs-mirror-given-up").await;
    // Given up before its answer came, and after it came (waiting in its slot): either
    // way the answer is decoded and dropped by the connection, and the server's release
    // of the callback, which waited for that, is applied.
    for answer_waits in [false, true] {
        let mut call = std::pin::pin!(mirror.reflect(ObjRef::new(counter.clone())));
        assert!(futures_util::poll!(call.as_mut()).is_pending());
        if answer_waits {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    drop(counter);
    assert_eq!(settle(&live).await, 0, "the counter leaked");
}

#[tokio::test]
async fn an_answer_left_undecoded_holds_back_only_the_releases_of_what_was_handed_back() {
    let (_listening, mirror, counter, live) =
        mirror_and_counter("mem://refs-mirror-undecoded").await;
    // A callback handed back, its answer left in its slot (the future kept, not polled).
    let mut call = std::pin::pin!(mirror.reflect(ObjRef::new(counter.clone())));
    assert!(futures_util::poll!(call.as_mut()).is_pending());
    tokio::time::sleep(Duration::from_millis(50)).await;
    // Meanwhile the server takes another object of ours and lets go of it, never handing
    // it back: that release is applied at once.
    let other_live = Arc::new(AtomicI64::new(1));
    let other = Object::new(CounterStub::new(Arc::new(CounterImpl(
        AtomicU64::new(0),
        Some(other_live.clone()),
    ))));
    mirror.ignore(ObjRef::new(other)).await.unwrap();
    assert_eq!(
        settle(&other_live).await,
        0,
        "held back by the undecoded answer"
    );
    // The handed-back one waits for its answer, which still finds it.
    let back = our_own(call.await);
    drop((back, counter));
    assert_eq!(settle(&live).await, 0, "the counter leaked");
}

#[tokio::test]
async fn an_answer_left_undecoded_keeps_its_object_however_many_releases_wait() {
    let (_listening, mirror, counter, live) = mirror_and_counter("mem://refs-mirror-many").await;
    let mut first = std::pin::pin!(mirror.reflect(ObjRef::new(counter.clone())));
    assert!(futures_util::poll!(first.as_mut()).is_pending());
    tokio::time::sleep(Duration::from_millis(20)).await;
    // Many more hand-backs of the same object while the first answer stays undecoded:
    // each one's release waits (more of them than any fixed bound would have held).
    for _ in 0..70_000 {
        our_own(mirror.reflect(ObjRef::new(counter.clone())).await);
    }
    let back = first
        .await
        .expect("the first answer still finds its object");
    assert!(back.local().is_some());
    drop((back, counter));
    assert_eq!(settle(&live).await, 0, "the counter leaked");
}

/// Hands out the object it was given.
#[lanner::interface]
trait Door {
    async fn open(&self) -> Result<ObjRef<CounterProxy>, Error>;
}

struct DoorTo(Object);

impl Door for DoorTo {
    async fn open(&self) -> Result<ObjRef<CounterProxy>, Error> {
        Ok(ObjRef::new(self.0.clone()))
    }
}

/// A server that publishes a counter as `secret` and lets nobody use it; the counter.
fn server_with_a_secret() -> (Server, Object) {
    let secret = Object::new(CounterStub::new(Arc::new(CounterImpl(
        AtomicU64::new(0),
        None,
    ))));
    let server = Server::new().with_access(
        lanner::AccessPolicy::allow_by_default().deny(lanner::Target::object("secret"), ["*"]),
    );
    server.publish("secret", secret.clone());
    (server, secret)
}

#[tokio::test]
async fn a_published_object_handed_out_as_a_result_obeys_its_names_rules() {
    let (server, secret) = server_with_a_secret();
    server.publish("door", Object::new(DoorStub::new(Arc::new(DoorTo(secret)))));
    let listening = server.listen("mem://refs-policy").await.unwrap();
    let door: DoorProxy = Client::new()
        .connect(&listening.endpoint().object_url("door"))
        .await
        .unwrap();
    let error = door.open().await.unwrap_err();
    assert!(error.message().contains("access policy"), "{error}");
}

/// Which side of [`idle_factory`]'s connection has the idle timeout.
#[derive(Clone, Copy)]
enum IdleSide {
    Server,
    Client,
}

/// A factory served at `endpoint` and a client's proxy for it, with a 100 ms idle timeout
/// on `side`.
async fn idle_factory(endpoint: &str, side: IdleSide) -> (lanner::Listening, FactoryProxy) {
    let idle = lanner::ConnectionOptions::default().with_idle_timeout(Duration::from_millis(100));
    let (server, client) = match side {
        IdleSide::Server => (Server::with_options(idle), Client::new()),
        IdleSide::Client => (Server::new(), Client::with_options(idle)),
    };
    server.publish(
        "factory",
        Object::new(FactoryStub::new(Arc::new(FactoryImpl::default()))),
    );
    let listening = server.listen(endpoint).await.unwrap();
    let factory = client
        .connect(&listening.endpoint().object_url("factory"))
        .await
        .unwrap();
    (listening, factory)
}

#[tokio::test]
async fn an_idle_timeout_spares_a_connection_whose_peer_holds_handed_out_objects() {
    let (_listening, factory) = idle_factory("mem://refs-idle", IdleSide::Server).await;
    let counter = factory.counter(1).await.unwrap().into_proxy().unwrap();
    // Idle for several timeouts, but the client holds a counter it could not find again.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(counter.increment().await, Ok(2));
}

#[tokio::test]
async fn an_idle_timeout_spares_a_connection_whose_client_holds_objects_it_was_handed() {
    let (_listening, factory) = idle_factory("mem://refs-client-idle", IdleSide::Client).await;
    let counter = factory.counter(1).await.unwrap().into_proxy().unwrap();
    // Idle for several timeouts, but the client holds a counter it could not find again.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(counter.increment().await, Ok(2));
    // Once it lets go, the idle connection closes (and the factory's proxy reconnects).
    let before = factory.object().traffic();
    drop(counter);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(factory.counter(5).await.is_ok());
    assert!(
        factory.object().traffic().messages_sent < before.messages_sent,
        "the connection was not replaced: {before:?} then {:?}",
        factory.object().traffic()
    );
}

/// The environment variable that makes [`child_holds_counters_until_killed`] run: the
/// factory's URL.
const CHILD_FACTORY: &str = "LANNER_TEST_CHILD_FACTORY";

/// How many counters the child process holds when it is killed.
const CHILD_COUNTERS: i64 = 1000;

/// Set (to anything) for the child to be in the middle of a call when it is killed: the
/// factory has made the counter it will answer with, and answers 300 ms later, to nobody.
const CHILD_MID_CALL: &str = "LANNER_TEST_CHILD_MID_CALL";

/// A client process holding counters (and a callback the server keeps) is killed with
/// SIGKILL: its connection ends without a RELEASE, and the server lets go of everything,
/// including (`mid_call`) the counter a call in flight then answers with.
async fn a_killed_client_process_leaks_nothing(endpoint: &str, mid_call: bool) {
    use std::io::BufRead;
    let (_listening, factory, live) = serve_counted(endpoint).await;
    let url = format!("{}/factory", factory.object().peer());
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_holds_counters_until_killed",
            "--nocapture",
        ])
        .env(CHILD_FACTORY, url)
        .envs(mid_call.then_some((CHILD_MID_CALL, "1")))
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let ready = tokio::task::spawn_blocking(move || {
        std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .find(|line| line.starts_with("holding"))
    })
    .await
    .unwrap();
    assert_eq!(
        ready.as_deref(),
        Some(format!("holding {CHILD_COUNTERS}").as_str())
    );
    if mid_call {
        // The call's counter exists: the call is in flight.
        tokio::time::timeout(
            Duration::from_secs(5),
            until_live(&live, CHILD_COUNTERS + 1),
        )
        .await
        .expect("the child's call reaches the server");
    } else {
        assert_eq!(live.load(Ordering::Relaxed), CHILD_COUNTERS);
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(
        settle(&live).await,
        0,
        "the killed client's counters leaked"
    );
    // The server still serves.
    assert_eq!(
        factory
            .counter(1)
            .await
            .unwrap()
            .into_proxy()
            .unwrap()
            .increment()
            .await,
        Ok(2)
    );
}

#[tokio::test]
async fn a_killed_client_process_leaks_nothing_over_unix() {
    a_killed_client_process_leaks_nothing(&unix("killed"), false).await;
}

#[tokio::test]
async fn a_killed_client_process_leaks_nothing_over_shm() {
    a_killed_client_process_leaks_nothing(
        &format!("shm://lanner-refs-killed-{}", std::process::id()),
        false,
    )
    .await;
}

#[tokio::test]
async fn a_client_process_killed_mid_call_leaks_nothing_over_unix() {
    a_killed_client_process_leaks_nothing(&unix("killed-mid-call"), true).await;
}

#[tokio::test]
async fn a_client_process_killed_mid_call_leaks_nothing_over_shm() {
    a_killed_client_process_leaks_nothing(
        &format!("shm://lanner-refs-killed-mid-call-{}", std::process::id()),
        true,
    )
    .await;
}

/// Not a test of its own: the client half of [`a_killed_client_process_leaks_nothing`],
/// run in a child process. Without its environment variable it does nothing.
#[tokio::test]
async fn child_holds_counters_until_killed() {
    let Ok(url) = std::env::var(CHILD_FACTORY) else {
        return;
    };
    let factory: FactoryProxy = Client::new().connect(&url).await.unwrap();
    let mut counters = Vec::new();
    for i in 0..CHILD_COUNTERS as u64 {
        counters.push(factory.counter(i).await.unwrap());
    }
    let heard = Arc::new(Heard::default());
    factory
        .subscribe(ObjRef::new(Object::new(ListenerStub::new(heard))))
        .await
        .unwrap();
    if std::env::var_os(CHILD_MID_CALL).is_some() {
        let factory = factory.clone();
        tokio::spawn(async move { factory.counter_later(300).await });
    }
    println!("holding {}", counters.len());
    // Bounded: the parent kills this process long before.
    tokio::time::sleep(Duration::from_secs(60)).await;
}

/// Hands out and takes pairs of counters, where the second of a pair may not be sent.
#[lanner::interface]
trait Pairs {
    /// A new counter and `second` (which this peer may be refused).
    async fn two(&self) -> Result<(ObjRef<CounterProxy>, ObjRef<CounterProxy>), Error>;
    /// Takes two counters and drops them.
    async fn take(&self, a: ObjRef<CounterProxy>, b: ObjRef<CounterProxy>) -> Result<(), Error>;
    /// Answers after `millis` milliseconds.
    async fn nap(&self, millis: u64) -> Result<(), Error>;
}

struct PairsImpl {
    live: Arc<AtomicI64>,
    second: Object,
}

fn live_counter(live: &Arc<AtomicI64>) -> Object {
    live.fetch_add(1, Ordering::Relaxed);
    Object::new(CounterStub::new(Arc::new(CounterImpl(
        AtomicU64::new(0),
        Some(live.clone()),
    ))))
}

impl Pairs for PairsImpl {
    async fn two(&self) -> Result<(ObjRef<CounterProxy>, ObjRef<CounterProxy>), Error> {
        Ok((
            ObjRef::new(live_counter(&self.live)),
            ObjRef::new(self.second.clone()),
        ))
    }

    async fn take(&self, _a: ObjRef<CounterProxy>, _b: ObjRef<CounterProxy>) -> Result<(), Error> {
        Ok(())
    }

    async fn nap(&self, millis: u64) -> Result<(), Error> {
        tokio::time::sleep(Duration::from_millis(millis)).await;
        Ok(())
    }
}

/// Publishes a [`Pairs`] object (whose second counter is `second`, and whose new
/// counters count themselves in `live`) on `server` at `endpoint`; a proxy for it.
async fn serve_pairs(
    server: Server,
    endpoint: &str,
    live: &Arc<AtomicI64>,
    second: Object,
) -> (lanner::Listening, PairsProxy) {
    server.publish(
        "pairs",
        Object::new(PairsStub::new(Arc::new(PairsImpl {
            live: live.clone(),
            second,
        }))),
    );
    let listening = server.listen(endpoint).await.unwrap();
    let pairs = Client::new()
        .connect(&listening.endpoint().object_url("pairs"))
        .await
        .unwrap();
    (listening, pairs)
}

/// A result that fails to encode after a reference in it was exported becomes an error
/// reply, and the exported object is unexported: the peer never got a handle to release.
#[tokio::test]
async fn a_result_that_fails_to_encode_unexports_what_it_exported() {
    let live = Arc::new(AtomicI64::new(0));
    let (server, secret) = server_with_a_secret();
    let (_listening, pairs) = serve_pairs(server, "mem://refs-failed-result", &live, secret).await;
    for _ in 0..10 {
        let error = pairs.two().await.unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Internal, "{error}");
        assert!(error.message().contains("could not be encoded"), "{error}");
    }
    assert_eq!(
        settle(&live).await,
        0,
        "the failed results' counters leaked"
    );
}

/// Arguments that fail to encode after a reference among them was exported: the call
/// fails before sending, and the exported object is unexported.
#[tokio::test]
async fn arguments_that_fail_to_encode_unexport_what_they_exported() {
    let unused = Arc::new(AtomicI64::new(0));
    let server = Server::new();
    let second = live_counter(&unused);
    let (_listening, pairs) =
        serve_pairs(server, "mem://refs-failed-arguments", &unused, second).await;
    let live = Arc::new(AtomicI64::new(0));
    // The second is not a counter: encoding fails after the first was exported.
    let listener = Object::new(ListenerStub::new(Arc::new(Heard::default())));
    let error = pairs
        .take(ObjRef::new(live_counter(&live)), ObjRef::new(listener))
        .await
        .unwrap_err();
    assert!(error.message().contains("does not implement"), "{error}");
    assert_eq!(
        settle(&live).await,
        0,
        "the first argument's counter leaked"
    );
    // The connection still works.
    pairs
        .take(
            ObjRef::new(live_counter(&live)),
            ObjRef::new(live_counter(&live)),
        )
        .await
        .unwrap();
    assert_eq!(settle(&live).await, 0);
}

/// A request whose arguments exported a reference but which never got a credit (its
/// deadline passed first, or it was dropped) unexports it: it was never sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_never_sent_for_want_of_a_credit_unexports_what_it_exported() {
    let unused = Arc::new(AtomicI64::new(0));
    let server = Server::with_options(lanner::ConnectionOptions::default().with_credits(1));
    let second = live_counter(&unused);
    let (_listening, pairs) = serve_pairs(server, "mem://refs-no-credit", &unused, second).await;
    let live = Arc::new(AtomicI64::new(0));
    // The one credit is taken by a napping call; each request below waits for it.
    let napping = tokio::spawn({
        let pairs = pairs.clone();
        async move { pairs.nap(500).await }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    let hurried = pairs.with_timeout(Duration::from_millis(50));
    let error = hurried
        .take(
            ObjRef::new(live_counter(&live)),
            ObjRef::new(live_counter(&live)),
        )
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::DeadlineExceeded, "{error}");
    let dropped = tokio::time::timeout(
        Duration::from_millis(50),
        pairs.take(
            ObjRef::new(live_counter(&live)),
            ObjRef::new(live_counter(&live)),
        ),
    )
    .await;
    assert!(dropped.is_err(), "the call got a credit");
    napping.await.unwrap().unwrap();
    assert_eq!(
        settle(&live).await,
        0,
        "the unsent requests' counters leaked"
    );
}

/// The same for a one-way call, which waits for its credit on a path of its own (boxed,
/// apart from the ready future of a call that found one at hand).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_one_way_call_never_sent_for_want_of_a_credit_unexports_what_it_exported() {
    let server = Server::with_options(lanner::ConnectionOptions::default().with_credits(1));
    let naps = Arc::new(AtomicU64::new(0));
    server.publish(
        "keeper",
        Object::new(keeper::old::KeeperStub::new(Arc::new(keeper::OldKeeper(
            naps.clone(),
        )))),
    );
    let listening = server.listen("mem://refs-one-way-no-credit").await.unwrap();
    let url = listening.endpoint().object_url("keeper");
    let keeper: keeper::old::KeeperProxy = Client::new().connect(&url).await.unwrap();
    let live = Arc::new(AtomicI64::new(0));
    // The one credit is taken by a napping call; each one-way call below waits for it.
    let napping = tokio::spawn({
        let keeper = keeper.clone();
        async move { keeper::old::Keeper::nap(&keeper, 500).await }
    });
    while naps.load(Ordering::Relaxed) == 0 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let hurried = keeper.with_timeout(Duration::from_millis(50));
    let error = keeper::old::Keeper::lend(&hurried, ObjRef::new(live_counter(&live)))
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::DeadlineExceeded, "{error}");
    assert!(!error.may_have_executed(), "{error}");
    let dropped = tokio::time::timeout(
        Duration::from_millis(50),
        keeper::old::Keeper::lend(&keeper, ObjRef::new(live_counter(&live))),
    )
    .await;
    assert!(dropped.is_err(), "the call got a credit");
    napping.await.unwrap().unwrap();
    assert_eq!(
        settle(&live).await,
        0,
        "the unsent one-way calls' counters leaked"
    );
    // Once the credit is back, a one-way call hands its counter over, and the server
    // releases it when the method is done with it.
    keeper::old::Keeper::lend(&keeper, ObjRef::new(live_counter(&live)))
        .await
        .unwrap();
    assert_eq!(settle(&live).await, 0);
}

/// Two versions of one interface (same id) whose `keep` differs in signature: a client
/// of the newer calls a server of the older.
mod keeper {
    use super::*;

    pub(super) mod old {
        use super::*;

        /// Keeps counters.
        #[lanner::interface(id = "3c1e5a2b-7d44-4f0e-9a61-2b8c0d9e4f17")]
        pub trait Keeper {
            /// Takes `counter`.
            async fn keep(&self, counter: ObjRef<CounterProxy>) -> Result<(), Error>;
            /// Answers after `millis` milliseconds.
            async fn nap(&self, millis: u64) -> Result<(), Error>;
            /// Takes `counter`, expecting no answer.
            #[oneway]
            async fn lend(&self, counter: ObjRef<CounterProxy>) -> Result<(), Error>;
        }
    }

    pub(super) mod new {
        use super::*;

        /// Keeps counters, several times.
        #[lanner::interface(id = "3c1e5a2b-7d44-4f0e-9a61-2b8c0d9e4f17")]
        pub trait Keeper {
            /// Takes `counter`, `times` times.
            async fn keep(&self, counter: ObjRef<CounterProxy>, times: u64) -> Result<(), Error>;
            /// Answers after `millis` milliseconds.
            async fn nap(&self, millis: u64) -> Result<(), Error>;
            /// Takes `counter`, `times` times, expecting no answer.
            #[oneway]
            async fn lend(&self, counter: ObjRef<CounterProxy>, times: u64) -> Result<(), Error>;
        }
    }

    /// Counts the naps begun. A nap computes without awaiting: it holds the receiver of
    /// its connection, and what the caller sends meanwhile waits.
    #[derive(Default)]
    pub(super) struct OldKeeper(pub(super) Arc<AtomicU64>);

    impl old::Keeper for OldKeeper {
        async fn keep(&self, _counter: ObjRef<CounterProxy>) -> Result<(), Error> {
            Ok(())
        }

        async fn nap(&self, millis: u64) -> Result<(), Error> {
            self.0.fetch_add(1, Ordering::Relaxed);
            std::thread::sleep(Duration::from_millis(millis));
            Ok(())
        }

        async fn lend(&self, _counter: ObjRef<CounterProxy>) -> Result<(), Error> {
            Ok(())
        }
    }
}

/// A call the server refuses without decoding its arguments (an incompatible method)
/// releases the reference the caller exported for them all the same (its request lists
/// it): nothing else on the server ever would.
#[tokio::test]
async fn references_among_arguments_the_server_never_decoded_are_taken_back() {
    let server = Server::new();
    server.publish(
        "keeper",
        Object::new(keeper::old::KeeperStub::new(Arc::new(
            keeper::OldKeeper::default(),
        ))),
    );
    let listening = server.listen("mem://refs-unread-arguments").await.unwrap();
    let url = listening.endpoint().object_url("keeper");
    let newer: keeper::new::KeeperProxy = Client::new().connect(&url).await.unwrap();
    let live = Arc::new(AtomicI64::new(0));
    for _ in 0..10 {
        let error = keeper::new::Keeper::keep(&newer, ObjRef::new(live_counter(&live)), 2)
            .await
            .unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Unimplemented, "{error}");
    }
    assert_eq!(
        settle(&live).await,
        0,
        "the unread arguments' counters leaked"
    );
    // A one-way call gets no answer: the server releases what its reference table lists.
    for _ in 0..10 {
        keeper::new::Keeper::lend(&newer, ObjRef::new(live_counter(&live)), 2)
            .await
            .unwrap();
    }
    assert_eq!(
        settle(&live).await,
        0,
        "the unread one-way arguments' counters leaked"
    );

    // A compatible call still hands its reference over, and it is released as usual.
    let older: keeper::old::KeeperProxy = Client::new().connect(&url).await.unwrap();
    keeper::old::Keeper::keep(&older, ObjRef::new(live_counter(&live)))
        .await
        .unwrap();
    assert_eq!(settle(&live).await, 0);
}

/// A hand-written stub for [`Pairs`] that reads none of a call's arguments: it panics
/// first, or answers without looking at them.
struct Careless {
    panics: bool,
}

impl lanner::Stub for Careless {
    fn interface_id(&self) -> lanner::InterfaceId {
        <PairsProxy as Proxy>::INTERFACE_ID
    }

    fn interface_name(&self) -> &'static str {
        <PairsProxy as Proxy>::INTERFACE_NAME
    }

    fn methods(&self) -> &'static [lanner::MethodInfo] {
        <PairsProxy as Proxy>::METHODS
    }

    fn dispatch(&self, _call: lanner::IncomingCall<'_>) -> lanner::DispatchFuture {
        if self.panics {
            panic!("a hand-written stub gives up before decoding");
        }
        Box::pin(async { lanner::Reply::error(&Error::new(ErrorKind::Internal, "not today")) })
    }
}

/// The references among the arguments of a call whose stub never decoded them (a
/// hand-written stub that panicked first, or ignores them) are the caller's still: the
/// server releases them as it answers, whatever the answer says. A stub that decoded
/// them and then dropped them released them itself, once (the generated one, above).
#[tokio::test]
async fn references_among_arguments_a_stub_never_decoded_are_taken_back() {
    for panics in [true, false] {
        let server = Server::new();
        server.publish("careless", Object::new(Careless { panics }));
        let endpoint = format!("mem://refs-careless-stub-{panics}");
        let listening = server.listen(&endpoint).await.unwrap();
        let url = listening.endpoint().object_url("careless");
        let pairs: PairsProxy = Client::new().connect(&url).await.unwrap();
        let live = Arc::new(AtomicI64::new(0));
        for _ in 0..10 {
            let counters = (
                ObjRef::new(live_counter(&live)),
                ObjRef::new(live_counter(&live)),
            );
            let error = pairs.take(counters.0, counters.1).await.unwrap_err();
            let expected = ErrorKind::Internal;
            assert_eq!(error.kind(), expected, "{error}");
        }
        assert_eq!(
            settle(&live).await,
            0,
            "the counters a stub never decoded leaked (it panicked: {panics})"
        );
        // The connection is intact: later calls are answered as before.
        let error = pairs.nap(1).await.unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Internal, "{error}");
    }
}

/// The same when the caller gave up before the answer came: the answer settles the
/// exports when it arrives. (A nap holds the server's receiver for the connection, so the
/// request is read, and refused, only after its caller gave up.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unread_arguments_of_an_abandoned_call_are_taken_back_when_its_answer_comes() {
    let server = Server::new();
    let naps = Arc::new(AtomicU64::new(0));
    server.publish(
        "keeper",
        Object::new(keeper::old::KeeperStub::new(Arc::new(keeper::OldKeeper(
            naps.clone(),
        )))),
    );
    let listening = server.listen("mem://refs-unread-abandoned").await.unwrap();
    let url = listening.endpoint().object_url("keeper");
    let newer: keeper::new::KeeperProxy = Client::new().connect(&url).await.unwrap();
    let napping = tokio::spawn({
        let newer = newer.clone();
        async move { keeper::new::Keeper::nap(&newer, 300).await }
    });
    // The server's receiver is busy with the nap: the next call waits behind it.
    while naps.load(Ordering::Relaxed) == 0 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let live = Arc::new(AtomicI64::new(0));
    let hurried = newer.with_timeout(Duration::from_millis(50));
    let error = keeper::new::Keeper::keep(&hurried, ObjRef::new(live_counter(&live)), 2)
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::DeadlineExceeded, "{error}");
    assert_eq!(
        live.load(Ordering::Relaxed),
        1,
        "released before the answer came"
    );
    napping.await.unwrap().unwrap();
    assert_eq!(
        settle(&live).await,
        0,
        "the abandoned call's counter leaked"
    );
}

/// Hands out a counter with a payload of a chosen size.
#[lanner::interface]
trait Bulky {
    /// A new counter, with `len` bytes.
    async fn counter_with(&self, len: u64) -> Result<(ObjRef<CounterProxy>, Vec<u8>), Error>;
}

struct BulkyImpl(Arc<AtomicI64>);

impl Bulky for BulkyImpl {
    async fn counter_with(&self, len: u64) -> Result<(ObjRef<CounterProxy>, Vec<u8>), Error> {
        let len =
            usize::try_from(len).map_err(|_| Error::new(ErrorKind::InvalidArgument, "too long"))?;
        Ok((ObjRef::new(live_counter(&self.0)), vec![7; len]))
    }
}

/// A result larger than the caller accepts goes as an error, and what it exported is
/// unexported: the caller never got the handle to release.
#[tokio::test]
async fn a_result_over_the_callers_frame_limit_unexports_what_it_exported() {
    let live = Arc::new(AtomicI64::new(0));
    let server = Server::new();
    server.publish(
        "bulky",
        Object::new(BulkyStub::new(Arc::new(BulkyImpl(live.clone())))),
    );
    let listening = server.listen("mem://refs-result-too-large").await.unwrap();
    let client =
        Client::with_options(lanner::ConnectionOptions::default().with_max_frame_size(64 * 1024));
    let bulky: BulkyProxy = client
        .connect(&listening.endpoint().object_url("bulky"))
        .await
        .unwrap();
    for _ in 0..10 {
        let error = bulky.counter_with(128 * 1024).await.unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Internal, "{error}");
        assert!(error.message().contains("could not be sent"), "{error}");
    }
    assert_eq!(
        settle(&live).await,
        0,
        "the refused results' counters leaked"
    );

    // One that fits arrives, and its counter lives while the caller holds it.
    let (counter, bytes) = bulky.counter_with(1024).await.unwrap();
    assert_eq!(bytes.len(), 1024);
    assert_eq!(live.load(Ordering::Relaxed), 1);
    drop(counter);
    assert_eq!(settle(&live).await, 0);
}

/// Hands out counters next to values the caller may fail to decode.
#[lanner::interface]
trait Giver {
    /// `Picky(picky)`, then a new counter.
    async fn picky_first(&self, picky: u8) -> Result<(Picky, ObjRef<CounterProxy>), Error>;
    /// A new counter, then `Picky(picky)`.
    async fn counter_first(&self, picky: u8) -> Result<(ObjRef<CounterProxy>, Picky), Error>;
}

/// Hands out a new counter (counted in `live`) each time, or, with `shared`, that one
/// counter again and again (so that a caller holds several counts of one object).
struct GiverImpl {
    live: Arc<AtomicI64>,
    shared: Option<Object>,
}

impl GiverImpl {
    fn new(live: Arc<AtomicI64>) -> GiverImpl {
        GiverImpl { live, shared: None }
    }

    fn counter(&self) -> ObjRef<CounterProxy> {
        ObjRef::new(match &self.shared {
            Some(shared) => shared.clone(),
            None => live_counter(&self.live),
        })
    }
}

impl Giver for GiverImpl {
    async fn picky_first(&self, picky: u8) -> Result<(Picky, ObjRef<CounterProxy>), Error> {
        Ok((Picky(picky), self.counter()))
    }

    async fn counter_first(&self, picky: u8) -> Result<(ObjRef<CounterProxy>, Picky), Error> {
        Ok((self.counter(), Picky(picky)))
    }
}

/// A result the caller fails to decode partway releases every reference the reply's
/// reference table lists, wherever the failure was: the server's counters do not stay
/// counted for a caller that never got them. One that decodes is held as usual.
#[tokio::test]
async fn references_in_a_result_that_fails_to_decode_are_released_whatever_their_place() {
    let live = Arc::new(AtomicI64::new(0));
    let giver = Object::new(GiverStub::new(Arc::new(GiverImpl::new(live.clone()))));
    let (_listening, giver): (_, GiverProxy) =
        serve_one("mem://refs-result-undecoded", giver).await;
    for _ in 0..5 {
        let error = giver.picky_first(Picky::REFUSED.0).await.unwrap_err();
        assert_eq!(error.kind(), ErrorKind::InvalidArgument, "{error}");
        assert!(error.message().contains("result of"), "{error}");
        let error = giver.counter_first(Picky::REFUSED.0).await.unwrap_err();
        assert_eq!(error.kind(), ErrorKind::InvalidArgument, "{error}");
    }
    assert_eq!(
        settle(&live).await,
        0,
        "the undecoded results' counters leaked"
    );

    // A `Deserialize` that panics on the result: the panic reaches the caller (its own
    // code), and the references are released all the same.
    for _ in 0..3 {
        let calling = giver.clone();
        let call = tokio::spawn(async move { calling.picky_first(Picky::PANICS.0).await });
        assert!(call.await.unwrap_err().is_panic());
    }
    assert_eq!(
        settle(&live).await,
        0,
        "the counters of results whose decoding panicked leaked"
    );

    let (picky, counter) = giver.picky_first(Picky::FINE.0).await.unwrap();
    assert_eq!(picky.0, Picky::FINE.0);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(live.load(Ordering::Relaxed), 1, "released while held");
    assert_eq!(counter.into_proxy().unwrap().increment().await, Ok(1));
    assert_eq!(settle(&live).await, 0);
}

/// Serializes a reference for its own purposes, outside any message.
#[lanner::interface]
trait Stasher {
    /// A new counter, serialized as JSON.
    async fn stash(&self) -> Result<String, Error>;
}

struct StasherImpl(Arc<AtomicI64>);

impl Stasher for StasherImpl {
    async fn stash(&self) -> Result<String, Error> {
        let counter: ObjRef<CounterProxy> = ObjRef::new(live_counter(&self.0));
        serde_json::to_string(&counter)
            .map_err(|e| Error::new(ErrorKind::InvalidArgument, e.to_string()))
    }
}

/// A reference serialized outside a message (a method encoding one with serde for its
/// own purposes, on the call's thread) is refused: it would be exported and counted for
/// the call's connection in no message's accounts, for as long as the connection lasts.
#[tokio::test]
async fn a_reference_serialized_outside_a_message_is_refused_and_exports_nothing() {
    let live = Arc::new(AtomicI64::new(0));
    let stasher = Object::new(StasherStub::new(Arc::new(StasherImpl(live.clone()))));
    let (_listening, stasher): (_, StasherProxy) = serve_one("mem://refs-stashed", stasher).await;
    for _ in 0..3 {
        let error = stasher.stash().await.unwrap_err();
        assert_eq!(error.kind(), ErrorKind::InvalidArgument, "{error}");
        assert!(error.message().contains("can only be sent"), "{error}");
    }
    assert_eq!(settle(&live).await, 0, "the stashed counters were exported");
}

/// A value whose decoding fails when it is [`Picky::REFUSED`] and panics (a user's
/// `Deserialize` with a bug) when it is [`Picky::PANICS`]; the caller encodes any.
#[derive(Debug, Clone, Copy, serde::Serialize)]
struct Picky(u8);

impl Picky {
    const REFUSED: Picky = Picky(0);
    const PANICS: Picky = Picky(255);
    const FINE: Picky = Picky(1);
}

impl<'de> serde::Deserialize<'de> for Picky {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        match u8::deserialize(deserializer)? {
            0 => Err(serde::de::Error::custom("zero is refused")),
            255 => panic!("a Deserialize with a bug"),
            value => Ok(Picky(value)),
        }
    }
}

/// Takes counters among arguments that may fail to decode.
#[lanner::interface]
trait Holder {
    /// Holds `counter` (if `picky` decodes) until `drop_all`.
    async fn hold_after(&self, picky: Picky, counter: ObjRef<CounterProxy>) -> Result<(), Error>;
    /// The same, the counter first.
    async fn hold_before(&self, counter: ObjRef<CounterProxy>, picky: Picky) -> Result<(), Error>;
    /// [`Holder::hold_before`], one-way.
    #[oneway]
    async fn hold_before_quietly(
        &self,
        counter: ObjRef<CounterProxy>,
        picky: Picky,
    ) -> Result<(), Error>;
    /// [`Holder::hold_after`], one-way.
    #[oneway]
    async fn hold_after_quietly(
        &self,
        picky: Picky,
        counter: ObjRef<CounterProxy>,
    ) -> Result<(), Error>;
    /// Drops what it holds.
    async fn drop_all(&self) -> Result<(), Error>;
    /// Increments every counter it holds (each a call back to its owner); how many.
    async fn poke_all(&self) -> Result<u64, Error>;
}

#[derive(Default)]
struct HolderImpl(Mutex<Vec<ObjRef<CounterProxy>>>);

impl Holder for HolderImpl {
    async fn hold_after(&self, _picky: Picky, counter: ObjRef<CounterProxy>) -> Result<(), Error> {
        self.0.lock().await.push(counter);
        Ok(())
    }

    async fn hold_before(&self, counter: ObjRef<CounterProxy>, _picky: Picky) -> Result<(), Error> {
        self.0.lock().await.push(counter);
        Ok(())
    }

    async fn hold_before_quietly(
        &self,
        counter: ObjRef<CounterProxy>,
        _picky: Picky,
    ) -> Result<(), Error> {
        self.0.lock().await.push(counter);
        Ok(())
    }

    async fn hold_after_quietly(
        &self,
        _picky: Picky,
        counter: ObjRef<CounterProxy>,
    ) -> Result<(), Error> {
        self.0.lock().await.push(counter);
        Ok(())
    }

    async fn drop_all(&self) -> Result<(), Error> {
        self.0.lock().await.clear();
        Ok(())
    }

    async fn poke_all(&self) -> Result<u64, Error> {
        let held = self.0.lock().await;
        for counter in held.iter() {
            let proxy = counter
                .proxy()
                .ok_or_else(|| Error::new(ErrorKind::Internal, "a held counter is not remote"))?;
            proxy.increment().await?;
        }
        Ok(held.len() as u64)
    }
}

/// Serves `object` alone at `endpoint`; a proxy for it whose calls give up after 5 s (a
/// call left unanswered fails the test instead of hanging it).
async fn serve_one<P: Proxy>(endpoint: &str, object: Object) -> (lanner::Listening, P) {
    let server = Server::new();
    server.publish("object", object);
    let listening = server.listen(endpoint).await.unwrap();
    let client = Client::with_options(
        lanner::ConnectionOptions::default().with_call_timeout(Duration::from_secs(5)),
    );
    let proxy = client
        .connect(&listening.endpoint().object_url("object"))
        .await
        .unwrap();
    (listening, proxy)
}

/// Serves a [`Holder`] at `endpoint` (see [`serve_one`]).
async fn serve_holder(endpoint: &str) -> (lanner::Listening, HolderProxy) {
    let holder = Object::new(HolderStub::new(Arc::new(HolderImpl::default())));
    serve_one(endpoint, holder).await
}

/// Calls `holder` with arguments whose `bad` value fails to decode (with `kind`), a
/// counter before it and after it: every counter's count is released, and one the
/// server also holds through an earlier call keeps that count. Then the connection
/// still serves.
async fn arguments_that_fail_are_all_or_nothing(holder: &HolderProxy, bad: Picky, kind: ErrorKind) {
    let live = Arc::new(AtomicI64::new(0));
    for _ in 0..3 {
        let error = holder
            .hold_after(bad, ObjRef::new(live_counter(&live)))
            .await
            .unwrap_err();
        assert_eq!(error.kind(), kind, "{error}");
        let error = holder
            .hold_before(ObjRef::new(live_counter(&live)), bad)
            .await
            .unwrap_err();
        assert_eq!(error.kind(), kind, "{error}");
    }
    assert_eq!(
        settle(&live).await,
        0,
        "the failed arguments' counters leaked"
    );

    // One counter the server holds, then passes in failing calls: taken back once per
    // failing call, it stays held by the server's own count.
    let counter = ObjRef::new(live_counter(&live));
    holder
        .hold_after(Picky::FINE, counter.clone())
        .await
        .unwrap();
    for _ in 0..2 {
        holder.hold_before(counter.clone(), bad).await.unwrap_err();
        holder.hold_after(bad, counter.clone()).await.unwrap_err();
    }
    drop(counter);
    held_by_the_holder_alone(holder, &live).await;
}

/// Checks that the one counter alive in `live` is held by `holder` alone: alive a while
/// after the caller dropped its own (not released while the holder holds it), and gone
/// once the holder drops what it holds (its count was exactly the holder's).
async fn held_by_the_holder_alone(holder: &HolderProxy, live: &AtomicI64) {
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(
        live.load(Ordering::Relaxed),
        1,
        "released while the server holds it"
    );
    holder.drop_all().await.unwrap();
    assert_eq!(settle(live).await, 0, "the held counter leaked");
}

/// Arguments that fail to decode are all or nothing: the server gives up the references
/// it had decoded before the failure without releasing them, and releases every
/// reference the request lists instead, wherever the failure was.
#[tokio::test]
async fn references_among_arguments_that_fail_to_decode_are_taken_back_whatever_their_place() {
    let (_listening, holder) = serve_holder("mem://refs-partly-decoded").await;
    arguments_that_fail_are_all_or_nothing(&holder, Picky::REFUSED, ErrorKind::InvalidArgument)
        .await;

    // A one-way call gets no answer to take anything back with: the server releases
    // what the request's reference table lists, wherever the failure was.
    let live = Arc::new(AtomicI64::new(0));
    for _ in 0..5 {
        holder
            .hold_before_quietly(ObjRef::new(live_counter(&live)), Picky::REFUSED)
            .await
            .unwrap();
        holder
            .hold_after_quietly(Picky::REFUSED, ObjRef::new(live_counter(&live)))
            .await
            .unwrap();
    }
    holder.drop_all().await.unwrap();
    assert_eq!(settle(&live).await, 0, "the one-way calls' counters leaked");
    // And once each: one the server also holds keeps that count.
    let counter = ObjRef::new(live_counter(&live));
    holder
        .hold_after(Picky::FINE, counter.clone())
        .await
        .unwrap();
    holder
        .hold_before_quietly(counter.clone(), Picky::REFUSED)
        .await
        .unwrap();
    holder
        .hold_after_quietly(Picky::REFUSED, counter.clone())
        .await
        .unwrap();
    drop(counter);
    // Calls on a connection are served in order: the one-way calls have been.
    holder
        .hold_after(Picky::REFUSED, ObjRef::new(live_counter(&live)))
        .await
        .unwrap_err();
    held_by_the_holder_alone(&holder, &live).await;
}

/// Arguments whose decoding panics (the user's code, fed by the peer) fail that call
/// with `Internal`, as a panicking method does, all or nothing as when they fail to
/// decode; the connection goes on serving.
#[tokio::test]
async fn arguments_whose_decoding_panics_fail_only_their_call() {
    let (_listening, holder) = serve_holder("mem://refs-decoding-panics").await;
    let error = holder
        .hold_after(Picky::PANICS, ObjRef::new(live_counter(&Arc::default())))
        .await
        .unwrap_err();
    assert!(error.message().contains("panicked"), "{error}");
    arguments_that_fail_are_all_or_nothing(&holder, Picky::PANICS, ErrorKind::Internal).await;
}

/// A server publishing a [`Holder`] as `holder` over a Unix socket (named by `tag`),
/// without authentication, and a raw client connected to it: the socket and the client's
/// protocol state, past the handshake.
async fn raw_client_of_a_holder(
    tag: &str,
) -> (
    lanner::Listening,
    tokio::net::UnixStream,
    lanner_proto::Connection,
) {
    let server = Server::new().with_auth(lanner::ServerAuth::none());
    server.publish(
        "holder",
        Object::new(HolderStub::new(Arc::new(HolderImpl::default()))),
    );
    let listening = server.listen(&unix(tag)).await.unwrap();
    let (socket, proto) = common::raw_unix_client(&listening).await;
    (listening, socket, proto)
}

/// On the wire: a call to a handle the server never handed out, or to a method it does
/// not have, is answered with the arguments-unread flag; one whose arguments decoded is
/// not.
#[tokio::test]
async fn the_server_says_when_it_left_a_calls_arguments_unread() {
    use lanner_proto::{Event, MessageBuilder, Status};
    use tokio::io::AsyncWriteExt;

    let (_listening, mut socket, mut proto) = raw_client_of_a_holder("raw-unread").await;
    let mut ask = async |request: MessageBuilder| {
        let (_, frame) = proto.send_request(request).map_err(|(e, _)| e).unwrap();
        socket.write_all(&frame.into_contiguous()).await.unwrap();
        match proto.handle_frame(common::read_frame(&mut socket).await.unwrap()) {
            Ok(Event::Response(response)) => (response.status, response.arguments_unread),
            other => panic!("expected a response, got {other:?}"),
        }
    };
    // A handle never handed out (index 5, some tag).
    let unknown = MessageBuilder::request(0x1234_5600_0005, 0, 0, 0);
    assert_eq!(ask(unknown).await, (Status::NotFound, true));
    // The root (handle 0) has no method with this fingerprint.
    let incompatible = MessageBuilder::request(0, 0, 0, 0xdead_beef);
    assert_eq!(ask(incompatible).await, (Status::Unimplemented, true));
    // Resolving a name nobody published fails too, but after decoding the arguments
    // (the root's `resolve(String)`; postcard: the length, then the bytes).
    let fingerprint =
        lanner::__private::method_fingerprint("resolve(String)->Result<ObjectRef,Error>");
    let mut resolve = MessageBuilder::request(0, 0, 0, fingerprint);
    resolve.inline().put_slice(b"\x04nope");
    assert_eq!(ask(resolve).await, (Status::AppError, false));
}

/// On the wire: a root answer handing out a reference lists it in the reply's reference
/// table, as a method's result does.
#[tokio::test]
async fn a_root_answer_lists_the_reference_it_hands_out() {
    use lanner_proto::{Event, MessageBuilder, Status};
    use tokio::io::AsyncWriteExt;

    let (_listening, mut socket, mut proto) = raw_client_of_a_holder("raw-root-table").await;
    let fingerprint =
        lanner::__private::method_fingerprint("resolve(String)->Result<ObjectRef,Error>");
    let mut resolve = MessageBuilder::request(0, 0, 0, fingerprint);
    resolve.inline().put_slice(b"\x06holder");
    let (_, frame) = proto.send_request(resolve).map_err(|(e, _)| e).unwrap();
    socket.write_all(&frame.into_contiguous()).await.unwrap();
    let response = match proto.handle_frame(common::read_frame(&mut socket).await.unwrap()) {
        Ok(Event::Response(response)) => response,
        other => panic!("expected a response, got {other:?}"),
    };
    assert_eq!(response.status, Status::Ok);
    // The answer starts with the handle (postcard: a varint).
    let (handle, _) = postcard::take_from_bytes::<u64>(response.payload.inline_slice()).unwrap();
    assert_eq!(response.payload.references().collect::<Vec<_>>(), [handle]);
}

/// A root answer the client cannot decode releases the reference its table lists: the
/// server counted it for a client that never got it.
#[tokio::test]
async fn a_root_answer_that_fails_to_decode_releases_what_it_lists() {
    use lanner_proto::{Event, Limits, MessageBuilder, Status};
    use tokio::io::AsyncWriteExt;

    let url = unix("raw-root-server");
    let socket_path = url.replace("unix://", "");
    let _ = std::fs::remove_file(&socket_path);
    let listener = tokio::net::UnixListener::bind(&socket_path).unwrap();
    let serving = tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.unwrap();
        let mut proto = lanner_proto::Connection::server(Limits::default());
        let hello = common::read_frame(&mut socket).await.unwrap();
        let Ok(Event::Accepted { welcome }) = proto.handle_frame(hello) else {
            panic!("the client's HELLO was refused");
        };
        socket.write_all(&welcome).await.unwrap();
        let request = match proto.handle_frame(common::read_frame(&mut socket).await.unwrap()) {
            Ok(Event::Request(request)) => request,
            other => panic!("expected the resolve request, got {other:?}"),
        };
        // Not a reference (a varint that never ends), listing one the server counted.
        let mut answer = MessageBuilder::response(Status::Ok);
        answer.inline().put_slice(b"\xff\xff\xff");
        answer.end_with_references(&[0x77]);
        let frame = proto.send_response(request.call_id, answer).unwrap();
        socket.write_all(&frame.into_contiguous()).await.unwrap();
        loop {
            match proto.handle_frame(common::read_frame(&mut socket).await.unwrap()) {
                Ok(Event::Released(release)) => return release.handles,
                Ok(_) => {}
                other => panic!("expected a release, got {other:?}"),
            }
        }
    });
    let client = Client::new().with_auth(lanner::ClientAuth::none());
    let error = client
        .connect::<CounterProxy>(&format!("{url}/counter"))
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InvalidArgument, "{error}");
    let released = tokio::time::timeout(Duration::from_secs(5), serving)
        .await
        .expect("no release came")
        .unwrap();
    assert_eq!(released, [0x77]);
    drop(client);
    // The listener above is tokio's own, which leaves its socket file behind.
    let _ = std::fs::remove_file(&socket_path);
}

/// A counter whose `Drop` panics (a user's bug).
struct PanickyCounter(Arc<AtomicI64>);

impl Drop for PanickyCounter {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
        panic!("a Drop with a bug");
    }
}

impl Counter for PanickyCounter {
    async fn increment(&self) -> Result<u64, Error> {
        Ok(1)
    }
}

/// Hands out counters whose `Drop` panics.
#[lanner::interface]
trait PanickyFactory {
    /// A new such counter.
    async fn counter(&self) -> Result<ObjRef<CounterProxy>, Error>;
}

struct PanickyFactoryImpl(Arc<AtomicI64>);

impl PanickyFactory for PanickyFactoryImpl {
    async fn counter(&self) -> Result<ObjRef<CounterProxy>, Error> {
        self.0.fetch_add(1, Ordering::Relaxed);
        Ok(ObjRef::new(Object::new(CounterStub::new(Arc::new(
            PanickyCounter(self.0.clone()),
        )))))
    }
}

/// An object whose `Drop` panics when the peer releases it is logged, and the
/// connection goes on serving (its receiver runs the drop).
#[tokio::test]
async fn an_object_whose_drop_panics_when_released_does_not_end_the_connection() {
    let live = Arc::new(AtomicI64::new(0));
    let server = Server::new();
    server.publish(
        "factory",
        Object::new(PanickyFactoryStub::new(Arc::new(PanickyFactoryImpl(
            live.clone(),
        )))),
    );
    let listening = server.listen("mem://refs-drop-panics").await.unwrap();
    let factory: PanickyFactoryProxy = Client::new()
        .connect(&listening.endpoint().object_url("factory"))
        .await
        .unwrap();
    // Held throughout: a reference handed out on a connection lives and dies with it
    // (the factory's URL reference would reconnect and hide a lost connection).
    let kept = factory.counter().await.unwrap().into_proxy().unwrap();
    for _ in 0..3 {
        let counter = factory.counter().await.unwrap().into_proxy().unwrap();
        assert_eq!(counter.increment().await, Ok(1));
        drop(counter);
        assert_eq!(settle_at(&live, 1).await, 1, "the counter was not released");
    }
    // Several released at once (one RELEASE frame), each drop panicking.
    let counters: Vec<CounterProxy> = futures_util::future::try_join_all(
        (0..3).map(|_| async { factory.counter().await?.into_proxy() }),
    )
    .await
    .unwrap();
    drop(counters);
    assert_eq!(
        settle_at(&live, 1).await,
        1,
        "the counters were not released"
    );
    // The connection still serves.
    assert_eq!(kept.increment().await, Ok(1));
}

/// The objects a client still exported when its connection goes (dropped by the client,
/// not ended) are dropped under the same guard: their `Drop` panicking is logged, and
/// two of them do not abort the process.
#[tokio::test]
async fn callbacks_whose_drop_panics_are_dropped_with_their_connection_safely() {
    let server = Server::new();
    server.publish(
        "holder",
        Object::new(HolderStub::new(Arc::new(HolderImpl::default()))),
    );
    let listening = server
        .listen("mem://refs-drop-panics-at-end")
        .await
        .unwrap();
    let live = Arc::new(AtomicI64::new(0));
    {
        let client = Client::new();
        let holder: HolderProxy = client
            .connect(&listening.endpoint().object_url("holder"))
            .await
            .unwrap();
        for _ in 0..2 {
            live.fetch_add(1, Ordering::Relaxed);
            let callback = Object::new(CounterStub::new(Arc::new(PanickyCounter(live.clone()))));
            holder
                .hold_after(Picky::FINE, ObjRef::new(callback))
                .await
                .unwrap();
        }
    }
    assert_eq!(settle(&live).await, 0, "the callbacks were not dropped");
}

/// One step of [`reference_counts_hold_whatever_mix_of_calls_succeeds_or_fails`].
#[derive(Debug, Clone, Copy)]
enum Step {
    /// Hands the holder a counter next to a value that fails to decode unless `fine`;
    /// `kept`: the one counter the client keeps throughout, else a fresh one.
    Hold {
        fine: bool,
        counter_first: bool,
        one_way: bool,
        kept: bool,
    },
    /// Takes a counter from a giver next to a value the client fails to decode unless
    /// `fine`; `shared`: from the giver that hands out one counter again and again,
    /// else a new one.
    Take {
        fine: bool,
        counter_first: bool,
        shared: bool,
    },
    /// The holder drops what it holds.
    DropAll,
    /// The client drops the oldest counter it took.
    DropTaken,
}

fn step() -> impl proptest::strategy::Strategy<Value = Step> {
    use proptest::prelude::*;
    prop_oneof![
        4 => (any::<bool>(), any::<bool>(), any::<bool>(), any::<bool>()).prop_map(
            |(fine, counter_first, one_way, kept)| Step::Hold {
                fine,
                counter_first,
                one_way,
                kept,
            }
        ),
        3 => (any::<bool>(), any::<bool>(), any::<bool>()).prop_map(
            |(fine, counter_first, shared)| Step::Take {
                fine,
                counter_first,
                shared,
            }
        ),
        1 => Just(Step::DropAll),
        1 => Just(Step::DropTaken),
    ]
}

/// Runs `steps` against a holder and two givers on one connection. After every step,
/// once releases have had time to arrive, each counter either side holds still answers
/// (no count was released twice: the last would have unexported it), and at the end,
/// everything dropped, no counter is left alive on either side (none was leaked).
async fn run_steps(endpoint: &str, steps: &[Step]) -> Result<(), String> {
    let client_live = Arc::new(AtomicI64::new(0));
    let server_live = Arc::new(AtomicI64::new(0));
    let server = Server::new();
    server.publish(
        "holder",
        Object::new(HolderStub::new(Arc::new(HolderImpl::default()))),
    );
    server.publish(
        "giver",
        Object::new(GiverStub::new(Arc::new(GiverImpl::new(
            server_live.clone(),
        )))),
    );
    // Its one counter lives as long as the giver: not counted in `server_live`.
    let sharer = GiverImpl {
        live: Arc::default(),
        shared: Some(live_counter(&Arc::default())),
    };
    server.publish("sharer", Object::new(GiverStub::new(Arc::new(sharer))));
    let listening = server.listen(endpoint).await.map_err(|e| e.to_string())?;
    let client = Client::with_options(
        lanner::ConnectionOptions::default().with_call_timeout(Duration::from_secs(5)),
    );
    let holder: HolderProxy = client
        .connect(&listening.endpoint().object_url("holder"))
        .await
        .map_err(|e| e.to_string())?;
    let giver: GiverProxy = client
        .connect(&listening.endpoint().object_url("giver"))
        .await
        .map_err(|e| e.to_string())?;
    let sharer: GiverProxy = client
        .connect(&listening.endpoint().object_url("sharer"))
        .await
        .map_err(|e| e.to_string())?;
    let kept: ObjRef<CounterProxy> = ObjRef::new(live_counter(&client_live));
    let mut taken: std::collections::VecDeque<ObjRef<CounterProxy>> = Default::default();
    let picky = |fine: bool| if fine { Picky::FINE } else { Picky::REFUSED };
    for (index, step) in steps.iter().enumerate() {
        match *step {
            Step::Hold {
                fine,
                counter_first,
                one_way,
                kept: use_kept,
            } => {
                let counter = if use_kept {
                    kept.clone()
                } else {
                    ObjRef::new(live_counter(&client_live))
                };
                let outcome = match (counter_first, one_way) {
                    (true, false) => holder.hold_before(counter, picky(fine)).await,
                    (false, false) => holder.hold_after(picky(fine), counter).await,
                    (true, true) => holder.hold_before_quietly(counter, picky(fine)).await,
                    (false, true) => holder.hold_after_quietly(picky(fine), counter).await,
                };
                let expected = match &outcome {
                    Ok(()) => fine || one_way,
                    Err(e) => !fine && !one_way && e.kind() == ErrorKind::InvalidArgument,
                };
                if !expected {
                    return Err(format!("step {index} {step:?}: {outcome:?}"));
                }
            }
            Step::Take {
                fine,
                counter_first,
                shared,
            } => {
                let from = if shared { &sharer } else { &giver };
                let value = picky(fine).0;
                let outcome = if counter_first {
                    from.counter_first(value).await.map(|(counter, _)| counter)
                } else {
                    from.picky_first(value).await.map(|(_, counter)| counter)
                };
                match outcome {
                    Ok(counter) if fine => taken.push_back(counter),
                    Err(e) if !fine && e.kind() == ErrorKind::InvalidArgument => {}
                    other => return Err(format!("step {index} {step:?}: {other:?}")),
                }
            }
            Step::DropAll => holder.drop_all().await.map_err(|e| e.to_string())?,
            Step::DropTaken => drop(taken.pop_front()),
        }
        // Releases are sent a moment after the drop (batched): a count released twice
        // has reached its exporter, and unexported the object, by now.
        tokio::time::sleep(Duration::from_millis(5)).await;
        // Every counter the server holds answers its owner's calls, and every counter
        // the client took answers too.
        holder
            .poke_all()
            .await
            .map_err(|e| format!("after step {index} {step:?}: poke_all: {e}"))?;
        for counter in &taken {
            let proxy = counter.proxy().ok_or("a taken counter is local")?;
            proxy
                .increment()
                .await
                .map_err(|e| format!("after step {index} {step:?}: a taken counter: {e}"))?;
        }
    }
    holder.drop_all().await.map_err(|e| e.to_string())?;
    drop((kept, taken));
    let (client_left, server_left) = (settle(&client_live).await, settle(&server_live).await);
    if (client_left, server_left) != (0, 0) {
        return Err(format!(
            "{client_left} client and {server_left} server counters leaked"
        ));
    }
    Ok(())
}

proptest::proptest! {
    // Each case sleeps 5 ms a step; a failing case waits up to 5 s for its counters to
    // settle, so shrinking is bounded in time too.
    #![proptest_config(proptest::prelude::ProptestConfig {
        cases: 32,
        max_shrink_time: 120_000,
        ..proptest::prelude::ProptestConfig::default()
    })]

    /// Any mix of calls handing references over, each succeeding or failing to decode at
    /// either end, answered or one-way, with one reference passed again and again: no
    /// count is released twice, and none is left behind.
    #[test]
    fn reference_counts_hold_whatever_mix_of_calls_succeeds_or_fails(
        steps in proptest::collection::vec(step(), 1..24),
    ) {
        static CASE: AtomicU64 = AtomicU64::new(0);
        let endpoint = format!("mem://refs-props-{}", CASE.fetch_add(1, Ordering::Relaxed));
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let outcome = runtime.block_on(run_steps(&endpoint, &steps));
        proptest::prop_assert!(outcome.is_ok(), "{}", outcome.unwrap_err());
    }
}
