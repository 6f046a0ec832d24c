//! Calls `threading_server`: ten pipelined appends to the apartment journal come back in
//! the order they were sent, never interleaved; eight concurrent calls to the free-threaded
//! pool all run at once; a method that never waits is answered inline.

use std::time::Instant;

use futures_util::future::join_all;
use lanner::Client;

#[path = "shared/threading.rs"]
mod threading;

use threading::{Journal, JournalProxy, Pool, PoolProxy};

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
        .unwrap_or_else(|| "unix:///tmp/lanner-threading.sock".to_owned());
    let client = Client::new();

    // Apartment: the ten requests go out back to back on one connection; the journal runs
    // them one at a time, in that order, although each one waits halfway.
    let journal: JournalProxy = client.connect(&format!("{endpoint}/journal")).await?;
    let started = journal.lines().await?.len();
    let appends = (0..10).map(|i| journal.append(format!("entry {i}")));
    let lengths: Vec<u64> = join_all(appends)
        .await
        .into_iter()
        .collect::<Result<_, _>>()?;
    println!("apartment: appends answered with lengths {lengths:?}");
    let lines = journal.lines().await?;
    println!(
        "apartment: the journal now ends with {:?}",
        &lines[started..]
    );

    // Free-threaded: eight calls of 100 ms each, all at once.
    let pool: PoolProxy = client.connect(&format!("{endpoint}/pool")).await?;
    // Each answer says how many calls were running at once so far in this batch.
    let clock = Instant::now();
    let most = join_all((0..8).map(|_| pool.work(100)))
        .await
        .into_iter()
        .collect::<Result<Vec<u32>, _>>()?
        .into_iter()
        .max()
        .unwrap_or(0);
    let took = clock.elapsed();
    println!("free-threaded: 8 calls of 100 ms took {took:?}, with up to {most} running at once");

    // Inline: a method that never waits is answered on the thread that received it.
    let clock = Instant::now();
    for _ in 0..1000 {
        pool.ping().await?;
    }
    let took = clock.elapsed();
    println!(
        "inline: 1000 sequential pings took {took:?} ({:?} each)",
        took / 1000
    );
    Ok(())
}
