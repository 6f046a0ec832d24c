//! `lanner serve`: the server process the demo and the benchmarks start. It serves the
//! echo and demo objects with Lanner and runs the raw echo baseline beside them, prints
//! one JSON line `{"lanner": <endpoint>, "raw": <endpoint>}` on stdout, and exits when its
//! standard input closes (so it never outlives the process that started it) or on SIGINT
//! or SIGTERM, after a graceful shutdown that removes its socket files.
//!
//! The echo object is published twice: free-threaded as `echo` and in an apartment (its
//! calls one at a time, in arrival order) as `echo.apartment`.
//!
//! With `--scale-objects N` it also serves the scale benchmark's objects (see
//! [`publish_scale`]).
//!
//! Clients authenticate as `--auth` says (peer credentials by default on `unix` and `shm`;
//! over `tcp` the user must choose, `--auth none` included). The raw baseline beside it is
//! never authenticated: it listens on the `--transport`'s medium at a fresh endpoint
//! (`/tmp/lanner-<pid>-raw.sock`, a free port of 127.0.0.1, or the abstract socket
//! `lanner-raw-shm/lanner-<pid>`), echoes messages of at most 64 MiB, and serves 64
//! connections at most (over shared memory, it bounds the offers clients have not taken
//! yet as Lanner's listener does: see `lanner_shm::offers`). It is a benchmark's
//! instrument, not a service.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use crate::auth_arg::{AuthArg, TCP_NEEDS_AUTH, TlsFiles, server_auth};
use crate::placement::pin_current_thread;
use crate::raw::RawListener;
use crate::raw_shm::RawShmListener;
use crate::services::{publish_all, publish_scale};
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
    /// The raw echo baseline always listens at a fresh endpoint of the --transport's
    /// medium, unauthenticated (see the module docs).
    #[arg(long)]
    pub listen: Option<String>,
    /// How clients authenticate [default: peercred on unix and shm; over tcp there is no
    /// default: choose one, or --auth none to accept anyone]. psk reads the key from the
    /// environment variable LANNER_PSK.
    ///
    /// none: anyone who can connect may call (an explicit opt-out).
    /// peercred: the kernel's word for the local peer process (unix and shm only).
    /// psk: clients and server prove to each other that they hold the same key, given in
    /// the environment variable LANNER_PSK as `<key id>:<secret in hex>` (at least 16
    /// bytes; 32 random ones is best), for example LANNER_PSK=ops:$(openssl rand -hex 32).
    /// tls: TLS 1.3 with --tls-cert and --tls-key, and --tls-client-ca to require client
    /// certificates (tcp only).
    #[arg(long, value_enum, verbatim_doc_comment)]
    pub auth: Option<AuthArg>,
    /// With --auth tls: the server's certificate chain (PEM, leaf first).
    #[arg(long, value_name = "PEM")]
    pub tls_cert: Option<PathBuf>,
    /// With --auth tls: the server's private key (PEM).
    #[arg(long, value_name = "PEM")]
    pub tls_key: Option<PathBuf>,
    /// With --auth tls: require client certificates signed by this authority (PEM).
    /// Without it, clients are encrypted but anonymous.
    #[arg(long, value_name = "PEM")]
    pub tls_client_ca: Option<PathBuf>,
    /// Also serve the scale benchmark's objects: N objects of the 200-method interface
    /// `lanner.bench.Wide` as `scale.0` … `scale.{N-1}`, and a one-method object
    /// (`lanner.bench.Null`) as `scale.base`.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub scale_objects: u32,
    /// Runtime worker threads: 1 runs everything on one thread (a current-thread runtime,
    /// what the latency benchmarks measure); more builds a multi-threaded runtime whose
    /// workers serve different connections at once (the throughput benchmark's thread
    /// scaling).
    #[arg(long, default_value_t = 1)]
    pub workers: usize,
}

impl ServeArgs {
    /// Whether the server listens on TCP (`--listen`'s scheme, else `--transport`).
    fn listens_on_tcp(&self) -> bool {
        match &self.listen {
            Some(listen) => listen.starts_with("tcp://"),
            None => self.transport == TransportArg::Tcp,
        }
    }

