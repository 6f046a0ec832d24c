//! `lanner bench secure`: null-call round trips (the echo of an empty payload) on a
//! connection authenticated with `--auth`, against the same calls on a connection without
//! authentication (`--auth none` on both sides), measured after connecting. Two server
//! processes with the same placement (pinned to the same CPU) and the same wait strategy,
//! one per side, measured in alternating blocks as the pingpong workload alternates Lanner
//! and raw.
//!
//! For `psk` the bench makes a random 32-byte key and hands it to its server in
//! `LANNER_PSK`; for `tls` it generates a throw-away authority, server and client
//! certificate into a private temporary directory (removed afterwards) and measures
//! mutual TLS 1.3 (the server requires the client's certificate).
//!
//! With the default wait strategy the server not being measured sleeps once its spin
//! budget is spent, so it costs the other nothing. With `--busy-poll` it never sleeps and
//! shares the server CPU with the measured one: medians stay comparable, but the 99th
//! percentiles of both sides then show the scheduler's time slices.

use lanner::{ClientAuth, PreSharedKey};
use serde::Serialize;

use super::pingpong::compare_null_calls;
use super::setup::ClientSide;
use super::stats::{ratio, round2};
use super::{BenchArgs, DEFAULT_ITERS, RowsReport, print_report};
use crate::auth_arg::{AuthArg, client_tls_config};
use crate::pki::{SERVER_NAMES, ThrowAwayPki};
use crate::server_process::{ServeAuth, ServerProcess};
use crate::services::EchoProxy;
use crate::transport_arg::TransportArg;

/// The id of the key the psk measurement makes.
const KEY_ID: &str = "bench";

/// One row of the result.
#[derive(Debug, Serialize)]
pub struct Row {
    /// The authentication measured (`--auth`).
    pub auth: &'static str,
    /// Median null-call round trip with authentication.
    pub secure_p50_us: f64,
    /// 99th percentile with authentication.
    pub secure_p99_us: f64,
    /// Median null-call round trip without (`none`).
    pub plain_p50_us: f64,
    /// 99th percentile without.
    pub plain_p99_us: f64,
    /// `secure_p50_us / plain_p50_us`.
    pub ratio: f64,
}

/// The mechanism `args` asks for: `--auth`, or psk over TCP and peer credentials on local
/// transports; refuses `none` (the plain side) and mechanisms the transport lacks.
pub fn mechanism(args: &BenchArgs) -> Result<AuthArg, String> {
    let tcp = args.transport == TransportArg::Tcp;
    let auth = args
        .auth
        .unwrap_or(if tcp { AuthArg::Psk } else { AuthArg::Peercred });
    if auth == AuthArg::None {
        return Err(
            "--auth none is what the secure workload compares against: choose psk or tls (tcp), peercred or psk (unix, shm)"
                .into(),
        );
    }
    auth.check_transport(tcp)?;
    Ok(auth)
}

/// Runs the benchmark and prints the report.
pub fn run(args: &BenchArgs) -> Result<(), Box<dyn std::error::Error>> {
    let auth = mechanism(args)?;
    let row = measure(args, auth)?;
    let report = RowsReport::new("secure", args, vec![row]);
    let detail = match auth {
        AuthArg::Tls => "; null calls, mutual TLS 1.3 vs none",
        _ => "; null calls, authenticated vs none",
    };
    print_report(args, &report, || {
        println!("{}", report.run.title(detail));
        println!(
            "{:>9}  {:>10}  {:>10}  {:>10}  {:>10}  {:>6}",
            "auth", "secure p50", "secure p99", "plain p50", "plain p99", "ratio"
        );
        for row in &report.rows {
            println!(
                "{:>9}  {:>8.1}us  {:>8.1}us  {:>8.1}us  {:>8.1}us  {:>6.2}",
                row.auth,
                row.secure_p50_us,
                row.secure_p99_us,
                row.plain_p50_us,
                row.plain_p99_us,
                row.ratio
            );
        }
    })?;
    Ok(())
}

/// How the secured server is started and how the client authenticates to it. The
/// throw-away certificates (for tls) are removed when `pki` is dropped.
struct Secured {
    serve: ServeAuth,
    client: ClientAuth,
    pki: Option<ThrowAwayPki>,
}

impl Secured {
    fn new(auth: AuthArg) -> Result<Secured, Box<dyn std::error::Error>> {
        Ok(match auth {
            AuthArg::Peercred => Secured {
                serve: ServeAuth::PeerCredentials,
                client: ClientAuth::peer_credentials(),
                pki: None,
            },
            AuthArg::Psk => {
                let secret: [u8; 32] = rand::random();
                Secured {
                    serve: ServeAuth::Psk {
                        id: KEY_ID.into(),
                        secret: secret.to_vec(),
                    },
                    client: ClientAuth::psk(PreSharedKey::new(KEY_ID, secret)?),
                    pki: None,
                }
            }
            AuthArg::Tls => {
                let pki = ThrowAwayPki::generate()?;
                let config =
                    client_tls_config(&pki.ca_cert, Some((&pki.client_cert, &pki.client_key)))?;
                Secured {
                    serve: ServeAuth::Tls {
                        cert: pki.server_cert.clone(),
                        key: pki.server_key.clone(),
                        client_ca: Some(pki.ca_cert.clone()),
                    },
                    client: ClientAuth::tls(config, SERVER_NAMES[0]),
                    pki: Some(pki),
                }
            }
            AuthArg::None => return Err("nothing to compare: --auth none".into()),
        })
    }
}

/// Starts both servers, connects to both, warms up and measures.
fn measure(args: &BenchArgs, auth: AuthArg) -> Result<Row, Box<dyn std::error::Error>> {
    let ClientSide {
        server_cpu,
        spin,
        runtime,
        options,
    } = ClientSide::start(args)?;
    let mut secured = Secured::new(auth)?;
    let program = std::env::current_exe()?;
    let plain_server = ServerProcess::spawn_with_auth(
        &program,
        args.transport,
        server_cpu,
        spin,
        &ServeAuth::None,
    )?;
    let secure_server =
        ServerProcess::spawn_with_auth(&program, args.transport, server_cpu, spin, &secured.serve)?;
    // The server has read its certificate and key (it says where it listens only after),
    // and the client's configuration holds its own: the files go now, so that a
    // benchmark stopped with Ctrl-C leaves no keys behind.
    drop(secured.pki.take());
    let (plain, secure) = runtime.block_on(async {
        let plain: EchoProxy = lanner::Client::with_options(options.clone())
            .with_auth(ClientAuth::none())
            .connect(&format!("{}/echo", plain_server.lanner))
            .await?;
        let secure: EchoProxy = lanner::Client::with_options(options)
            .with_auth(secured.client.clone())
            .connect(&format!("{}/echo", secure_server.lanner))
            .await?;
        Ok::<_, lanner::Error>((plain, secure))
    })?;
    let iters = args.iters_or(DEFAULT_ITERS).max(1);
    if !args.json {
        eprintln!("  {} vs none: {iters} null calls each …", auth.name());
    }
    let (plain, secure) = compare_null_calls(&runtime, (&plain, &secure), iters, args.warmup)?;
    Ok(Row {
        auth: auth.name(),
        secure_p50_us: round2(secure.p50),
        secure_p99_us: round2(secure.p99),
        plain_p50_us: round2(plain.p50),
        plain_p99_us: round2(plain.p99),
        ratio: ratio(secure.p50, plain.p50),
    })
}
