//! `lanner bench pingpong`: sequential echo calls (`Bytes` in, `Bytes` out) against the
//! same payload ping-ponged on a raw socket, in alternating blocks so that both see the
//! same machine conditions.

use std::time::{Duration, Instant};

use bytes::Bytes;
use serde::Serialize;

use super::idle::{self, IdleCpu};
use super::setup::Setup;
use super::stats::{Percentiles, percentiles, ratio, round2};
use super::{BenchArgs, DEFAULT_ITERS, Env, RunInfo, print_report};
use crate::services::{Echo, EchoProxy};

/// Iterations per alternating block, at most; at least 16 blocks per side so that both
/// sides see the same machine conditions even for large sizes.
const BLOCK: usize = 250;

/// Bytes moved per side per size, at most.
const MAX_BYTES_PER_SIZE: usize = 1 << 30;

/// One row of the result.
#[derive(Debug, Serialize)]
pub struct Row {
    /// Payload size in bytes.
    pub size: usize,
    /// Lanner median round trip.
    pub rpc_p50_us: f64,
    /// Lanner 99th percentile.
    pub rpc_p99_us: f64,
    /// Raw median round trip.
    pub raw_p50_us: f64,
    /// Raw 99th percentile.
    pub raw_p99_us: f64,
    /// `rpc_p50_us / raw_p50_us`.
    pub ratio_p50: f64,
}

#[derive(Debug, Serialize)]
struct Report {
    #[serde(flatten)]
    run: RunInfo,
    rows: Vec<Row>,
    /// CPU use of the two processes, connected and silent, after the measurements.
    idle_cpu: IdleCpu,
    env: Env,
}

/// Seconds of silence over which idle CPU use is measured.
const IDLE_SECS: f64 = 1.0;

/// Runs the benchmark and prints the report.
pub fn run(args: &BenchArgs) -> Result<(), Box<dyn std::error::Error>> {
    let (rows, idle_cpu) = measure(args, IDLE_SECS)?;
    let idle_cpu = idle_cpu.ok_or("idle CPU was not measured")?;
    let report = Report {
        run: RunInfo::new("pingpong", args),
        rows,
        idle_cpu,
        env: Env::current(),
    };
    print_report(args, &report, || {
        println!("{}", report.run.title(""));
        print_table(&report.rows);
        println!(
            "idle, connected: client {:.1}% and server {:.1}% of a core over {} s",
            idle_cpu.client_percent, idle_cpu.server_percent, idle_cpu.secs
        );
    })?;
    Ok(())
}

/// Prints rows as a table.
pub fn print_table(rows: &[Row]) {
    println!(
        "{:>9}  {:>10}  {:>10}  {:>10}  {:>10}  {:>6}",
        "size", "lanner p50", "lanner p99", "raw p50", "raw p99", "ratio"
    );
    for row in rows {
        println!(
            "{:>9}  {:>8.1}us  {:>8.1}us  {:>8.1}us  {:>8.1}us  {:>6.2}",
            row.size, row.rpc_p50_us, row.rpc_p99_us, row.raw_p50_us, row.raw_p99_us, row.ratio_p50
        );
    }
}

/// Measures every size of `args`, then (if `idle_secs` > 0) the CPU both processes use
/// while their connections stay silent; used by the bench and by the demo.
pub fn measure(
    args: &BenchArgs,
    idle_secs: f64,
) -> Result<(Vec<Row>, Option<IdleCpu>), Box<dyn std::error::Error>> {
    let Setup {
        server,
        runtime,
        echo,
        mut raw,
    } = Setup::start(args)?;
    let mut rows = Vec::new();
    for &size in &args.sizes {
        let cap = (MAX_BYTES_PER_SIZE / size.max(1)).max(100);
        let iters = args.iters_or(DEFAULT_ITERS).min(cap).max(1);
        let warmup = args.warmup.min(cap / 4);
        if !args.json {
            eprintln!("  size {size}: {iters} iterations …");
        }
        let payload = super::payload::payload(args, size, 0xa5);
        for _ in 0..warmup {
            raw.round_trip(&payload)?;
        }
        runtime.block_on(async {
            for _ in 0..warmup {
                echo.echo(payload.clone()).await?;
            }
            Ok::<(), lanner::Error>(())
        })?;
        let (mut raw_samples, mut rpc_samples) = alternate(
            iters,
            |block, samples| {
                let mut echoed = 0;
                for _ in 0..block {
                    let start = Instant::now();
                    echoed = raw.round_trip(&payload)?;
                    samples.push(start.elapsed());
                }
                if echoed != size {
                    return Err(format!("raw echo returned {echoed} bytes, sent {size}").into());
                }
                Ok(())
            },
            |block, samples| {
                runtime.block_on(async {
                    for _ in 0..block {
                        let start = Instant::now();
                        let echoed = echo.echo(payload.clone()).await?;
                        samples.push(start.elapsed());
                        if echoed.len() != size {
                            return Err(format!(
                                "echo returned {} bytes, sent {size}",
                                echoed.len()
                            )
                            .into());
                        }
                    }
                    Ok(())
                })
            },
        )?;
        rows.push(row(size, &mut rpc_samples, &mut raw_samples));
    }
    let idle = if idle_secs > 0.0 {
        Some(idle::measure(&runtime, server.pid(), idle_secs)?)
    } else {
        None
    };
    Ok((rows, idle))
}

