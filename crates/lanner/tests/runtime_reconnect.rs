//! The client side after a connection breaks: a proxy with a short timeout still
//! reconnects (through a slow link), a URL proxy passed as an argument after a restart,
//! and the object URL of a name with a slash on a Unix socket.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lanner::{Client, ErrorKind, Object, Proxy, Server};

mod common;

#[lanner::interface]
trait Echo {
    async fn echo(&self, value: u64) -> Result<u64, lanner::Error>;
}

struct Numbered(u64);

impl Echo for Numbered {
    async fn echo(&self, value: u64) -> Result<u64, lanner::Error> {
        Ok(self.0 + value)
    }
}

fn temp_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("lanner-reconnect-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A Unix socket at `listen` that, for each connection, waits `delay` before connecting
/// it through to `target` (a slow network, a slow TLS handshake). Returns how many
/// connections it accepted and a handle that cuts every connection bridged so far.
struct Bridge {
    accepted: Arc<AtomicU32>,
    tasks: Arc<Mutex<Vec<tokio::task::AbortHandle>>>,
    acceptor: tokio::task::JoinHandle<()>,
}

impl Bridge {
    fn start(listen: &Path, target: &Path, delay: Duration) -> Bridge {
        let listener = tokio::net::UnixListener::bind(listen).unwrap();
        let accepted = Arc::new(AtomicU32::new(0));
        let tasks: Arc<Mutex<Vec<tokio::task::AbortHandle>>> = Arc::default();
        let target = target.to_owned();
        let acceptor = tokio::spawn({
            let accepted = accepted.clone();
            let tasks = tasks.clone();
            async move {
                loop {
                    let Ok((mut inbound, _)) = listener.accept().await else {
                        return;
                    };
                    accepted.fetch_add(1, Ordering::SeqCst);
                    let target = target.clone();
                    let task = tokio::spawn(async move {
                        tokio::time::sleep(delay).await;
                        let Ok(mut outbound) = tokio::net::UnixStream::connect(&target).await
                        else {
                            return;
                        };
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    });
                    tasks.lock().unwrap().push(task.abort_handle());
                }
            }
        });
        Bridge {
            accepted,
            tasks,
            acceptor,
        }
    }

    /// Breaks every connection bridged so far.
    fn cut(&self) {
        for task in self.tasks.lock().unwrap().drain(..) {
            task.abort();
        }
    }

    fn accepted(&self) -> u32 {
        self.accepted.load(Ordering::SeqCst)
    }
}

impl Drop for Bridge {
    fn drop(&mut self) {
        self.cut();
        self.acceptor.abort();
    }
}

/// A proxy whose per-call timeout is shorter than it takes to connect to its server
/// (a slow link, a slow handshake) works once connected. Once its connection breaks it
/// must still reconnect: each call's deadline passing must not throw away the connection
/// attempt under way, or no call ever reconnects and every call opens (and abandons) a
/// connection of its own.
#[tokio::test]
async fn a_proxy_with_a_timeout_shorter_than_a_connect_reconnects() {
    let dir = temp_dir("slow-link");
    let real = dir.join("real.sock");
    let bridged = dir.join("bridge.sock");
    let server = Server::new();
    server.publish("echo", Object::new(EchoStub::new(Arc::new(Numbered(1000)))));
    let _listening = server
        .listen(&format!("unix://{}", real.display()))
        .await
        .unwrap();
    let bridge = Bridge::start(&bridged, &real, Duration::from_millis(300));

    let client = Client::new();
    let echo: EchoProxy = client
        .connect(&format!("unix://{}/echo", bridged.display()))
        .await
        .unwrap();
    let quick = echo.with_timeout(Duration::from_millis(100));
    assert_eq!(quick.echo(1).await, Ok(1001));
    assert_eq!(bridge.accepted(), 1);

    // The link breaks; the server is still there, 300 ms away.
    bridge.cut();
    let started = Instant::now();
    let mut errors = Vec::new();
    let answer = loop {
        match quick.echo(2).await {
            Ok(answer) => break answer,
            Err(error) => {
                errors.push(error.to_string());
                assert!(
                    started.elapsed() < Duration::from_secs(5),
                    "never reconnected; {} connections opened; last errors: {:?}",
                    bridge.accepted(),
                    &errors[errors.len().saturating_sub(3)..]
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };
    assert_eq!(answer, 1002);
    // One reconnection, not one per call.
    assert!(bridge.accepted() <= 3, "{} connections", bridge.accepted());
    let _ = std::fs::remove_dir_all(&dir);
}

#[lanner::interface]
trait Holder {
    /// Takes a reference to an echo object and calls it with `value`.
    async fn take(&self, echo: lanner::ObjRef<EchoProxy>, value: u64)
    -> Result<u64, lanner::Error>;
}

struct Keeper;

impl Holder for Keeper {
    async fn take(
        &self,
        echo: lanner::ObjRef<EchoProxy>,
        value: u64,
    ) -> Result<u64, lanner::Error> {
        // Handed back to its own server: the object itself.
        match echo.local() {
            Some(_) => Ok(value),
            None => echo.into_proxy()?.echo(value).await,
        }
    }
}

async fn serve_both(endpoint: &str, number: u64) -> (Server, lanner::Listening) {
    let server = Server::new();
    server.publish(
        "echo",
        Object::new(EchoStub::new(Arc::new(Numbered(number)))),
    );
    server.publish("holder", Object::new(HolderStub::new(Arc::new(Keeper))));
    let listening = server.listen(endpoint).await.unwrap();
    (server, listening)
}

/// Two proxies found by URL at one server; the server restarts. A proxy reconnects "by
/// itself", including when the first thing done with it is to pass it back to its
/// server: the call must not fail for good with `InvalidArgument`.
#[tokio::test]
async fn a_url_proxy_passed_back_after_a_restart_is_not_an_invalid_argument() {
    let dir = temp_dir("restart-pass");
    let endpoint = format!("unix://{}", dir.join("s.sock").display());
    let (_first, listening) = serve_both(&endpoint, 1000).await;
    let client = Client::new();
    let holder: HolderProxy = client.connect(&format!("{endpoint}/holder")).await.unwrap();
    let echo: EchoProxy = client.connect(&format!("{endpoint}/echo")).await.unwrap();
    assert_eq!(holder.take(echo.clone().into(), 1).await, Ok(1));

    listening.shutdown(Duration::ZERO).await;
    let (_second, _listening) = serve_both(&endpoint, 2000).await;
    let started = Instant::now();
    let answer = loop {
        match holder.take(echo.clone().into(), 2).await {
            Ok(answer) => break answer,
            Err(error) => {
                assert_eq!(error.kind(), ErrorKind::Unavailable, "{error}");
                assert!(started.elapsed() < Duration::from_secs(5), "{error}");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };
    assert_eq!(answer, 2);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `Endpoint::object_url` is "the URL of the object published as `name`": a name with a
/// `/` (which `publish` takes, and which tcp, shm and mem URLs carry) must reach it on a
/// Unix socket too, or be refused, not lead to another socket.
#[tokio::test]
async fn the_object_url_of_a_name_with_a_slash_reaches_it_on_a_unix_socket() {
    let dir = temp_dir("slash-name");
    let server = Server::new();
    server.publish(
        "svc/echo",
        Object::new(EchoStub::new(Arc::new(Numbered(5)))),
    );
    let listening = server
        .listen(&format!("unix://{}", dir.join("s.sock").display()))
        .await
        .unwrap();
    let url = listening.endpoint().object_url("svc/echo");
    let parsed = lanner::ObjectUrl::parse(&url).unwrap();
    assert_eq!(
        (&parsed.endpoint, parsed.name.as_str()),
        (listening.endpoint(), "svc/echo"),
        "{url}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The same, called from a plain thread (`block_on` outside any runtime): the reconnect
/// runs on the connection's runtime, and a call's deadline must not cut it short either.
#[test]
fn a_proxy_with_a_short_timeout_reconnects_for_a_plain_thread_caller() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let dir = temp_dir("slow-link-plain");
    let real = dir.join("real.sock");
    let bridged = dir.join("bridge.sock");
    let (_server, _listening, bridge, quick) = runtime.block_on(async {
        let server = Server::new();
        server.publish("echo", Object::new(EchoStub::new(Arc::new(Numbered(1000)))));
        let listening = server
            .listen(&format!("unix://{}", real.display()))
            .await
            .unwrap();
        let bridge = Bridge::start(&bridged, &real, Duration::from_millis(300));
        let echo: EchoProxy = Client::new()
            .connect(&format!("unix://{}/echo", bridged.display()))
            .await
            .unwrap();
        (
            server,
            listening,
            bridge,
            echo.with_timeout(Duration::from_millis(100)),
        )
    });
    assert_eq!(common::block_on_plain_thread(quick.echo(1)), Ok(1001));
    bridge.cut();
    let started = Instant::now();
    let answer = loop {
        match common::block_on_plain_thread(quick.echo(2)) {
            Ok(answer) => break answer,
            Err(error) => {
                assert!(
                    started.elapsed() < Duration::from_secs(5),
                    "never reconnected; {} connections opened; {error}",
                    bridge.accepted()
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    };
    assert_eq!(answer, 1002);
    assert!(bridge.accepted() <= 3, "{} connections", bridge.accepted());
    runtime.block_on(async move { drop(bridge) });
    let _ = std::fs::remove_dir_all(&dir);
}
