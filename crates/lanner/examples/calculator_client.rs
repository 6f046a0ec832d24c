//! Calls the calculator served by `calculator_server`.

#[path = "shared/calculator.rs"]
mod calculator;
#[path = "shared/key.rs"]
mod key;

use calculator::{CalcError, Calculator, CalculatorProxy, Memory, MemoryProxy};
use lanner::Proxy;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "unix:///tmp/lanner-calc.sock/calc".to_owned());
    let client = lanner::Client::new().with_auth(key::client_auth()?);
    let calc: CalculatorProxy = client.connect(&url).await?;
    println!("2 + 40 = {:?}", calc.add(2, 40).await);
    match calc.divide(1, 0).await {
        Err(CalcError::DivisionByZero) => println!("1 / 0 = division by zero, as typed"),
        other => println!("1 / 0 = {other:?}"),
    }
    // The reference knows the object's interfaces: no round trip here.
    let memory: MemoryProxy = calc.query()?;
    memory.store(42).await?;
    println!("recall = {}", memory.recall().await?);
    Ok(())
}
