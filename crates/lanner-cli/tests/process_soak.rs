//! A short run of `lanner soak` (the real soak runs for minutes, by hand): the command
//! works end to end and its checks hold while the server is killed and restarted.

use std::process::Command;

#[test]
fn a_short_soak_has_no_wrong_answers_and_no_leaks() {
    let output = Command::new(env!("CARGO_BIN_EXE_lanner"))
        .args([
            "soak",
            "--secs",
            "3",
            "--clients",
            "8",
            "--transport",
            "unix",
            "--json",
        ])
        .output()
        .expect("lanner soak runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "soak failed: {stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let summary: serde_json::Value = serde_json::from_str(stdout.trim()).expect("one JSON object");
    assert_eq!(summary["wrong_answers"], 0, "{summary}");
    assert_eq!(summary["leaked_fds"], 0, "{summary}");
    assert!(summary["servers_killed"].as_u64() >= Some(1), "{summary}");
    let calls = summary["calls"].as_u64().unwrap();
    let succeeded = summary["succeeded"].as_u64().unwrap();
    let failed: u64 = summary["failed"]
        .as_object()
        .unwrap()
        .values()
        .map(|n| n.as_u64().unwrap())
        .sum();
    assert_eq!(
        calls,
        succeeded + failed,
        "every call ended exactly once: {summary}"
    );
    assert!(succeeded > 0, "{summary}");
}
