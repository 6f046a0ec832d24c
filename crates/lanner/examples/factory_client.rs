//! Calls `factory_server`: gets counters handed out as references, hands the server a
//! callback it calls back over the same connection, and creates an instance of a class.

use std::sync::Arc;

use lanner::{Client, ObjRef, Object};

#[path = "shared/factory.rs"]
mod factory;

use factory::{COUNTER_CLASS, Counter, CounterProxy, Factory, FactoryProxy};
use factory::{Listener, ListenerStub};

struct Printer;

impl Listener for Printer {
    async fn notify(&self, event: String) -> Result<(), lanner::Error> {
        println!("  (the server called back: {event})");
        Ok(())
    }
}

fn main() {
    if let Err(error) = run() {
        eprintln!("error: {error}");
        std::process::exit(1);
    }
}

#[tokio::main]
async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let endpoint = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "unix:///tmp/lanner-factory.sock".to_owned());
    let client = Client::new();
    let factory: FactoryProxy = client.connect(&format!("{endpoint}/factory")).await?;

    // A callback object of ours, handed to the server.
    factory
        .subscribe(ObjRef::new(Object::new(ListenerStub::new(Arc::new(
            Printer,
        )))))
        .await?;

    // Objects handed out as results.
    let counter = factory.counter(41).await?.into_proxy()?;
    println!("counter from the factory: {}", counter.increment().await?);
    drop(counter); // released on the server

    // Activation: an instance of a registered class.
    let created: CounterProxy = client.create(&endpoint, COUNTER_CLASS).await?;
    println!("created counter: {}", created.increment().await?);
    Ok(())
}
