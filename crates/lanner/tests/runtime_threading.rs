//! Threading models: a free-threaded object (the default) runs its calls concurrently; an
//! object in an apartment runs them one at a time, in the order they arrived.

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};

use futures_util::future::join_all;
use lanner::{Client, Error, Object, Server};

/// Records how calls overlap.
#[lanner::interface]
trait Recorder {
    /// Enters, waits until `peers` calls are inside at once (or gives up after a while),
    /// leaves; returns how many were inside at most.
    async fn gather(&self, peers: u32) -> Result<u32, Error>;
    /// Enters, yields to the runtime a few times, records `seq`, leaves.
    async fn record(&self, seq: u32) -> Result<(), Error>;
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