/// The result of one block of a measurement.
pub type BlockResult = Result<(), Box<dyn std::error::Error>>;

/// Measures two sides in alternating blocks (`first`, then `second`, again and again)
/// until each has `iters` samples, so that both see the same machine conditions: blocks
/// of at most `BLOCK` iterations and at least 16 blocks per side. A side is called with
/// the block's length and its samples, and pushes one time per iteration. Returns the
/// samples of (`first`, `second`).
pub fn alternate(
    iters: usize,
    mut first: impl FnMut(usize, &mut Vec<Duration>) -> BlockResult,
    mut second: impl FnMut(usize, &mut Vec<Duration>) -> BlockResult,
) -> Result<(Vec<Duration>, Vec<Duration>), Box<dyn std::error::Error>> {
    let mut samples = alternate_all(iters, &mut [&mut first, &mut second])?.into_iter();
    match (samples.next(), samples.next()) {
        (Some(first), Some(second)) => Ok((first, second)),
        _ => Err("alternate_all returned fewer sides than it was given".into()),
    }
}

/// One side of an alternated measurement: runs a block of the given length, pushing one
/// time per iteration (see [`alternate`]).
pub type Sampler<'a> = &'a mut dyn FnMut(usize, &mut Vec<Duration>) -> BlockResult;

/// [`alternate`] for any number of sides, taken in turn in the order given; their samples
/// in the same order.
pub fn alternate_all(
    iters: usize,
    sides: &mut [Sampler<'_>],
) -> Result<Vec<Vec<Duration>>, Box<dyn std::error::Error>> {
    let mut samples: Vec<Vec<Duration>> = sides.iter().map(|_| Vec::with_capacity(iters)).collect();
    let block_size = (iters / 16).clamp(1, BLOCK);
    let mut done = 0;
    while done < iters {
        let block = block_size.min(iters - done);
        for (side, samples) in sides.iter_mut().zip(&mut samples) {
            side(block, samples)?;
        }
        done += block;
    }
    Ok(samples)
}

/// `count` sequential null calls (the echo of an empty payload) on `runtime`, each one's
/// time pushed to `samples`: one side of the workloads that compare null-call round trips
/// (see [`compare_null_calls`]; the floor).
pub fn null_calls(
    runtime: &tokio::runtime::Runtime,
    echo: &EchoProxy,
    count: usize,
    samples: &mut Vec<Duration>,
) -> BlockResult {
    runtime.block_on(async {
        for _ in 0..count {
            let start = Instant::now();
            let echoed = echo.echo(Bytes::new()).await?;
            samples.push(start.elapsed());
            if !echoed.is_empty() {
                return Err(format!("a null call returned {} bytes", echoed.len()).into());
            }
        }
        Ok(())
    })
}

/// Warms both proxies up (`warmup` null calls each), then makes `iters` null calls on each
/// in alternated blocks: the percentiles of `first`'s round trips and of `second`'s. The
/// workloads that compare two ways of making the same null call (secure, apartment) are
/// this.
pub fn compare_null_calls(
    runtime: &tokio::runtime::Runtime,
    (first, second): (&EchoProxy, &EchoProxy),
    iters: usize,
    warmup: usize,
) -> Result<(Percentiles, Percentiles), Box<dyn std::error::Error>> {
    null_calls(runtime, first, warmup, &mut Vec::new())?;
    null_calls(runtime, second, warmup, &mut Vec::new())?;
    let (mut first_samples, mut second_samples) = alternate(
        iters,
        |block, samples| null_calls(runtime, first, block, samples),
        |block, samples| null_calls(runtime, second, block, samples),
    )?;
    Ok((
        percentiles(&mut first_samples),
        percentiles(&mut second_samples),
    ))
}

fn row(size: usize, rpc: &mut [Duration], raw: &mut [Duration]) -> Row {
    let rpc: Percentiles = percentiles(rpc);
    let raw: Percentiles = percentiles(raw);
    Row {
        size,
        rpc_p50_us: round2(rpc.p50),
        rpc_p99_us: round2(rpc.p99),
        raw_p50_us: round2(raw.p50),
        raw_p99_us: round2(raw.p99),
        ratio_p50: ratio(rpc.p50, raw.p50),
    }
}
