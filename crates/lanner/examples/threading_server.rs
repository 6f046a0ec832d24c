//! Serves one object per threading model: `journal` in an apartment (calls one at a
//! time, in arrival order, state in an [`ApartmentCell`] with no lock) and `pool`
//! free-threaded (calls concurrently). Every call first runs inline on the thread that
//! received it; a method that never waits (`Pool::ping`) runs to completion there.
//!
//! ```text
//! cargo run -p lanner --example threading_server -- unix:///tmp/lanner-threading.sock
//! cargo run -p lanner --example threading_client -- unix:///tmp/lanner-threading.sock
//! ```

use std::sync::{Arc, Mutex};
use std::time::Duration;

use lanner::{ApartmentCell, Object};

#[path = "shared/logging.rs"]
mod logging;
#[path = "shared/threading.rs"]
mod threading;

use threading::{Journal, JournalStub, Pool, PoolStub};

/// The journal's state: a plain `Vec` and a half-written entry, with no lock.
#[derive(Default)]
struct Lines {
    lines: Vec<String>,
    writing: Option<String>,
}

#[derive(Default)]
struct Log(ApartmentCell<Lines>);

impl Journal for Log {
    async fn append(&self, line: String) -> Result<u64, lanner::Error> {
        self.0.with(|state| {
            // In an apartment no other call ever sees a half-written entry.
            assert!(state.writing.is_none(), "calls interleaved");
            state.writing = Some(line);
        });
        tokio::time::sleep(Duration::from_millis(1)).await;
        Ok(self.0.with(|state| {
            let line = state.writing.take().expect("still ours");
            state.lines.push(line);
            state.lines.len() as u64
        }))
    }

    async fn lines(&self) -> Result<Vec<String>, lanner::Error> {
        Ok(self.0.with(|state| state.lines.clone()))
    }
}

/// How many calls are working now, and the most at once since the pool was last idle.
#[derive(Default)]
struct Busy {
    working: u32,
    most: u32,
}

#[derive(Default)]
struct Workers(Mutex<Busy>);

impl Pool for Workers {
    async fn work(&self, ms: u64) -> Result<u32, lanner::Error> {
        {
            let mut busy = self.0.lock().expect("not poisoned");
            if busy.working == 0 {
                // The pool was idle: a new batch of work starts counting afresh.
                busy.most = 0;
            }
            busy.working += 1;
            busy.most = busy.most.max(busy.working);
        }
        tokio::time::sleep(Duration::from_millis(ms)).await;
        let mut busy = self.0.lock().expect("not poisoned");
        busy.working -= 1;
        Ok(busy.most)
    }

    async fn ping(&self) -> Result<(), lanner::Error> {
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
        .unwrap_or_else(|| "unix:///tmp/lanner-threading.sock".to_owned());
    let server = lanner::Server::new();
    server.publish(
        "journal",
        Object::new(JournalStub::new(Arc::new(Log::default()))).in_apartment(),
    );
    server.publish(
        "pool",
        Object::new(PoolStub::new(Arc::new(Workers::default()))),
    );
    let listening = server.listen(&endpoint).await?;
    println!(
        "serving {} (apartment) and {} (free-threaded)",
        listening.endpoint().object_url("journal"),
        listening.endpoint().object_url("pool")
    );
    tokio::signal::ctrl_c().await.ok();
    Ok(())
}
