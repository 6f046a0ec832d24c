//! `lanner bench`: the public API measured against the raw medium in the same run, client
//! and server in separate processes (see `docs/BENCH.md`).

use std::time::Duration;

use clap::{Args, ValueEnum};
use serde::Serialize;

use crate::auth_arg::AuthArg;
use crate::placement::Placement;
use crate::transport_arg::TransportArg;

pub mod apartment;
pub mod bandwidth;
pub mod firstcall;
pub mod floor;
pub mod idle;
pub mod payload;
pub mod pingpong;
pub mod raw_client;
pub mod scale;
pub mod secure;
pub mod setup;
pub mod stats;
pub mod throughput;

/// Benchmark workloads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Workload {
    /// Sequential echo calls of a byte payload vs the same ping-pong on the raw medium.
    Pingpong,
    /// One-way bulk transfer: calls taking a payload vs raw one-way messages.
    Bandwidth,
    /// Null-call round trips with authentication (--auth) vs without (none), after
    /// connecting.
    Secure,
    /// An object with two interfaces: the first call on the second interface (on a fresh
    /// connection) vs later calls, in time and in messages.
    Firstcall,
    /// Null-call round trips on random (object, method) pairs of --objects objects with
    /// --methods methods vs on a one-method object.
    Scale,
    /// Null-call round trips on an apartment object (calls one at a time, in arrival
    /// order) vs on a free-threaded one, over one connection.
    Apartment,
    /// Null calls with --concurrency calls outstanding on one connection per client
    /// thread (--threads) vs null messages pipelined as deep on the raw medium.
    Throughput,
    /// Null round trips over shm in one alternated run: the raw ring, Lanner's protocol
    /// core alone on the same rings (no runtime), and Lanner's own null call; the floor
    /// under `pingpong --sizes 0`, and how far above it Lanner is.
    Floor,
}

/// Options of `lanner bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// What to measure.
    #[arg(value_enum)]
    pub workload: Workload,
    /// Transport.
    #[arg(long, value_enum, default_value = "unix")]
    pub transport: TransportArg,
    /// Payload sizes in bytes.
    #[arg(long, value_delimiter = ',', default_value = "0,64,4096,65536,1048576")]
    pub sizes: Vec<usize>,
    /// Measured iterations per size (fewer for large sizes: at most 1 GiB per side); for
    /// firstcall, trials (each a fresh connection) [default: 10000; firstcall: 200].
    #[arg(long)]
    pub iters: Option<usize>,
    /// Seconds per size (throughput: per row) and side, for workloads that run for a time
    /// (bandwidth, throughput).
    #[arg(long, default_value_t = 2.0)]
    pub secs: f64,
    /// Warm-up iterations per size.
    #[arg(long, default_value_t = 1_000)]
    pub warmup: usize,
    /// Process placement.
    #[arg(long, value_enum, default_value = "split")]
    pub placement: Placement,
    /// Spin budget in microseconds before a waiting side sleeps (0: pure blocking).
    #[arg(long, default_value_t = 50)]
    pub spin_us: u64,
    /// Never sleep: poll until the peer answers (both sides; overrides --spin-us).
    #[arg(long)]
    pub busy_poll: bool,
    /// Authentication measured by the secure workload against none [default: psk over
    /// tcp, peercred on unix and shm].
    #[arg(long, value_enum)]
    pub auth: Option<AuthArg>,
    /// For scale: objects hosted (each resolved once by the client).
    #[arg(long, default_value_t = 100_000)]
    pub objects: u32,
    /// For scale: methods called (the first M of the hosted interface's 200).
    #[arg(long, default_value_t = 200)]
    pub methods: usize,
    /// For throughput: calls (and raw messages) kept outstanding on one connection.
    #[arg(long, value_delimiter = ',', default_value = "1,8,32,128")]
    pub concurrency: Vec<usize>,
    /// For throughput: client threads, each with its own connection (and raw connection);
    /// the server runs as many runtime workers as the largest value.
    #[arg(long, value_delimiter = ',', default_value = "1")]
    pub threads: Vec<usize>,
    /// For pingpong and bandwidth: start each payload this many bytes (0 to 63) past a
    /// 64-byte boundary, for Lanner and the raw baseline alike [default: where the
    /// allocator puts it]. How a payload lies against a cache line can decide how fast the
    /// kernel copies it (see `bench::payload`).
    #[arg(long, value_parser = clap::value_parser!(u8).range(0..64))]
    pub payload_offset: Option<u8>,
    /// Print one JSON object on stdout and nothing else.
    #[arg(long)]
    pub json: bool,
}

/// Measured iterations when `--iters` is not given, for most workloads.
pub const DEFAULT_ITERS: usize = 10_000;

impl BenchArgs {
    /// `--iters`, or `default` if it was not given.
    pub fn iters_or(&self, default: usize) -> usize {
        self.iters.unwrap_or(default)
    }

    /// The spin budget.
    pub fn spin(&self) -> Duration {
        if self.busy_poll {
            lanner::ConnectionOptions::BUSY_POLL
        } else {
            Duration::from_micros(self.spin_us)
        }
    }

    /// The wait strategy, as reported.
    pub fn wait(&self) -> String {
        if self.busy_poll {
            "busy-poll".to_owned()
        } else if self.spin_us == 0 {
            "block".to_owned()
        } else {
            format!("spin {}us then sleep", self.spin_us)
        }
    }
}

