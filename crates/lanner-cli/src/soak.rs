//! `lanner soak`: many clients call a server process that is killed and restarted at
//! random, for a bounded time. At the end every call has either succeeded with the right
//! answer or failed with an error, and nothing leaked.
//!
//! Each client has its own `Client` (its own connection) and one proxy, obtained once from
//! the server's URL: after a kill, the proxy reconnects by itself when the server is back.
//! Payload sizes are random (mostly small, some up to 256 KiB). Every call has a deadline,
//! so a call can never hang the run.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::Args;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use crate::auth_arg::plain_client_auth;
use crate::server_process::{ServeAuth, ServerProcess};
use crate::services::{Echo, EchoProxy};
use crate::transport_arg::TransportArg;

/// Options of `lanner soak`.
#[derive(Debug, Args)]
pub struct SoakArgs {
    /// How long to run, in seconds.
    #[arg(long, default_value_t = 30)]
    pub secs: u64,
    /// Transport.
    #[arg(long, value_enum, default_value = "unix")]
    pub transport: TransportArg,
    /// Concurrent clients, each with its own connection.
    #[arg(long, default_value_t = 64)]
    pub clients: usize,
    /// Print one JSON object instead of a summary.
    #[arg(long)]
    pub json: bool,
}

/// What a soak run saw.
#[derive(Debug, Default, Serialize)]
pub struct Summary {
    /// Transport used.
    pub transport: String,
    /// Seconds run.
    pub secs: u64,
    /// Concurrent clients.
    pub clients: usize,
    /// Calls made.
    pub calls: u64,
    /// Calls that returned the right answer.
    pub succeeded: u64,
    /// Calls that failed, by error kind.
    pub failed: BTreeMap<String, u64>,
    /// Of the failed calls, those whose error said the request may have run.
    pub failed_may_have_executed: u64,
    /// Calls that returned an answer other than what was sent (must be 0).
    pub wrong_answers: u64,
    /// Times the server process was killed (SIGKILL) and restarted.
    pub servers_killed: u64,
    /// The soak process's peak resident memory.
    pub peak_rss_mb: f64,
    /// File descriptors open after the run that were not open before it (must be 0).
    pub leaked_fds: i64,
}

/// Per-call deadline: a call to a killed server never waits longer than this.
const CALL_TIMEOUT: Duration = Duration::from_secs(2);

/// Runs the soak test and prints its summary; an error if any answer was wrong or
/// anything leaked.
pub fn run(args: &SoakArgs) -> Result<(), Box<dyn std::error::Error>> {
    if args.clients == 0 {
        return Err("--clients must be at least 1".into());
    }
    let endpoint = fixed_endpoint(args.transport)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    // After building the runtime: tokio may create process-wide descriptors once (the
    // signal driver's socket pair) that stay open for the life of the process.
    let fds_before = open_fds()?;
    let mut summary = runtime.block_on(soak(args, &endpoint))?;
    // Every connection and task goes with the runtime; give the kernel a moment to
    // finish closing sockets.
    drop(runtime);
    std::thread::sleep(Duration::from_millis(200));
    let fds_after = open_fds()?;
    let leaked: Vec<&String> = fds_after
        .iter()
        .filter(|fd| !fds_before.contains(*fd))
        .collect();
    summary.leaked_fds = leaked.len() as i64;
    summary.peak_rss_mb = peak_rss_mb()?;
    if args.json {
        println!("{}", serde_json::to_string(&summary)?);
    } else {
        print_summary(&summary);
    }
    if summary.wrong_answers > 0 {
        return Err(format!("{} wrong answers", summary.wrong_answers).into());
    }
    if summary.leaked_fds != 0 {
        return Err(format!("{} file descriptors leaked: {leaked:?}", summary.leaked_fds).into());
    }
    Ok(())
}

fn print_summary(summary: &Summary) {
    println!(
        "soak over {} for {} s with {} clients",
        summary.transport, summary.secs, summary.clients
    );
    println!(
        "calls {}  succeeded {}  wrong answers {}  servers killed {}",
        summary.calls, summary.succeeded, summary.wrong_answers, summary.servers_killed
    );
    for (kind, count) in &summary.failed {
        println!("failed with {kind}: {count}");
    }
    println!(
        "failed calls that may have run: {}  peak RSS {:.1} MiB  leaked fds {}",
        summary.failed_may_have_executed, summary.peak_rss_mb, summary.leaked_fds
    );
}

/// Counters shared by the clients.
#[derive(Default)]
struct Tally {
    calls: AtomicU64,
    succeeded: AtomicU64,
    wrong: AtomicU64,
    may_have_executed: AtomicU64,
    failed: std::sync::Mutex<BTreeMap<String, u64>>,
}

