//! Running one test of the current test binary as a child process: the cross-process half
//! of a test (a client to kill, a server in another process).

// Shared by several test crates.
#![allow(dead_code, unreachable_pub)]

use std::io::BufRead;
use std::process::{Child, Command, Stdio};

/// Runs test `name` of this test binary in a child process with `env` set, and waits for
/// the first line of its output that starts with `ready` (returned; `None` if the child
/// ended first). The child test must do nothing without that variable.
pub async fn spawn(name: &str, env: (&str, &str), ready: &str) -> (Child, Option<String>) {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", name, "--nocapture"])
        .env(env.0, env.1)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let ready = ready.to_owned();
    let line = tokio::task::spawn_blocking(move || {
        let mut lines = std::io::BufReader::new(stdout).lines();
        let found = lines
            .by_ref()
            .map_while(Result::ok)
            .find(|line| line.starts_with(&ready));
        // The rest is read too (on a thread of its own), or the child's test harness,
        // writing its result into a closed pipe, reports a broken pipe.
        std::thread::spawn(move || lines.for_each(drop));
        found
    })
    .await
    .unwrap();
    (child, line)
}
