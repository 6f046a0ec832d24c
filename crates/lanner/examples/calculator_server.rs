//! Serves a calculator object with three interfaces: `CalculatorV2`, the `Calculator` it
//! extends (so version-1 clients keep working), and `Memory`.
//!
//! ```text
//! cargo run -p lanner --example calculator_server -- unix:///tmp/lanner-calc.sock
//! cargo run -p lanner --example calculator_client -- unix:///tmp/lanner-calc.sock/calc
//! ```
//!
//! Over TCP both sides need a key: `LANNER_PSK`, as `<key id>:<secret in hex>` (at least
//! 16 bytes), the same on both, as for the `lanner` command:
//!
//! ```text
//! export LANNER_PSK=example:$(openssl rand -hex 32)
//! cargo run -p lanner --example calculator_server -- tcp://127.0.0.1:7000
//! cargo run -p lanner --example calculator_client -- tcp://127.0.0.1:7000/calc
//! ```
//!
//! Lanner's log goes to stderr, at `info` and above unless `RUST_LOG` says otherwise.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

#[path = "shared/calculator.rs"]
mod calculator;
#[path = "shared/key.rs"]
mod key;
#[path = "shared/logging.rs"]
mod logging;

use calculator::{CalcError, Calculator, CalculatorV2, CalculatorV2Stub, Memory, MemoryStub};

#[derive(Default)]
struct Desk {
    memory: AtomicI64,
}

impl Calculator for Desk {
    async fn add(&self, a: i64, b: i64) -> Result<i64, CalcError> {
        Ok(a.wrapping_add(b))
    }

    async fn divide(&self, a: i64, b: i64) -> Result<i64, CalcError> {
        a.checked_div(b).ok_or(CalcError::DivisionByZero)
    }
}

impl CalculatorV2 for Desk {
    async fn power(&self, base: i64, exp: u32) -> Result<i64, CalcError> {
        Ok(base.wrapping_pow(exp))
    }
}

impl Memory for Desk {
    async fn store(&self, value: i64) -> Result<i64, lanner::Error> {
        Ok(self.memory.swap(value, Ordering::Relaxed))
    }

    async fn recall(&self) -> Result<i64, lanner::Error> {
        Ok(self.memory.load(Ordering::Relaxed))
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
        .unwrap_or_else(|| "unix:///tmp/lanner-calc.sock".to_owned());
    let desk = Arc::new(Desk::default());
    let server = lanner::Server::new().with_auth(key::server_auth()?);
    server.publish(
        "calc",
        // Version 2 of the calculator (which serves version-1 clients too) and the memory.
        lanner::Object::new(CalculatorV2Stub::new(desk.clone())).with(MemoryStub::new(desk)),
    );
    let listening = server.listen(&endpoint).await?;
    println!("serving {}", listening.endpoint().object_url("calc"));
    tokio::signal::ctrl_c().await.ok();
    Ok(())
}
