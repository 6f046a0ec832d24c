//! `lanner demo`: a server process and this client process on this machine; a few calls on
//! an object with two interfaces; then a short latency table of Lanner vs the raw socket.

use std::time::{Duration, Instant};

use clap::Args;
use lanner::Proxy;

use crate::auth_arg::plain_client_auth;
use crate::bench::pingpong::{measure, print_table};
use crate::bench::{BenchArgs, Workload};
use crate::placement::Placement;
use crate::server_process::ServerProcess;
use crate::services::{CalcError, Calculator, CalculatorProxy, Greeter, GreeterProxy};
use crate::transport_arg::TransportArg;

/// Options of `lanner demo`.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Transport between the two processes.
    #[arg(long, value_enum, default_value = "unix")]
    pub transport: TransportArg,
}

/// Runs the demo.
pub fn run(args: &DemoArgs) -> Result<(), Box<dyn std::error::Error>> {
    println!(
        "Lanner demo: client pid {}, transport {}",
        std::process::id(),
        args.transport.name()
    );
    calls(args)?;
    println!();
    println!("Latency, Lanner vs the raw medium (same run, server in another process):");
    let bench = BenchArgs {
        workload: Workload::Pingpong,
        transport: args.transport,
        sizes: vec![0, 4096, 65536],
        iters: Some(2_000),
        secs: 0.0,
        warmup: 200,
        placement: Placement::Split,
        spin_us: 50,
        busy_poll: false,
        auth: None,
        objects: 1,
        methods: 1,
        concurrency: vec![1],
        threads: vec![1],
        payload_offset: None,
        json: true,
    };
    let (rows, _) = measure(&bench, 0.0)?;
    print_table(&rows);
    println!(
        "(wait strategy: {}; full benchmark: lanner bench pingpong --transport {})",
        bench.wait(),
        args.transport.name()
    );
    Ok(())
}

fn calls(args: &DemoArgs) -> Result<(), Box<dyn std::error::Error>> {
    let server = ServerProcess::spawn(args.transport, None, Duration::from_micros(50))?;
    println!("server process listening at {}", server.lanner);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let url = format!("{}/calc", server.lanner);
        let start = Instant::now();
        let client = lanner::Client::new().with_auth(plain_client_auth(args.transport));
        let calc: CalculatorProxy = client.connect(&url).await?;
        println!("connected to {url} in {:?}", start.elapsed());
        println!("  the object implements {} interfaces: {:?}", calc.object().interfaces().len(), calc.object().interfaces());
        println!("  Calculator.add(40, 2)      = {:?}", calc.add(40, 2).await);
        println!("  Calculator.divide(84, 2)   = {:?}", calc.divide(84, 2).await);
        match calc.divide(1, 0).await {
            Err(CalcError::DivisionByZero) => {
                println!("  Calculator.divide(1, 0)    = Err(DivisionByZero)  (a typed application error)")
            }
            other => println!("  Calculator.divide(1, 0)    = {other:?}"),
        }
        let greeter: GreeterProxy = calc.query()?;
        println!("  query::<Greeter>() answered locally, no round trip");
        println!("  Greeter.greet(\"demo\")      = {:?}", greeter.greet("demo".into()).await?);
        let many: Vec<_> = (0..100).map(|i| calc.add(i, i)).collect();
        let sums = futures_util::future::join_all(many).await;
        let correct = sums.iter().enumerate().filter(|(i, r)| **r == Ok(2 * *i as i64)).count();
        println!("  100 concurrent calls on one connection: {correct} correct answers");
        Ok::<(), Box<dyn std::error::Error>>(())
    })
}
