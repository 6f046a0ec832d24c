//! Serves a factory of counters, calls subscribed listeners back (one-way, dropping those
//! whose client went away), and registers a class clients can create instances of.
//!
//! ```text
//! cargo run -p lanner --example factory_server -- unix:///tmp/lanner-factory.sock
//! cargo run -p lanner --example factory_client -- unix:///tmp/lanner-factory.sock
//! ```

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use futures_util::future::join_all;
use lanner::{ObjRef, Object};

#[path = "shared/factory.rs"]
mod factory;
#[path = "shared/logging.rs"]
mod logging;

use factory::{COUNTER_CLASS, Counter, CounterProxy, CounterStub, Factory, FactoryStub};
use factory::{Listener, ListenerProxy};

struct Count(AtomicU64);

impl Counter for Count {
    async fn increment(&self) -> Result<u64, lanner::Error> {
        Ok(self.0.fetch_add(1, Ordering::Relaxed) + 1)
    }
}

impl Drop for Count {
    fn drop(&mut self) {
        println!(
            "a counter was released (it had reached {})",
            self.0.load(Ordering::Relaxed)
        );
    }
}

fn counter(start: u64) -> Object {
    Object::new(CounterStub::new(Arc::new(Count(AtomicU64::new(start)))))
}

#[derive(Default)]
struct Shop {
    /// The subscribed listeners, each with a number to tell it apart.
    listeners: Mutex<Vec<(u64, ListenerProxy)>>,
    subscribed: AtomicU64,
}

impl Shop {
    /// Tells every listener about `event`, and drops those that cannot be told (their
    /// client went away: the call fails at once, unsent).
    async fn tell(&self, event: String) {
        let listeners = self.listeners.lock().expect("not poisoned").clone();
        // One-way calls complete once written, so this waits for no listener's method.
        let calls = listeners.iter().map(|(number, listener)| {
            let event = event.clone();
            async move { (*number, listener.notify(event).await) }
        });
        let mut gone = Vec::new();
        for (number, result) in join_all(calls).await {
            if let Err(error) = result {
                println!("dropped listener {number}: {error}");
                gone.push(number);
            }
        }
        if !gone.is_empty() {
            let mut listeners = self.listeners.lock().expect("not poisoned");
            listeners.retain(|(number, _)| !gone.contains(number));
        }
    }
}

impl Factory for Shop {
    async fn counter(&self, start: u64) -> Result<ObjRef<CounterProxy>, lanner::Error> {
        self.tell(format!("a counter starting at {start}")).await;
        Ok(ObjRef::new(counter(start)))
    }

    async fn subscribe(&self, listener: ObjRef<ListenerProxy>) -> Result<(), lanner::Error> {
        let listener = listener.into_proxy()?;
        let number = self.subscribed.fetch_add(1, Ordering::Relaxed) + 1;
        self.listeners
            .lock()
            .expect("not poisoned")
            .push((number, listener));
        println!("listener {number} subscribed");
        Ok(())
    }
}

fn main() {
    logging::init();
    if let Err(error) = run() {
        eprintln!("error: {error}");
        std::process::exit(1);
    }
}

#[tokio::main]
async fn run() -> Result<(), lanner::Error> {
    let endpoint = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "unix:///tmp/lanner-factory.sock".to_owned());
    let server = lanner::Server::new();
    server.publish(
        "factory",
        Object::new(FactoryStub::new(Arc::new(Shop::default()))),
    );
    server.register_class(COUNTER_CLASS, || counter(0));
    let listening = server.listen(&endpoint).await?;
    println!("serving {}", listening.endpoint().object_url("factory"));
    tokio::signal::ctrl_c().await.ok();
    Ok(())
}
