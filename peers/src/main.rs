//! `peers`: Lanner's pingpong and throughput workloads with tonic (gRPC), tarpc and
//! capnp-rpc, measured the way `lanner bench` measures Lanner (server in a separate
//! process, `--placement split` pins the client to CPU 0 and the server to CPU 1, p50/p99
//! of sequential calls after a warm-up). See `README.md`.

mod capnp_bench;
mod endpoint;
mod report;
mod server_process;
mod tarpc_bench;
mod tonic_bench;
mod workload;

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand, ValueEnum};
use serde::Serialize;

use endpoint::{Listener, Transport};
// Placement and percentiles are Lanner's own, so both sides are measured alike.
use lanner_cli::bench::stats;
use lanner_cli::placement::{Placement, pin_current_thread};
use report::{Env, Report};
use server_process::ServerProcess;
use workload::{BoxError, DEFAULT_ITERS, EchoClient, LatencyRow, ThroughputRow};

/// Lanner's workloads with its peers.
#[derive(Debug, Parser)]
#[command(name = "peers", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Measures one workload with one framework over one transport.
    Bench(BenchArgs),
    /// Serves the echo service (started by `bench`; stops when stdin closes).
    #[command(hide = true)]
    Serve(ServeArgs),
}

/// An RPC framework compared with Lanner.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Framework {
    /// gRPC with tonic (HTTP/2, protobuf).
    Tonic,
    /// tarpc with its serde transport (bincode).
    Tarpc,
    /// Cap'n Proto RPC (two-party).
    Capnp,
}

impl Framework {
    /// The name used on the command line and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            Framework::Tonic => "tonic",
            Framework::Tarpc => "tarpc",
            Framework::Capnp => "capnp",
        }
    }

    /// How its server runs.
    fn server_runtime(self) -> &'static str {
        match self {
            Framework::Tonic | Framework::Tarpc => "tokio multi-thread",
            Framework::Capnp => "tokio current-thread + LocalSet (capnp-rpc is single-threaded)",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Workload {
    /// Sequential echo calls of each of --sizes: p50/p99 round trip.
    Pingpong,
    /// Null calls with --concurrency calls outstanding on one connection: calls/s.
    Throughput,
}

impl Workload {
    fn name(self) -> &'static str {
        match self {
            Workload::Pingpong => "pingpong",
            Workload::Throughput => "throughput",
        }
    }
}

#[derive(Debug, Args)]
struct BenchArgs {
    /// What to measure.
    #[arg(value_enum)]
    workload: Workload,
    /// The framework.
    #[arg(long, value_enum)]
    framework: Framework,
    /// Transport.
    #[arg(long, value_enum, default_value = "tcp")]
    transport: Transport,
    /// Payload sizes in bytes (pingpong).
    #[arg(long, value_delimiter = ',', default_value = "0,4096,65536,1048576")]
    sizes: Vec<usize>,
    /// Measured calls per size (fewer for large sizes: at most 1 GiB per size).
    #[arg(long, default_value_t = DEFAULT_ITERS)]
    iters: usize,
    /// Warm-up calls per size (at most a quarter of the 1 GiB cap).
    #[arg(long, default_value_t = 1_000)]
    warmup: usize,
    /// Calls outstanding on the connection (throughput); one row each.
    #[arg(long, value_delimiter = ',', default_value = "32")]
    concurrency: Vec<usize>,
    /// Measured seconds per concurrency (throughput).
    #[arg(long, default_value_t = 2.0)]
    secs: f64,
    /// Warm-up seconds per concurrency (throughput).
    #[arg(long, default_value_t = 0.5)]
    warmup_secs: f64,
    /// Process placement.
    #[arg(long, value_enum, default_value = "split")]
    placement: Placement,
    /// Print one JSON object on stdout and nothing else.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
struct ServeArgs {
    #[arg(long, value_enum)]
    framework: Framework,
    #[arg(long, value_enum)]
    transport: Transport,
    /// Pin the server to this CPU.
    #[arg(long)]
    cpu: Option<usize>,
}

/// The rows of either workload.
#[derive(Debug, Serialize)]
#[serde(untagged)]
enum Rows {
    Latency(Vec<LatencyRow>),
    Throughput(Vec<ThroughputRow>),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Bench(args) => bench(&args),
        Command::Serve(args) => serve(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("peers: {error}");
            ExitCode::FAILURE
        }
    }
}

