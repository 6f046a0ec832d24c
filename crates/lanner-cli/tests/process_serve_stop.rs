//! `lanner serve` stops gracefully on SIGINT (Ctrl-C in the terminal of a benchmark that
//! started it) and SIGTERM, as it does when its standard input closes: it exits with
//! success and removes its socket files. (Killed with SIGKILL it could not.)

mod support;

use std::path::PathBuf;

use lanner_cli::services::Echo;
use lanner_cli::transport_arg::TransportArg;
use support::{PATIENCE, connect, payload, runtime, server, signal};

/// The socket file behind a `unix://` endpoint.
fn socket_file(endpoint: &str) -> PathBuf {
    PathBuf::from(
        endpoint
            .strip_prefix("unix://")
            .unwrap_or_else(|| panic!("a unix endpoint: {endpoint}")),
    )
}

fn stops_gracefully_on(signal_number: libc::c_int) {
    let mut server = server(TransportArg::Unix);
    let files = [socket_file(&server.lanner), socket_file(&server.raw)];
    for file in &files {
        assert!(file.exists(), "{} exists while serving", file.display());
    }
    let runtime = runtime();
    // A client connected when the signal comes: it is told to go away, not cut off.
    let echo = runtime.block_on(async {
        let echo: lanner_cli::services::EchoProxy = connect(&server, "echo").await;
        let sent = payload(1_000, 7);
        assert!(echo.echo(sent.clone()).await.expect("an echo") == sent);
        echo
    });
    signal(server.pid(), signal_number);
    let status = server
        .exit_within(PATIENCE)
        .expect("the server exits within 5 s of the signal");
    assert!(status.success(), "the server exits with success: {status}");
    for file in &files {
        assert!(!file.exists(), "{} is removed", file.display());
    }
    drop(echo);
}

#[test]
fn sigint_stops_the_server_and_removes_its_socket_files() {
    stops_gracefully_on(libc::SIGINT);
}

#[test]
fn sigterm_stops_the_server_and_removes_its_socket_files() {
    stops_gracefully_on(libc::SIGTERM);
}
