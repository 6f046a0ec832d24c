//! The interface of `keeper_server`: it keeps a counter someone hands it. The counter
//! lives in another process (`factory_server`), so handing it over is a third-party
//! hand-off.

use lanner::ObjRef;

use crate::factory::CounterProxy;

/// Keeps one counter and increments it on request.
#[lanner::interface(name = "lanner.examples.Keeper")]
pub trait Keeper {
    /// Keeps `counter` (claiming it at its own server) and increments it once.
    async fn keep(&self, counter: ObjRef<CounterProxy>) -> Result<u64, lanner::Error>;
    /// Increments the kept counter.
    async fn bump(&self) -> Result<u64, lanner::Error>;
}
