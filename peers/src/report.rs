//! The JSON report: the shape of `lanner bench --json` (see `shared/BENCH.md`) plus the
//! framework's name.

use serde::Serialize;

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

/// The machine and build a result came from.
#[derive(Debug, Serialize)]
pub struct Env {
    /// CPUs online.
    pub cores: usize,
    /// Kernel release.
    pub kernel: String,
    /// `release` or `debug`.
    pub profile: &'static str,
}

impl Env {
    /// Describes this machine and build.
    pub fn current() -> Env {
        // SAFETY: sysconf has no memory-safety preconditions.
        let online = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
        Env {
            cores: usize::try_from(online).unwrap_or(1).max(1),
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .map(|s| s.trim().to_owned())
                .unwrap_or_else(|_| "unknown".into()),
            profile: if cfg!(debug_assertions) {
                "debug"
            } else {
                "release"
            },
        }
    }
}
