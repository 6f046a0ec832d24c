//! `lanner bench apartment`: null-call round trips (the echo of an empty payload) on an
//! apartment object (calls run one at a time, in arrival order) against the same calls on
//! a free-threaded object, measured in alternating blocks as the pingpong workload
//! alternates Lanner and raw.
//!
//! One server process publishes the echo object twice: free-threaded as
//! [`ECHO_NAME`] and in an apartment as [`APARTMENT_ECHO_NAME`]. The client resolves both
//! through one `lanner::Client`, so both sides share one connection, one transport, one
//! placement and one wait strategy; only the object's threading differs. Calls are
//! sequential, so the apartment is always idle when a call arrives: what is measured is
//! what entering and leaving an idle apartment adds to a call.

use lanner::Proxy;
use serde::Serialize;

use super::pingpong::{compare_null_calls, null_calls};
use super::setup::ClientSide;
use super::stats::{ratio, round2};
use super::{BenchArgs, DEFAULT_ITERS, RowsReport, print_report};
use crate::auth_arg::plain_client_auth;
use crate::server_process::ServerProcess;
use crate::services::{APARTMENT_ECHO_NAME, ECHO_NAME, EchoProxy};

/// One row of the result.
#[derive(Debug, Serialize)]
pub struct Row {
    /// Median null-call round trip on the apartment object.
    pub apartment_p50_us: f64,
    /// Its 99th percentile.
    pub apartment_p99_us: f64,
    /// Median null-call round trip on the free-threaded object.
    pub free_p50_us: f64,
    /// Its 99th percentile.
    pub free_p99_us: f64,
    /// `apartment_p50_us / free_p50_us`.
    pub ratio: f64,
}

/// Runs the benchmark and prints the report.
pub fn run(args: &BenchArgs) -> Result<(), Box<dyn std::error::Error>> {
    let row = measure(args)?;
    let report = RowsReport::new("apartment", args, vec![row]);
    print_report(args, &report, || {
        println!(
            "{}",
            report
                .run
                .title("; null calls, apartment object vs free-threaded, one connection")
        );
        println!(
            "{:>13}  {:>13}  {:>8}  {:>8}  {:>6}",
            "apartment p50", "apartment p99", "free p50", "free p99", "ratio"
        );
        for row in &report.rows {
            println!(
                "{:>11.1}us  {:>11.1}us  {:>6.1}us  {:>6.1}us  {:>6.2}",
                row.apartment_p50_us,
                row.apartment_p99_us,
                row.free_p50_us,
                row.free_p99_us,
                row.ratio
            );
        }
    })?;
    Ok(())
}

/// Starts the server, resolves both objects on one connection, warms up and measures.
fn measure(args: &BenchArgs) -> Result<Row, Box<dyn std::error::Error>> {
    let ClientSide {
        server_cpu,
        spin,
        runtime,
        options,
    } = ClientSide::start(args)?;
    let server = ServerProcess::spawn(args.transport, server_cpu, spin)?;
    let client = lanner::Client::with_options(options).with_auth(plain_client_auth(args.transport));
    let (free, apartment) = runtime.block_on(async {
        let free: EchoProxy = client
            .connect(&format!("{}/{ECHO_NAME}", server.lanner))
            .await?;
        let apartment: EchoProxy = client
            .connect(&format!("{}/{APARTMENT_ECHO_NAME}", server.lanner))
            .await?;
        Ok::<_, lanner::Error>((free, apartment))
    })?;
    let iters = args.iters_or(DEFAULT_ITERS).max(1);
    if !args.json {
        eprintln!("  apartment vs free-threaded: {iters} null calls each …");
    }
    check_one_connection(&runtime, &free, &apartment)?;
    let (free, apartment) = compare_null_calls(&runtime, (&free, &apartment), iters, args.warmup)?;
    Ok(Row {
        apartment_p50_us: round2(apartment.p50),
        apartment_p99_us: round2(apartment.p99),
        free_p50_us: round2(free.p50),
        free_p99_us: round2(free.p99),
        ratio: ratio(apartment.p50, free.p50),
    })
}

/// Fails unless a call on `free` shows on `apartment`'s connection: both sides must be
/// measured on the same connection.
fn check_one_connection(
    runtime: &tokio::runtime::Runtime,
    free: &EchoProxy,
    apartment: &EchoProxy,
) -> Result<(), Box<dyn std::error::Error>> {
    let before = apartment.object().traffic().messages_sent;
    null_calls(runtime, free, 1, &mut Vec::new())?;
    if apartment.object().traffic().messages_sent == before {
        return Err(
            "the apartment and free-threaded objects were reached on different connections".into(),
        );
    }
    Ok(())
}
