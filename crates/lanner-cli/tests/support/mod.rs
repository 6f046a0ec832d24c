//! Helpers for tests that talk to a real `lanner serve` process.

#![allow(dead_code)]

use std::path::Path;
use std::time::Duration;

use lanner_cli::server_process::ServerProcess;
use lanner_cli::transport_arg::TransportArg;

/// Every transport between processes.
pub(crate) const TRANSPORTS: [TransportArg; 3] =
    [TransportArg::Tcp, TransportArg::Unix, TransportArg::Shm];

/// The transports that are byte streams, for tests that write raw bytes to a socket.
pub(crate) const STREAM_TRANSPORTS: [TransportArg; 2] = [TransportArg::Tcp, TransportArg::Unix];

/// Starts `lanner serve` on `transport` (no pinning, default spin).
pub(crate) fn server(transport: TransportArg) -> ServerProcess {
    ServerProcess::spawn_program(
        Path::new(env!("CARGO_BIN_EXE_lanner")),
        transport,
        None,
        Duration::from_micros(50),
    )
    .expect("the lanner server process starts")
}

/// A multi-threaded runtime for a test.
pub(crate) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

/// A fresh client (not the global one), so tests do not share connections.
pub(crate) fn client() -> lanner::Client {
    lanner::Client::new()
}
