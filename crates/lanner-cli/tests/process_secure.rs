//! Authentication against a real `lanner serve` process: pre-shared keys and TLS over TCP
//! (right and wrong credentials), the refusal to serve TCP without a choice of `--auth`,
//! and a smoke run of `lanner bench secure` (its output, never its timings).

mod support;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use lanner::{ClientAuth, ErrorKind, PreSharedKey};
use lanner_cli::auth_arg::client_tls_config;
use lanner_cli::pki::{SERVER_NAMES, ThrowAwayPki};
use lanner_cli::server_process::{ServeAuth, ServerProcess};
use lanner_cli::services::{Calculator, CalculatorProxy};
use lanner_cli::transport_arg::TransportArg;
use support::runtime;

const LANNER: &str = env!("CARGO_BIN_EXE_lanner");

/// Starts `lanner serve --transport tcp` authenticating with `auth`.
fn tcp_server(auth: &ServeAuth) -> ServerProcess {
    ServerProcess::spawn_with_auth(
        Path::new(LANNER),
        TransportArg::Tcp,
        None,
        Duration::from_micros(50),
        auth,
    )
    .expect("the lanner server process starts")
}

/// Connects to `calc` at `server` authenticating with `auth`, and adds 2 and 3.
fn add_with(server: &ServerProcess, auth: ClientAuth) -> Result<i64, lanner::Error> {
    runtime().block_on(async {
        let calc: CalculatorProxy = lanner::Client::new()
            .with_auth(auth)
            .connect(&format!("{}/calc", server.lanner))
            .await?;
        tokio::time::timeout(Duration::from_secs(5), calc.add(2, 3))
            .await
            .expect("the call ends")
            .map_err(|error| match error {
                lanner_cli::services::CalcError::Rpc(error) => error,
                other => panic!("unexpected application error {other:?}"),
            })
    })
}

/// `add_with`'s error; panics if the call succeeded.
fn refused(server: &ServerProcess, auth: ClientAuth, what: &str) -> lanner::Error {
    match add_with(server, auth) {
        Ok(sum) => panic!("{what}: the call succeeded ({sum})"),
        Err(error) => error,
    }
}

#[test]
fn a_pre_shared_key_over_tcp_admits_only_its_holders() {
    let secret: Vec<u8> = (0..32u8).map(|i| i.wrapping_mul(37) ^ 0x5a).collect();
    let server = tcp_server(&ServeAuth::Psk {
        id: "tests".into(),
        secret: secret.clone(),
    });
    let key = PreSharedKey::new("tests", &secret).unwrap();
    assert_eq!(add_with(&server, ClientAuth::psk(key)), Ok(5));

    let mut wrong_secret = secret.clone();
    wrong_secret[0] ^= 1;
    let wrong = PreSharedKey::new("tests", wrong_secret).unwrap();
    let error = refused(&server, ClientAuth::psk(wrong), "a wrong key");
    assert_eq!(error.kind(), ErrorKind::Unauthenticated, "{error}");
    assert!(
        error
            .message()
            .contains("server could not prove it holds pre-shared key"),
        "{error}"
    );

    let error = refused(&server, ClientAuth::none(), "no authentication");
    assert_eq!(error.kind(), ErrorKind::Unauthenticated, "{error}");
    assert!(error.message().contains("accepts: psk"), "{error}");

    // The refusals cost the server nothing: the right key still works.
    let key = PreSharedKey::new("tests", &secret).unwrap();
    assert_eq!(add_with(&server, ClientAuth::psk(key)), Ok(5));
}

/// A TLS client trusting the authority of `trusted`, presenting `pki`'s client certificate
/// if `with_certificate`.
fn tls_client(trusted: &ThrowAwayPki, identity: Option<&ThrowAwayPki>) -> ClientAuth {
    let identity = identity.map(|pki| (pki.client_cert.as_path(), pki.client_key.as_path()));
    let config = client_tls_config(&trusted.ca_cert, identity).unwrap();
    ClientAuth::tls(config, SERVER_NAMES[0])
}

/// A connection refused during the handshake with `kind`, never sent a call.
fn assert_refused(error: &lanner::Error, kind: ErrorKind) {
    assert_eq!(error.kind(), kind, "{error}");
    assert!(!error.may_have_executed(), "{error}");
}

