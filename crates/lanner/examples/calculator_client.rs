//! Calls the calculator served by `calculator_server`.

#[path = "shared/calculator.rs"]
mod calculator;
#[path = "shared/key.rs"]
mod key;

use calculator::{CalcError, Calculator, CalculatorProxy, CalculatorV2, CalculatorV2Proxy};
use calculator::{Memory, MemoryProxy};
use lanner::Proxy;

fn main() {
    if let Err(error) = run() {
        eprintln!("error: {error}");
        std::process::exit(1);
    }
}

#[tokio::main]
async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "unix:///tmp/lanner-calc.sock/calc".to_owned());
    let client = lanner::Client::new().with_auth(key::client_auth()?);
    let calc: CalculatorProxy = client.connect(&url).await?;
    println!("2 + 40 = {}", calc.add(2, 40).await?);
    match calc.divide(1, 0).await {
        Err(CalcError::DivisionByZero) => println!("1 / 0 = division by zero, as typed"),
        Err(other) => return Err(other.into()),
        Ok(value) => println!("1 / 0 = {value} (unexpected)"),
    }
    // The reference knows the object's interfaces: no round trip here.
    let memory: MemoryProxy = calc.query()?;
    memory.store(42).await?;
    println!("recall = {}", memory.recall().await?);
    // A newer server may serve version 2 of the calculator: use it if it is there.
    match calc.query::<CalculatorV2Proxy>() {
        Ok(v2) => println!("2 ^ 10 = {} (version 2)", v2.power(2, 10).await?),
        Err(_) => println!("the server serves version 1 only"),
    }
    Ok(())
}
