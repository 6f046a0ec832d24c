//! The interfaces shared by `factory_server` and `factory_client`: objects handed out as
//! results, callbacks handed in as arguments, and a class clients create instances of.

use lanner::ObjRef;

/// The class `factory_server` registers: instances are counters starting at 0.
pub(crate) const COUNTER_CLASS: lanner::ClassId = lanner::ClassId::named("lanner.examples.Counter");

/// A counter.
#[lanner::interface(name = "lanner.examples.Counter")]
pub trait Counter {
    /// Adds one and returns the new value.
    async fn increment(&self) -> Result<u64, lanner::Error>;
}

/// Hears about events (implemented by the client, called by the server).
#[lanner::interface(name = "lanner.examples.Listener")]
pub trait Listener {
    /// Something happened. One-way: the server does not wait for the listener to run it,
    /// so a slow listener does not hold up the server's caller.
    #[oneway]
    async fn notify(&self, event: String) -> Result<(), lanner::Error>;
}

/// Makes counters and tells listeners.
#[lanner::interface(name = "lanner.examples.Factory")]
pub trait Factory {
    /// A new counter starting at `start`, handed out as a reference.
    async fn counter(&self, start: u64) -> Result<ObjRef<CounterProxy>, lanner::Error>;
    /// Calls `listener` back (over the caller's own connection) once per counter made
    /// from now on, for as long as the caller's connection lasts.
    async fn subscribe(&self, listener: ObjRef<ListenerProxy>) -> Result<(), lanner::Error>;
}
