//! `lanner bench throughput`: null calls with many outstanding on one connection, against
//! null messages pipelined as deep over the raw medium (see [`crate::raw_pipeline`]).
//!
//! Each client thread (`--threads`) has its own current-thread runtime, its own Lanner
//! connection (a private client, [`lanner::Client::private`]: nothing is shared through
//! the connection cache)
//! and its own raw connection; the server process runs as many runtime workers as the
//! largest `--threads` value, so each connection can be served by another core. That needs
//! `--placement free`: the other placements pin each process (all its threads) to one
//! CPU, so more than one thread is refused with them. A row runs
//! all its threads at once, Lanner and raw in alternating blocks (so both see the same
//! machine conditions) until each side has run `--secs`, after one warm-up block each.
//! `server_cores` is the CPU time the server process used while Lanner ran, per second of
//! wall time; `calls_s_per_core` is `rpc_calls_s / server_cores`; `client_cores` is the
//! same for the client process (spinning counts: a side that waits spins for its budget).

use std::sync::mpsc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::future::try_join_all;
use serde::Serialize;

use super::idle::{cpu_ticks, ticks_per_second};
use super::raw_client::RawClient;
use super::setup::ClientSide;
use super::stats::{ratio, round2};
use super::{BenchArgs, RowsReport, print_report};
use crate::auth_arg::plain_client_auth;
use crate::placement::Placement;
use crate::server_process::ServerProcess;
use crate::services::{ECHO_NAME, Echo, EchoProxy};

/// Length of one alternating block, at most.
const BLOCK: Duration = Duration::from_millis(250);

/// Answers a Lanner caller takes between two reads of the clock.
const CLOCK_EVERY: u64 = 16;

/// One row of the result.
#[derive(Debug, Serialize)]
pub struct Row {
    /// Calls (raw: messages) outstanding per connection.
    pub concurrency: usize,
    /// Client threads, each with its own connection.
    pub threads: usize,
    /// Lanner null calls completed per second, all threads together.
    pub rpc_calls_s: f64,
    /// Raw null messages echoed per second, all threads together.
    pub raw_msgs_s: f64,
    /// `rpc_calls_s / raw_msgs_s`.
    pub ratio: f64,
    /// CPU the server process used while Lanner ran, in cores (CPU seconds per second).
    pub server_cores: f64,
    /// `rpc_calls_s / server_cores`: Lanner calls per second per server core.
    pub calls_s_per_core: f64,
    /// CPU the client process used while Lanner ran, in cores.
    pub client_cores: f64,
}

/// Runs the benchmark and prints the report.
pub fn run(args: &BenchArgs) -> Result<(), Box<dyn std::error::Error>> {
    let rows = measure(args)?;
    let report = RowsReport::new("throughput", args, rows);
    print_report(args, &report, || {
        println!("{}", report.run.title(", null calls"));
        println!(
            "{:>11}  {:>7}  {:>13}  {:>13}  {:>6}  {:>12}  {:>14}",
            "concurrency",
            "threads",
            "lanner call/s",
            "raw msg/s",
            "ratio",
            "server cores",
            "calls/s/core"
        );
        for row in &report.rows {
            println!(
                "{:>11}  {:>7}  {:>13.0}  {:>13.0}  {:>6.2}  {:>12.2}  {:>14.0}",
                row.concurrency,
                row.threads,
                row.rpc_calls_s,
                row.raw_msgs_s,
                row.ratio,
                row.server_cores,
                row.calls_s_per_core
            );
        }
    })?;
    Ok(())
}

/// Measures every (threads, concurrency) pair of `args`.
pub fn measure(args: &BenchArgs) -> Result<Vec<Row>, Box<dyn std::error::Error>> {
    if args.threads.iter().any(|&threads| threads > 1) && args.placement != Placement::Free {
        return Err(format!(
            "--threads above 1 needs --placement free: placement {} pins each process, all \
             its threads, to one CPU, so the threads would share it",
            args.placement.name()
        )
        .into());
    }
    let ClientSide {
        server_cpu,
        spin,
        options,
        ..
    } = ClientSide::start(args)?;
    let most_threads = args.threads.iter().copied().max().unwrap_or(1).max(1);
    let server = ServerProcess::spawn_workers(args.transport, server_cpu, spin, most_threads)?;
    let target = Target {
        url: format!("{}/{ECHO_NAME}", server.lanner),
        raw: server.raw.clone(),
        client: lanner::Client::with_options(options).with_auth(plain_client_auth(args.transport)),
        spin,
    };
    let workers = (0..most_threads)
        .map(|_| Worker::start(target.clone()))
        .collect::<Result<Vec<_>, _>>()?;
    let per_side = Duration::from_secs_f64(args.secs.max(0.001));
    let block = BLOCK.min(per_side);
    let mut rows = Vec::new();
    for &threads in &args.threads {
        let threads = threads.clamp(1, most_threads);
        for &concurrency in &args.concurrency {
            let concurrency = concurrency.max(1);
            if !args.json {
                eprintln!(
                    "  {threads} thread(s), concurrency {concurrency}: {per_side:?} per side …"
                );
            }
            let workers = &workers[..threads];
            let job = |side| Job {
                side,
                concurrency,
                duration: block,
            };
            // Warm-up: one block of each, not counted.
            run_block(workers, job(Side::Raw))?;
            run_block(workers, job(Side::Rpc))?;
            let (mut rpc, mut raw) = (Tally::default(), Tally::default());
            let server_pid = server.pid().to_string();
            while rpc.elapsed < per_side || raw.elapsed < per_side {
                raw.add(run_block(workers, job(Side::Raw))?);
                let server_before = cpu_ticks(&server_pid)?;
                let client_before = cpu_ticks("self")?;
                rpc.add(run_block(workers, job(Side::Rpc))?);
                rpc.server_ticks += cpu_ticks(&server_pid)? - server_before;
                rpc.client_ticks += cpu_ticks("self")? - client_before;
            }
            let cores = |ticks: u64| {
                ticks as f64 / ticks_per_second() / rpc.elapsed.as_secs_f64().max(f64::MIN_POSITIVE)
            };
            let server_cores = cores(rpc.server_ticks);
            rows.push(Row {
                concurrency,
                threads,
                rpc_calls_s: rpc.rate().round(),
                raw_msgs_s: raw.rate().round(),
                ratio: ratio(rpc.rate(), raw.rate()),
                server_cores: round2(server_cores),
                calls_s_per_core: (rpc.rate() / server_cores.max(0.01)).round(),
                client_cores: round2(cores(rpc.client_ticks)),
            });
        }
    }
    drop(workers);
    Ok(rows)
}