fn bench(args: &BenchArgs) -> Result<(), BoxError> {
    if args.secs <= 0.0 || args.warmup_secs < 0.0 {
        return Err("--secs must be positive and --warmup-secs not negative".into());
    }
    let (client_cpu, server_cpu) = args.placement.cpus();
    if let Some(cpu) = client_cpu {
        pin_current_thread(cpu).map_err(|e| format!("cannot pin the client to CPU {cpu}: {e}"))?;
    }
    let server = ServerProcess::spawn(args.framework, args.transport, server_cpu)?;
    // The client runs like a latency-critical caller: one thread, a current-thread
    // runtime (as Lanner's bench client), inside a LocalSet because capnp-rpc needs one.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let local = tokio::task::LocalSet::new();
    let endpoint = server.endpoint.clone();
    let rows = local.block_on(&runtime, async {
        match args.framework {
            Framework::Tonic => run(tonic_bench::Client::connect(&endpoint).await?, args).await,
            Framework::Tarpc => run(tarpc_bench::Client::connect(&endpoint).await?, args).await,
            Framework::Capnp => run(capnp_bench::Client::connect(&endpoint).await?, args).await,
        }
    });
    drop(local);
    drop(runtime);
    drop(server);
    let rows = rows.map_err(|e| {
        format!(
            "{} {} over {}: {e}",
            args.framework.name(),
            args.workload.name(),
            args.transport.name()
        )
    })?;
    let report = Report {
        framework: args.framework.name(),
        workload: args.workload.name(),
        transport: args.transport.name(),
        placement: args.placement.name(),
        wait: "framework default (tokio epoll: sleep at once)",
        server_runtime: args.framework.server_runtime(),
        rows,
        env: Env::current(),
    };
    if args.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        print_table(&report);
    }
    Ok(())
}

async fn run<C: EchoClient>(mut client: C, args: &BenchArgs) -> Result<Rows, BoxError> {
    match args.workload {
        Workload::Pingpong => Ok(Rows::Latency(
            workload::pingpong(&mut client, &args.sizes, args.iters, args.warmup).await?,
        )),
        Workload::Throughput => {
            let mut rows = Vec::new();
            for &concurrency in &args.concurrency {
                rows.push(
                    workload::throughput(&client, concurrency, args.warmup_secs, args.secs).await?,
                );
            }
            Ok(Rows::Throughput(rows))
        }
    }
}

fn print_table(report: &Report<Rows>) {
    println!(
        "{} {} over {} (placement {}, server: {})",
        report.framework,
        report.workload,
        report.transport,
        report.placement,
        report.server_runtime
    );
    match &report.rows {
        Rows::Latency(rows) => {
            println!(
                "{:>9}  {:>10}  {:>10}  {:>7}",
                "size", "p50", "p99", "calls"
            );
            for row in rows {
                println!(
                    "{:>9}  {:>8.1}us  {:>8.1}us  {:>7}",
                    row.size, row.p50_us, row.p99_us, row.iters
                );
            }
        }
        Rows::Throughput(rows) => {
            println!("{:>11}  {:>12}", "concurrency", "calls/s");
            for row in rows {
                println!("{:>11}  {:>12.0}", row.concurrency, row.calls_s);
            }
        }
    }
}

fn serve(args: &ServeArgs) -> Result<(), BoxError> {
    if let Some(cpu) = args.cpu {
        pin_current_thread(cpu).map_err(|e| format!("cannot pin the server to CPU {cpu}: {e}"))?;
    }
    let framework = args.framework;
    let runtime = match framework {
        Framework::Capnp => tokio::runtime::Builder::new_current_thread(),
        Framework::Tonic | Framework::Tarpc => tokio::runtime::Builder::new_multi_thread(),
    }
    .enable_all()
    .build()?;
    let local = tokio::task::LocalSet::new();
    let serving = async {
        let listener = Listener::bind(args.transport, framework.name()).await?;
        let endpoint = listener.endpoint()?;
        let socket_file = match &endpoint {
            endpoint::Endpoint::Unix(path) => Some(path.clone()),
            endpoint::Endpoint::Tcp(_) => None,
        };
        let mut stdout = std::io::stdout().lock();
        writeln!(
            stdout,
            "{}",
            serde_json::json!({ "endpoint": endpoint.to_string() })
        )?;
        stdout.flush()?;
        drop(stdout);
        exit_when_stdin_closes(socket_file);
        match framework {
            Framework::Tonic => tonic_bench::serve(listener).await,
            Framework::Tarpc => tarpc_bench::serve(listener).await,
            Framework::Capnp => capnp_bench::serve(listener).await,
        }
    };
    match framework {
        Framework::Capnp => local.block_on(&runtime, serving),
        Framework::Tonic | Framework::Tarpc => runtime.block_on(serving),
    }
}

/// Ends the process (removing its Unix socket file) once its parent closes stdin.
fn exit_when_stdin_closes(socket_file: Option<PathBuf>) {
    std::thread::spawn(move || {
        let mut sink = [0u8; 64];
        let mut stdin = std::io::stdin();
        while matches!(stdin.read(&mut sink), Ok(n) if n > 0) {}
        if let Some(path) = socket_file {
            let _ = std::fs::remove_file(path);
        }
        std::process::exit(0);
    });
}
