//! Serves a keeper: hand it a counter that lives in `factory_server`, and it calls the
//! counter there directly (a third-party hand-off: the reference carries the factory
//! server's endpoint and a token, which this server redeems there on its first call).
//!
//! ```text
//! cargo run -p lanner --example factory_server -- unix:///tmp/lanner-factory.sock &
//! cargo run -p lanner --example keeper_server -- unix:///tmp/lanner-keeper.sock &
//! cargo run -p lanner --example handoff_client -- unix:///tmp/lanner-factory.sock unix:///tmp/lanner-keeper.sock
//! ```

use std::sync::Arc;

use lanner::{ObjRef, Object, Proxy};
use tokio::sync::Mutex;

#[path = "shared/factory.rs"]
#[allow(dead_code)]
mod factory;
#[path = "shared/keeper.rs"]
mod keeper;
#[path = "shared/logging.rs"]
mod logging;

use factory::{Counter, CounterProxy};
use keeper::{Keeper, KeeperStub};

#[derive(Default)]
struct Holder(Mutex<Option<CounterProxy>>);

impl Keeper for Holder {
    async fn keep(&self, counter: ObjRef<CounterProxy>) -> Result<u64, lanner::Error> {
        let counter = counter.into_proxy()?;
        println!("kept a counter living at {}", counter.object().peer());
        let value = counter.increment().await?;
        *self.0.lock().await = Some(counter);
        Ok(value)
    }

    async fn bump(&self) -> Result<u64, lanner::Error> {
        let counter = self.0.lock().await.clone();
        match counter {
            Some(counter) => counter.increment().await,
            None => Err(lanner::Error::new(
                lanner::ErrorKind::NotFound,
                "no counter kept yet",
            )),
        }
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
        .unwrap_or_else(|| "unix:///tmp/lanner-keeper.sock".to_owned());
    let server = lanner::Server::new();
    server.publish(
        "keeper",
        Object::new(KeeperStub::new(Arc::new(Holder::default()))),
    );
    let listening = server.listen(&endpoint).await?;
    println!("serving {}", listening.endpoint().object_url("keeper"));
    tokio::signal::ctrl_c().await.ok();
    Ok(())
}
