//! Liveness of a connection's send and receive paths (twenty-seventh session's review).

use std::sync::Arc;
use std::time::Duration;

use lanner::{Client, ConnectionOptions, Proxy, Server};

mod common;
use common::*;

/// Polls `future` to its end on this thread, which runs no runtime, parking it between
/// polls (as `futures::executor::block_on` does).
fn block_on_plain_thread<F: std::future::Future>(future: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl std::task::Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = std::task::Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = std::task::Context::from_waker(&waker);
    let mut future = std::pin::pin!(future);
    loop {
        if let std::task::Poll::Ready(output) = future.as_mut().poll(&mut cx) {
            return output;
        }
        std::thread::park();
    }
}

/// A call with a deadline made where no runtime runs (`block_on` on a plain thread, as
/// `futures::executor::block_on` does), which waits for its answer or for a credit rather
/// than spinning for it, times its deadline on its connection's runtime: it used to
/// panic ("there is no reactor running") as it made its timer.
#[test]
fn a_call_with_a_deadline_can_wait_where_no_runtime_runs() {
    let _watchdog = watchdog(
        "a_call_with_a_deadline_can_wait_where_no_runtime_runs",
        Duration::from_secs(60),
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    // One credit: a second call waits for the first one's.
    let server = Server::with_options(ConnectionOptions::default().with_credits(1));
    let (_server, _listening, _service) =
        runtime.block_on(serve_service("liveness-deadline-plain", server));
    let control: ControlProxy = runtime.block_on(async {
        Client::new()
            .connect(&url("liveness-deadline-plain"))
            .await
            .unwrap()
    });
    let patient = control.with_timeout(Duration::from_secs(20));
    // Answered after the spin budget: the caller waits for the reader.
    assert_eq!(block_on_plain_thread(patient.sleep_ms(50, 1)), Ok(1));
    // The deadline comes first, and wakes this thread.
    let hasty = control.with_timeout(Duration::from_millis(100));
    let error = block_on_plain_thread(hasty.sleep_ms(300, 2)).unwrap_err();
    assert_eq!(error.kind(), lanner::ErrorKind::DeadlineExceeded, "{error}");
    // The only credit is taken: the call waits for it, with its deadline.
    let holder = runtime.spawn({
        let control = control.clone();
        async move { control.sleep_ms(200, 3).await }
    });
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(block_on_plain_thread(patient.sleep_ms(1, 4)), Ok(4));
    assert_eq!(runtime.block_on(holder).unwrap(), Ok(3));
}
