//! A server process that stops answering (SIGSTOP: the process lives, its sockets stay
//! open, nothing comes back) is detected by the client's keepalive, on every transport:
//! the call waiting on it fails with `Unavailable` instead of hanging.

mod support;

use std::time::{Duration, Instant};

use lanner::{ConnectionOptions, ErrorKind};
use lanner_cli::services::{Calculator, CalculatorProxy};
use support::{TRANSPORTS, connect_with, rpc_error, runtime, server, signal};

#[test]
fn a_stopped_server_is_detected_by_keepalive() {
    let interval = Duration::from_millis(100);
    let timeout = Duration::from_millis(200);
    for transport in TRANSPORTS {
        let mut server = server(transport);
        runtime().block_on(async {
            let options = ConnectionOptions::default().with_keepalive(interval, timeout);
            let calc: CalculatorProxy =
                connect_with(&server.lanner, "calc", options).await.unwrap();
            // Idle for several intervals: the probes are answered, the connection lives.
            tokio::time::sleep(interval * 5).await;
            assert_eq!(calc.add(1, 2).await, Ok(3), "{transport:?}");

            signal(server.pid(), libc::SIGSTOP);
            let started = Instant::now();
            let result = tokio::time::timeout(Duration::from_secs(10), calc.add(2, 3))
                .await
                .expect("keepalive ends the call instead of letting it hang");
            let waited = started.elapsed();
            signal(server.pid(), libc::SIGCONT);
            let error = rpc_error(result, &format!("{transport:?}"));
            assert_eq!(
                error.kind(),
                ErrorKind::Unavailable,
                "{transport:?}: {error}"
            );
            assert!(error.may_have_executed(), "{error}");
            assert!(error.message().contains("keepalive"), "{error}");
            // Detected within about two intervals plus the timeout (with slack for a busy
            // machine), not after some transport-level timeout of minutes.
            assert!(
                waited < Duration::from_secs(5),
                "{transport:?}: took {waited:?}"
            );
        });
        server.kill();
    }
}
