//! Concurrency on one connection: slow methods do not hold up others, flow-control credits
//! bound what a client has outstanding (callers wait instead of failing), and callers that
//! give up before their reply leave the connection intact.

mod common;

use std::time::{Duration, Instant};

use common::*;
use lanner::{ConnectionOptions, Proxy, Server};

/// A server granting each connection `credits` calls in flight.
fn server_with_credits(credits: u32) -> Server {
    Server::with_options(ConnectionOptions::default().with_credits(credits))
}

async fn slow_method_does_not_block_others(endpoint: &str) {
    let (_server, _listening, service) = serve_service(endpoint, Server::new()).await;
    let control: ControlProxy = connect(endpoint).await;

    let slow = {
        let control = control.clone();
        tokio::spawn(async move { control.sleep_ms(2_000, 77).await })
    };
    // Let the slow call reach the server.
    while service.max_active() == 0 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let started = Instant::now();
    for i in 0..200 {
        assert_eq!(control.echo(i).await, Ok(i));
    }
    let calc: CalculatorProxy = control.query().unwrap();
    assert_eq!(calc.add(2, 2).await, Ok(4));
    // Another slow call overlaps the first one instead of queueing behind it.
    assert_eq!(control.sleep_ms(10, 5).await, Ok(5));
    assert!(
        started.elapsed() < Duration::from_millis(1_500),
        "fast calls took {:?} behind a slow one",
        started.elapsed()
    );
    assert!(!slow.is_finished(), "the slow call finished early");
    assert_eq!(service.max_active(), 2);
    assert_eq!(slow.await.unwrap(), Ok(77));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_method_does_not_block_other_calls_multi_thread() {
    slow_method_does_not_block_others("flow-slow-multi").await;
}

#[tokio::test]
async fn a_slow_method_does_not_block_other_calls_current_thread() {
    slow_method_does_not_block_others("flow-slow-current").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn callers_wait_for_credits_and_never_exceed_them() {
    const CALLS: u64 = 50;
    const MILLIS: u64 = 20;
    let (_server, _listening, service) =
        serve_service("flow-credits", server_with_credits(2)).await;
    let control: ControlProxy = connect("flow-credits").await;

    let started = Instant::now();
    let tasks = spawn_each(&control, 0..CALLS, |control, token| async move {
        control.sleep_ms(MILLIS, token).await
    });
    for (token, result) in await_all(tasks).await.into_iter().enumerate() {
        assert_eq!(result, Ok(token as u64));
    }
    let elapsed = started.elapsed();
    assert_eq!(service.completed(), CALLS);
    // At most two calls ran at once, so the calls took at least 25 rounds.
    assert_eq!(service.max_active(), 2);
    assert!(
        elapsed >= Duration::from_millis(CALLS / 2 * MILLIS),
        "50 calls of {MILLIS} ms with 2 credits took only {elapsed:?}"
    );
    // The credits all came back.
    assert_eq!(control.echo(1).await, Ok(1));
    assert_eq!(control.sleep_ms(1, 2).await, Ok(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn credits_are_granted_per_connection() {
    let (_server, _listening, service) =
        serve_service("flow-credits-per-connection", server_with_credits(2)).await;

    let mut tasks = Vec::new();
    for client in 0..2u64 {
        let control: ControlProxy = connect("flow-credits-per-connection").await;
        let tokens = (0..6u64).map(|call| client * 100 + call);
        tasks.extend(spawn_each(&control, tokens, |control, token| async move {
            (token, control.sleep_ms(100, token).await)
        }));
    }
    for (token, result) in await_all(tasks).await {
        assert_eq!(result, Ok(token));
    }
    assert_eq!(service.completed(), 12);
    assert_eq!(service.max_active(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_that_gives_up_does_not_break_the_connection() {
    let (_server, _listening, service) = serve_service("flow-give-up", Server::new()).await;
    let control: ControlProxy = connect("flow-give-up").await;

    // Dropped while waiting for the reply, alone on the connection ...
    let gave_up = tokio::time::timeout(Duration::from_millis(20), control.sleep_ms(200, 1)).await;
    assert!(gave_up.is_err(), "the call should have timed out");
    assert_eq!(control.echo(2).await, Ok(2));

    // ... and among other calls.
    let abandoned = spawn_each(&control, 0..10, |control, token| async move {
        tokio::time::timeout(Duration::from_millis(20), control.sleep_ms(150, token)).await
    });
    for result in await_all(abandoned).await {
        assert!(result.is_err());
    }
    for i in 0..50 {
        assert_eq!(control.echo(i).await, Ok(i));
    }
    // The abandoned calls still ran; their late replies are dropped harmlessly.
    while service.completed() < 1 + 1 + 10 + 50 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(control.sleep_ms(1, 3).await, Ok(3));
    assert_eq!(control.echo(4).await, Ok(4));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abandoned_calls_return_their_credits() {
    let (_server, _listening, service) =
        serve_service("flow-give-up-credits", server_with_credits(2)).await;
    let control: ControlProxy = connect("flow-give-up-credits").await;

    // Two abandoned calls hold both credits until the server answers them ...
    for token in 0..2 {
        let gave_up =
            tokio::time::timeout(Duration::from_millis(10), control.sleep_ms(300, token)).await;
        assert!(gave_up.is_err());
    }
    // ... so a third call waits for a credit; give up on that one too, while it waits.
    let waiting = tokio::time::timeout(Duration::from_millis(10), control.echo(5)).await;
    assert!(waiting.is_err(), "a call got through without a credit");
    assert_eq!(service.completed(), 0);

    // Once the abandoned calls are answered their credits return and calls flow again.
    let tasks = spawn_each(&control, 0..20u64, |control, token| async move {
        control.sleep_ms(5, token).await
    });
    let results = tokio::time::timeout(Duration::from_secs(5), await_all(tasks))
        .await
        .expect("calls stalled: credits of abandoned calls were not returned");
    assert_eq!(results, (0..20).map(Ok).collect::<Vec<_>>());
    assert_eq!(service.max_active(), 2);
    assert_eq!(control.echo(6).await, Ok(6));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zero_credits_are_clamped_to_one() {
    let (_server, _listening, service) =
        serve_service("flow-zero-credits", server_with_credits(0)).await;
    let control: ControlProxy = connect("flow-zero-credits").await;

    let tasks = spawn_each(&control, 0..8u64, |control, token| async move {
        control.sleep_ms(10, token).await
    });
    for (token, result) in await_all(tasks).await.into_iter().enumerate() {
        assert_eq!(result, Ok(token as u64));
    }
    assert_eq!(service.max_active(), 1);
    assert_eq!(service.completed(), 8);
}

/// A call answered by the receive attempt that received it is counted apart from the
/// protocol state (without its lock), one that waited is answered by its own task through
/// the state: both give the caller's credit back, so many times the window of calls go
/// through, and neither leaves the server counting a call as running (a shutdown right
/// after them finds none).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_given_where_calls_arrived_or_elsewhere_both_return_their_credits() {
    const WINDOW: u32 = 2;
    let endpoint = "flow-answers-counted";
    let (_server, listening, _service) = serve_service(endpoint, server_with_credits(WINDOW)).await;
    let control: ControlProxy = connect(endpoint).await;
    for i in 0..u64::from(50 * WINDOW) {
        assert_eq!(control.echo(i).await, Ok(i));
        if i % 5 == 0 {
            assert_eq!(control.sleep_ms(1, i).await, Ok(i));
        }
    }
    let started = Instant::now();
    let report = listening.shutdown(Duration::from_secs(30)).await;
    assert_eq!(report.unfinished_calls, 0);
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the shutdown waited for calls already answered ({:?})",
        started.elapsed()
    );
}
