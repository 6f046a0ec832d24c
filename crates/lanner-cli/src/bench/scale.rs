//! `lanner bench scale`: null-call round trips with many objects of a many-method
//! interface hosted, against the same calls on a one-method object.
//!
//! The server (`lanner serve --scale-objects N`) hosts `--objects` objects of the 200-method
//! interface `Wide` and one object of the one-method interface `Null` (the 1 × 1 case).
//! The client resolves every object once, on one connection, so the server's table of the
//! objects this connection may call holds them all. It then measures, in alternating
//! blocks, calls of a method chosen at random among the first `--methods` of an object
//! chosen at random, against calls of the 1 × 1 object's method. Every call returns its
//! object's index, which is checked.

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use rand::Rng;
use serde::Serialize;

use super::pingpong::{BlockResult, alternate};
use super::setup::ClientSide;
use super::stats::{Percentiles, percentiles, ratio, round2};
use super::{BenchArgs, DEFAULT_ITERS, Progress, RowsReport, print_report};
use crate::auth_arg::plain_client_auth;
use crate::server_process::{ServeAuth, ServerProcess};
use crate::services::{
    BASE_INDEX, Null, NullProxy, SCALE_BASE_NAME, WIDE_METHODS, WideProxy, call_wide, scale_name,
};

/// Resolutions in flight at once while the client resolves every object.
const RESOLVE_CONCURRENCY: usize = 64;

/// One row of the result.
#[derive(Debug, Serialize)]
pub struct Row {
    /// Objects hosted (and resolved).
    pub objects: u32,
    /// Methods called per object (the first of the interface's [`WIDE_METHODS`]).
    pub methods: usize,
    /// Median round trip of a call on a random (object, method).
    pub p50_us: f64,
    /// Its 99th percentile.
    pub p99_us: f64,
    /// Median round trip of a call on the 1 × 1 object.
    pub base_p50_us: f64,
    /// Its 99th percentile.
    pub base_p99_us: f64,
    /// `p50_us / base_p50_us`.
    pub ratio: f64,
    /// Seconds the client took to resolve every object.
    pub resolve_secs: f64,
}

/// Runs the benchmark and prints the report.
pub fn run(args: &BenchArgs) -> Result<(), Box<dyn std::error::Error>> {
    if args.objects == 0 {
        return Err("--objects must be at least 1".into());
    }
    if !(1..=WIDE_METHODS).contains(&args.methods) {
        return Err(format!("--methods must be from 1 to {WIDE_METHODS}").into());
    }
    let row = measure(args)?;
    let report = RowsReport::new("scale", args, vec![row]);
    print_report(args, &report, || {
        println!(
            "{}",
            report
                .run
                .title("; null calls, random object and method vs a 1 x 1 object")
        );
        println!(
            "{:>8}  {:>7}  {:>9}  {:>9}  {:>9}  {:>9}  {:>6}",
            "objects", "methods", "p50", "p99", "1x1 p50", "1x1 p99", "ratio"
        );
        for row in &report.rows {
            println!(
                "{:>8}  {:>7}  {:>7.1}us  {:>7.1}us  {:>7.1}us  {:>7.1}us  {:>6.2}",
                row.objects,
                row.methods,
                row.p50_us,
                row.p99_us,
                row.base_p50_us,
                row.base_p99_us,
                row.ratio
            );
        }
        println!(
            "(resolving the {} objects took {:.2} s)",
            report.rows[0].objects, report.rows[0].resolve_secs
        );
    })?;
    Ok(())
}

/// Starts the server, resolves every object, warms up and measures.
fn measure(args: &BenchArgs) -> Result<Row, Box<dyn std::error::Error>> {
    let ClientSide {
        server_cpu,
        spin,
        runtime,
        options,
    } = ClientSide::start(args)?;
    let mut command = ServerProcess::command(
        &std::env::current_exe()?,
        args.transport,
        server_cpu,
        spin,
        &ServeAuth::plain(args.transport),
    );
    command.args(["--scale-objects", &args.objects.to_string()]);
    let server = ServerProcess::start(command)?;
    let client = lanner::Client::with_options(options).with_auth(plain_client_auth(args.transport));
    let endpoint = &server.lanner;
    let base: NullProxy =
        runtime.block_on(client.connect(&format!("{endpoint}/{SCALE_BASE_NAME}")))?;

    let started = Instant::now();
    let mut progress = Progress::new(args, "resolving objects", args.objects as usize);
    let objects: Vec<WideProxy> = runtime.block_on(async {
        let mut resolved = futures_util::stream::iter(0..args.objects)
            .map(|index| {
                let url = format!("{endpoint}/{}", scale_name(index));
                let client = &client;
                async move { client.connect::<WideProxy>(&url).await }
            })
            .buffered(RESOLVE_CONCURRENCY);
        let mut objects = Vec::with_capacity(args.objects as usize);
        while let Some(proxy) = resolved.next().await {
            objects.push(proxy?);
            progress.update(objects.len());
        }
        Ok::<_, lanner::Error>(objects)
    })?;
    progress.finish();
    let resolve_secs = started.elapsed().as_secs_f64();

    let iters = args.iters_or(DEFAULT_ITERS).max(1);
    if !args.json {
        eprintln!(
            "  {iters} null calls each: random object of {} and method of {}, vs the 1 x 1 object …",
            args.objects, args.methods
        );
    }
    let mut rng = rand::rng();
    let mut scale_calls = |count: usize, samples: &mut Vec<Duration>| -> BlockResult {
        runtime.block_on(async {
            for _ in 0..count {
                let index = rng.random_range(0..objects.len());
                let method = rng.random_range(0..args.methods);
                let start = Instant::now();
                let answer = call_wide(&objects[index], method).await?;
                samples.push(start.elapsed());
                if answer as usize != index {
                    return Err(format!("object {index} answered as object {answer}").into());
                }
            }
            Ok(())
        })
    };
    let base_calls = |count: usize, samples: &mut Vec<Duration>| -> BlockResult {
        runtime.block_on(async {
            for _ in 0..count {
                let start = Instant::now();
                let answer = base.null().await?;
                samples.push(start.elapsed());
                if answer != BASE_INDEX {
                    return Err(format!("the 1 x 1 object answered as object {answer}").into());
                }
            }
            Ok(())
        })
    };
    base_calls(args.warmup, &mut Vec::new())?;
    scale_calls(args.warmup, &mut Vec::new())?;
    let (mut base_samples, mut scale_samples) = alternate(iters, base_calls, scale_calls)?;
    let scale: Percentiles = percentiles(&mut scale_samples);
    let base: Percentiles = percentiles(&mut base_samples);
    Ok(Row {
        objects: args.objects,
        methods: args.methods,
        p50_us: round2(scale.p50),
        p99_us: round2(scale.p99),
        base_p50_us: round2(base.p50),
        base_p99_us: round2(base.p99),
        ratio: ratio(scale.p50, base.p50),
        resolve_secs: round2(resolve_secs),
    })
}
