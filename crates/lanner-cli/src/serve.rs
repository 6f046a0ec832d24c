//! `lanner serve`: the server process the demo and the benchmarks start. It serves the
//! echo and demo objects with Lanner and runs the raw echo baseline beside them, prints
//! one JSON line `{"lanner": <endpoint>, "raw": <endpoint>}` on stdout, and exits when its
//! standard input closes (so it never outlives the process that started it).

use std::io::{Read, Write};
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use crate::placement::pin_current_thread;
use crate::raw::RawListener;
use crate::raw_shm::RawShmListener;
use crate::services::publish_all;
use crate::transport_arg::TransportArg;

/// How long a shutting-down server lets calls in flight finish.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

/// Options of `lanner serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Transport to listen on.
    #[arg(long, value_enum, default_value = "unix")]
    pub transport: TransportArg,
    /// Pin the server to this CPU.
    #[arg(long)]
    pub cpu: Option<usize>,
    /// Spin budget in microseconds before a waiting side sleeps (0: pure blocking).
    #[arg(long, default_value_t = 50)]
    pub spin_us: u64,
    /// Listen here instead of a fresh endpoint (a restarted server keeps its address).
    #[arg(long)]
    pub listen: Option<String>,
}

fn socket_path(tag: &str) -> PathBuf {
    std::env::temp_dir().join(format!("lanner-{}-{tag}.sock", std::process::id()))
}

/// Runs the server process until stdin closes, then shuts down gracefully.
pub fn run(args: &ServeArgs) -> Result<(), Box<dyn std::error::Error>> {
    if let Some(cpu) = args.cpu {
        pin_current_thread(cpu)?;
    }
    let spin = Duration::from_micros(args.spin_us);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let tcp = args.transport == TransportArg::Tcp;
    let raw_path = socket_path("raw");
    let shm_name = format!("lanner-{}", std::process::id());
    runtime.block_on(async {
        let options = lanner::ConnectionOptions::default().with_spin(spin);
        let server = lanner::Server::with_options(options);
        publish_all(&server);
        let listen = match (&args.listen, args.transport) {
            (Some(listen), _) => listen.clone(),
            (None, TransportArg::Tcp) => "tcp://127.0.0.1:0".to_owned(),
            (None, TransportArg::Unix) => format!("unix://{}", socket_path("lanner").display()),
            (None, TransportArg::Shm) => format!("shm://{shm_name}"),
        };
        let listening = server.listen(&listen).await?;
        let raw_endpoint = if args.transport == TransportArg::Shm {
            let raw = RawShmListener::bind(&shm_name)?;
            let endpoint = raw.endpoint();
            std::thread::spawn(move || raw.serve(spin));
            endpoint
        } else {
            let raw = RawListener::bind(tcp, raw_path.clone())?;
            let endpoint = raw.endpoint()?;
            std::thread::spawn(move || raw.serve(spin));
            endpoint
        };
        let ready = serde_json::json!({
            "lanner": listening.endpoint().to_string(),
            "raw": raw_endpoint,
        });
        let mut stdout = std::io::stdout();
        writeln!(stdout, "{ready}")?;
        stdout.flush()?;
        tokio::task::spawn_blocking(|| {
            let mut sink = Vec::new();
            let _ = std::io::stdin().read_to_end(&mut sink);
        })
        .await?;
        // Stdin closed: finish the calls in flight, tell the clients to go away.
        listening.shutdown(SHUTDOWN_GRACE).await;
        Ok::<(), Box<dyn std::error::Error>>(())
    })?;
    let _ = std::fs::remove_file(raw_path);
    Ok(())
}