/// What every report starts with: the workload and how it ran.
#[derive(Debug, Serialize)]
pub struct RunInfo {
    workload: &'static str,
    transport: &'static str,
    placement: &'static str,
    wait: String,
    /// `--payload-offset`, if given.
    #[serde(skip_serializing_if = "Option::is_none")]
    payload_offset: Option<u8>,
}

impl RunInfo {
    /// `workload` run with `args`.
    pub fn new(workload: &'static str, args: &BenchArgs) -> RunInfo {
        RunInfo {
            workload,
            transport: args.transport.name(),
            placement: args.placement.name(),
            wait: args.wait(),
            payload_offset: args.payload_offset,
        }
    }

    /// The readable report's first line; `detail` goes inside its parentheses.
    pub fn title(&self, detail: &str) -> String {
        let offset = self
            .payload_offset
            .map(|offset| format!(", payloads {offset} bytes past a line"))
            .unwrap_or_default();
        format!(
            "{} over {} (placement {}, wait: {}{offset}{detail})",
            self.workload, self.transport, self.placement, self.wait
        )
    }
}

/// A report that is rows and nothing more: the shape of most workloads' JSON.
#[derive(Debug, Serialize)]
pub struct RowsReport<R> {
    /// The workload and how it ran.
    #[serde(flatten)]
    pub run: RunInfo,
    /// One row per measured case.
    pub rows: Vec<R>,
    /// The machine.
    pub env: Env,
}

impl<R> RowsReport<R> {
    /// `rows` measured by `workload` run with `args`, on this machine.
    pub fn new(workload: &'static str, args: &BenchArgs, rows: Vec<R>) -> RowsReport<R> {
        RowsReport {
            run: RunInfo::new(workload, args),
            rows,
            env: Env::current(),
        }
    }
}

/// Prints `report` as one JSON object with `--json`, otherwise as `table` prints it.
pub fn print_report(
    args: &BenchArgs,
    report: &impl Serialize,
    table: impl FnOnce(),
) -> serde_json::Result<()> {
    if args.json {
        println!("{}", serde_json::to_string(report)?);
    } else {
        table();
    }
    Ok(())
}

/// A progress line on stderr for long steps, redrawn in place as a count moves from 0 to
/// its total; silent with `--json`.
pub struct Progress {
    label: String,
    total: usize,
    shown_percent: Option<usize>,
    enabled: bool,
}

impl Progress {
    /// Progress of `label`, out of `total`, shown unless `args` asks for JSON.
    pub fn new(args: &BenchArgs, label: impl Into<String>, total: usize) -> Progress {
        Progress {
            label: label.into(),
            total: total.max(1),
            shown_percent: None,
            enabled: !args.json,
        }
    }

    /// `done` of the total are done (redrawn at each whole percent).
    pub fn update(&mut self, done: usize) {
        let percent = done * 100 / self.total;
        if self.enabled && self.shown_percent != Some(percent) {
            self.shown_percent = Some(percent);
            eprint!("\r  {}: {done}/{} ({percent}%)", self.label, self.total);
        }
    }

    /// Ends the line.
    pub fn finish(&mut self) {
        if self.enabled && self.shown_percent.is_some() {
            eprintln!();
        }
        self.shown_percent = None;
    }
}

/// The machine and build a result came from.
#[derive(Debug, Serialize)]
pub struct Env {
    /// CPUs available.
    pub cores: usize,
    /// Kernel release.
    pub kernel: String,
    /// `release` or `debug`.
    pub profile: &'static str,
    /// How much tasks waited for a CPU lately, when the result was reported (absent where
    /// the kernel does not tell): a few percent means the run had competition and its
    /// figures are noisier than usual.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_pressure: Option<crate::procfs::CpuPressure>,
}

impl Env {
    /// Describes this machine and build.
    pub fn current() -> Env {
        Env {
            cores: online_cpus(),
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .map(|s| s.trim().to_owned())
                .unwrap_or_else(|_| "unknown".into()),
            profile: if cfg!(debug_assertions) {
                "debug"
            } else {
                "release"
            },
            cpu_pressure: crate::procfs::cpu_pressure().ok(),
        }
    }
}

/// CPUs online on the machine (not the affinity mask: the bench pins itself).
fn online_cpus() -> usize {
    // SAFETY: sysconf has no memory-safety preconditions.
    let online = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    usize::try_from(online).unwrap_or(1).max(1)
}

/// Runs `lanner bench`.
pub fn run(args: &BenchArgs) -> Result<(), Box<dyn std::error::Error>> {
    if args.payload_offset.is_some()
        && !matches!(args.workload, Workload::Pingpong | Workload::Bandwidth)
    {
        return Err(
            "--payload-offset applies to pingpong and bandwidth, the workloads that send payloads"
                .into(),
        );
    }
    match args.workload {
        Workload::Pingpong => pingpong::run(args),
        Workload::Bandwidth => bandwidth::run(args),
        Workload::Secure => secure::run(args),
        Workload::Firstcall => firstcall::run(args),
        Workload::Scale => scale::run(args),
        Workload::Apartment => apartment::run(args),
        Workload::Throughput => throughput::run(args),
        Workload::Floor => floor::run(args),
    }
}
