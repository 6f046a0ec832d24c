//! Calls to a real server process over TCP, Unix sockets and shared memory.

mod support;

use std::time::{Duration, Instant};

use lanner::{ErrorKind, Proxy};
use lanner_cli::services::{
    CalcError, Calculator, CalculatorProxy, Echo, EchoProxy, Greeter, GreeterProxy,
};
use support::{TRANSPORTS, client, connect, payload, rpc_error, runtime, server};

#[test]
fn typed_results_errors_and_a_second_interface() {
    for transport in TRANSPORTS {
        let server = server(transport);
        runtime().block_on(async {
            let calc: CalculatorProxy = connect(&server, "calc").await;
            assert_eq!(calc.add(40, 2).await, Ok(42));
            assert_eq!(calc.divide(84, 2).await, Ok(42));
            assert_eq!(calc.divide(1, 0).await, Err(CalcError::DivisionByZero));
            assert_eq!(calc.add(i64::MAX, 1).await, Err(CalcError::Overflow));
            assert_eq!(calc.object().interfaces().len(), 2);
            let greeter: GreeterProxy = calc.query().unwrap();
            let greeting = greeter.greet("tests".into()).await.unwrap();
            assert!(greeting.starts_with("hello, tests"), "{greeting}");
            assert!(greeting.contains(&server.pid().to_string()), "{greeting}");
            let echo_on_calc = calc.query::<EchoProxy>().unwrap_err();
            assert_eq!(echo_on_calc.kind(), ErrorKind::Unimplemented);
            assert!(echo_on_calc.message().contains("Echo"), "{echo_on_calc}");
        });
    }
}

#[test]
fn bulk_payloads_round_trip_byte_exact() {
    for transport in TRANSPORTS {
        let server = server(transport);
        runtime().block_on(async {
            let echo: EchoProxy = connect(&server, "echo").await;
            for size in [0usize, 1, 4095, 65536, 1 << 20, 5 << 20] {
                let payload = payload(size, 0);
                let echoed = echo.echo(payload.clone()).await.unwrap();
                assert_eq!(echoed.len(), size);
                assert!(
                    echoed == payload,
                    "payload of {size} bytes came back different"
                );
            }
        });
    }
}

#[test]
fn sixty_four_tasks_share_one_connection() {
    for transport in TRANSPORTS {
        let server = server(transport);
        runtime().block_on(async {
            let client = client(&server.lanner);
            let url = format!("{}/calc", server.lanner);
            let calc: CalculatorProxy = client.connect(&url).await.unwrap();
            let tasks: Vec<_> = (0..64i64)
                .map(|task| {
                    let calc = calc.clone();
                    tokio::spawn(async move {
                        let mut wrong = 0;
                        for i in 0..1000i64 {
                            if calc.add(task * 1_000_000, i).await != Ok(task * 1_000_000 + i) {
                                wrong += 1;
                            }
                        }
                        wrong
                    })
                })
                .collect();
            let mut wrong = 0;
            for task in tasks {
                wrong += task.await.unwrap();
            }
            assert_eq!(wrong, 0, "64 x 1000 calls over {}", transport.name());
            // Every proxy obtained through this client reuses the one connection.
            let again: CalculatorProxy = client.connect(&url).await.unwrap();
            assert_eq!(again.add(1, 1).await, Ok(2));
        });
    }
}

#[test]
fn a_killed_server_fails_calls_with_unavailable() {
    for transport in TRANSPORTS {
        let mut server = server(transport);
        runtime().block_on(async {
            let calc: CalculatorProxy = connect(&server, "calc").await;
            assert_eq!(calc.add(1, 2).await, Ok(3));
            server.kill();
            let start = Instant::now();
            let failed = tokio::time::timeout(Duration::from_secs(5), calc.add(1, 2))
                .await
                .expect("a call to a dead server fails instead of hanging");
            let error = rpc_error(failed, "a call to a dead server");
            assert_eq!(error.kind(), ErrorKind::Unavailable, "{error}");
            assert!(start.elapsed() < Duration::from_secs(5));
            let next = calc.add(1, 2).await;
            assert!(
                matches!(&next, Err(CalcError::Rpc(e)) if e.is_unavailable() && !e.may_have_executed()),
                "a call on a connection known to be closed is never sent: {next:?}"
            );
        });
    }
}

#[test]
fn connecting_to_nothing_is_unavailable() {
    runtime().block_on(async {
        let error = client("unix://")
            .connect::<EchoProxy>("unix:///nonexistent-dir/lanner.sock/echo")
            .await
            .unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Unavailable, "{error}");
        let error = client("tcp://")
            .connect::<EchoProxy>("tcp://127.0.0.1:1/echo")
            .await
            .unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Unavailable, "{error}");
    });
}

#[test]
fn unknown_names_are_not_found() {
    let server = server(TRANSPORTS[0]);
    runtime().block_on(async {
        let error = client(&server.lanner)
            .connect::<EchoProxy>(&format!("{}/nope", server.lanner))
            .await
            .unwrap_err();
        assert_eq!(error.kind(), ErrorKind::NotFound, "{error}");
        assert!(error.message().contains("nope"), "{error}");
    });
}