async fn soak(args: &SoakArgs, endpoint: &str) -> Result<Summary, Box<dyn std::error::Error>> {
    let program = std::env::current_exe()?;
    let spawn = {
        let program = program.clone();
        let transport = args.transport;
        let endpoint = endpoint.to_owned();
        move || {
            ServerProcess::spawn_listening(
                &program,
                transport,
                None,
                Duration::from_micros(50),
                Some(&endpoint),
                &ServeAuth::plain(transport),
            )
        }
    };
    let server = spawn()?;
    let url = format!("{}/echo", server.lanner);
    let deadline = Instant::now() + Duration::from_secs(args.secs);
    let tally = Arc::new(Tally::default());
    let stop = Arc::new(AtomicBool::new(false));

    let mut clients = Vec::with_capacity(args.clients);
    for index in 0..args.clients {
        let options = lanner::ConnectionOptions::default().with_call_timeout(CALL_TIMEOUT);
        let echo: EchoProxy = lanner::Client::with_options(options)
            .with_auth(plain_client_auth(args.transport))
            .connect(&url)
            .await
            .map_err(|e| format!("client {index} could not connect: {e}"))?;
        clients.push(tokio::spawn(client(echo, tally.clone(), stop.clone())));
    }

    let killer = tokio::task::spawn_blocking({
        let stop = stop.clone();
        move || kill_and_restart(server, spawn, deadline, &stop)
    });
    while Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop.store(true, Ordering::SeqCst);
    for client in clients {
        client.await?;
    }
    let servers_killed = killer.await??;

    let failed = tally
        .failed
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    Ok(Summary {
        transport: args.transport.name().to_owned(),
        secs: args.secs,
        clients: args.clients,
        calls: tally.calls.load(Ordering::SeqCst),
        succeeded: tally.succeeded.load(Ordering::SeqCst),
        failed,
        failed_may_have_executed: tally.may_have_executed.load(Ordering::SeqCst),
        wrong_answers: tally.wrong.load(Ordering::SeqCst),
        servers_killed,
        peak_rss_mb: 0.0,
        leaked_fds: 0,
    })
}

/// One client: echo calls with random payloads until told to stop.
async fn client(echo: EchoProxy, tally: Arc<Tally>, stop: Arc<AtomicBool>) {
    // A generator the task owns (the thread-local one cannot cross an await).
    let mut rng = rand::rngs::StdRng::from_os_rng();
    while !stop.load(Ordering::Relaxed) {
        let len = match rng.random_range(0..100) {
            0..70 => rng.random_range(0..256),
            70..95 => rng.random_range(256..16 * 1024),
            _ => rng.random_range(16 * 1024..256 * 1024),
        };
        let seed: u8 = rng.random();
        let payload: Bytes = (0..len)
            .map(|i| (i as u8).wrapping_mul(31) ^ seed)
            .collect();
        tally.calls.fetch_add(1, Ordering::Relaxed);
        match echo.echo(payload.clone()).await {
            Ok(answer) if answer == payload => {
                tally.succeeded.fetch_add(1, Ordering::Relaxed);
            }
            Ok(_) => {
                tally.wrong.fetch_add(1, Ordering::Relaxed);
            }
            Err(error) => {
                if error.may_have_executed() {
                    tally.may_have_executed.fetch_add(1, Ordering::Relaxed);
                }
                *tally
                    .failed
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .entry(error.kind().name().to_owned())
                    .or_default() += 1;
                // The server is down: do not spin on fast failures.
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    }
}

/// Kills the server at random moments and starts a new one on the same endpoint, until
/// `deadline`. Returns how many times it killed one.
fn kill_and_restart(
    mut server: ServerProcess,
    spawn: impl Fn() -> Result<ServerProcess, Box<dyn std::error::Error>>,
    deadline: Instant,
    stop: &AtomicBool,
) -> Result<u64, String> {
    let mut rng = rand::rng();
    let mut killed = 0;
    loop {
        let up = Duration::from_millis(rng.random_range(300..1_500));
        if Instant::now() + up >= deadline || stop.load(Ordering::SeqCst) {
            return Ok(killed);
        }
        std::thread::sleep(up);
        server.kill();
        killed += 1;
        std::thread::sleep(Duration::from_millis(rng.random_range(0..300)));
        // The old process may still hold the address for a moment.
        let restart_deadline = Instant::now() + Duration::from_secs(5);
        server = loop {
            match spawn() {
                Ok(server) => break server,
                Err(error) if Instant::now() < restart_deadline => {
                    tracing::debug!(%error, "restart failed, retrying");
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(error) => return Err(format!("the server did not restart: {error}")),
            }
        };
    }
}

/// An endpoint that a restarted server can listen on again.
fn fixed_endpoint(transport: TransportArg) -> Result<String, Box<dyn std::error::Error>> {
    let pid = std::process::id();
    Ok(match transport {
        TransportArg::Tcp => {
            let port = std::net::TcpListener::bind("127.0.0.1:0")?
                .local_addr()?
                .port();
            format!("tcp://127.0.0.1:{port}")
        }
        TransportArg::Unix => format!(
            "unix://{}",
            std::env::temp_dir()
                .join(format!("lanner-soak-{pid}.sock"))
                .display()
        ),
        TransportArg::Shm => format!("shm://lanner-soak-{pid}"),
    })
}

/// The open file descriptors, each as `fd -> target`.
fn open_fds() -> std::io::Result<Vec<String>> {
    let mut fds = Vec::new();
    for entry in std::fs::read_dir("/proc/self/fd")? {
        let entry = entry?;
        let Ok(target) = std::fs::read_link(entry.path()) else {
            continue;
        };
        // The directory being read is itself an open descriptor.
        if target.ends_with("fd") && target.starts_with("/proc") {
            continue;
        }
        fds.push(format!(
            "{} -> {}",
            entry.file_name().to_string_lossy(),
            target.display()
        ));
    }
    Ok(fds)
}

fn peak_rss_mb() -> std::io::Result<f64> {
    Ok(crate::procfs::status_kib("self", "VmHWM")? as f64 / 1024.0)
}
