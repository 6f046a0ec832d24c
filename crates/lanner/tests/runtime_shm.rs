//! The shared-memory transport inside one process (the cross-process tests live in
//! `lanner-cli`): calls, payloads across ring wrap-around and fragmentation, concurrency,
//! held payloads, and connection errors. A peer dying is tested across processes.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use lanner::{Client, ErrorKind, Listening, Server};

/// A fresh `shm://` name per test (abstract socket names are per network namespace, and
/// test binaries may run side by side).
fn endpoint(test: &str) -> String {
    format!("shm://lanner-test-{}-{test}", std::process::id())
}

/// A `Service` served on [`endpoint`]`(test)`, and the URL of its object.
async fn serve_shm(test: &str) -> (Server, Listening, String) {
    let object = service_object(&Arc::default());
    let (server, listening) = serve_at(&endpoint(test), Server::new(), object).await;
    (server, listening, format!("{}/obj", endpoint(test)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_and_typed_errors_work_over_shared_memory() {
    let (_server, listening, url) = serve_shm("calls").await;
    assert_eq!(listening.endpoint().to_string(), endpoint("calls"));
    let calc: CalculatorProxy = Client::new().connect(&url).await.unwrap();
    assert_eq!(calc.add(40, 2).await, Ok(42));
    assert_eq!(
        calc.divide(7, 0).await,
        Err(CalcError::DivideByZero { dividend: 7 })
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn payloads_of_every_size_round_trip_through_the_rings() {
    let (_server, _listening, url) = serve_shm("payloads").await;
    let blobs: BlobsProxy = Client::new().connect(&url).await.unwrap();
    // Sizes around the in-place threshold, across many ring wrap-arounds, and larger
    // than half the ring (sent in pieces).
    let mut sizes = vec![0usize, 1, 7, 4096, 16 * 1024 - 1, 16 * 1024, 65536, 1 << 20];
    sizes.extend([3 << 20, 9 << 20]);
    for round in 0..3u8 {
        for &size in &sizes {
            let payload = pattern(size, round);
            let echoed = blobs.echo(payload.clone()).await.unwrap();
            assert!(echoed == payload, "{size} bytes came back different");
        }
    }
}

/// Large payloads are placed in the ring where their source lies modulo a cache line:
/// payloads that start anywhere in their buffer (a slice at every offset from 0 to 64)
/// come back whole, both ways (the reply's source is the request's payload, read in
/// place).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn payloads_at_every_alignment_round_trip_through_the_rings() {
    let (_server, _listening, url) = serve_shm("alignments").await;
    let blobs: BlobsProxy = Client::new().connect(&url).await.unwrap();
    let buffer = pattern(64 * 1024 + 64, 7);
    for offset in 0..=64 {
        let payload = buffer.slice(offset..offset + 32 * 1024 + offset % 9);
        let echoed = blobs.echo(payload.clone()).await.unwrap();
        assert!(echoed == payload, "offset {offset}: came back different");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_callers_share_one_shared_memory_connection() {
    let (_server, _listening, url) = serve_shm("concurrent").await;
    let blobs: BlobsProxy = Client::new().connect(&url).await.unwrap();
    let tasks = spawn_each(&blobs, 0..16u8, |blobs, task| async move {
        for i in 0..50usize {
            let payload = pattern((i * 977 + usize::from(task) * 131) % 200_000, task);
            let echoed = blobs.echo(payload.clone()).await.unwrap();
            assert!(echoed == payload, "task {task} call {i}");
        }
    });
    await_all(tasks).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_payload_stays_intact_while_the_ring_moves_on() {
    let (_server, _listening, url) = serve_shm("held").await;
    let blobs: BlobsProxy = Client::new().connect(&url).await.unwrap();
    let kept = blobs.echo(pattern(100_000, 1)).await.unwrap();
    for round in 0..20u8 {
        blobs.echo(pattern(50_000, round)).await.unwrap();
    }
    drop(kept.clone());
    assert!(kept == pattern(100_000, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connecting_to_a_name_nobody_serves_is_unavailable() {
    let error = Client::new()
        .connect::<CalculatorProxy>(&format!("{}/obj", endpoint("nobody")))
        .await
        .unwrap_err();
    assert_error_contains(&error, ErrorKind::Unavailable, "nothing listens");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_listener_on_the_same_name_is_refused() {
    let (_server, _listening, _url) = serve_shm("twice").await;
    let error = Server::new().listen(&endpoint("twice")).await.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Unavailable, "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_large_concurrent_calls_never_stall() {
    let (_server, _listening, url) = serve_shm("stall").await;
    let blobs: BlobsProxy = Client::new().connect(&url).await.unwrap();
    let tasks = spawn_each(&blobs, 0..16u8, |blobs, task| async move {
        for i in 0..40u8 {
            let payload = pattern(1 << 20, task ^ i);
            let echoed = blobs.echo(payload.clone()).await.unwrap();
            assert!(echoed == payload);
        }
    });
    tokio::time::timeout(Duration::from_secs(60), await_all(tasks))
        .await
        .expect("16 tasks × 40 calls of 1 MiB stalled");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_rings_carry_large_payloads_in_pieces() {
    let small = lanner::ConnectionOptions::default().with_shm_ring_size(64 * 1024);
    let object = service_object(&Arc::default());
    let (_server, _listening) = serve_at(
        &endpoint("small-rings"),
        Server::with_options(small.clone()),
        object,
    )
    .await;
    let url = format!("{}/obj", endpoint("small-rings"));
    let blobs: BlobsProxy = Client::with_options(small).connect(&url).await.unwrap();
    for (round, size) in [0usize, 100, 40 * 1024, 1 << 20].into_iter().enumerate() {
        let payload = pattern(size, round as u8);
        let echoed = blobs.echo(payload.clone()).await.unwrap();
        assert!(echoed == payload, "{size} bytes came back different");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ring_size_that_is_not_a_power_of_two_is_refused_when_listening() {
    let options = lanner::ConnectionOptions::default().with_shm_ring_size(3000);
    let error = Server::with_options(options)
        .listen(&endpoint("bad-ring-size"))
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InvalidArgument);
    assert!(error.message().contains("power of two"), "{error}");
}

/// A loaned payload: `len` bytes of `pattern(len, seed)`, built in the loan itself.
fn loaned(blobs: &BlobsProxy, len: usize, seed: u8) -> lanner::Loan {
    use lanner::Proxy;
    let mut loan = blobs.object().loan(len);
    loan.copy_from_slice(&pattern(len, seed));
    loan
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loaned_payloads_are_lent_not_copied_and_their_blocks_come_back() {
    use lanner::Proxy;
    let (_server, _listening, url) = serve_shm("loans").await;
    let blobs: BlobsProxy = Client::new().connect(&url).await.unwrap();
    // Fifty 1 MiB loans through a 4 MiB area: each block must come back for the next
    // loans to stay shared.
    for round in 0..50u8 {
        let loan = loaned(&blobs, 1 << 20, round);
        assert!(
            loan.is_shared(),
            "round {round}: the area ran out of blocks"
        );
        let payload = loan.freeze();
        let seen = blobs.digest(payload.clone()).await.unwrap();
        assert_eq!(seen, digest(&pattern(1 << 20, round)), "round {round}");
        let echoed = blobs.echo(payload.clone()).await.unwrap();
        assert!(echoed == payload, "round {round}: the echo differs");
    }
    assert_eq!(blobs.object().traffic().payloads_lent, 100);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_ordinary_payloads_go_through_the_loan_area() {
    use lanner::Proxy;
    let (_server, _listening, url) = serve_shm("large-lent").await;
    let blobs: BlobsProxy = Client::new().connect(&url).await.unwrap();
    let small = pattern(8 * 1024, 1);
    assert!(blobs.echo(small.clone()).await.unwrap() == small);
    assert_eq!(
        blobs.object().traffic().payloads_lent,
        0,
        "small: through the ring"
    );
    let medium = pattern(100_000, 2);
    assert!(blobs.echo(medium.clone()).await.unwrap() == medium);
    assert_eq!(
        blobs.object().traffic().payloads_lent,
        0,
        "medium: through the ring"
    );
    let large = pattern(300_000, 3);
    assert!(blobs.echo(large.clone()).await.unwrap() == large);
    assert_eq!(
        blobs.object().traffic().payloads_lent,
        1,
        "large: copied into a block"
    );
}

/// Frames of 16 KiB or more are read in place, their structure (fixed fields, inline
/// arguments, segment table) copied out of the ring first: requests whose large part is
/// inline, bulk, or both arrive whole, next to a lent segment and to small ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frames_read_in_place_with_inline_and_bulk_parts_arrive_whole() {
    let (_server, _listening, url) = serve_shm("in-place").await;
    let blobs: BlobsProxy = Client::new().connect(&url).await.unwrap();
    let long_tag = "t".repeat(20_000);
    let cases = [
        (long_tag.as_str(), 0usize, 0usize),
        (long_tag.as_str(), 20_000, 5),
        ("short", 20_000, 40_000),
        ("short", 300_000, 3),
        // Lent (256 KiB or more) next to one in the ring: a lending record read in place.
        (long_tag.as_str(), 300_000, 20_000),
    ];
    for (tag, first_len, second_len) in cases {
        let first = pattern(first_len, 1);
        let second = pattern(second_len, 2);
        let third = pattern(17, 3);
        assert_mix(&blobs, tag, &first, &second, 2, &third).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loaned_and_ordinary_segments_mix_in_one_call() {
    use lanner::Proxy;
    let (_server, _listening, url) = serve_shm("loans-mixed").await;
    let blobs: BlobsProxy = Client::new().connect(&url).await.unwrap();
    let first = loaned(&blobs, 70_000, 1).freeze();
    let second = pattern(3000, 2);
    // Too small to be worth lending: copied.
    let third = loaned(&blobs, 10, 3).freeze();
    assert_mix(&blobs, "tag", &first, &second, 3, &third).await;
    assert_eq!(blobs.object().traffic().payloads_lent, 1);
    // Once both sides dropped them (the server right after answering), every block is
    // free again: a loan of the whole area is shared.
    drop((first, third, blobs.object().loan(1 << 20)));
    let whole_area = async {
        while !blobs.object().loan(4 << 20).is_shared() {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(5), whole_area)
        .await
        .expect("the lent blocks never came back");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_concurrent_callers_lend_from_one_area() {
    let (_server, _listening, url) = serve_shm("loans-concurrent").await;
    let blobs: BlobsProxy = Client::new().connect(&url).await.unwrap();
    let tasks = spawn_each(&blobs, 0..8u8, |blobs, task| async move {
        for i in 0..40usize {
            let len = (i * 7919 + usize::from(task) * 131) % 300_000 + 1;
            let payload = loaned(&blobs, len, task).freeze();
            let seen = blobs.digest(payload).await.unwrap();
            assert_eq!(seen, digest(&pattern(len, task)), "task {task} call {i}");
        }
    });
    await_all(tasks).await;
}

#[tokio::test]
async fn a_loan_on_another_transport_is_ordinary_memory() {
    use lanner::Proxy;
    let object = service_object(&Arc::default());
    let (_server, _listening) = serve_at("mem://loans-elsewhere", Server::new(), object).await;
    let blobs: BlobsProxy = Client::new()
        .connect("mem://loans-elsewhere/obj")
        .await
        .unwrap();
    let loan = loaned(&blobs, 5000, 4);
    assert!(!loan.is_shared());
    let seen = blobs.digest(loan.freeze()).await.unwrap();
    assert_eq!(seen, digest(&pattern(5000, 4)));
    assert_eq!(blobs.object().traffic().payloads_lent, 0);
}

/// The "private socket": a caller waiting alone on an idle connection takes its reply
/// from the ring itself, with no hand-off from the connection's reader. The client runs
/// on one thread (as latency-sensitive clients do), the server on a runtime of its own.
#[test]
fn a_lone_caller_receives_its_reply_itself() {
    use lanner::Proxy;
    let server_runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let (_server, _listening, url) = server_runtime.block_on(serve_shm("private"));
    let client_runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let traffic = client_runtime.block_on(async {
        // A spin budget no reply takes longer than, even on a loaded machine.
        let options = lanner::ConnectionOptions::default().with_spin(Duration::from_secs(1));
        let calc: CalculatorProxy = Client::with_options(options).connect(&url).await.unwrap();
        for i in 0..200 {
            assert_eq!(calc.add(i, 1).await, Ok(i + 1));
        }
        calc.object().traffic()
    });
    // All but the first few (a caller new to the connection yields once before it spins).
    assert!(
        traffic.replies_to_their_caller >= 190,
        "only {} replies reached their caller directly (200 calls and the lookup)",
        traffic.replies_to_their_caller
    );
    drop(client_runtime);
    server_runtime.shutdown_background();
}

use lanner_shm::sys::testing::{lingering_tcp_socket, under_valgrind};

/// A client that passes a descriptor over its setup socket (the data doorbell) breaks the
/// protocol, and the descriptor is one whose close blocks: a TCP socket lingering for 2 s.
/// The kernel refuses it (`SO_PASSRIGHTS`, Linux 6.16), or the server takes it, ends that
/// connection and closes it on a thread of its own: either way an honest client connects
/// and calls at once, although the server has a single worker thread.
#[test]
fn a_descriptor_passed_on_the_setup_socket_holds_nobody_up() {
    use std::io::Read;
    use std::os::fd::AsFd;
    use std::os::linux::net::SocketAddrExt;

    let server_runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let (_server, _listening, url) = server_runtime.block_on(serve_shm("passes-fds"));
    let name = format!("lanner-shm/lanner-test-{}-passes-fds", std::process::id());
    let address = std::os::unix::net::SocketAddr::from_abstract_name(name).unwrap();
    let raw = std::os::unix::net::UnixStream::connect_addr(&address).unwrap();
    let mut offer = [0u8; 16];
    let (len, _region_and_bell) = lanner_shm::sys::recv_with_fds(raw.as_fd(), &mut offer).unwrap();
    assert_eq!(len, 16, "the server's offer");

    let linger = Duration::from_secs(2);
    let (lingering, reader) = lingering_tcp_socket(linger);
    let passed = lanner_shm::sys::send_with_fds(raw.as_fd(), &[1], &[lingering.as_fd()]);
    match &passed {
        // The copy on its way is the socket's only descriptor now: its close is the one
        // that lingers (unless the reader goes first).
        Ok(_) => drop(lingering),
        Err(error) => {
            assert_eq!(
                error.kind(),
                std::io::ErrorKind::PermissionDenied,
                "{error}"
            );
            // The reader first: its close resets the connection, and the close of the
            // lingering socket returns at once.
            drop(reader);
            drop(lingering);
        }
    }
    // Time for the server to take the ring (and the descriptor, if it came through).
    std::thread::sleep(Duration::from_millis(100));

    let started = std::time::Instant::now();
    let client_runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    client_runtime.block_on(async {
        let patience = if under_valgrind() {
            linger * 30
        } else {
            linger / 2
        };
        let calc: CalculatorProxy = tokio::time::timeout(patience, Client::new().connect(&url))
            .await
            .expect("an honest client connects at once")
            .unwrap();
        assert_eq!(calc.add(40, 2).await, Ok(42));
    });
    let took = started.elapsed();
    assert!(
        took < linger / 2 || under_valgrind(),
        "the honest client took {took:?}"
    );

    if passed.is_ok() {
        // A kernel that let the descriptor through: the server ended that connection.
        raw.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let ended = loop {
            match (&raw).read(&mut [0u8; 256]) {
                Ok(0) => break true,
                Ok(_) => {}
                Err(e) => break e.kind() == std::io::ErrorKind::ConnectionReset,
            }
        };
        assert!(
            ended,
            "the server kept the connection that passed a descriptor"
        );
    }
    drop(client_runtime);
    server_runtime.shutdown_background();
}

#[test]
fn a_shutdown_that_cuts_calls_off_still_lets_a_queued_answer_through() {
    if under_valgrind() {
        eprintln!("skipped under valgrind: the test's timings assume a real CPU");
        return;
    }
    // A 12 MiB answer to a client whose runtime reads nothing for 1.5 s, and a shutdown
    // with no grace period meanwhile: the CLOSE's linger gives the queued answer its time
    // (the connection's end must not hang up the doorbells the writer waits on).
    let server_runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let (server, listening) = server_runtime.block_on(serve_at(
        &format!("shm://linger-{}", std::process::id()),
        Server::new(),
        service_object(&Arc::new(Service::default())),
    ));
    let url = listening.endpoint().object_url("obj");
    let (called, was_called) = std::sync::mpsc::channel();
    let client = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let client = Client::new();
            let blobs: BlobsProxy = client.connect(&url).await.unwrap();
            let call = tokio::spawn(async move { blobs.make(12 << 20, 7).await });
            tokio::time::sleep(Duration::from_millis(100)).await;
            called.send(()).unwrap();
            // The client's runtime reads nothing for a while.
            std::thread::sleep(Duration::from_millis(1500));
            call.await.unwrap().map(|answer| answer.len())
        })
    });
    was_called.recv().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    server_runtime.block_on(listening.shutdown(Duration::ZERO));
    assert_eq!(client.join().unwrap(), Ok(12 << 20));
    drop(server);
}

/// Loans through small rings (the loan area is as small as the ring), many
/// callers at once, sizes around the lending thresholds and the area's size.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loans_through_small_rings_and_areas_arrive_whole() {
    for ring in [4096usize, 16 * 1024, 64 * 1024] {
        let small = lanner::ConnectionOptions::default().with_shm_ring_size(ring);
        let object = service_object(&Arc::default());
        let name = format!("small-loans-{ring}");
        let (_server, _listening) = serve_at(
            &endpoint(&name),
            Server::with_options(small.clone()),
            object,
        )
        .await;
        let url = format!("{}/obj", endpoint(&name));
        let blobs: BlobsProxy = Client::with_options(small).connect(&url).await.unwrap();
        let tasks = spawn_each(&blobs, 0..4u8, move |blobs, task| async move {
            for i in 0..60usize {
                let len = [
                    1023,
                    1024,
                    1025,
                    ring / 2,
                    ring - 1,
                    ring,
                    ring + 1,
                    3000,
                    300_000,
                ][(i + usize::from(task)) % 9];
                let payload = loaned(&blobs, len, task ^ i as u8).freeze();
                let seen = blobs.digest(payload.clone()).await.unwrap();
                assert_eq!(
                    seen,
                    digest(&pattern(len, task ^ i as u8)),
                    "ring {ring} len {len}"
                );
                let echoed = blobs.echo(payload.clone()).await.unwrap();
                assert!(echoed == payload, "ring {ring} len {len}: echo differs");
            }
        });
        tokio::time::timeout(Duration::from_secs(60), await_all(tasks))
            .await
            .unwrap_or_else(|_| panic!("ring {ring}: stalled"));
    }
}

/// A fresh loan is zeroed ordinary memory on other transports; on shared memory
/// it must not hold what an earlier loan left in its block ("code that loans works on
/// every transport": a payload filled only in part would otherwise carry stale bytes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_loan_holds_no_earlier_loans_bytes() {
    use lanner::Proxy;
    let (_server, _listening, url) = serve_shm("stale-loan").await;
    let blobs: BlobsProxy = Client::new().connect(&url).await.unwrap();
    // Elsewhere: zeroed.
    let object = service_object(&Arc::default());
    let (_mem_server, _mem_listening) = serve_at("mem://stale-loan", Server::new(), object).await;
    let mem: BlobsProxy = Client::new().connect("mem://stale-loan/obj").await.unwrap();
    let elsewhere = mem.object().loan(4096);
    assert!(elsewhere.iter().all(|byte| *byte == 0));

    // A loan filled and given up (never sent): its block is free again at once, and the
    // next loan takes it (first fit).
    let mut given_up = blobs.object().loan(4096);
    assert!(given_up.is_shared());
    given_up.fill(0xAA);
    drop(given_up);
    let fresh = blobs.object().loan(4096);
    assert!(fresh.is_shared());
    let stale = fresh.iter().filter(|byte| **byte != 0).count();
    assert_eq!(
        stale, 0,
        "{stale} bytes of a fresh loan hold an earlier loan's bytes"
    );
}

/// What a client hands the apartment to be asked.
#[lanner::interface]
trait Asker {
    async fn answer(&self) -> Result<u64, lanner::Error>;
}

/// An object served in an apartment: `ask` calls the caller back; `put` takes a payload
/// and drops it at once.
#[lanner::interface]
trait Desk {
    async fn ask(&self, asker: lanner::ObjRef<AskerProxy>) -> Result<u64, lanner::Error>;
    async fn put(&self, data: bytes::Bytes) -> Result<u64, lanner::Error>;
}

struct DeskImpl;

impl Desk for DeskImpl {
    async fn ask(&self, asker: lanner::ObjRef<AskerProxy>) -> Result<u64, lanner::Error> {
        asker.into_proxy()?.answer().await
    }

    async fn put(&self, data: bytes::Bytes) -> Result<u64, lanner::Error> {
        Ok(data.len() as u64)
    }
}

/// Answers after a pause, in which the caller's `put`s go out.
struct SlowAsker;

impl Asker for SlowAsker {
    async fn answer(&self) -> Result<u64, lanner::Error> {
        tokio::time::sleep(Duration::from_millis(300)).await;
        Ok(42)
    }
}

/// Calls queued in an apartment hold their payloads; read in place, those pin the
/// ring. An apartment's running call that waits on its caller (a callback) then waits for
/// an answer that has no room to come back in: the program runs over a Unix socket and
/// hangs over shared memory.
async fn apartment_callback_with_queued_puts(endpoint: &str) {
    let object = lanner::Object::new(DeskStub::new(Arc::new(DeskImpl))).in_apartment();
    let (_server, _listening) = serve_at(endpoint, Server::new(), object).await;
    let desk: DeskProxy = Client::new()
        .connect(&format!("{endpoint}/obj"))
        .await
        .unwrap();
    let asker = lanner::ObjRef::new(lanner::Object::new(AskerStub::new(Arc::new(SlowAsker))));
    let asking = {
        let desk = desk.clone();
        tokio::spawn(async move { desk.ask(asker).await })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    // Sixty payloads of 100 KiB (read in place, not through the loan area): 6 MiB, more
    // than the 4 MiB ring.
    let puts = spawn_each(&desk, 0..60u8, |desk, i| async move {
        desk.put(pattern(100 * 1024, i)).await.unwrap()
    });
    let all = async {
        assert_eq!(asking.await.unwrap(), Ok(42));
        await_all(puts).await;
    };
    tokio::time::timeout(Duration::from_secs(20), all)
        .await
        .unwrap_or_else(|_| panic!("{endpoint}: the apartment's callback never got its answer"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_apartment_callback_with_calls_queued_behind_it_completes_over_a_socket() {
    let path = std::env::temp_dir().join(format!("lanner-test-desk-{}.sock", std::process::id()));
    let _ = std::fs::remove_file(&path);
    apartment_callback_with_queued_puts(&format!("unix://{}", path.display())).await;
    let _ = std::fs::remove_file(&path);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_apartment_callback_with_calls_queued_behind_it_completes_over_shared_memory() {
    apartment_callback_with_queued_puts(&endpoint("desk")).await;
}
