//! Third-party hand-off: a process passes on a reference to an object that lives in a
//! third process. The receiver claims it at the object's server (reusing a connection it
//! has there), that server applies its own access policy to the receiver, and a token
//! never claimed expires with its lease.
//!
//! The three "processes" are mostly three servers and clients in one test process, on
//! separate endpoints; `a_handoff_crosses_real_processes` runs the object's server as a
//! child process.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use lanner::{
    AccessPolicy, CallContext, Client, ClientAuth, Error, ErrorKind, ObjRef, Object, PreSharedKey,
    Proxy, Server, ServerAuth, Target,
};
use tokio::sync::Mutex;

mod child;
mod common;

/// An object of B's.
#[lanner::interface]
trait Counter {
    async fn increment(&self) -> Result<u64, Error>;
    /// Who B says is calling.
    async fn caller(&self) -> Result<String, Error>;
}

/// B makes counters.
#[lanner::interface]
trait Maker {
    async fn make(&self) -> Result<ObjRef<CounterProxy>, Error>;
    /// Holds the calling connection's receiver for `millis` milliseconds (computes
    /// without awaiting): what the caller sends meanwhile waits.
    async fn hog(&self, millis: u64) -> Result<(), Error>;
}

/// C keeps a counter someone hands it.
#[lanner::interface]
trait Keeper {
    /// Keeps `counter` and increments it once.
    async fn keep(&self, counter: ObjRef<CounterProxy>) -> Result<u64, Error>;
    /// Increments the kept counter.
    async fn bump(&self) -> Result<u64, Error>;
    /// Who the kept counter's server says calls it.
    async fn caller(&self) -> Result<String, Error>;
    /// Drops `counter` without using it.
    async fn ignore(&self, counter: ObjRef<CounterProxy>) -> Result<(), Error>;
    /// Hands the kept counter to the caller.
    async fn give(&self) -> Result<ObjRef<CounterProxy>, Error>;
    /// Messages C has sent on `probe`'s connection so far (to tell whether C reused it).
    async fn sent_on_probe(&self) -> Result<u64, Error>;
    /// Keeps `counter` and increments it once, giving up after `millis` milliseconds;
    /// the error's kind if it gave up.
    async fn keep_hurried(
        &self,
        counter: ObjRef<CounterProxy>,
        millis: u64,
    ) -> Result<String, Error>;
}

struct CounterImpl {
    value: AtomicU64,
    live: Arc<AtomicI64>,
}

