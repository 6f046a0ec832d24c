//! Calls racing the claim of a reference handed over by a third party: each goes to the
//! object once it is claimed, never to the placeholder the reference had before (the
//! connection it arrived on, handle 0), and callers that give their calls up while the
//! claim runs leave none of the others waiting for ever.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Waker};
use std::time::Duration;

use lanner::{Client, ConnectionOptions, Error, ObjRef, Object, Proxy, Server};

#[lanner::interface]
trait Counter {
    async fn increment(&self) -> Result<u64, Error>;
}

#[lanner::interface]
trait Maker {
    async fn make(&self) -> Result<ObjRef<CounterProxy>, Error>;
}

#[lanner::interface]
trait Racer {
    /// Races first calls through `counter` against its claim; returns how many calls
    /// the spinners started.
    async fn race(&self, counter: ObjRef<CounterProxy>) -> Result<u64, Error>;
}

struct CounterImpl(AtomicU64);

impl Counter for CounterImpl {
    async fn increment(&self) -> Result<u64, Error> {
        Ok(self.0.fetch_add(1, Ordering::Relaxed) + 1)
    }
}

struct MakerImpl;

impl Maker for MakerImpl {
    async fn make(&self) -> Result<ObjRef<CounterProxy>, Error> {
        Ok(ObjRef::new(Object::new(CounterStub::new(Arc::new(
            CounterImpl(AtomicU64::new(0)),
        )))))
    }
}

struct RacerImpl;

const SPINNERS: usize = 3;

impl Racer for RacerImpl {
    async fn race(&self, counter: ObjRef<CounterProxy>) -> Result<u64, Error> {
        let proxy = counter.into_proxy()?;
        let stop = Arc::new(AtomicBool::new(false));
        let started = Arc::new(AtomicU64::new(0));
        let mut spinners = Vec::new();
        for _ in 0..SPINNERS {
            let proxy = proxy.clone();
            let stop = stop.clone();
            let started = started.clone();
            spinners.push(std::thread::spawn(move || {
                let mut cx = Context::from_waker(Waker::noop());
                // Bounded: past the claim, these polls send real calls (given up at once).
                let until = std::time::Instant::now() + Duration::from_millis(30);
                while !stop.load(Ordering::Relaxed) && std::time::Instant::now() < until {
                    // First poll only: settles the destination (and, if it is settled,
                    // sends the request), then the call is given up.
                    let mut call = Box::pin(proxy.increment());
                    let _ = call.as_mut().poll(&mut cx);
                    drop(call);
                    started.fetch_add(1, Ordering::Relaxed);
                }
            }));
        }
        // The monitor: a whole call, which claims the reference and then returns.
        // Bounded here, so that a lost wake-up shows as an error rather than a hang.
        let answered = tokio::time::timeout(Duration::from_secs(10), proxy.increment())
            .await
            .unwrap_or_else(|_| {
                Err(Error::new(
                    lanner::ErrorKind::DeadlineExceeded,
                    "HUNG: the first call through the reference waited 10 s for its claim (which takes milliseconds)",
                ))
            });
        stop.store(true, Ordering::Relaxed);
        for spinner in spinners {
            spinner.join().unwrap();
        }
        answered?;
        Ok(started.load(Ordering::Relaxed))
    }
}

fn unix(tag: &str) -> String {
    let path = std::env::temp_dir().join(format!(
        "lanner-claim-race-{tag}-{}.sock",
        std::process::id()
    ));
    format!("unix://{}", path.display())
}

/// The three parties: B serves counters (made by its "maker"), C races calls through
/// the counters A hands it (its "racer"), and A is a client of both. No caller of C's
/// spins for its reply on its own thread (the racing calls are polled once on plain
/// threads and given up). The servers and their listeners are kept for as long as the
/// parties are used.
struct Parties {
    _servers: [(Server, lanner::Listening); 2],
    maker: MakerProxy,
    racer: RacerProxy,
}

async fn three_parties(tag: &str) -> Parties {
    let b_server = Server::new();
    b_server.publish("maker", Object::new(MakerStub::new(Arc::new(MakerImpl))));
    let b = b_server.listen(&unix(&format!("{tag}-b"))).await.unwrap();
    let quiet = || ConnectionOptions::default().with_spin(Duration::ZERO);
    let c_server = Server::with_options(quiet()).with_handoff_client(Client::with_options(quiet()));
    c_server.publish("racer", Object::new(RacerStub::new(Arc::new(RacerImpl))));
    let c = c_server.listen(&unix(&format!("{tag}-c"))).await.unwrap();
    let a = Client::new();
    let maker = a.connect(&b.endpoint().object_url("maker")).await.unwrap();
    let racer = a.connect(&c.endpoint().object_url("racer")).await.unwrap();
    Parties {
        _servers: [(b_server, b), (c_server, c)],
        maker,
        racer,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_racing_the_claim_never_goes_to_the_connection_the_reference_arrived_on() {
    // Bound whole: a pattern with `..` would drop the servers at once.
    let parties = three_parties("race").await;
    let (maker, racer) = (&parties.maker, &parties.racer);
    let mut spins = 0;
    for trial in 0..300 {
        let counter = maker.make().await.unwrap();
        let before = racer.object().traffic();
        spins += racer.race(counter).await.unwrap();
        // Let a stale call's request and CANCEL arrive.
        tokio::time::sleep(Duration::from_millis(2)).await;
        let after = racer.object().traffic();
        // One race call: one request out, one response in. C never has a reason to send
        // A a request: a call C makes on A's connection is one whose target was the
        // placeholder of an unclaimed reference.
        let received = after.messages_received - before.messages_received;
        assert!(
            received <= 1,
            "trial {trial}: A received {received} messages for one call ({:?} -> {:?}); \
             C called through a handed-over reference on the connection it arrived on \
             (spins so far {spins})",
            before,
            after
        );
    }
    assert!(spins > 0, "no call raced the claims");
}

/// The claim is shared by every caller that waits for it; callers that give up their call
/// after polling it once (here: a single poll, then dropped) must not leave the others
/// waiting for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_waiting_for_a_claim_is_answered_when_other_callers_give_up_theirs() {
    // Bound whole: a pattern with `..` would drop the servers at once.
    let parties = three_parties("hang").await;
    let (maker, racer) = (&parties.maker, &parties.racer);
    for trial in 0..100 {
        let counter = maker.make().await.unwrap();
        if let Err(error) = racer.race(counter).await {
            panic!("trial {trial}: {error}");
        }
    }
}
