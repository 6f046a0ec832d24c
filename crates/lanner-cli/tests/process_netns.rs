//! Failure detection across a real network path: the server runs in a network namespace
//! this test creates, joined to the test's namespace by a veth pair. `tc netem` makes the
//! link lossy and slow (where the kernel has netem), then the link is cut. Calls survive
//! loss and delay; a cut link is found by the keepalive. Needs root (`ip netns`); without
//! it the test says so and passes.

mod support;

use std::process::Command;
use std::time::{Duration, Instant};

use lanner::{ConnectionOptions, ErrorKind, Proxy};
use lanner_cli::server_process::ServerProcess;
use lanner_cli::services::{Calculator, CalculatorProxy};
use support::{connect_with, rpc_error, runtime};

/// Runs `ip`/`tc` with `args`; false if it failed.
fn run(program: &str, args: &[&str]) -> bool {
    Command::new(program)
        .args(args)
        .status()
        .is_ok_and(|status| status.success())
}

fn must(program: &str, args: &[&str]) {
    assert!(run(program, args), "{program} {}", args.join(" "));
}

/// A namespace with one end of a veth pair; removed (with both ends) on drop.
struct Namespace {
    name: String,
    /// The veth end in the test's namespace.
    outer: String,
    /// The veth end in the new namespace.
    inner: String,
}

impl Namespace {
    /// None if this machine does not let the test create namespaces.
    fn create(subnet: u8) -> Option<Namespace> {
        let id = std::process::id() % 10_000;
        let name = format!("lanner-test-{id}");
        if !run("ip", &["netns", "add", &name]) {
            return None;
        }
        let namespace = Namespace {
            name: name.clone(),
            outer: format!("lnr{id}a"),
            inner: format!("lnr{id}b"),
        };
        let inner = namespace.inner.clone();
        must(
            "ip",
            &[
                "link",
                "add",
                &namespace.outer,
                "type",
                "veth",
                "peer",
                "name",
                &inner,
            ],
        );
        must("ip", &["link", "set", &inner, "netns", &name]);
        let outer_address = format!("10.231.{subnet}.1/30");
        let inner_address = format!("10.231.{subnet}.2/30");
        must(
            "ip",
            &["addr", "add", &outer_address, "dev", &namespace.outer],
        );
        must("ip", &["link", "set", &namespace.outer, "up"]);
        must(
            "ip",
            &["-n", &name, "addr", "add", &inner_address, "dev", &inner],
        );
        must("ip", &["-n", &name, "link", "set", &inner, "up"]);
        must("ip", &["-n", &name, "link", "set", "lo", "up"]);
        Some(namespace)
    }

    /// Replaces the outer link's netem settings (`netem` arguments, e.g. `loss 5%`);
    /// false if this kernel has no netem.
    fn netem(&self, settings: &[&str]) -> bool {
        let mut args = vec!["qdisc", "replace", "dev", &self.outer, "root", "netem"];
        args.extend_from_slice(settings);
        run("tc", &args)
    }

    /// Cuts the link: nothing passes either way, and nobody is told. (The far end goes
    /// down, so the near end keeps its route and packets die on the link instead of
    /// leaving by the default route.)
    fn cut(&self) {
        must(
            "ip",
            &["-n", &self.name, "link", "set", &self.inner, "down"],
        );
    }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        // Deleting the namespace deletes the inner veth end, and with it the outer one.
        let _ = run("ip", &["netns", "del", &self.name]);
        let _ = run("ip", &["link", "del", &self.outer]);
    }
}

#[test]
fn keepalive_finds_a_cut_link_and_tolerates_a_lossy_one() {
    let Some(namespace) = Namespace::create(7) else {
        eprintln!("skipped: cannot create a network namespace here (needs root)");
        return;
    };
    let mut command = Command::new("ip");
    command
        .args(["netns", "exec", &namespace.name])
        .arg(env!("CARGO_BIN_EXE_lanner"))
        .args([
            "serve",
            "--transport",
            "tcp",
            "--listen",
            "tcp://10.231.7.2:0",
            "--auth",
            "none",
        ]);
    let mut server = ServerProcess::start(command).expect("the server starts in the namespace");
    let interval = Duration::from_millis(200);
    let timeout = Duration::from_millis(400);
    runtime().block_on(async {
        let options = ConnectionOptions::default().with_keepalive(interval, timeout);
        let calc: CalculatorProxy = connect_with(&server.lanner, "calc", options)
            .await
            .expect("connect across the veth pair");

        // A slow, lossy link: calls still succeed, and idle periods do not look like death.
        if !namespace.netem(&["delay", "20ms", "5ms", "loss", "5%"]) {
            eprintln!("no netem in this kernel: the link stays clean until it is cut");
        }
        for i in 0..30 {
            assert_eq!(calc.add(i, 1).await, Ok(i + 1));
        }
        tokio::time::sleep(interval * 6).await;
        assert_eq!(calc.add(2, 2).await, Ok(4), "an idle lossy link stays up");

        // Cut the link: the call in flight fails once the keepalive gives up.
        namespace.cut();
        let started = Instant::now();
        let result = tokio::time::timeout(Duration::from_secs(20), calc.add(1, 1))
            .await
            .expect("the keepalive ends the call instead of letting it hang");
        let error = rpc_error(result, "a call over the cut link");
        assert_eq!(error.kind(), ErrorKind::Unavailable, "{error}");
        assert!(error.message().contains("keepalive"), "{error}");
        assert!(error.may_have_executed(), "{error}");
        let waited = started.elapsed();
        assert!(waited < Duration::from_secs(10), "took {waited:?}");

        // Reconnecting to a host nobody answers for is bounded by the call's deadline,
        // and connecting afresh by the handshake timeout: neither waits for the kernel.
        let started = Instant::now();
        let result = calc
            .with_timeout(Duration::from_millis(300))
            .add(1, 1)
            .await;
        let error = rpc_error(result, "a call that must reconnect");
        assert_eq!(error.kind(), ErrorKind::DeadlineExceeded, "{error}");
        assert!(!error.may_have_executed(), "{error}");
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "{:?}",
            started.elapsed()
        );
        let started = Instant::now();
        let options =
            ConnectionOptions::default().with_handshake_timeout(Duration::from_millis(300));
        let error = connect_with::<CalculatorProxy>(&server.lanner, "calc", options)
            .await
            .unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Unavailable, "{error}");
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "{:?}",
            started.elapsed()
        );
    });
    server.kill();
}
