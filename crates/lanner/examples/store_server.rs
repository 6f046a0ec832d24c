//! Serves a store that reads the payloads it is given, wherever they are: over
//! `shm://`, payloads the client built in a loan are read in place, never copied.
//!
//! ```text
//! cargo run -p lanner --example store_server -- shm://lanner-store
//! cargo run -p lanner --example store_client -- shm://lanner-store
//! ```

use std::sync::Arc;

use lanner::Object;

#[path = "shared/logging.rs"]
mod logging;
#[path = "shared/store.rs"]
mod store;

use store::{Store, StoreStub, Summary, checksum};

struct Summing;

impl Store for Summing {
    async fn put(&self, name: String, data: bytes::Bytes) -> Result<Summary, lanner::Error> {
        let summary = Summary {
            len: data.len() as u64,
            checksum: checksum(&data),
        };
        println!("{name}: {} bytes", summary.len);
        // Dropping `data` gives a lent payload's memory back to the client.
        Ok(summary)
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
        .unwrap_or_else(|| "shm://lanner-store".to_owned());
    let server = lanner::Server::new();
    server.publish("store", Object::new(StoreStub::new(Arc::new(Summing))));
    let listening = server.listen(&endpoint).await?;
    println!("serving {}", listening.endpoint().object_url("store"));
    tokio::signal::ctrl_c().await.ok();
    Ok(())
}
