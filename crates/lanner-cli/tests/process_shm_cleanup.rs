//! When the server process of a shared-memory connection is killed, nothing of the
//! connection stays in the client: its region is unmapped and its descriptors are closed
//! once the client lets go of its proxy. Alone in its test binary, because it counts this
//! process's mappings and descriptors, which tests running beside it would change.

mod support;

use std::time::{Duration, Instant};

use lanner::ErrorKind;
use lanner_cli::services::{Echo, EchoProxy};
use lanner_cli::transport_arg::TransportArg;
use support::{PATIENCE, connect, payload, runtime, server};

/// Mappings of shared-memory regions in this process.
fn regions() -> usize {
    std::fs::read_to_string("/proc/self/maps")
        .unwrap()
        .lines()
        .filter(|line| line.contains("memfd:lanner-shm"))
        .count()
}

/// Open descriptors of this process.
fn descriptors() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

/// Waits (at most [`PATIENCE`]) until `now()` gives `expected`; returns the last value.
fn settles_at(expected: usize, now: impl Fn() -> usize) -> usize {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let value = now();
        if value == expected || Instant::now() > deadline {
            return value;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_killed_servers_region_and_descriptors_leave_the_client() {
    let mut server = server(TransportArg::Shm);
    let runtime = runtime();
    // The runtime's own descriptors (its reactor) exist before the count.
    runtime.block_on(tokio::task::yield_now());
    let (regions_before, descriptors_before) = (regions(), descriptors());
    runtime.block_on(async {
        let echo: EchoProxy = connect(&server, "echo").await;
        // A payload large enough to be read in place, held while the server dies.
        let sent = payload(100_000, 1);
        let held = echo.echo(sent.clone()).await.expect("an echo");
        assert!(held == sent);
        assert!(regions() > regions_before, "the region is mapped");
        assert!(descriptors() > descriptors_before);
        server.kill();
        let error = tokio::time::timeout(PATIENCE, echo.echo(sent))
            .await
            .expect("a call to a killed server fails within 5 s")
            .expect_err("a call to a killed server fails");
        assert_eq!(error.kind(), ErrorKind::Unavailable, "{error}");
        drop((echo, held));
    });
    assert_eq!(
        settles_at(regions_before, regions),
        regions_before,
        "the region stays mapped"
    );
    assert_eq!(
        settles_at(descriptors_before, descriptors),
        descriptors_before,
        "descriptors stay open"
    );
}
