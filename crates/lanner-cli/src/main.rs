//! The `lanner` command: `lanner demo`, `lanner bench …`, and `lanner serve` (the server
//! process the other two start).

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use lanner_cli::{bench, demo, serve, soak};

/// Lanner: distributed objects at the speed of the medium.
#[derive(Debug, Parser)]
#[command(name = "lanner", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Start a server process and call an object with two interfaces from this one, then
    /// show Lanner's latency next to the raw socket's.
    Demo(demo::DemoArgs),
    /// Measure Lanner against the raw medium (see docs/BENCH.md).
    Bench(bench::BenchArgs),
    /// Calls from many clients while the server is killed and restarted at random;
    /// checks that every call succeeded with the right answer or failed with an error,
    /// and that nothing leaked (not part of the test suite: run it by hand).
    Soak(soak::SoakArgs),
    /// Serve the demo and benchmark objects (started by `demo` and `bench`), and the raw
    /// echo baseline next to them.
    #[command(hide = true)]
    Serve(serve::ServeArgs),
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let result = match &cli.command {
        Command::Demo(args) => demo::run(args),
        Command::Bench(args) => bench::run(args),
        Command::Soak(args) => soak::run(args),
        Command::Serve(args) => serve::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("lanner: {error}");
            ExitCode::FAILURE
        }
    }
}