    /// The `--auth` in effect and what it needs; fails if a TCP server has no `--auth`.
    fn auth(&self) -> Result<(AuthArg, lanner::ServerAuth), String> {
        let tcp = self.listens_on_tcp();
        let auth = match self.auth {
            Some(auth) => auth,
            None if tcp => return Err(TCP_NEEDS_AUTH.into()),
            None => AuthArg::Peercred,
        };
        let tls = TlsFiles {
            cert: self.tls_cert.as_deref(),
            key: self.tls_key.as_deref(),
            client_ca: self.tls_client_ca.as_deref(),
        };
        Ok((auth, server_auth(auth, tcp, &tls)?))
    }
}

fn socket_path(tag: &str) -> PathBuf {
    std::env::temp_dir().join(format!("lanner-{}-{tag}.sock", std::process::id()))
}

/// What tells the server to stop: its standard input closing (the process that started
/// it is done, or died), SIGINT (Ctrl-C in the terminal reaches a benchmark's server too,
/// being in its process group) or SIGTERM (a supervisor's `kill`). The server then shuts
/// down gracefully, which removes its socket files.
struct StopSignals {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
    stdin_closed: tokio::sync::oneshot::Receiver<()>,
}

impl StopSignals {
    /// Starts listening for all three (before the server says it is ready, so that a
    /// signal sent as soon as it is stops it gracefully).
    fn install() -> std::io::Result<StopSignals> {
        use tokio::signal::unix::{SignalKind, signal};
        let interrupt = signal(SignalKind::interrupt())?;
        let terminate = signal(SignalKind::terminate())?;
        let (closed, stdin_closed) = tokio::sync::oneshot::channel();
        // A thread of its own, not `spawn_blocking`: the runtime would wait for a blocking
        // task still reading when it is dropped after a signal.
        std::thread::Builder::new()
            .name("stdin-watch".into())
            .spawn(move || {
                let mut sink = [0u8; 4096];
                let mut stdin = std::io::stdin();
                while matches!(stdin.read(&mut sink), Ok(n) if n > 0) {}
                let _ = closed.send(());
            })?;
        Ok(StopSignals {
            interrupt,
            terminate,
            stdin_closed,
        })
    }

    /// Waits for the first of them; says which it was.
    async fn first(mut self) -> &'static str {
        tokio::select! {
            _ = self.stdin_closed => "standard input closed",
            _ = self.interrupt.recv() => "interrupted (SIGINT)",
            _ = self.terminate.recv() => "terminated (SIGTERM)",
        }
    }
}

/// Runs the server process until it is told to stop (its stdin closes, or SIGINT or
/// SIGTERM), then shuts down gracefully.
pub fn run(args: &ServeArgs) -> Result<(), Box<dyn std::error::Error>> {
    let (auth, server_auth) = args.auth()?;
    if let Some(cpu) = args.cpu {
        pin_current_thread(cpu)?;
    }
    let spin = Duration::from_micros(args.spin_us);
    let runtime = if args.workers > 1 {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(args.workers)
            .enable_all()
            .build()?
    } else {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
    };
    let tcp = args.transport == TransportArg::Tcp;
    let raw_path = socket_path("raw");
    let shm_name = format!("lanner-{}", std::process::id());
    runtime.block_on(async {
        let options = lanner::ConnectionOptions::default().with_spin(spin);
        let server = lanner::Server::with_options(options).with_auth(server_auth);
        publish_all(&server);
        if args.scale_objects > 0 {
            publish_scale(&server, args.scale_objects);
        }
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
        let stop = StopSignals::install()?;
        let ready = serde_json::json!({
            "lanner": listening.endpoint().to_string(),
            "raw": raw_endpoint,
            "auth": auth.name(),
        });
        let mut stdout = std::io::stdout();
        writeln!(stdout, "{ready}")?;
        stdout.flush()?;
        let why = stop.first().await;
        tracing::debug!("{why}: shutting down");
        // Finish the calls in flight, tell the clients to go away.
        listening.shutdown(SHUTDOWN_GRACE).await;
        Ok::<(), Box<dyn std::error::Error>>(())
    })?;
    let _ = std::fs::remove_file(raw_path);
    Ok(())
}
