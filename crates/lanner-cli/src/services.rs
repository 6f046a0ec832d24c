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
    /// Takes `payload` and returns its length.
    async fn absorb(&self, payload: Bytes) -> Result<u64, lanner::Error>;
    /// Takes `payload` without answering (a one-way call): the bandwidth benchmark's
    /// workload. The object counts the bytes it was given.
    #[oneway]
    async fn sink(&self, payload: Bytes) -> Result<(), lanner::Error>;
    /// How many bytes [`Echo::sink`] was given on this object so far.
    async fn sunk(&self) -> Result<u64, lanner::Error>;
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
#[derive(Default)]
pub struct EchoService {
    /// Bytes given to [`Echo::sink`].
    sunk: AtomicU64,
}

impl Echo for EchoService {
    async fn echo(&self, payload: Bytes) -> Result<Bytes, lanner::Error> {
        Ok(payload)
    }

    async fn absorb(&self, payload: Bytes) -> Result<u64, lanner::Error> {
        Ok(payload.len() as u64)
    }

    async fn sink(&self, payload: Bytes) -> Result<(), lanner::Error> {
        self.sunk.fetch_add(payload.len() as u64, Ordering::Relaxed);
        Ok(())
    }

    async fn sunk(&self) -> Result<u64, lanner::Error> {
        Ok(self.sunk.load(Ordering::Relaxed))
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

/// The scale benchmark's 1 × 1 object: one interface with one method.
#[lanner::interface(name = "lanner.bench.Null")]
pub trait Null {
    /// Does nothing; returns the object's index ([`BASE_INDEX`] for the 1 × 1 object).
    async fn null(&self) -> Result<u32, lanner::Error>;
}

// The scale benchmark's interface `Wide` (methods `m000` … `m199`, each returning the
// object's index), its implementation by `ScaleObject`, and `call_wide`, which calls a
// method by ordinal: written by build.rs.
include!(concat!(env!("OUT_DIR"), "/wide.rs"));

/// How many methods [`Wide`] has.
pub const WIDE_METHODS: usize = <WideProxy as lanner::Proxy>::METHODS.len();

/// What the 1 × 1 object's method returns.
pub const BASE_INDEX: u32 = u32::MAX;

/// The name the scale benchmark's 1 × 1 object is published under.
pub const SCALE_BASE_NAME: &str = "scale.base";

/// The name the scale benchmark's object number `index` is published under. (Not
/// `scale/<index>`: a `unix://` URL takes its last path segment as the name.)
pub fn scale_name(index: u32) -> String {
    format!("scale.{index}")
}

/// An object of the scale benchmark, knowing its index.
pub struct ScaleObject {
    index: u32,
}

impl Null for ScaleObject {
    async fn null(&self) -> Result<u32, lanner::Error> {
        Ok(self.index)
    }
}

/// Publishes the scale benchmark's objects: `objects` objects implementing [`Wide`] as
/// [`scale_name`]`(0)` … `(objects - 1)`, and one implementing [`Null`] as
/// [`SCALE_BASE_NAME`].
pub fn publish_scale(server: &lanner::Server, objects: u32) {
    let base = Arc::new(ScaleObject { index: BASE_INDEX });
    server.publish(SCALE_BASE_NAME, lanner::Object::new(NullStub::new(base)));
    for index in 0..objects {
        let object = Arc::new(ScaleObject { index });
        server.publish(
            scale_name(index),
            lanner::Object::new(WideStub::new(object)),
        );
    }
}

/// The name the echo object is published under, free-threaded (calls run concurrently).
pub const ECHO_NAME: &str = "echo";

/// The name the echo object is published under a second time, in an apartment (calls run
/// one at a time, in arrival order): the apartment benchmark's serialized side.
pub const APARTMENT_ECHO_NAME: &str = "echo.apartment";

/// Publishes the echo object as [`ECHO_NAME`] and again, in an apartment, as
/// [`APARTMENT_ECHO_NAME`], and the demo object as `calc`.
pub fn publish_all(server: &lanner::Server) {
    let echo = Arc::new(EchoService::default());
    server.publish(ECHO_NAME, lanner::Object::new(EchoStub::new(echo.clone())));
    server.publish(
        APARTMENT_ECHO_NAME,
        lanner::Object::new(EchoStub::new(echo)).in_apartment(),
    );
    let demo = Arc::new(DemoService::default());
    server.publish(
        "calc",
        lanner::Object::new(CalculatorStub::new(demo.clone())).with(GreeterStub::new(demo)),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use lanner::Proxy;

    #[test]
    fn wide_methods_are_numbered_in_ordinal_order() {
        assert_eq!(WIDE_METHODS, 200);
        for (ordinal, method) in WideProxy::METHODS.iter().enumerate() {
            assert_eq!(usize::from(method.ordinal), ordinal);
            assert_eq!(method.name, format!("m{ordinal:03}"));
        }
    }

    #[tokio::test(flavor = "current_thread")]
    async fn call_wide_reaches_the_method_it_names() {
        let server = lanner::Server::new();
        publish_scale(&server, 3);
        let _listening = server.listen("mem://scale-services-test").await.unwrap();
        let client = lanner::Client::new();
        let wide: WideProxy = client
            .connect(&format!("mem://scale-services-test/{}", scale_name(2)))
            .await
            .unwrap();
        for method in [0, 1, 199] {
            assert_eq!(call_wide(&wide, method).await, Ok(2));
        }
        let error = call_wide(&wide, 200).await.unwrap_err();
        assert_eq!(error.kind(), lanner::ErrorKind::InvalidArgument);
        let base: NullProxy = client
            .connect(&format!("mem://scale-services-test/{SCALE_BASE_NAME}"))
            .await
            .unwrap();
        assert_eq!(base.null().await, Ok(BASE_INDEX));
    }

    #[tokio::test(flavor = "current_thread")]
    async fn sink_counts_what_one_way_calls_gave_it() {
        let server = lanner::Server::new();
        publish_all(&server);
        let _listening = server.listen("mem://sink-services-test").await.unwrap();
        let client = lanner::Client::new();
        let echo: EchoProxy = client
            .connect(&format!("mem://sink-services-test/{ECHO_NAME}"))
            .await
            .unwrap();
        let before = echo.sunk().await.unwrap();
        for size in [0, 1, 4096, 65536] {
            echo.sink(Bytes::from(vec![1u8; size])).await.unwrap();
        }
        // Calls on one connection arrive in order: the one-way calls ran before this one.
        assert_eq!(echo.sunk().await.unwrap() - before, 4096 + 65536 + 1);
    }
}
