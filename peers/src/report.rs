//! The JSON report: the shape of `lanner bench --json` (see `docs/BENCH.md`) plus the
//! framework's name.

use serde::Serialize;

/// The machine and build, described as `lanner bench` describes them.
pub use lanner_cli::bench::Env;

/// One run of one workload with one framework over one transport.
#[derive(Debug, Serialize)]
pub struct Report<R> {
    /// `tonic`, `tarpc` or `capnp`.
    pub framework: &'static str,
    /// `pingpong` or `throughput`.
    pub workload: &'static str,
    /// `tcp` or `unix`.
    pub transport: &'static str,
    /// `split`, `same` or `free`.
    pub placement: &'static str,
    /// How a waiting side waits: the frameworks' own (Tokio's epoll, sleeping at once).
    pub wait: &'static str,
    /// How the server runs the framework.
    pub server_runtime: &'static str,
    /// The measurements (a list of rows).
    pub rows: R,
    /// The machine and build.
    pub env: Env,
}
