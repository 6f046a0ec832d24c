//! Whether the tokio runtime a connection runs on still runs, and what happens when it
//! stops while the connection is still in use.
//!
//! A connection is served by tasks on the runtime it was made on (its reader, its
//! flusher, calls that wait). A client kept across runtimes (a test harness's
//! `#[tokio::test]`s, a runtime built per request) outlives that runtime; with it gone
//! nothing receives or flushes for the connection, and a timer made on it panics when
//! polled. A watch task on the runtime notices: tokio drops a task without finishing it
//! only when its runtime shuts down (or had shut down when the task was spawned). The
//! task ends on its own when the connection is dropped.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};

use tokio::sync::oneshot;

use super::Connection;

/// What a connection keeps of its watch.
pub(super) struct RuntimeWatch {
    /// Set when the runtime shut down while the connection existed.
    gone: Arc<AtomicBool>,
    /// Dropped with the connection: the watch task then ends.
    _connection_alive: oneshot::Sender<()>,
}

/// The watch task's half, to start once the connection exists ([`Watching::start`]).
pub(super) struct Watching {
    gone: Arc<AtomicBool>,
    connection_dropped: oneshot::Receiver<()>,
}

/// A watch for a connection about to be made.
pub(super) fn new() -> (RuntimeWatch, Watching) {
    let gone = Arc::new(AtomicBool::new(false));
    let (alive, dropped) = oneshot::channel();
    (
        RuntimeWatch {
            gone: gone.clone(),
            _connection_alive: alive,
        },
        Watching {
            gone,
            connection_dropped: dropped,
        },
    )
}

impl RuntimeWatch {
    /// Whether the runtime still runs (as far as its tasks can tell: a runtime that
    /// nobody drives, a current-thread runtime outside `block_on`, counts as running).
    pub(super) fn runtime_alive(&self) -> bool {
        !self.gone.load(Ordering::Acquire)
    }
}

impl Watching {
    /// Spawns the watch task on the current runtime (the connection's).
    pub(super) fn start(self, connection: Weak<Connection>) {
        let shut_down = OnShutDown {
            gone: self.gone,
            connection: Some(connection),
        };
        let dropped = self.connection_dropped;
        tokio::spawn(async move {
            let mut shut_down = shut_down;
            let _ = dropped.await;
            // The connection is gone; the runtime runs.
            shut_down.connection = None;
        });
    }
}

/// Held by the watch task: dropped with `connection` still set only when the runtime
/// shuts down.
struct OnShutDown {
    gone: Arc<AtomicBool>,
    connection: Option<Weak<Connection>>,
}

impl Drop for OnShutDown {
    fn drop(&mut self) {
        let Some(connection) = self.connection.take() else {
            return;
        };
        self.gone.store(true, Ordering::Release);
        if let Some(connection) = connection.upgrade() {
            connection.runtime_shut_down();
        }
    }
}
