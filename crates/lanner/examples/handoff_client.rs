//! Hands a counter that lives in `factory_server` to `keeper_server` (see that example
//! for the commands): the keeper claims it at the factory server and calls it there, not
//! through this process, which may go away.

use lanner::Client;

#[path = "shared/factory.rs"]
#[allow(dead_code)]
mod factory;
#[path = "shared/keeper.rs"]
mod keeper;

use factory::{Counter, Factory, FactoryProxy};
use keeper::{Keeper, KeeperProxy};

fn main() {
    if let Err(error) = run() {
        eprintln!("error: {error}");
        std::process::exit(1);
    }
}

#[tokio::main]
async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let factory_at = args
        .next()
        .unwrap_or_else(|| "unix:///tmp/lanner-factory.sock".to_owned());
    let keeper_at = args
        .next()
        .unwrap_or_else(|| "unix:///tmp/lanner-keeper.sock".to_owned());
    let client = Client::new();
    let factory: FactoryProxy = client.connect(&format!("{factory_at}/factory")).await?;
    let keeper: KeeperProxy = client.connect(&format!("{keeper_at}/keeper")).await?;

    let counter = factory.counter(100).await?;
    println!(
        "the keeper incremented our counter to {}",
        keeper.keep(counter.clone()).await?
    );
    let counter = counter.into_proxy()?;
    println!("we increment it to {}", counter.increment().await?);
    println!("the keeper increments it to {}", keeper.bump().await?);
    Ok(())
}
