//! Serves a factory of counters, calls subscribed listeners back, and registers a class
//! clients can create instances of.
//!
//! ```text
//! cargo run -p lanner --example factory_server -- unix:///tmp/lanner-factory.sock
//! cargo run -p lanner --example factory_client -- unix:///tmp/lanner-factory.sock
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use lanner::{ObjRef, Object};
use tokio::sync::Mutex;

#[path = "shared/factory.rs"]
mod factory;

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
    listeners: Mutex<Vec<ListenerProxy>>,
}

impl Factory for Shop {
    async fn counter(&self, start: u64) -> Result<ObjRef<CounterProxy>, lanner::Error> {
        let listeners = self.listeners.lock().await.clone();
        for listener in listeners {
            // A listener whose client went away just fails; keep going.
            let _ = listener
                .notify(format!("a counter starting at {start}"))
                .await;
        }
        Ok(ObjRef::new(counter(start)))
    }

    async fn subscribe(&self, listener: ObjRef<ListenerProxy>) -> Result<(), lanner::Error> {
        self.listeners.lock().await.push(listener.into_proxy()?);
        Ok(())
    }
}

#[tokio::main]
async fn main() -> Result<(), lanner::Error> {
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
