//! `lanner bench firstcall`: what the first call on an object's second interface costs,
//! against later calls on it, in time and in messages.
//!
//! Each trial opens a fresh connection (a new `lanner::Client`), resolves the demo object
//! (`calc`, which implements `Calculator` and `Greeter`), calls `Calculator::add` once, then
//! queries the `Greeter` proxy from the reference (answered locally, no message) and times
//! its first `greet`, then [`LATER_CALLS`] more, each timed. `first_us` is the median of
//! the first calls over the trials, `later_p50_us` the median of all later calls.
//! Messages are counted on the connection ([`lanner::ObjectRef::traffic`]: sent plus
//! received around one call); the report gives the most any one call took, first and later.

use std::time::{Duration, Instant};

use lanner::{ObjectRef, Proxy, Traffic};
use serde::Serialize;

use super::setup::ClientSide;
use super::stats::{percentiles, ratio, round2};
use super::{BenchArgs, Progress, RowsReport, print_report};
use crate::auth_arg::plain_client_auth;
use crate::server_process::ServerProcess;
use crate::services::{Calculator, CalculatorProxy, Greeter, GreeterProxy};

/// Trials when `--iters` is not given.
pub const DEFAULT_TRIALS: usize = 200;

/// Later calls timed per trial.
pub const LATER_CALLS: usize = 50;

/// One row of the result.
#[derive(Debug, Serialize)]
pub struct Row {
    /// Median time of the first call on the second interface.
    pub first_us: f64,
    /// Median time of the later calls on it.
    pub later_p50_us: f64,
    /// `first_us / later_p50_us`.
    pub ratio: f64,
    /// Messages (sent + received) around the first call on the second interface: the most
    /// any trial saw.
    pub messages_first: u64,
    /// Messages around one later call: the most any later call saw.
    pub messages_later: u64,
    /// 99th percentile of the first calls.
    pub first_p99_us: f64,
    /// Trials (fresh connections).
    pub trials: usize,
    /// Later calls per trial.
    pub later_calls: usize,
}

/// Runs the benchmark and prints the report.
pub fn run(args: &BenchArgs) -> Result<(), Box<dyn std::error::Error>> {
    let row = measure(args)?;
    let report = RowsReport::new("firstcall", args, vec![row]);
    print_report(args, &report, || {
        println!(
            "{}",
            report
                .run
                .title("; Greeter::greet on the object's second interface")
        );
        println!(
            "{:>10}  {:>10}  {:>12}  {:>6}  {:>14}  {:>14}",
            "first p50", "first p99", "later p50", "ratio", "messages first", "messages later"
        );
        for row in &report.rows {
            println!(
                "{:>8.1}us  {:>8.1}us  {:>10.1}us  {:>6.2}  {:>14}  {:>14}",
                row.first_us,
                row.first_p99_us,
                row.later_p50_us,
                row.ratio,
                row.messages_first,
                row.messages_later
            );
        }
        println!(
            "({} trials, each a fresh connection; {} later calls per trial)",
            report.rows[0].trials, report.rows[0].later_calls
        );
    })?;
    Ok(())
}

/// What one trial saw.
struct Trial {
    first: Duration,
    messages_first: u64,
    later: Vec<Duration>,
    messages_later: u64,
}

/// Starts the server, runs the trials and summarizes them.
fn measure(args: &BenchArgs) -> Result<Row, Box<dyn std::error::Error>> {
    let ClientSide {
        server_cpu,
        spin,
        runtime,
        options,
    } = ClientSide::start(args)?;
    let server = ServerProcess::spawn(args.transport, server_cpu, spin)?;
    let url = format!("{}/calc", server.lanner);
    let trials = args.iters_or(DEFAULT_TRIALS).max(1);
    let mut firsts = Vec::with_capacity(trials);
    let mut laters = Vec::with_capacity(trials * LATER_CALLS);
    let (mut messages_first, mut messages_later) = (0, 0);
    let mut progress = Progress::new(args, "trials (fresh connections)", trials);
    for done in 0..trials {
        progress.update(done);
        let client = lanner::Client::with_options(options.clone())
            .with_auth(plain_client_auth(args.transport));
        let trial = runtime.block_on(trial(&client, &url))?;
        firsts.push(trial.first);
        laters.extend(trial.later);
        messages_first = messages_first.max(trial.messages_first);
        messages_later = messages_later.max(trial.messages_later);
    }
    progress.update(trials);
    progress.finish();
    let first = percentiles(&mut firsts);
    let later = percentiles(&mut laters);
    Ok(Row {
        first_us: round2(first.p50),
        later_p50_us: round2(later.p50),
        ratio: ratio(first.p50, later.p50),
        messages_first,
        messages_later,
        first_p99_us: round2(first.p99),
        trials,
        later_calls: LATER_CALLS,
    })
}

/// One trial on a fresh connection of `client` (its first): resolve, a call on the first
/// interface, then the first and later calls on the second.
async fn trial(client: &lanner::Client, url: &str) -> Result<Trial, Box<dyn std::error::Error>> {
    let object = client.resolve(url).await?;
    let calc: CalculatorProxy = object.query()?;
    let sum = calc.add(20, 22).await?;
    if sum != 42 {
        return Err(format!("Calculator::add(20, 22) returned {sum}").into());
    }
    // Answered from the reference: no message.
    let greeter: GreeterProxy = object.query()?;
    let (first, messages_first) = timed_greet(&greeter, "first").await?;
    let mut later = Vec::with_capacity(LATER_CALLS);
    let mut messages_later = 0;
    for _ in 0..LATER_CALLS {
        let (time, messages) = timed_greet(&greeter, "later").await?;
        later.push(time);
        messages_later = messages_later.max(messages);
    }
    Ok(Trial {
        first,
        messages_first,
        later,
        messages_later,
    })
}

/// One timed `greet`, and the messages its connection carried meanwhile.
async fn timed_greet(
    greeter: &GreeterProxy,
    name: &str,
) -> Result<(Duration, u64), Box<dyn std::error::Error>> {
    let object: &ObjectRef = greeter.object();
    let name = name.to_owned();
    let before = object.traffic();
    let start = Instant::now();
    let greeting = greeter.greet(name).await?;
    let time = start.elapsed();
    let messages = messages(before, object.traffic());
    if !greeting.starts_with("hello, ") {
        return Err(format!("unexpected greeting {greeting:?}").into());
    }
    Ok((time, messages))
}

/// Messages sent plus received between two readings.
fn messages(before: Traffic, after: Traffic) -> u64 {
    (after.messages_sent - before.messages_sent)
        + (after.messages_received - before.messages_received)
}