/// Where the workers connect, and how.
#[derive(Clone)]
struct Target {
    url: String,
    raw: String,
    /// Each worker takes a private client of this one.
    client: lanner::Client,
    spin: Duration,
}

/// Which side a block measures.
#[derive(Debug, Clone, Copy)]
enum Side {
    Rpc,
    Raw,
}

/// One block for one worker.
#[derive(Debug, Clone, Copy)]
struct Job {
    side: Side,
    concurrency: usize,
    duration: Duration,
}

/// Completions and the time they took, summed over blocks.
#[derive(Debug, Default, Clone, Copy)]
struct Tally {
    done: u64,
    elapsed: Duration,
    server_ticks: u64,
    client_ticks: u64,
}

impl Tally {
    fn add(&mut self, other: Tally) {
        self.done += other.done;
        self.elapsed += other.elapsed;
    }

    fn rate(&self) -> f64 {
        self.done as f64 / self.elapsed.as_secs_f64().max(f64::MIN_POSITIVE)
    }
}

/// Runs `job` on every worker at once; the block lasts until the last one is done.
fn run_block(workers: &[Worker], job: Job) -> Result<Tally, Box<dyn std::error::Error>> {
    let start = Instant::now();
    for worker in workers {
        worker.jobs.send(job).map_err(|_| "a client thread ended")?;
    }
    let mut done = 0;
    for worker in workers {
        done += worker.done.recv().map_err(|_| "a client thread ended")??;
    }
    Ok(Tally {
        done,
        elapsed: start.elapsed(),
        server_ticks: 0,
        client_ticks: 0,
    })
}

/// A client thread with its own runtime, Lanner connection and raw connection.
struct Worker {
    jobs: mpsc::Sender<Job>,
    done: mpsc::Receiver<Result<u64, String>>,
}

impl Worker {
    /// Starts the thread and waits until both of its connections are up.
    fn start(target: Target) -> Result<Worker, Box<dyn std::error::Error>> {
        let (jobs, job_queue) = mpsc::channel::<Job>();
        let (done_sender, done) = mpsc::channel();
        let (ready_sender, ready) = mpsc::channel();
        std::thread::spawn(move || {
            let connected = connect(&target);
            let (runtime, echo, mut raw) = match connected {
                Ok(connected) => {
                    let _ = ready_sender.send(Ok(()));
                    connected
                }
                Err(error) => {
                    let _ = ready_sender.send(Err(error));
                    return;
                }
            };
            for job in job_queue {
                let result = match job.side {
                    Side::Rpc => runtime
                        .block_on(rpc_block(&echo, job.concurrency, job.duration))
                        .map_err(|e| e.to_string()),
                    Side::Raw => raw
                        .pipeline(job.concurrency, job.duration)
                        .map_err(|e| e.to_string()),
                };
                if done_sender.send(result).is_err() {
                    return;
                }
            }
        });
        ready.recv().map_err(|_| "a client thread died")??;
        Ok(Worker { jobs, done })
    }
}

/// A worker's runtime and connections. Each worker has a private client
/// ([`lanner::Client::private`]), so its connection is its alone.
fn connect(target: &Target) -> Result<(tokio::runtime::Runtime, EchoProxy, RawClient), String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let client = target.client.private();
    let echo = runtime
        .block_on(client.connect::<EchoProxy>(&target.url))
        .map_err(|e| e.to_string())?;
    let raw = RawClient::connect(&target.raw, target.spin).map_err(|e| e.to_string())?;
    Ok((runtime, echo, raw))
}

/// Keeps `concurrency` null calls outstanding for `duration`, then lets the last ones
/// finish; returns how many completed. Each of `concurrency` callers makes its next call as
/// soon as its last one returns, all driven from this task: the same harness as the peer
/// comparison's (`peers/src/workload.rs`). A set of call futures refilled as each one
/// finishes (`FuturesUnordered`) measured about 20% fewer calls per second: it allocates a
/// task per call and wakes twice per answer.
async fn rpc_block(
    echo: &EchoProxy,
    concurrency: usize,
    duration: Duration,
) -> Result<u64, Box<dyn std::error::Error + Send + Sync>> {
    let start = Instant::now();
    let callers = (0..concurrency).map(|_| async {
        let mut done = 0u64;
        loop {
            let reply = echo.echo(Bytes::new()).await?;
            if !reply.is_empty() {
                return Err(format!("a null call returned {} bytes", reply.len()).into());
            }
            done += 1;
            // The clock is read every few answers, as the raw pipeline reads it once per
            // batch of echoes: a clock read per call would be a good part of a call's cost.
            if done % CLOCK_EVERY == 0 && start.elapsed() >= duration {
                return Ok::<u64, Box<dyn std::error::Error + Send + Sync>>(done);
            }
        }
    });
    let counts = try_join_all(callers).await?;
    Ok(counts.into_iter().sum())
}
