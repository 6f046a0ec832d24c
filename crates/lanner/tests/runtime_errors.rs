//! Failures and what they leave behind: panicking methods, oversized messages, bad URLs,
//! missing and busy endpoints, servers that went away. After every recoverable failure the
//! connection must keep working.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use lanner::{Client, ClientAuth, ConnectionOptions, ErrorKind, Object, Proxy, Server, ServerAuth};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A value that refuses to be encoded as 13 and to be decoded as 7.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Picky(pub u32);

impl Serialize for Picky {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if self.0 == 13 {
            return Err(serde::ser::Error::custom("13 is unlucky"));
        }
        serializer.serialize_u32(self.0)
    }
}

impl<'de> Deserialize<'de> for Picky {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Picky, D::Error> {
        match u32::deserialize(deserializer)? {
            7 => Err(serde::de::Error::custom("7 is refused")),
            value => Ok(Picky(value)),
        }
    }
}

/// Passes `Picky` values both ways.
#[lanner::interface]
pub trait Picker {
    /// Returns the value plus one.
    async fn next(&self, value: Picky) -> Result<Picky, lanner::Error>;
}

struct NextPicker;

impl Picker for NextPicker {
    async fn next(&self, value: Picky) -> Result<Picky, lanner::Error> {
        Ok(Picky(value.0 + 1))
    }
}

