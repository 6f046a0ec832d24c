//! The README's example pairs run as the README says: each server in a process of its own,
//! its client against it, exiting successfully. `cargo test` builds the examples (next to
//! the test binaries, in `target/<profile>/examples/`); this runs them.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

/// The built example `name`.
fn example(name: &str) -> PathBuf {
    // target/<profile>/deps/<this test> → target/<profile>/examples/<name>
    let deps = std::env::current_exe().unwrap();
    let path = deps
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("examples")
        .join(name);
    assert!(path.exists(), "{} is not built", path.display());
    path
}

/// A Unix socket endpoint of this test run.
fn unix(tag: &str) -> String {
    let path =
        std::env::temp_dir().join(format!("lanner-example-{tag}-{}.sock", std::process::id()));
    format!("unix://{}", path.display())
}

/// An example server, serving until dropped (then interrupted, as Ctrl-C would, so that it
/// removes its socket file).
struct ExampleServer(Child);

impl ExampleServer {
    /// Starts `name` on `endpoint` and waits until it says it serves.
    fn start(name: &str, endpoint: &str) -> ExampleServer {
        let mut child = Command::new(example(name))
            .arg(endpoint)
            .env_remove("LANNER_PSK")
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut output = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        output.read_line(&mut line).unwrap();
        assert!(line.starts_with("serving"), "{name} printed {line:?}");
        // It goes on printing what it does: read it, or it fails writing to a closed pipe.
        std::thread::spawn(move || output.lines().map_while(Result::ok).for_each(drop));
        ExampleServer(child)
    }
}

impl Drop for ExampleServer {
    fn drop(&mut self) {
        let pid = libc::pid_t::try_from(self.0.id()).expect("a pid");
        // SAFETY: kill(2) takes no pointers; the pid is this process's child, not reaped
        // yet, so it names that child.
        unsafe { libc::kill(pid, libc::SIGINT) };
        let _ = self.0.wait();
    }
}

/// Runs the example client `name` with `args`; its output, once it succeeded.
fn run_client(name: &str, args: &[&str]) -> String {
    let output = Command::new(example(name))
        .args(args)
        .env_remove("LANNER_PSK")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{name} failed: {stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

#[test]
fn the_calculator_pair_runs() {
    let endpoint = unix("calc");
    let _server = ExampleServer::start("calculator_server", &endpoint);
    let output = run_client("calculator_client", &[&format!("{endpoint}/calc")]);
    assert!(output.contains("2 + 40 = 42"), "{output}");
}

#[test]
fn the_factory_pair_runs() {
    let endpoint = unix("factory");
    let _server = ExampleServer::start("factory_server", &endpoint);
    run_client("factory_client", &[&endpoint]);
}

#[test]
fn the_handoff_trio_runs() {
    let (factory, keeper) = (unix("handoff-factory"), unix("handoff-keeper"));
    let _factory = ExampleServer::start("factory_server", &factory);
    let _keeper = ExampleServer::start("keeper_server", &keeper);
    run_client("handoff_client", &[&factory, &keeper]);
}

#[test]
fn the_threading_pair_runs() {
    let endpoint = unix("threading");
    let _server = ExampleServer::start("threading_server", &endpoint);
    run_client("threading_client", &[&endpoint]);
}

#[test]
fn the_store_pair_runs_over_shared_memory() {
    let endpoint = format!("shm://lanner-example-store-{}", std::process::id());
    let _server = ExampleServer::start("store_server", &endpoint);
    run_client("store_client", &[&endpoint]);
}
