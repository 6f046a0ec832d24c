//! A connection closed on purpose (its CLOSE written, the rest of its writing left to a
//! task that lingers for a slow reader) lets go of its socket even when its runtime ends
//! before that task runs, although something still holds the connection.
//!
//! The only test of its binary: it watches the process's sockets.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lanner::{Client, Error, ObjRef, Object, Server};

/// Told of events.
#[lanner::interface]
trait Listener {
    async fn notify(&self, value: u64) -> Result<(), Error>;
}

/// Keeps the listeners it is given (each a proxy holding the connection it came on).
#[lanner::interface]
trait Hub {
    async fn subscribe(&self, listener: ObjRef<ListenerProxy>) -> Result<(), Error>;
}

#[derive(Default)]
struct Subscribers(Mutex<Vec<ListenerProxy>>);

impl Hub for Subscribers {
    async fn subscribe(&self, listener: ObjRef<ListenerProxy>) -> Result<(), Error> {
        self.0.lock().unwrap().push(listener.into_proxy()?);
        Ok(())
    }
}

struct Quiet;

impl Listener for Quiet {
    async fn notify(&self, _: u64) -> Result<(), Error> {
        Ok(())
    }
}

/// The sockets this process has open (`socket:[inode]`).
fn sockets() -> Vec<String> {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|entry| std::fs::read_link(entry.ok()?.path()).ok())
        .map(|target| target.display().to_string())
        .filter(|target| target.starts_with("socket:"))
        .collect()
}

#[test]
fn a_connection_closed_just_before_its_runtime_ends_lets_go_of_its_socket() {
    let path = std::env::temp_dir().join(format!("lanner-closed-ends-{}.sock", std::process::id()));
    let hub = Arc::new(Subscribers::default());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let before = sockets();
    let (opened, client, proxy) = runtime.block_on(async {
        let server = Server::new();
        server.publish("hub", Object::new(HubStub::new(hub.clone())));
        let listening = server
            .listen(&format!("unix://{}", path.display()))
            .await
            .unwrap();
        let client = Client::new();
        let proxy: HubProxy = client
            .connect(&listening.endpoint().object_url("hub"))
            .await
            .unwrap();
        // The server's object now holds a proxy of the connection: it is not dropped.
        let listener = ObjRef::new(Object::new(ListenerStub::new(Arc::new(Quiet))));
        proxy.subscribe(listener).await.unwrap();
        let opened: Vec<String> = sockets()
            .into_iter()
            .filter(|socket| !before.contains(socket))
            .collect();
        // The CLOSE is written and the task that finishes the writing is spawned; a
        // current-thread runtime does not poll it before `block_on` returns.
        listening.shutdown(Duration::ZERO).await;
        (opened, client, proxy)
    });
    drop(runtime);
    assert_eq!(hub.0.lock().unwrap().len(), 1, "the listener was not kept");
    let started = Instant::now();
    loop {
        let open: Vec<String> = sockets()
            .into_iter()
            .filter(|socket| opened.contains(socket))
            .collect();
        if open.is_empty() {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(7),
            "still open 7 s after the connection was closed and its runtime ended: {open:?} \
             (of {opened:?})"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    drop((client, proxy));
    let _ = std::fs::remove_file(&path);
}
