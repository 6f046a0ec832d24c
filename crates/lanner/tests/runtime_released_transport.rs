//! A connection that has ended lets go of its socket although proxies made on it live on.
//!
//! A proxy pins the connection it was made on (its calls go there without asking the
//! reference), and a client's cache keeps it until its endpoint is looked up again. Were
//! the transport kept with the connection, every server that went away would cost a
//! client that keeps its proxies a socket (or a shared-memory connection's descriptors,
//! and its region: megabytes of rings and loan areas). This is the only test of its
//! binary: it counts the process's open descriptors and shared-memory mappings.

use std::sync::Arc;
use std::time::{Duration, Instant};

use lanner::{Client, ErrorKind, Proxy, Server};

mod common;
use common::*;

fn open_descriptors() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

/// Mappings of shared-memory connections' regions (their memfds' name) in this process.
fn region_mappings() -> usize {
    std::fs::read_to_string("/proc/self/maps")
        .unwrap()
        .lines()
        .filter(|line| line.contains("memfd:lanner-shm"))
        .count()
}

#[tokio::test]
async fn a_proxy_kept_after_its_server_went_away_holds_no_descriptor_and_no_region() {
    let path = std::env::temp_dir().join(format!("lanner-released-{}.sock", std::process::id()));
    // One after the other: both count the same process's descriptors.
    proxy_outlives_its_server(&format!("unix://{}", path.display())).await;
    proxy_outlives_its_server(&format!("shm://lanner-released-{}", std::process::id())).await;
}

/// Serves at `endpoint`, calls, shuts the server down, and waits for the process to have
/// the descriptors (and shared-memory mappings) it had before while the client keeps its
/// proxy.
async fn proxy_outlives_its_server(endpoint: &str) {
    let before = open_descriptors();
    let regions_before = region_mappings();
    let server = Server::new();
    let (_server, listening) = serve_at(
        endpoint,
        server,
        service_object(&Arc::new(Service::default())),
    )
    .await;
    let client = Client::new();
    let calculator: CalculatorProxy = client
        .connect(&listening.endpoint().object_url("obj"))
        .await
        .unwrap();
    assert_eq!(calculator.add(2, 3).await, Ok(5));
    assert!(open_descriptors() > before);
    let lends = endpoint.starts_with("shm://");
    assert_eq!(calculator.object().loan(4096).is_shared(), lends);

    // The server goes away; the client keeps its proxy (and its client).
    listening.shutdown(Duration::ZERO).await;
    drop(_server);
    let started = Instant::now();
    loop {
        let error = calculator.add(1, 1).await.unwrap_err();
        let CalcError::Remote(error) = error else {
            panic!("unexpected {error:?}");
        };
        assert_eq!(error.kind(), ErrorKind::Unavailable, "{error}");
        if open_descriptors() == before && region_mappings() == regions_before {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{endpoint}: {} descriptors still open, {before} before the server started; \
             {} regions mapped, {regions_before} before",
            open_descriptors(),
            region_mappings()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        !calculator.object().loan(4096).is_shared(),
        "an ended connection lends from ordinary memory"
    );
    drop(calculator);
    drop(client);
}
