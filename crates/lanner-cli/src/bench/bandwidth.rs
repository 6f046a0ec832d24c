//! `lanner bench bandwidth`: one-way bulk transfer. Lanner streams one-way calls
//! (`#[oneway]`, no answer; each takes a credit that the server returns when the method has
//! run) taking a `size`-byte payload on one connection and ends each block with one call
//! asking the server how many bytes its method was given; the raw baseline streams
//! `size`-byte one-way messages over the same medium and ends each block with one round
//! trip, so that it counts only what arrived. Alternating blocks give both the same
//! conditions. Each row also reports request-reply calls with `WINDOW` in flight
//! (`calls_mb_s`), for a service whose bulk method answers.

use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::future::try_join_all;
use serde::Serialize;

use super::raw_client::RawClient;
use super::setup::Setup;
use super::stats::{ratio, round1};
use super::{BenchArgs, Env, RunInfo, print_report};
use crate::services::{Echo, EchoProxy};

/// Request-reply calls in flight at once (the `calls_mb_s` column).
const WINDOW: usize = 8;

/// Length of one alternating block.
const BLOCK: Duration = Duration::from_millis(250);

/// One row of the result.
#[derive(Debug, Serialize)]
pub struct Row {
    /// Payload size in bytes.
    pub size: usize,
    /// Lanner throughput with one-way calls, MB/s (10^6 bytes).
    pub rpc_mb_s: f64,
    /// Raw throughput, MB/s.
    pub raw_mb_s: f64,
    /// `rpc_mb_s / raw_mb_s`.
    pub ratio: f64,
    /// Lanner throughput with request-reply calls, `WINDOW` in flight, MB/s.
    pub calls_mb_s: f64,
}

#[derive(Debug, Serialize)]
struct Report {
    #[serde(flatten)]
    run: RunInfo,
    window: usize,
    rows: Vec<Row>,
    env: Env,
}

/// Runs the benchmark and prints the report.
pub fn run(args: &BenchArgs) -> Result<(), Box<dyn std::error::Error>> {
    if args.sizes.contains(&0) {
        return Err(
            "bandwidth moves payloads: every --sizes must be at least 1 byte \
                    (for empty messages, see `bench throughput`)"
                .into(),
        );
    }
    let Setup {
        server: _server,
        runtime,
        echo,
        mut raw,
    } = Setup::start(args)?;
    let per_side = Duration::from_secs_f64(args.secs.max(BLOCK.as_secs_f64()));
    let mut rows = Vec::new();
    for &size in &args.sizes {
        if !args.json {
            eprintln!("  size {size}: {per_side:?} per side …");
        }
        let payload = super::payload::payload(args, size, 0x5a);
        let (mut rpc, mut raw_total) = (Transfer::default(), Transfer::default());
        let mut calls = Transfer::default();
        // One block of each, not counted: the first of a size faults its buffers in.
        raw_block(&mut raw, &payload)?;
        runtime.block_on(one_way_block(&echo, &payload))?;
        runtime.block_on(rpc_block(&echo, &payload))?;
        while rpc.elapsed < per_side || raw_total.elapsed < per_side {
            raw_total.add(raw_block(&mut raw, &payload)?);
            rpc.add(runtime.block_on(one_way_block(&echo, &payload))?);
            calls.add(runtime.block_on(rpc_block(&echo, &payload))?);
        }
        rows.push(Row {
            size,
            rpc_mb_s: round1(rpc.mb_s()),
            raw_mb_s: round1(raw_total.mb_s()),
            ratio: ratio(rpc.mb_s(), raw_total.mb_s()),
            calls_mb_s: round1(calls.mb_s()),
        });
    }
    let report = Report {
        run: RunInfo::new("bandwidth", args),
        window: WINDOW,
        rows,
        env: Env::current(),
    };
    print_report(args, &report, || {
        println!(
            "{}",
            report.run.title(&format!(
                "; lanner: one-way calls; calls: request-reply, {WINDOW} in flight"
            ))
        );
        println!(
            "{:>9}  {:>12}  {:>12}  {:>6}  {:>12}",
            "size", "lanner MB/s", "raw MB/s", "ratio", "calls MB/s"
        );
        for row in &report.rows {
            println!(
                "{:>9}  {:>12.1}  {:>12.1}  {:>6.2}  {:>12.1}",
                row.size, row.rpc_mb_s, row.raw_mb_s, row.ratio, row.calls_mb_s
            );
        }
    })?;
    Ok(())
}

/// Bytes moved and the time it took.
#[derive(Debug, Default, Clone, Copy)]
struct Transfer {
    bytes: u64,
    elapsed: Duration,
}

impl Transfer {
    fn add(&mut self, other: Transfer) {
        self.bytes += other.bytes;
        self.elapsed += other.elapsed;
    }

    fn mb_s(&self) -> f64 {
        self.bytes as f64 / self.elapsed.as_secs_f64().max(f64::MIN_POSITIVE) / 1e6
    }
}

/// Streams one-way messages for a block, then one round trip to know they all arrived.
fn raw_block(raw: &mut RawClient, payload: &[u8]) -> std::io::Result<Transfer> {
    let start = Instant::now();
    let mut sent = 0u64;
    while start.elapsed() < BLOCK {
        raw.send_one_way_burst(payload, 8)?;
        sent += 8;
    }
    raw.round_trip(&[])?;
    Ok(Transfer {
        bytes: sent * payload.len() as u64,
        elapsed: start.elapsed(),
    })
}

/// Streams one-way calls for a block; counts what the server's method was given (asked
/// with one call before and one after: calls on a connection arrive in order).
async fn one_way_block(echo: &EchoProxy, payload: &Bytes) -> Result<Transfer, lanner::Error> {
    let before = echo.sunk().await?;
    let start = Instant::now();
    while start.elapsed() < BLOCK {
        for _ in 0..8 {
            echo.sink(payload.clone()).await?;
        }
    }
    let after = echo.sunk().await?;
    Ok(Transfer {
        bytes: after - before,
        elapsed: start.elapsed(),
    })
}

/// Keeps `WINDOW` calls in flight for a block, then waits for the last ones: each of
/// `WINDOW` callers, all driven from this task, makes its next call as soon as its last
/// one returns (as the throughput benchmark's callers do).
async fn rpc_block(echo: &EchoProxy, payload: &Bytes) -> Result<Transfer, lanner::Error> {
    let start = Instant::now();
    let callers = (0..WINDOW).map(|_| async {
        let mut received = 0u64;
        while start.elapsed() < BLOCK {
            received += echo.absorb(payload.clone()).await?;
        }
        Ok::<u64, lanner::Error>(received)
    });
    let received = try_join_all(callers).await?.into_iter().sum();
    Ok(Transfer {
        bytes: received,
        elapsed: start.elapsed(),
    })
}
