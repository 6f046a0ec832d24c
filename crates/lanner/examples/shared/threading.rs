//! The interfaces of the threading example: one object served in an apartment, one
//! free-threaded.

/// An append-only log, served in an apartment: its calls run one at a time, in arrival
/// order, so its state needs no lock.
#[lanner::interface(name = "lanner.examples.Journal")]
pub trait Journal {
    /// Appends `line` (in two steps, with an await between them); returns the new length.
    async fn append(&self, line: String) -> Result<u64, lanner::Error>;
    /// Every line so far.
    async fn lines(&self) -> Result<Vec<String>, lanner::Error>;
}

/// A free-threaded worker pool: its calls run concurrently.
#[lanner::interface(name = "lanner.examples.Pool")]
pub trait Pool {
    /// Works for `ms` milliseconds; returns the most calls that were working at once
    /// since the pool was last idle (so far in the batch this call is part of).
    async fn work(&self, ms: u64) -> Result<u32, lanner::Error>;
    /// Answers without waiting: served inline, run to completion on the thread that
    /// received the request.
    async fn ping(&self) -> Result<(), lanner::Error>;
}
