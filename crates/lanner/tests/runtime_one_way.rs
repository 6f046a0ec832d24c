//! One-way calls: the caller does not wait for an answer, the server runs the method and
//! returns the call's credit, so a flood of one-way calls is flow-controlled like any other.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use lanner::{Client, ConnectionOptions, Object, Server};

#[lanner::interface]
trait Counter {
    /// Adds `n`; the caller does not wait.
    #[oneway]
    async fn add(&self, n: u64) -> Result<(), lanner::Error>;
    /// Fails; the caller never hears of it.
    #[oneway]
    async fn fail(&self) -> Result<(), lanner::Error>;
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

    async fn total(&self) -> Result<u64, lanner::Error> {
        Ok(self.total.load(Ordering::SeqCst))
    }
}

async fn one_way_calls_run_in_order_and_return_their_credits(endpoint: &str) {
    // Few credits, many calls: the caller must get credits back from one-way calls.
    let server = Server::with_options(ConnectionOptions::default().with_credits(4));
    let service = Arc::new(CounterService::default());
    server.publish("counter", Object::new(CounterStub::new(service.clone())));
    let listening = server.listen(endpoint).await.unwrap();
    let counter: CounterProxy = Client::new()
        .connect(&listening.endpoint().object_url("counter"))
        .await
        .unwrap();
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_way_calls_over_a_unix_socket() {
    let path = std::env::temp_dir().join(format!("lanner-one-way-{}.sock", std::process::id()));
    let _ = std::fs::remove_file(&path);
    one_way_calls_run_in_order_and_return_their_credits(&format!("unix://{}", path.display()))
        .await;
    let _ = std::fs::remove_file(&path);
}
