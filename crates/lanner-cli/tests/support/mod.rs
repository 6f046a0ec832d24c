//! Helpers for tests that talk to a real `lanner serve` process.

#![allow(dead_code)]

use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use lanner_cli::server_process::ServerProcess;
use lanner_cli::services::{Calculator, CalculatorProxy};
use lanner_cli::transport_arg::TransportArg;
use lanner_proto::frame;
use lanner_proto::{Hello, Limits, Mechanism, MessageBuilder, PROTOCOL_VERSION};

/// Every transport between processes.
pub(crate) const TRANSPORTS: [TransportArg; 3] =
    [TransportArg::Tcp, TransportArg::Unix, TransportArg::Shm];

/// The transports that are byte streams, for tests that write raw bytes to a socket.
pub(crate) const STREAM_TRANSPORTS: [TransportArg; 2] = [TransportArg::Tcp, TransportArg::Unix];

/// How long the server gets to react to anything a test does.
pub(crate) const PATIENCE: Duration = Duration::from_secs(5);

/// Starts `lanner serve` on `transport` (no pinning, default spin), authenticating as
/// `ServeAuth::plain` says: `none` over TCP, peer credentials on local transports.
pub(crate) fn server(transport: TransportArg) -> ServerProcess {
    ServerProcess::spawn_program(
        Path::new(env!("CARGO_BIN_EXE_lanner")),
        transport,
        None,
        Duration::from_micros(50),
    )
    .expect("the lanner server process starts")
}

/// Sends `signal` to process `pid` (a server process this test started).
pub(crate) fn signal(pid: u32, signal: libc::c_int) {
    let target = libc::pid_t::try_from(pid).expect("a pid fits pid_t");
    // SAFETY: kill(2) has no memory-safety preconditions; the pid is our own child's.
    let result = unsafe { libc::kill(target, signal) };
    assert_eq!(
        result,
        0,
        "kill({pid}, {signal}): {}",
        std::io::Error::last_os_error()
    );
}

/// A multi-threaded runtime for a test.
pub(crate) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

/// The client authentication a server started by [`server`] accepts at `endpoint` (a
/// URL): `none` over TCP, peer credentials on local transports.
pub(crate) fn plain_auth(endpoint: &str) -> lanner::ClientAuth {
    if endpoint.starts_with("tcp://") {
        lanner::ClientAuth::none()
    } else {
        lanner::ClientAuth::peer_credentials()
    }
}

/// The mechanism a hand-built HELLO names for a server started by [`server`] at
/// `endpoint`.
pub(crate) fn plain_mechanism(endpoint: &str) -> Mechanism {
    if endpoint.starts_with("tcp://") {
        Mechanism::None
    } else {
        Mechanism::PeerCredentials
    }
}

/// A fresh client (not the global one), so tests do not share connections, that
/// authenticates as a server started by [`server`] at `endpoint` expects.
pub(crate) fn client(endpoint: &str) -> lanner::Client {
    lanner::Client::new().with_auth(plain_auth(endpoint))
}

/// A proxy to the object `name` of `server`, through a fresh client.
pub(crate) async fn connect<P: lanner::Proxy>(server: &ServerProcess, name: &str) -> P {
    client(&server.lanner)
        .connect(&format!("{}/{name}", server.lanner))
        .await
        .unwrap()
}

/// The server still serves a well-behaved client, within [`PATIENCE`].
pub(crate) fn still_serving(server: &ServerProcess) {
    runtime().block_on(async {
        let calc: CalculatorProxy = connect(server, "calc").await;
        let sum = tokio::time::timeout(PATIENCE, calc.add(2, 2))
            .await
            .expect("the server answers a good client");
        assert_eq!(sum, Ok(4));
    });
}

/// `len` bytes of a pattern that differs with `seed`.
pub(crate) fn payload(len: usize, seed: usize) -> Bytes {
    (0..len).map(|i| ((i + seed) * 31 % 251) as u8).collect()
}

