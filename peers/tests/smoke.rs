//! Every framework over every transport answers both workloads, end to end: the bench
//! binary starts its server process, measures a few calls and prints its JSON report.

use std::process::Command;

use serde_json::Value;

/// Runs `peers bench ARGS --json` (placement free, so it runs on any machine) and returns
/// its report.
fn bench(args: &[&str]) -> Value {
    let output = Command::new(env!("CARGO_BIN_EXE_peers"))
        .arg("bench")
        .args(args)
        .args(["--placement", "free", "--json"])
        .output()
        .expect("run peers");
    assert!(
        output.status.success(),
        "peers {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("one JSON object on stdout")
}

#[test]
fn every_framework_and_transport_runs_both_workloads() {
    for framework in ["tonic", "tarpc", "capnp"] {
        for transport in ["tcp", "unix"] {
            let common = ["--framework", framework, "--transport", transport];
            let report = bench(
                &[
                    &[
                        "pingpong", "--sizes", "0,70000", "--iters", "20", "--warmup", "2",
                    ][..],
                    &common,
                ]
                .concat(),
            );
            assert_eq!(report["framework"], framework);
            assert_eq!(report["transport"], transport);
            let rows = report["rows"].as_array().expect("rows");
            assert_eq!(rows.len(), 2);
            assert_eq!(rows[1]["size"], 70000);
            assert!(rows[1]["p50_us"].as_f64().unwrap() > 0.0);

            let report = bench(
                &[
                    &[
                        "throughput",
                        "--concurrency",
                        "4",
                        "--secs",
                        "0.2",
                        "--warmup-secs",
                        "0.05",
                    ][..],
                    &common,
                ]
                .concat(),
            );
            let rows = report["rows"].as_array().expect("rows");
            assert_eq!(rows[0]["concurrency"], 4);
            assert!(rows[0]["calls_s"].as_f64().unwrap() > 0.0, "{report}");
        }
    }
}
