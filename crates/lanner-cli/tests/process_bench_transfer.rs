//! Smoke runs of `lanner bench pingpong` and `lanner bench bandwidth` over shared memory
//! against real `lanner serve` processes: every row and field is there, `--payload-offset`
//! is reported (and refused where it means nothing), and a connected but silent client
//! and server fall idle after their spin budget. Never their timings.
//! Also `lanner bench floor`, whose raw and protocol-core sides are threads of the bench
//! itself and whose Lanner side calls a `lanner serve` process.

mod support;

use support::{bench_json, bench_refusal};

/// `row[field]` is a positive number.
fn positive(row: &serde_json::Value, field: &str) {
    assert!(
        row[field].as_f64().is_some_and(|v| v > 0.0),
        "{field}: {row}"
    );
}

/// The report's rows, one per size asked for, after checking what every report has.
fn rows<'a>(
    report: &'a serde_json::Value,
    workload: &str,
    sizes: &[u64],
) -> &'a [serde_json::Value] {
    assert_eq!(report["workload"], workload, "{report}");
    assert_eq!(report["transport"], "shm", "{report}");
    let rows = report["rows"].as_array().expect("rows");
    let reported: Vec<u64> = rows.iter().filter_map(|row| row["size"].as_u64()).collect();
    assert_eq!(reported, sizes, "{report}");
    rows
}

#[test]
fn bench_pingpong_over_shm_reports_latency_and_idle_cpu() {
    let report = bench_json(&[
        "pingpong",
        "--transport",
        "shm",
        "--sizes",
        "0,65536",
        "--iters",
        "200",
        "--warmup",
        "20",
    ]);
    for row in rows(&report, "pingpong", &[0, 65536]) {
        for field in [
            "rpc_p50_us",
            "rpc_p99_us",
            "raw_p50_us",
            "raw_p99_us",
            "ratio_p50",
        ] {
            positive(row, field);
        }
    }
    // Silent after the spin budget (50 us by default): both sides sleep. A side that kept
    // spinning would show close to 100% of a core.
    let idle = &report["idle_cpu"];
    positive(idle, "secs");
    for side in ["client_percent", "server_percent"] {
        let percent = idle[side].as_f64().unwrap_or(f64::NAN);
        assert!(percent < 10.0, "{side} {percent}% while silent: {report}");
    }
}

#[test]
fn bench_pingpong_places_payloads_where_payload_offset_asks_and_says_so() {
    let report = bench_json(&[
        "pingpong",
        "--transport",
        "shm",
        "--sizes",
        "65536",
        "--iters",
        "100",
        "--warmup",
        "10",
        "--payload-offset",
        "44",
    ]);
    assert_eq!(report["payload_offset"], 44, "{report}");
    for row in rows(&report, "pingpong", &[65536]) {
        positive(row, "ratio_p50");
    }
}

#[test]
fn bench_payload_offset_is_refused_where_no_payload_is_sent_or_past_a_line() {
    let stderr = bench_refusal(&["floor", "--transport", "shm", "--payload-offset", "8"]);
    assert!(
        stderr.contains("--payload-offset applies to pingpong and bandwidth"),
        "{stderr}"
    );
    let stderr = bench_refusal(&["pingpong", "--payload-offset", "64"]);
    assert!(stderr.contains("64 is not in 0..64"), "{stderr}");
}

#[test]
fn bench_bandwidth_refuses_empty_payloads() {
    let stderr = bench_refusal(&["bandwidth", "--transport", "shm", "--sizes", "4096,0"]);
    assert!(
        stderr.contains("every --sizes must be at least 1 byte"),
        "{stderr}"
    );
}

#[test]
fn bench_bandwidth_over_shm_reports_one_way_and_call_rates() {
    let report = bench_json(&[
        "bandwidth",
        "--transport",
        "shm",
        "--sizes",
        "4096,65536",
        "--secs",
        "0.2",
    ]);
    for row in rows(&report, "bandwidth", &[4096, 65536]) {
        for field in ["rpc_mb_s", "raw_mb_s", "ratio", "calls_mb_s"] {
            positive(row, field);
        }
    }
}

#[test]
fn bench_floor_reports_the_raw_ring_the_protocol_core_and_lanner() {
    let report = bench_json(&[
        "floor",
        "--transport",
        "shm",
        "--iters",
        "200",
        "--warmup",
        "20",
    ]);
    for row in rows(&report, "floor", &[0]) {
        for field in [
            "raw_p50_us",
            "raw_p99_us",
            "core_p50_us",
            "core_p99_us",
            "core_ratio_p50",
            "lanner_p50_us",
            "lanner_p99_us",
            "lanner_ratio_p50",
            "core_cpu_ns",
        ] {
            positive(row, field);
        }
    }
}

#[test]
fn bench_floor_refuses_other_transports_clearly() {
    let stderr = bench_refusal(&["floor", "--transport", "unix"]);
    assert!(stderr.contains("--transport shm"), "{stderr}");
}