/// `len` bytes of noise (a multiplicative hash of the index, shifted right by `shift`).
pub(crate) fn garbage(len: u32, shift: u32) -> Vec<u8> {
    (0..len)
        .map(|i| (i.wrapping_mul(2654435761) >> shift) as u8)
        .collect()
}

/// A HELLO frame offering this build's protocol version, authenticating with
/// `mechanism` (one without data: `none` or peer credentials).
pub(crate) fn hello_with(mechanism: Mechanism) -> Bytes {
    frame::encode_hello(&Hello {
        version_min: PROTOCOL_VERSION,
        version_max: PROTOCOL_VERSION,
        limits: Limits::default(),
        mechanism,
        auth: Bytes::new(),
    })
}

/// The HELLO a server started by [`server`] at `endpoint` accepts.
pub(crate) fn hello(endpoint: &str) -> Bytes {
    hello_with(plain_mechanism(endpoint))
}

/// A WELCOME without authentication data, as a server accepting `mechanism` sends it.
pub(crate) fn welcome(version: u16, mechanism: Mechanism) -> Bytes {
    frame::encode_welcome(&lanner_proto::Welcome {
        version,
        limits: Limits::default(),
        mechanism,
        auth: Bytes::new(),
    })
}

/// A REQUEST frame with a valid header (built through a client-role state machine, so the
/// call id and lengths are right).
pub(crate) fn request(
    object: u64,
    slot: u16,
    method: u16,
    fingerprint: u32,
    inline: &[u8],
) -> Bytes {
    let (mut conn, _) = lanner_proto::Connection::client(Limits::default());
    conn.handle_frame(welcome(PROTOCOL_VERSION, Mechanism::None))
        .unwrap();
    let mut message = MessageBuilder::request(object, slot, method, fingerprint);
    message.inline().put_slice(inline);
    let (_, out) = conn.send_request(message).map_err(|(e, _)| e).unwrap();
    out.into_contiguous()
}

/// The `lanner::Error` a failed calculator call carries; panics, naming `what`, if the call
/// succeeded or failed with an application error.
pub(crate) fn rpc_error<T: std::fmt::Debug>(
    result: Result<T, lanner_cli::services::CalcError>,
    what: &str,
) -> lanner::Error {
    match result {
        Err(lanner_cli::services::CalcError::Rpc(error)) => error,
        other => panic!("{what}: expected a call failure, got {other:?}"),
    }
}

/// A proxy to the object `name` at the Lanner endpoint `endpoint`, through a fresh client
/// with `options`.
pub(crate) async fn connect_with<P: lanner::Proxy>(
    endpoint: &str,
    name: &str,
    options: lanner::ConnectionOptions,
) -> Result<P, lanner::Error> {
    lanner::Client::with_options(options)
        .with_auth(plain_auth(endpoint))
        .connect(&format!("{endpoint}/{name}"))
        .await
}

/// Runs `lanner bench <args> --json`.
fn run_bench(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_lanner"))
        .arg("bench")
        .args(args)
        .arg("--json")
        .stdin(std::process::Stdio::null())
        .output()
        .expect("lanner bench runs")
}

/// Runs `lanner bench <args> --json`, asserts that it succeeded, and returns the one JSON
/// object it printed.
pub(crate) fn bench_json(args: &[&str]) -> serde_json::Value {
    let output = run_bench(args);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "bench {args:?} failed: {stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(stdout.trim()).expect("exactly one JSON object on stdout")
}

/// Runs `lanner bench <args> --json`, asserts that it refused (failed, with no report on
/// stdout), and returns what it said on stderr.
pub(crate) fn bench_refusal(args: &[&str]) -> String {
    let output = run_bench(args);
    assert!(!output.status.success(), "bench {args:?} was not refused");
    assert!(output.stdout.is_empty(), "no report on stdout");
    String::from_utf8_lossy(&output.stderr).into_owned()
}
