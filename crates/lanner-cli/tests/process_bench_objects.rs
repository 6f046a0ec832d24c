//! Smoke runs of `lanner bench firstcall`, `lanner bench scale` and `lanner bench
//! apartment` against real `lanner serve` processes: their reports' shape and the message
//! counts, never their timings.

mod support;

use support::{bench_json, bench_refusal};

/// The report's single row, after checking what every report has.
fn only_row<'a>(
    report: &'a serde_json::Value,
    workload: &str,
    transport: &str,
) -> &'a serde_json::Value {
    assert_eq!(report["workload"], workload, "{report}");
    assert_eq!(report["transport"], transport, "{report}");
    for field in ["placement", "wait", "env"] {
        assert!(!report[field].is_null(), "{field} missing: {report}");
    }
    let rows = report["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 1, "{report}");
    &rows[0]
}

/// `row[field]` is a positive number.
fn positive(row: &serde_json::Value, field: &str) {
    assert!(
        row[field].as_f64().is_some_and(|v| v > 0.0),
        "{field}: {row}"
    );
}

#[test]
fn bench_firstcall_counts_one_request_and_one_reply_per_call() {
    for transport in ["unix", "tcp"] {
        let report = bench_json(&["firstcall", "--transport", transport, "--iters", "20"]);
        let row = only_row(&report, "firstcall", transport);
        for field in ["first_us", "later_p50_us", "ratio"] {
            positive(row, field);
        }
        // The second interface's proxy comes from the reference: its first call is one
        // request and one reply, like every later one.
        assert_eq!(row["messages_first"], 2, "{report}");
        assert_eq!(row["messages_later"], 2, "{report}");
        assert_eq!(row["trials"], 20, "{report}");
    }
}

#[test]
fn bench_scale_calls_many_objects_and_methods() {
    let report = bench_json(&[
        "scale",
        "--objects",
        "1000",
        "--methods",
        "200",
        "--iters",
        "200",
        "--warmup",
        "50",
    ]);
    let row = only_row(&report, "scale", "unix");
    assert_eq!(row["objects"], 1000, "{report}");
    assert_eq!(row["methods"], 200, "{report}");
    for field in ["p50_us", "base_p50_us", "ratio"] {
        positive(row, field);
    }
}

#[test]
fn bench_scale_refuses_more_methods_than_the_interface_has() {
    let stderr = bench_refusal(&["scale", "--objects", "10", "--methods", "201"]);
    assert!(
        stderr.contains("--methods must be from 1 to 200"),
        "{stderr}"
    );
}

#[test]
fn bench_apartment_compares_an_apartment_object_with_a_free_threaded_one() {
    for transport in ["unix", "tcp"] {
        let report = bench_json(&[
            "apartment",
            "--transport",
            transport,
            "--iters",
            "200",
            "--warmup",
            "50",
        ]);
        let row = only_row(&report, "apartment", transport);
        for field in [
            "apartment_p50_us",
            "apartment_p99_us",
            "free_p50_us",
            "free_p99_us",
            "ratio",
        ] {
            positive(row, field);
        }
    }
}