#[tokio::test]
async fn values_that_cannot_be_encoded_or_decoded_fail_their_call_only() {
    let object = Object::new(PickerStub::new(Arc::new(NextPicker)));
    let (_server, _listening) = serve("errors-encoding", Server::new(), object).await;
    let picker: PickerProxy = connect("errors-encoding").await;

    assert_eq!(picker.next(Picky(1)).await, Ok(Picky(2)));

    for (value, kind, prefix) in [
        // The caller cannot encode its argument: nothing is sent.
        (
            13,
            ErrorKind::InvalidArgument,
            "arguments of next: could not encode",
        ),
        // The callee cannot decode the argument.
        (
            7,
            ErrorKind::InvalidArgument,
            "arguments of next: could not decode",
        ),
        // The callee cannot encode its result.
        (
            12,
            ErrorKind::Internal,
            "the method's result could not be encoded",
        ),
        // The caller cannot decode the result.
        (
            6,
            ErrorKind::InvalidArgument,
            "result of next: could not decode",
        ),
    ] {
        let error = picker.next(Picky(value)).await.unwrap_err();
        assert_error(&error, kind, prefix);
    }

    assert_eq!(picker.next(Picky(100)).await, Ok(Picky(101)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_method_is_an_internal_error_and_the_connection_survives() {
    let (_server, _listening, _service) = serve_service("errors-panic", Server::new()).await;
    let control: ControlProxy = connect("errors-panic").await;

    // Panics while first polled (on the connection's reader) ...
    let error = control.panic_now("boom now".into()).await.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Internal);
    assert_eq!(error.message(), "the method panicked: boom now");
    assert_eq!(control.echo(1).await, Ok(1));

    // ... and after waiting (on its own task).
    let error = control
        .panic_after_await("boom later".into())
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Internal);
    assert_eq!(error.message(), "the method panicked: boom later");
    assert_eq!(control.echo(2).await, Ok(2));

    // With a custom error type the failure arrives through `From<lanner::Error>`.
    let calc: CalculatorProxy = control.query().unwrap();
    match calc.fail(Failure::Panic).await {
        Err(CalcError::Remote(error)) => {
            assert_eq!(error.kind(), ErrorKind::Internal);
            assert_eq!(
                error.message(),
                "the method panicked: calculator asked to panic"
            );
        }
        other => panic!("expected a remote Internal error, got {other:?}"),
    }

    // Panics among concurrent calls fail only their own call.
    let tasks = spawn_each(&control, 0..40u64, |control, i| async move {
        if i % 4 == 0 {
            let error = control.panic_now(format!("p{i}")).await.unwrap_err();
            assert_eq!(error.message(), format!("the method panicked: p{i}"));
        } else {
            assert_eq!(control.echo(i).await, Ok(i));
        }
    });
    await_all(tasks).await;
    assert_eq!(calc.add(20, 22).await, Ok(42));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_larger_than_the_client_accepts_fails_the_call_not_the_connection() {
    let (_server, _listening, _service) = serve_service("errors-big-result", Server::new()).await;
    let client = Client::with_options(ConnectionOptions::default().with_max_frame_size(64 * 1024));
    let blobs: BlobsProxy = client.connect(&url("errors-big-result")).await.unwrap();

    let error = blobs.make(1 << 20, 5).await.unwrap_err();
    assert_error(
        &error,
        ErrorKind::Internal,
        "the result could not be sent: ",
    );
    assert!(error.message().contains("65536"), "{error}");

    // The same connection still works, for small results and for large arguments (the
    // server accepts up to its own, default, limit).
    assert_eq!(blobs.make(1000, 5).await.unwrap(), pattern(1000, 5));
    let big = pattern(1 << 20, 6);
    assert_eq!(blobs.digest(big.clone()).await.unwrap(), digest(&big));
    // An echo of the large argument is too large to come back.
    let error = blobs.echo(big).await.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Internal);
    // Just under the limit passes.
    let fits = pattern(60 * 1024, 7);
    assert_eq!(blobs.echo(fits.clone()).await.unwrap(), fits);
    let calc: CalculatorProxy = blobs.query().unwrap();
    assert_eq!(calc.add(1, 2).await, Ok(3));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_larger_than_the_server_accepts_fails_locally() {
    let server = Server::with_options(ConnectionOptions::default().with_max_frame_size(64 * 1024));
    let (_server, _listening, _service) = serve_service("errors-big-request", server).await;
    let blobs: BlobsProxy = connect("errors-big-request").await;

    let error = blobs.digest(pattern(1 << 20, 1)).await.unwrap_err();
    assert_error_contains(&error, ErrorKind::InvalidArgument, "65536");
    // Large inline arguments are measured the same way.
    let calc: CalculatorProxy = blobs.query().unwrap();
    let error = calc.stats(vec![1; 100_000], None).await.unwrap_err();
    match error {
        CalcError::Remote(error) => assert_eq!(error.kind(), ErrorKind::InvalidArgument),
        other => panic!("expected a local InvalidArgument error, got {other:?}"),
    }

    let small = pattern(1000, 2);
    assert_eq!(blobs.digest(small.clone()).await.unwrap(), digest(&small));
    assert_eq!(calc.add(5, 6).await, Ok(11));
}

#[tokio::test]
async fn malformed_urls_are_invalid_arguments() {
    let client = Client::new();
    for url in [
        "errors-no-scheme/obj",
        "http://errors-http/obj",
        "mem://errors-no-name",
        "mem://errors-empty-name/",
        "mem:///obj",
        "tcp://127.0.0.1/obj",
    ] {
        let error = client.resolve(url).await.unwrap_err();
        assert_error_contains(&error, ErrorKind::InvalidArgument, url);
    }
    let error = Server::new().listen("mem://").await.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InvalidArgument);
}

#[tokio::test]
async fn connecting_where_nobody_listens_is_unavailable() {
    let error = Client::new()
        .resolve("mem://errors-nobody-listens/obj")
        .await
        .unwrap_err();
    assert_error_contains(
        &error,
        ErrorKind::Unavailable,
        "nothing listens on mem://errors-nobody-listens",
    );
}

#[tokio::test]
async fn listening_on_a_mem_name_already_in_use_fails_clearly() {
    let (server, listening, _service) = serve_service("errors-in-use", Server::new()).await;

    let error = Server::new()
        .listen("mem://errors-in-use")
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Unavailable);
    assert_eq!(
        error.message(),
        "listening on mem://errors-in-use: mem://errors-in-use is already in use in this process"
    );
    // Also for the same server.
    let error = server.listen("mem://errors-in-use").await.unwrap_err();
    assert!(error.message().contains("already in use"), "{error}");

    // The first listener is unaffected.
    let control: ControlProxy = connect("errors-in-use").await;
    assert_eq!(control.echo(9).await, Ok(9));

    // Once `close` returns the name is free again.
    listening.close().await;
    let again = server.listen("mem://errors-in-use").await.unwrap();
    assert_eq!(again.endpoint().to_string(), "mem://errors-in-use");
    let control: ControlProxy = connect("errors-in-use").await;
    assert_eq!(control.echo(10).await, Ok(10));

    // A dropped listener releases its name too, once the runtime cancels its task.
    drop(again);
    let third = retry(async || server.listen("mem://errors-in-use").await.ok()).await;
    assert!(third.is_some(), "mem://errors-in-use never became free");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_tcp_listener_releases_its_port_at_once() {
    let (server, listening) = serve_at(
        "tcp://127.0.0.1:0",
        Server::new().with_auth(ServerAuth::none()),
        service_object(&Arc::default()),
    )
    .await;
    let endpoint = listening.endpoint().to_string();
    assert!(!endpoint.ends_with(":0"), "{endpoint}");
    let control: ControlProxy = Client::new()
        .with_auth(ClientAuth::none())
        .connect(&format!("{endpoint}/obj"))
        .await
        .unwrap();
    assert_eq!(control.echo(1).await, Ok(1));

    listening.close().await;
    let again = server.listen(&endpoint).await.unwrap();
    assert_eq!(again.endpoint().to_string(), endpoint);
    // The connection made before the close still works.
    assert_eq!(control.echo(2).await, Ok(2));
}

#[tokio::test]
async fn connecting_to_a_closed_mem_listener_says_nothing_listens() {
    let (_server, listening, _service) = serve_service("errors-closed-mem", Server::new()).await;
    listening.close().await;
    let error = Client::new()
        .resolve(&url("errors-closed-mem"))
        .await
        .unwrap_err();
    // Today: "... mem://errors-closed-mem stopped listening", because the registry entry
    // outlives the listener (its `Drop` checks `is_closed()` on a sender whose receiver,
    // a field of the listener being dropped, is still open).
    assert_error_contains(
        &error,
        ErrorKind::Unavailable,
        "nothing listens on mem://errors-closed-mem",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_connections_outlive_the_server_and_its_listener() {
    let (server, listening, _service) = serve_service("errors-server-dropped", Server::new()).await;
    let calc: CalculatorProxy = connect("errors-server-dropped").await;
    assert_eq!(calc.add(1, 1).await, Ok(2));

    drop(listening);
    drop(server);

    // Documented: connections already open keep working (and keep resolving names).
    assert_eq!(calc.add(2, 2).await, Ok(4));
    let client = Client::new();
    // New connections are refused once the accept task has stopped.
    let refused = retry(async || client.resolve(&url("errors-server-dropped")).await.err()).await;
    let error = refused.expect("a new connection was still accepted after the listener closed");
    assert_eq!(error.kind(), ErrorKind::Unavailable, "{error}");
    assert_eq!(calc.add(3, 3).await, Ok(6));
}

/// Runs `attempt` until it returns `Some`, at most 200 times, 5 ms apart.
async fn retry<T>(mut attempt: impl AsyncFnMut() -> Option<T>) -> Option<T> {
    for _ in 0..200 {
        if let Some(value) = attempt().await {
            return Some(value);
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    None
}