impl Drop for CounterImpl {
    fn drop(&mut self) {
        self.live.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Counter for CounterImpl {
    async fn increment(&self) -> Result<u64, Error> {
        Ok(self.value.fetch_add(1, Ordering::Relaxed) + 1)
    }

    async fn caller(&self) -> Result<String, Error> {
        let call = CallContext::current().expect("called remotely");
        Ok(call.principal().to_string())
    }
}

/// Calls of [`Maker::hog`] begun in this test process.
static HOGS_STARTED: AtomicU64 = AtomicU64::new(0);

#[derive(Default)]
struct MakerImpl {
    /// Counters alive now.
    live: Arc<AtomicI64>,
}

impl Maker for MakerImpl {
    async fn hog(&self, millis: u64) -> Result<(), Error> {
        HOGS_STARTED.fetch_add(1, Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(millis));
        Ok(())
    }

    async fn make(&self) -> Result<ObjRef<CounterProxy>, Error> {
        self.live.fetch_add(1, Ordering::Relaxed);
        let counter = CounterImpl {
            value: AtomicU64::new(0),
            live: self.live.clone(),
        };
        Ok(ObjRef::new(Object::new(CounterStub::new(Arc::new(
            counter,
        )))))
    }
}

#[derive(Default)]
struct KeeperImpl {
    kept: Mutex<Option<ObjRef<CounterProxy>>>,
    /// A proxy C holds on B's maker, made through C's hand-off client.
    probe: Mutex<Option<MakerProxy>>,
}

impl KeeperImpl {
    async fn kept(&self) -> Result<ObjRef<CounterProxy>, Error> {
        self.kept
            .lock()
            .await
            .clone()
            .ok_or_else(|| Error::new(ErrorKind::NotFound, "nothing kept"))
    }
}

impl Keeper for KeeperImpl {
    async fn keep(&self, counter: ObjRef<CounterProxy>) -> Result<u64, Error> {
        *self.kept.lock().await = Some(counter.clone());
        increment(&counter).await
    }

    async fn bump(&self) -> Result<u64, Error> {
        increment(&self.kept().await?).await
    }

    async fn caller(&self) -> Result<String, Error> {
        match self.kept().await?.proxy() {
            Some(proxy) => proxy.caller().await,
            None => Err(Error::new(ErrorKind::Internal, "kept a local object")),
        }
    }

    async fn ignore(&self, _counter: ObjRef<CounterProxy>) -> Result<(), Error> {
        Ok(())
    }

    async fn give(&self) -> Result<ObjRef<CounterProxy>, Error> {
        self.kept().await
    }

    async fn keep_hurried(
        &self,
        counter: ObjRef<CounterProxy>,
        millis: u64,
    ) -> Result<String, Error> {
        *self.kept.lock().await = Some(counter.clone());
        let Some(proxy) = counter.proxy() else {
            return Err(Error::new(ErrorKind::Internal, "kept a local object"));
        };
        let hurried = proxy.with_timeout(Duration::from_millis(millis));
        Ok(match hurried.increment().await {
            Ok(_) => "answered".to_owned(),
            Err(error) => error.kind().to_string(),
        })
    }

    async fn sent_on_probe(&self) -> Result<u64, Error> {
        let probe = self.probe.lock().await;
        let probe = probe.as_ref().expect("a probe was set");
        Ok(probe.object().traffic().messages_sent)
    }
}

/// Calls a counter, remote or local.
async fn increment(counter: &ObjRef<CounterProxy>) -> Result<u64, Error> {
    match (counter.proxy(), counter.local()) {
        (Some(proxy), _) => proxy.increment().await,
        (None, Some(_)) => Err(Error::new(ErrorKind::Internal, "kept a local object")),
        (None, None) => unreachable!("a reference is local or remote"),
    }
}

/// B: a server with a maker; returns its endpoint and the count of counters alive.
async fn serve_b(endpoint: &str, server: Server) -> (lanner::Listening, Arc<AtomicI64>) {
    let maker = Arc::new(MakerImpl::default());
    let live = maker.live.clone();
    server.publish("maker", Object::new(MakerStub::new(maker)));
    (server.listen(endpoint).await.unwrap(), live)
}

/// C: a server with a keeper; returns its endpoint and the keeper.
async fn serve_c(endpoint: &str, server: Server) -> (lanner::Listening, Arc<KeeperImpl>) {
    let keeper = Arc::new(KeeperImpl::default());
    server.publish("keeper", Object::new(KeeperStub::new(keeper.clone())));
    (server.listen(endpoint).await.unwrap(), keeper)
}

/// Waits (a few seconds at most) until `live` is `expected`; returns what it is then.
async fn settle(live: &AtomicI64, expected: i64) -> i64 {
    for _ in 0..500 {
        if live.load(Ordering::Relaxed) == expected {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    live.load(Ordering::Relaxed)
}

fn unix(tag: &str) -> String {
    let path =
        std::env::temp_dir().join(format!("lanner-handoff-{tag}-{}.sock", std::process::id()));
    format!("unix://{}", path.display())
}

#[tokio::test]
async fn a_reference_to_a_third_process_object_is_claimed_at_its_server() {
    let (b, live) = serve_b(&unix("claim-b"), Server::new()).await;
    let (c, _keeper) = serve_c(&unix("claim-c"), Server::new()).await;
    // A: a client of both.
    let a = Client::new();
    let maker: MakerProxy = a.connect(&b.endpoint().object_url("maker")).await.unwrap();
    let keeper: KeeperProxy = a.connect(&c.endpoint().object_url("keeper")).await.unwrap();
    let counter = maker.make().await.unwrap();
    // C claims the counter at B and calls it there; it is the same object A calls.
    assert_eq!(keeper.keep(counter.clone()).await, Ok(1));
    let counter = counter.into_proxy().unwrap();
    assert_eq!(counter.increment().await, Ok(2));
    assert_eq!(keeper.bump().await, Ok(3));
    // A lets go of everything: C's claim keeps the counter alive on its own.
    drop((counter, maker));
    drop(a);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(keeper.bump().await, Ok(4));
    assert_eq!(live.load(Ordering::Relaxed), 1);
}

#[tokio::test]
async fn the_third_party_reuses_its_connection_to_the_objects_server() {
    let (b, _live) = serve_b(&unix("reuse-b"), Server::new()).await;
    let c_client = Client::new();
    let (c, keeper_impl) = serve_c(
        &unix("reuse-c"),
        Server::new().with_handoff_client(c_client.clone()),
    )
    .await;
    // C already has a connection to B, through the client it claims hand-offs with.
    let probe: MakerProxy = c_client
        .connect(&b.endpoint().object_url("maker"))
        .await
        .unwrap();
    *keeper_impl.probe.lock().await = Some(probe);

    let a = Client::new();
    let maker: MakerProxy = a.connect(&b.endpoint().object_url("maker")).await.unwrap();
    let keeper: KeeperProxy = a.connect(&c.endpoint().object_url("keeper")).await.unwrap();
    let before = keeper.sent_on_probe().await.unwrap();
    assert_eq!(keeper.keep(maker.make().await.unwrap()).await, Ok(1));
    // The claim and the call went on that connection: one request each.
    assert_eq!(keeper.sent_on_probe().await, Ok(before + 2));
}

fn key(id: &str, byte: u8) -> PreSharedKey {
    PreSharedKey::new(id, [byte; 32]).unwrap()
}

#[tokio::test]
async fn the_objects_server_applies_its_own_policy_to_the_third_party() {
    // B knows A and C by their keys; C may only ask a counter who calls.
    let policy = AccessPolicy::deny_by_default()
        .allow(Target::everything(), ["psk:a"])
        .allow(
            Target::everything()
                .interface::<CounterProxy>()
                .method("caller"),
            ["psk:c"],
        );
    let b_server = Server::new()
        .with_auth(ServerAuth::psk(key("a", 1)).and_psk(key("c", 3)))
        .with_access(policy);
    let (b, _live) = serve_b(&unix("policy-b"), b_server).await;
    let c_client = Client::new().with_auth(ClientAuth::psk(key("c", 3)));
    let (c, _keeper) = serve_c(
        &unix("policy-c"),
        Server::new().with_handoff_client(c_client),
    )
    .await;

    let a = Client::new().with_auth(ClientAuth::psk(key("a", 1)));
    let maker: MakerProxy = a.connect(&b.endpoint().object_url("maker")).await.unwrap();
    let keeper: KeeperProxy = Client::new()
        .connect(&c.endpoint().object_url("keeper"))
        .await
        .unwrap();
    let counter = maker.make().await.unwrap();
    let denied = keeper.keep(counter.clone()).await.unwrap_err();
    assert_eq!(denied.kind(), ErrorKind::PermissionDenied, "{denied}");
    assert_eq!(keeper.caller().await, Ok("psk:c".to_owned()));

    // Nothing at all for C: the claim itself is refused, and stays refused.
    let policy = AccessPolicy::deny_by_default().allow(Target::everything(), ["psk:a"]);
    let strict = Server::new()
        .with_auth(ServerAuth::psk(key("a", 1)).and_psk(key("c", 3)))
        .with_access(policy);
    let (strict, _live) = serve_b(&unix("policy-strict-b"), strict).await;
    let maker: MakerProxy = a
        .connect(&strict.endpoint().object_url("maker"))
        .await
        .unwrap();
    let refused = keeper.keep(maker.make().await.unwrap()).await.unwrap_err();
    assert_eq!(refused.kind(), ErrorKind::PermissionDenied, "{refused}");
    assert!(refused.message().contains("psk:c may not use"), "{refused}");
    let again = keeper.bump().await.unwrap_err();
    assert_eq!(again.kind(), ErrorKind::PermissionDenied, "{again}");
    // A's own rights are A's.
    let maker: MakerProxy = a.connect(&b.endpoint().object_url("maker")).await.unwrap();
    let counter = maker.make().await.unwrap();
    let counter = counter.into_proxy().unwrap();
    assert_eq!(counter.caller().await, Ok("psk:a".to_owned()));
    assert_eq!(counter.increment().await, Ok(1));
}

#[tokio::test]
async fn a_handoff_filter_keeps_the_third_party_from_connecting_where_it_does_not_allow() {
    let lease = Duration::from_millis(500);
    let b_endpoint = unix("filter-b");
    let (b, live) = serve_b(&b_endpoint, Server::new().with_handoff_lease(lease)).await;
    let asked = Arc::new(std::sync::Mutex::new(Vec::new()));
    let c_client = Client::new().with_handoff_filter({
        let asked = asked.clone();
        move |endpoint| {
            asked.lock().unwrap().push(endpoint.to_string());
            matches!(endpoint, lanner::Endpoint::Shm(_))
        }
    });
    let (c, _keeper) = serve_c(
        &unix("filter-c"),
        Server::new().with_handoff_client(c_client.private()),
    )
    .await;
    let a = Client::new();
    let maker: MakerProxy = a.connect(&b.endpoint().object_url("maker")).await.unwrap();
    let keeper: KeeperProxy = a.connect(&c.endpoint().object_url("keeper")).await.unwrap();

    let refused = keeper.keep(maker.make().await.unwrap()).await.unwrap_err();
    assert_eq!(refused.kind(), ErrorKind::PermissionDenied, "{refused}");
    assert!(refused.message().contains("hand-off filter"), "{refused}");
    assert_eq!(*asked.lock().unwrap(), vec![b.endpoint().to_string()]);
    // Refused for good: the filter is not asked again, and C never connected to B.
    let again = keeper.bump().await.unwrap_err();
    assert_eq!(again.kind(), ErrorKind::PermissionDenied, "{again}");
    assert_eq!(asked.lock().unwrap().len(), 1);
    // The token was never redeemed: B lets the counter go with its lease.
    assert_eq!(settle(&live, 0).await, 0);

    // A third party whose filter allows B claims as usual.
    let (open_c, _keeper) = serve_c(
        &unix("filter-open-c"),
        Server::new().with_handoff_client(
            Client::new().with_handoff_filter(|endpoint| endpoint.to_string().contains("filter-b")),
        ),
    )
    .await;
    let keeper: KeeperProxy = a
        .connect(&open_c.endpoint().object_url("keeper"))
        .await
        .unwrap();
    assert_eq!(keeper.keep(maker.make().await.unwrap()).await, Ok(1));
    assert_eq!(keeper.bump().await, Ok(2));
}

/// Holds B's receiver for A's connection for 400 ms (what A sends meanwhile, such as a
/// GRANT, waits behind it); returns once B has started holding it.
async fn hog_400_ms(maker: &MakerProxy) -> tokio::task::JoinHandle<Result<(), Error>> {
    let hogs = HOGS_STARTED.load(Ordering::SeqCst);
    let hogging = tokio::spawn({
        let maker = maker.clone();
        async move { maker.hog(400).await }
    });
    while HOGS_STARTED.load(Ordering::SeqCst) == hogs {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    hogging
}

/// A claim whose caller gives up (its deadline passes while the object's server waits
/// for the grant) still completes: the reference is claimed for the next call, not left
/// with a token spent on an answer nobody took.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_claim_given_up_by_its_caller_still_claims_the_object() {
    let (b, _live) = serve_b(&unix("slow-claim-b"), Server::new()).await;
    let (c, _keeper) = serve_c(&unix("slow-claim-c"), Server::new()).await;
    let a = Client::new();
    let maker: MakerProxy = a.connect(&b.endpoint().object_url("maker")).await.unwrap();
    let keeper: KeeperProxy = a.connect(&c.endpoint().object_url("keeper")).await.unwrap();
    // B's receiver for A is held for 400 ms: the GRANT A sends with the hand-off waits
    // behind it, so C's claim reaches B first and waits there for it, past its caller's
    // deadline. (If the grant gets through first anyway, the claim is answered in time
    // and proves nothing: tried again, up to three times.)
    for _ in 0..3 {
        let counter = maker.make().await.unwrap();
        let hogging = hog_400_ms(&maker).await;
        let outcome = keeper.keep_hurried(counter, 100).await.unwrap();
        hogging.await.unwrap().unwrap();
        if outcome != ErrorKind::DeadlineExceeded.to_string() {
            continue;
        }
        // The claim went on after its caller gave up: the next call finds the object.
        let mut bumped = keeper.bump().await;
        for _ in 0..50 {
            if bumped.is_ok() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
            bumped = keeper.bump().await;
        }
        // (2 if the claim made it in time and the increment itself timed out after it
        // went: the claim went on either way.)
        assert!(matches!(bumped, Ok(1 | 2)), "{bumped:?}");
        return;
    }
    panic!("the claim was answered before its deadline three times");
}

/// A claim is not cut short by the call timeout of the client that makes it: the object's
/// server answers a redemption only once the grant is there, and a redemption given up
/// would have spent the token on an answer nobody takes, leaving the reference unable to
/// reach its object ever after.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_claim_outlives_its_clients_call_timeout() {
    let (b, _live) = serve_b(&unix("timeout-claim-b"), Server::new()).await;
    let hurried = Client::with_options(
        lanner::ConnectionOptions::default().with_call_timeout(Duration::from_millis(100)),
    );
    let (c, _keeper) = serve_c(
        &unix("timeout-claim-c"),
        Server::new().with_handoff_client(hurried),
    )
    .await;
    let a = Client::new();
    let maker: MakerProxy = a.connect(&b.endpoint().object_url("maker")).await.unwrap();
    let keeper: KeeperProxy = a.connect(&c.endpoint().object_url("keeper")).await.unwrap();
    // As in `a_claim_given_up_by_its_caller_still_claims_the_object`: the grant waits
    // 400 ms behind B's hogged receiver, and C's claim waits for it at B. (The call that
    // needs the claim has no timeout: it arrived on C's server side.)
    for _ in 0..3 {
        let counter = maker.make().await.unwrap();
        let hogging = hog_400_ms(&maker).await;
        let started = std::time::Instant::now();
        let kept = keeper.keep(counter).await;
        hogging.await.unwrap().unwrap();
        if started.elapsed() < Duration::from_millis(100) {
            // The grant got through first: nothing was tested.
            continue;
        }
        // The claim waited at B past C's call timeout, and completed.
        assert_eq!(kept, Ok(1));
        return;
    }
    panic!("the claim was answered before C's call timeout three times");
}

#[tokio::test]
async fn a_handoff_never_claimed_expires_with_its_lease() {
    let lease = Duration::from_millis(1500);
    let (b, live) = serve_b(&unix("lease-b"), Server::new().with_handoff_lease(lease)).await;
    let (c, _keeper) = serve_c(&unix("lease-c"), Server::new()).await;
    let a = Client::new();
    let maker: MakerProxy = a.connect(&b.endpoint().object_url("maker")).await.unwrap();
    let keeper: KeeperProxy = a.connect(&c.endpoint().object_url("keeper")).await.unwrap();
    let counter = maker.make().await.unwrap();
    let started = std::time::Instant::now();
    keeper.ignore(counter).await.unwrap();
    // A dropped its reference (released); B keeps the counter for the token...
    tokio::time::sleep(Duration::from_millis(100)).await;
    if started.elapsed() < lease {
        assert_eq!(live.load(Ordering::Relaxed), 1);
    }
    // ...until the lease ends.
    assert_eq!(settle(&live, 0).await, 0);
    assert!(started.elapsed() >= lease);
}

#[tokio::test]
async fn a_client_receives_a_handoff_as_a_result() {
    let (b, live) = serve_b(&unix("result-b"), Server::new()).await;
    let (c, _keeper) = serve_c(&unix("result-c"), Server::new()).await;
    let a = Client::new();
    let maker: MakerProxy = a.connect(&b.endpoint().object_url("maker")).await.unwrap();
    let keeper: KeeperProxy = a.connect(&c.endpoint().object_url("keeper")).await.unwrap();
    assert_eq!(keeper.keep(maker.make().await.unwrap()).await, Ok(1));
    drop((maker, keeper, a));

    // D asks C for the counter: C hands it off again, and D calls B directly.
    let d = Client::new();
    let keeper: KeeperProxy = d.connect(&c.endpoint().object_url("keeper")).await.unwrap();
    let counter = keeper.give().await.unwrap();
    let proxy = counter.proxy().unwrap().clone();
    assert_eq!(proxy.object().peer(), b.endpoint().to_string());
    // Not claimed yet: it cannot be passed on.
    let refused = keeper.keep(counter).await.unwrap_err();
    assert_eq!(refused.kind(), ErrorKind::InvalidArgument, "{refused}");
    assert!(refused.message().contains("not claimed yet"), "{refused}");
    assert_eq!(proxy.increment().await, Ok(2));
    assert_eq!(keeper.bump().await, Ok(3));
    drop(proxy);
    drop(keeper);
    assert_eq!(live.load(Ordering::Relaxed), 1, "C still holds it");
}

#[tokio::test]
async fn an_object_of_a_process_with_no_known_address_cannot_be_handed_on() {
    let (c, _keeper) = serve_c(&unix("noaddr-c"), Server::new()).await;
    // D passes C a callback: C reaches it only through D's own connection.
    let d = Client::new();
    let keeper: KeeperProxy = d.connect(&c.endpoint().object_url("keeper")).await.unwrap();
    let live = Arc::new(AtomicI64::new(1));
    let callback = CounterImpl {
        value: AtomicU64::new(10),
        live,
    };
    let callback = ObjRef::new(Object::new(CounterStub::new(Arc::new(callback))));
    assert_eq!(keeper.keep(callback).await, Ok(11));
    // E asks for it: C cannot tell E where D is.
    let e = Client::new();
    let other: KeeperProxy = e.connect(&c.endpoint().object_url("keeper")).await.unwrap();
    let error = other.give().await.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Internal, "{error}");
    assert!(
        error
            .message()
            .contains("no address known here that a third party could connect to"),
        "{error}"
    );
    // Nothing broke: C still calls D's callback.
    assert_eq!(keeper.bump().await, Ok(12));
}

/// The environment variable that makes [`child_serves_a_maker`] run: where to listen.
const CHILD_ENDPOINT: &str = "LANNER_TEST_HANDOFF_CHILD";

#[tokio::test]
async fn a_handoff_crosses_real_processes() {
    // B is a child process; A (this client) hands its counter to C (a server here).
    let endpoint = unix("process-b");
    let (mut child, ready) = child::spawn(
        "child_serves_a_maker",
        (CHILD_ENDPOINT, &endpoint),
        "serving",
    )
    .await;
    assert_eq!(ready, Some(format!("serving {endpoint}")));
    let (c, _keeper) = serve_c(&unix("process-c"), Server::new()).await;
    let a = Client::new();
    let maker: MakerProxy = a.connect(&format!("{endpoint}/maker")).await.unwrap();
    let keeper: KeeperProxy = a.connect(&c.endpoint().object_url("keeper")).await.unwrap();
    let counter = maker.make().await.unwrap();
    assert_eq!(keeper.keep(counter.clone()).await, Ok(1));
    assert_eq!(counter.into_proxy().unwrap().increment().await, Ok(2));
    assert_eq!(keeper.bump().await, Ok(3));
    child.kill().unwrap();
    child.wait().unwrap();
    // A killed server cannot remove its socket file.
    let _ = std::fs::remove_file(endpoint.trim_start_matches("unix://"));
    // B is gone: C's calls fail cleanly.
    let gone = keeper.bump().await.unwrap_err();
    assert_eq!(gone.kind(), ErrorKind::Unavailable, "{gone}");
}

/// A redemption whose connection ends while it waits for its grant (the third party
/// died) leaves the token parked for a later one, until the lease: taken, it would be
/// spent on an answer nobody can receive, and the object dropped with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_redemption_whose_connection_ends_leaves_its_token_parked() {
    let lease = Duration::from_secs(3);
    let (b, live) = serve_b(
        &unix("ended-claim-b"),
        Server::new().with_handoff_lease(lease),
    )
    .await;
    let a = Client::new();
    let maker: MakerProxy = a.connect(&b.endpoint().object_url("maker")).await.unwrap();
    // C is a child process. If the grant gets through before C's claim reaches B anyway
    // (the claim is answered before C dies), nothing was tested: tried again, up to three
    // times.
    let mut tested = false;
    for attempt in 0..3 {
        let c_endpoint = unix(&format!("ended-claim-c{attempt}"));
        let (mut child, ready) = child::spawn(
            "child_serves_a_keeper",
            (CHILD_ENDPOINT, &c_endpoint),
            "serving",
        )
        .await;
        assert_eq!(ready, Some(format!("serving {c_endpoint}")));
        let keeper: KeeperProxy = a.connect(&format!("{c_endpoint}/keeper")).await.unwrap();
        let counter = maker.make().await.unwrap();
        // The grant waits behind B's hogged receiver; C's claim reaches B first and waits.
        let hogging = hog_400_ms(&maker).await;
        let keeping = tokio::spawn({
            let keeper = keeper.clone();
            async move { keeper.keep(counter).await }
        });
        tokio::time::sleep(Duration::from_millis(150)).await;
        let answered_first = keeping.is_finished();
        child.kill().unwrap();
        child.wait().unwrap();
        let _ = std::fs::remove_file(c_endpoint.trim_start_matches("unix://"));
        let kept = keeping.await.unwrap();
        hogging.await.unwrap().unwrap();
        if answered_first {
            // C held the counter; its death released it.
            assert_eq!(settle(&live, 0).await, 0);
            continue;
        }
        assert!(kept.is_err(), "C is gone");
        tested = true;
        break;
    }
    assert!(tested, "the claim was answered before C died three times");
    // The grant is in and A let go of its reference (its call failed): the token alone
    // keeps the counter, for whoever redeems it within the lease.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        live.load(Ordering::Relaxed),
        1,
        "the token was spent on a redemption nobody could receive"
    );
    // Then the lease ends.
    assert_eq!(settle(&live, 0).await, 0);
}