#[test]
fn tls_over_tcp_checks_the_server_and_when_asked_the_client() {
    let pki = ThrowAwayPki::generate().unwrap();
    let stranger = ThrowAwayPki::generate().unwrap();
    let server = tcp_server(&ServeAuth::Tls {
        cert: pki.server_cert.clone(),
        key: pki.server_key.clone(),
        client_ca: None,
    });
    assert_eq!(add_with(&server, tls_client(&pki, None)), Ok(5));

    // A refused certificate is Unauthenticated, with rustls's reason.
    let error = refused(&server, tls_client(&stranger, None), "an untrusted server");
    assert_refused(&error, ErrorKind::Unauthenticated);
    assert!(
        error
            .message()
            .contains("invalid peer certificate: UnknownIssuer"),
        "{error}"
    );

    // A client speaking plain Lanner to a TLS port gets nowhere (the server reads its
    // HELLO as a TLS record and hangs up).
    let error = refused(&server, ClientAuth::none(), "a plain client");
    assert_refused(&error, ErrorKind::Unavailable);
    assert!(error.message().contains("ClientAuth::tls"), "{error}");

    // Client certificates required.
    let mutual = tcp_server(&ServeAuth::Tls {
        cert: pki.server_cert.clone(),
        key: pki.server_key.clone(),
        client_ca: Some(pki.ca_cert.clone()),
    });
    assert_eq!(add_with(&mutual, tls_client(&pki, Some(&pki))), Ok(5));
    let error = refused(
        &mutual,
        tls_client(&pki, None),
        "a client without a certificate",
    );
    assert_refused(&error, ErrorKind::Unauthenticated);
    assert!(error.message().contains("CertificateRequired"), "{error}");
    let error = refused(
        &mutual,
        tls_client(&pki, Some(&stranger)),
        "a client certificate from another authority",
    );
    assert_refused(&error, ErrorKind::Unauthenticated);
    assert!(error.message().contains("UnknownCA"), "{error}");
    assert_eq!(add_with(&mutual, tls_client(&pki, Some(&pki))), Ok(5));
}

/// Runs `lanner serve` with `args` (and `env`), expecting it to refuse to start; returns
/// its standard error.
fn serve_refuses(args: &[&str], env: &[(&str, &str)]) -> String {
    let mut command = Command::new(LANNER);
    command
        .arg("serve")
        .args(args)
        .env_remove("LANNER_PSK")
        .stdin(Stdio::null());
    for (name, value) in env {
        command.env(name, value);
    }
    let output = command.output().expect("lanner serve runs");
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(!output.status.success(), "lanner serve {args:?} started");
    assert!(
        output.stdout.is_empty(),
        "lanner serve {args:?} said it listens"
    );
    stderr
}

#[test]
fn serve_refuses_tcp_without_a_choice_of_authentication() {
    let stderr = serve_refuses(&["--transport", "tcp"], &[]);
    assert!(stderr.contains("needs --auth"), "{stderr}");
    assert!(stderr.contains("--auth none"), "{stderr}");

    let stderr = serve_refuses(&["--transport", "tcp", "--auth", "peercred"], &[]);
    assert!(stderr.contains("unix and shm only"), "{stderr}");
    let stderr = serve_refuses(&["--transport", "tcp", "--auth", "psk"], &[]);
    assert!(stderr.contains("LANNER_PSK"), "{stderr}");
    let stderr = serve_refuses(
        &["--transport", "tcp", "--auth", "psk"],
        &[("LANNER_PSK", "k:0011")],
    );
    assert!(stderr.contains("at least 16"), "{stderr}");
    assert!(
        !stderr.contains("0011"),
        "the secret is never shown: {stderr}"
    );
    let stderr = serve_refuses(&["--transport", "tcp", "--auth", "tls"], &[]);
    assert!(stderr.contains("--tls-cert"), "{stderr}");
    let stderr = serve_refuses(&["--transport", "unix", "--auth", "tls"], &[]);
    assert!(stderr.contains("tcp only"), "{stderr}");
}

/// Runs `lanner bench secure` with `args`; returns its JSON report.
fn bench_secure(args: &[&str]) -> serde_json::Value {
    let mut all = vec!["secure", "--iters", "200", "--warmup", "50"];
    all.extend_from_slice(args);
    support::bench_json(&all)
}

#[test]
fn bench_secure_reports_authenticated_and_plain_round_trips() {
    for (transport, auth) in [("unix", "peercred"), ("tcp", "psk")] {
        let report = bench_secure(&["--transport", transport, "--auth", auth]);
        assert_eq!(report["workload"], "secure", "{report}");
        assert_eq!(report["transport"], transport, "{report}");
        for field in ["placement", "wait", "env"] {
            assert!(!report[field].is_null(), "{field} missing: {report}");
        }
        let rows = report["rows"].as_array().expect("rows");
        assert_eq!(rows.len(), 1, "{report}");
        let row = &rows[0];
        assert_eq!(row["auth"], auth, "{report}");
        for field in [
            "secure_p50_us",
            "secure_p99_us",
            "plain_p50_us",
            "plain_p99_us",
            "ratio",
        ] {
            assert!(
                row[field].as_f64().is_some_and(|v| v > 0.0),
                "{field}: {report}"
            );
        }
    }
}
