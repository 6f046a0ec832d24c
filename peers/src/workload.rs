//! The workloads, written once over [`EchoClient`] and measured the way `lanner bench`
//! measures Lanner: sequential calls after a warm-up for latency, many calls outstanding on
//! one connection for throughput.

use std::cell::Cell;
use std::future::Future;
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde::Serialize;

use crate::stats::{percentiles, round2};

/// Any error of a framework, boxed.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A client of the echo service in one framework, on one connection. Clones share the
/// connection (that is how concurrent calls are made).
pub trait EchoClient: Clone {
    /// Calls `echo(payload)` and returns the length of the payload that came back.
    fn echo(&mut self, payload: Bytes) -> impl Future<Output = Result<usize, BoxError>>;
}

/// Measured iterations per size, at most, unless `--iters` says otherwise (as Lanner).
pub const DEFAULT_ITERS: usize = 10_000;

/// Bytes moved per size, at most (as Lanner: 1 GiB).
const MAX_BYTES_PER_SIZE: usize = 1 << 30;

/// One row of a pingpong result.
#[derive(Debug, Serialize)]
pub struct LatencyRow {
    /// Payload size in bytes (0: a null call).
    pub size: usize,
    /// Median round trip in microseconds.
    pub p50_us: f64,
    /// 99th percentile round trip in microseconds.
    pub p99_us: f64,
    /// Calls measured.
    pub iters: usize,
}

/// One row of a throughput result.
#[derive(Debug, Serialize)]
pub struct ThroughputRow {
    /// Calls outstanding on the one connection.
    pub concurrency: usize,
    /// Completed calls per second.
    pub calls_s: f64,
}

/// Sequential echo calls of each size in `sizes`: `warmup` unmeasured calls, then `iters`
/// measured ones (both capped so that no size moves more than 1 GiB, as in Lanner's bench).
pub async fn pingpong<C: EchoClient>(
    client: &mut C,
    sizes: &[usize],
    iters: usize,
    warmup: usize,
) -> Result<Vec<LatencyRow>, BoxError> {
    let mut rows = Vec::new();
    for &size in sizes {
        let cap = (MAX_BYTES_PER_SIZE / size.max(1)).max(100);
        let iters = iters.min(cap).max(1);
        let warmup = warmup.min(cap / 4);
        let payload = Bytes::from(vec![0xa5u8; size]);
        for _ in 0..warmup {
            check(size, client.echo(payload.clone()).await?)?;
        }
        let mut samples = Vec::with_capacity(iters);
        for _ in 0..iters {
            let start = Instant::now();
            let echoed = client.echo(payload.clone()).await?;
            samples.push(start.elapsed());
            check(size, echoed)?;
        }
        let p = percentiles(&mut samples);
        rows.push(LatencyRow {
            size,
            p50_us: round2(p.p50),
            p99_us: round2(p.p99),
            iters,
        });
    }
    Ok(rows)
}

/// Null calls with `concurrency` outstanding on the connection of `client`, all driven
/// from this task: each of `concurrency` callers issues its next call as soon as the last
/// one returns. Calls completed during `secs` after a warm-up of `warmup_secs` count.
pub async fn throughput<C: EchoClient>(
    client: &C,
    concurrency: usize,
    warmup_secs: f64,
    secs: f64,
) -> Result<ThroughputRow, BoxError> {
    let start = Instant::now();
    let measure_from = start + Duration::from_secs_f64(warmup_secs);
    let measure_to = measure_from + Duration::from_secs_f64(secs);
    let completed = Cell::new(0u64);
    let callers = (0..concurrency.max(1)).map(|_| {
        let mut client = client.clone();
        let completed = &completed;
        async move {
            loop {
                let echoed = client.echo(Bytes::new()).await?;
                check(0, echoed)?;
                let now = Instant::now();
                if now >= measure_to {
                    return Ok::<(), BoxError>(());
                }
                if now >= measure_from {
                    completed.set(completed.get() + 1);
                }
            }
        }
    });
    futures::future::try_join_all(callers).await?;
    Ok(ThroughputRow {
        concurrency,
        calls_s: (completed.get() as f64 / secs).round(),
    })
}

fn check(sent: usize, echoed: usize) -> Result<(), BoxError> {
    if sent == echoed {
        Ok(())
    } else {
        Err(format!("the echo returned {echoed} bytes, sent {sent}").into())
    }
}