/// Not a test of its own: process C of
/// [`a_redemption_whose_connection_ends_leaves_its_token_parked`]. Without its
/// environment variable it does nothing.
#[tokio::test]
async fn child_serves_a_keeper() {
    let Ok(endpoint) = std::env::var(CHILD_ENDPOINT) else {
        return;
    };
    let (listening, _keeper) = serve_c(&endpoint, Server::new()).await;
    println!("serving {}", listening.endpoint());
    // Bounded: the parent kills this process long before.
    tokio::time::sleep(Duration::from_secs(60)).await;
}

/// Not a test of its own: process B of [`a_handoff_crosses_real_processes`]. Without its
/// environment variable it does nothing.
#[tokio::test]
async fn child_serves_a_maker() {
    let Ok(endpoint) = std::env::var(CHILD_ENDPOINT) else {
        return;
    };
    let (listening, _live) = serve_b(&endpoint, Server::new()).await;
    println!("serving {}", listening.endpoint());
    // Bounded: the parent kills this process long before.
    tokio::time::sleep(Duration::from_secs(60)).await;
}

/// The root object is not a hand-off: every peer holds it, so a peer granting it needs no
/// object of its own. The server refuses such a grant, and the token is unknown.
#[tokio::test]
async fn a_grant_of_the_root_object_is_refused() {
    use lanner_proto::{Event, Grant, MessageBuilder, Status};
    use tokio::io::AsyncWriteExt;

    let (b, _live) = serve_b(
        &unix("root-grant"),
        Server::new().with_auth(lanner::ServerAuth::none()),
    )
    .await;
    let token = [0x3c; 16];
    let (mut granting, _) = common::raw_unix_client(&b).await;
    let grant = lanner_proto::frame::encode_grant(&Grant { handle: 0, token });
    granting.write_all(&grant).await.unwrap();

    let (mut redeeming, mut proto) = common::raw_unix_client(&b).await;
    let fingerprint =
        lanner::__private::method_fingerprint("redeem([u8;16])->Result<ObjectRef,Error>");
    let mut redeem = MessageBuilder::request(0, 0, 2, fingerprint);
    redeem.inline().put_slice(&token);
    let (_, frame) = proto.send_request(redeem).map_err(|(e, _)| e).unwrap();
    redeeming.write_all(&frame.into_contiguous()).await.unwrap();
    let answer = common::read_frame(&mut redeeming).await.unwrap();
    let response = match proto.handle_frame(answer) {
        Ok(Event::Response(response)) => response,
        other => panic!("expected the redemption's answer, got {other:?}"),
    };
    // The root's methods answer an `Error` value: the redemption's says the token is
    // unknown (granted, the root would have been handed out).
    let message = String::from_utf8_lossy(response.payload.inline_slice()).into_owned();
    assert_eq!(response.status, Status::AppError, "{message}");
    assert!(
        message.contains("no object waits for this hand-off token"),
        "{message}"
    );
    drop(granting);
}
