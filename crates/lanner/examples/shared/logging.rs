//! Logging for the example servers: what Lanner logs (refused connections, failed
//! authentications, one-way calls that failed) goes to stderr, at `info` and above unless
//! `RUST_LOG` says otherwise (`RUST_LOG=debug`, `RUST_LOG=lanner=warn`, …).

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

/// Starts logging to stderr (stdout stays the example's own output).
pub(crate) fn init() {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
}
