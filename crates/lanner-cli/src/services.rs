//! The interfaces and objects the demo and the benchmarks serve.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use serde::{Deserialize, Serialize};

/// Echoes a bulk payload: the pingpong benchmark's workload.
#[lanner::interface(name = "lanner.bench.Echo")]
pub trait Echo {
    /// Returns `payload` unchanged (no copy on either side).
    async fn echo(&self, payload: Bytes) -> Result<Bytes, lanner::Error>;
    /// Takes `payload` and returns its length: the bandwidth benchmark's workload.
    async fn absorb(&self, payload: Bytes) -> Result<u64, lanner::Error>;
}

/// Arithmetic with a typed application error: the demo's first interface.
#[lanner::interface(name = "lanner.demo.Calculator")]
pub trait Calculator {
    /// `a + b`, or an overflow error.
    async fn add(&self, a: i64, b: i64) -> Result<i64, CalcError>;
    /// `a / b`, or a division-by-zero error.
    async fn divide(&self, a: i64, b: i64) -> Result<i64, CalcError>;
}

/// Greetings: the demo's second interface, implemented by the same object.
#[lanner::interface(name = "lanner.demo.Greeter")]
pub trait Greeter {
    /// A greeting for `name`, counting how many were made.
    async fn greet(&self, name: String) -> Result<String, lanner::Error>;
}

/// The calculator's application error.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum CalcError {
    /// Tried to divide by zero.
    DivisionByZero,
    /// The result does not fit in an i64.
    Overflow,
    /// The call itself failed.
    Rpc(lanner::Error),
}

impl From<lanner::Error> for CalcError {
    fn from(error: lanner::Error) -> Self {
        CalcError::Rpc(error)
    }
}

impl fmt::Display for CalcError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CalcError::DivisionByZero => f.write_str("division by zero"),
            CalcError::Overflow => f.write_str("overflow"),
            CalcError::Rpc(error) => write!(f, "call failed: {error}"),
        }
    }
}

impl std::error::Error for CalcError {}

/// The echo object.
pub struct EchoService;

impl Echo for EchoService {
    async fn echo(&self, payload: Bytes) -> Result<Bytes, lanner::Error> {
        Ok(payload)
    }

    async fn absorb(&self, payload: Bytes) -> Result<u64, lanner::Error> {
        Ok(payload.len() as u64)
    }
}

/// The demo object: one implementation, two interfaces.
#[derive(Default)]
pub struct DemoService {
    greetings: AtomicU64,
}

impl Calculator for DemoService {
    async fn add(&self, a: i64, b: i64) -> Result<i64, CalcError> {
        a.checked_add(b).ok_or(CalcError::Overflow)
    }

    async fn divide(&self, a: i64, b: i64) -> Result<i64, CalcError> {
        if b == 0 {
            return Err(CalcError::DivisionByZero);
        }
        a.checked_div(b).ok_or(CalcError::Overflow)
    }
}

impl Greeter for DemoService {
    async fn greet(&self, name: String) -> Result<String, lanner::Error> {
        let count = self.greetings.fetch_add(1, Ordering::Relaxed) + 1;
        Ok(format!(
            "hello, {name} (greeting #{count} from pid {})",
            std::process::id()
        ))
    }
}

/// Publishes the echo object as `echo` and the demo object as `calc`.
pub fn publish_all(server: &lanner::Server) {
    server.publish(
        "echo",
        lanner::Object::new(EchoStub::new(Arc::new(EchoService))),
    );
    let demo = Arc::new(DemoService::default());
    server.publish(
        "calc",
        lanner::Object::new(CalculatorStub::new(demo.clone())).with(GreeterStub::new(demo)),
    );
}
