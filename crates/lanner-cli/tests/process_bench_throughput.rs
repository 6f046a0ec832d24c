//! Smoke runs of `lanner bench throughput` against real `lanner serve` processes: the
//! report's shape, one row per (threads, concurrency) pair, and every rate measured; never
//! the timings themselves.

mod support;

/// Runs `lanner bench throughput <args> --json` briefly; returns its JSON report.
fn throughput(args: &[&str]) -> serde_json::Value {
    let mut all = vec!["throughput", "--secs", "0.05"];
    all.extend_from_slice(args);
    support::bench_json(&all)
}

/// `row[field]` is a positive number.
fn positive(row: &serde_json::Value, field: &str) {
    assert!(
        row[field].as_f64().is_some_and(|v| v > 0.0),
        "{field}: {row}"
    );
}

#[test]
fn bench_throughput_reports_a_row_per_concurrency_on_every_transport() {
    for transport in ["tcp", "unix", "shm"] {
        let report = throughput(&["--transport", transport, "--concurrency", "1,16"]);
        assert_eq!(report["workload"], "throughput", "{report}");
        assert_eq!(report["transport"], transport, "{report}");
        assert_eq!(report["placement"], "split", "{report}");
        for field in ["wait", "env"] {
            assert!(!report[field].is_null(), "{field} missing: {report}");
        }
        let rows = report["rows"].as_array().expect("rows");
        let concurrencies: Vec<_> = rows.iter().map(|row| &row["concurrency"]).collect();
        assert_eq!(concurrencies, [1, 16], "{report}");
        for row in rows {
            assert_eq!(row["threads"], 1, "{row}");
            for field in ["rpc_calls_s", "raw_msgs_s", "ratio", "calls_s_per_core"] {
                positive(row, field);
            }
            for field in ["server_cores", "client_cores"] {
                assert!(
                    row[field].as_f64().is_some_and(|v| v >= 0.0),
                    "{field}: {row}"
                );
            }
        }
    }
}

#[test]
fn bench_throughput_runs_each_thread_count_with_its_own_connections() {
    let report = throughput(&[
        "--transport",
        "unix",
        "--placement",
        "free",
        "--concurrency",
        "4",
        "--threads",
        "1,2",
    ]);
    let rows = report["rows"].as_array().expect("rows");
    let threads: Vec<_> = rows.iter().map(|row| &row["threads"]).collect();
    assert_eq!(threads, [1, 2], "{report}");
    for row in rows {
        assert_eq!(row["concurrency"], 4, "{row}");
        positive(row, "rpc_calls_s");
        positive(row, "raw_msgs_s");
    }
}

#[test]
fn bench_throughput_refuses_several_threads_pinned_to_one_cpu() {
    let stderr = support::bench_refusal(&["throughput", "--threads", "1,2"]);
    assert!(stderr.contains("needs --placement free"), "{stderr}");
}
