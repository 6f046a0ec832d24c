//! Concurrency on one connection: slow methods do not hold up others, flow-control credits
//! bound what a client has outstanding (callers wait instead of failing), and callers that
//! give up before their reply leave the connection intact.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use lanner::{Client, ConnectionOptions, Proxy, Server};

async fn slow_method_does_not_block_others(endpoint: &str) {
    let service = Arc::new(Service::default());
    let (_server, _listening) = serve(endpoint, Server::new(), service_object(&service)).await;
    let control: ControlProxy = Client::new().connect(&url(endpoint)).await.unwrap();

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
    let service = Arc::new(Service::default());
    let server = Server::with_options(ConnectionOptions::default().with_credits(2));
    let (_server, _listening) = serve("flow-credits", server, service_object(&service)).await;
    let control: ControlProxy = Client::new().connect(&url("flow-credits")).await.unwrap();

    let started = Instant::now();
    let mut tasks = Vec::new();
    for token in 0..CALLS {
        let control = control.clone();
        tasks.push(tokio::spawn(async move {
            control.sleep_ms(MILLIS, token).await
        }));
    }
    for (token, task) in tasks.into_iter().enumerate() {
        assert_eq!(task.await.unwrap(), Ok(token as u64));
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
    let service = Arc::new(Service::default());
    let server = Server::with_options(ConnectionOptions::default().with_credits(2));
    let (_server, _listening) = serve(
        "flow-credits-per-connection",
        server,
        service_object(&service),
    )
    .await;

    let mut tasks = Vec::new();
    for client in 0..2u64 {
        let control: ControlProxy = Client::new()
            .connect(&url("flow-credits-per-connection"))
            .await
            .unwrap();
        for call in 0..6u64 {
            let control = control.clone();
            let token = client * 100 + call;
            tasks.push(tokio::spawn(async move {
                (token, control.sleep_ms(100, token).await)
            }));
        }
    }
    for task in tasks {
        let (token, result) = task.await.unwrap();
        assert_eq!(result, Ok(token));
    }
    assert_eq!(service.completed(), 12);
    assert_eq!(service.max_active(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_that_gives_up_does_not_break_the_connection() {
    let service = Arc::new(Service::default());
    let (_server, _listening) =
        serve("flow-give-up", Server::new(), service_object(&service)).await;
    let control: ControlProxy = Client::new().connect(&url("flow-give-up")).await.unwrap();

    // Dropped while waiting for the reply, alone on the connection ...
    let gave_up = tokio::time::timeout(Duration::from_millis(20), control.sleep_ms(200, 1)).await;
    assert!(gave_up.is_err(), "the call should have timed out");
    assert_eq!(control.echo(2).await, Ok(2));

    // ... and among other calls.
    let mut abandoned = Vec::new();
    for token in 0..10 {
        let control = control.clone();
        abandoned.push(tokio::spawn(async move {
            tokio::time::timeout(Duration::from_millis(20), control.sleep_ms(150, token)).await
        }));
    }
    for task in abandoned {
        assert!(task.await.unwrap().is_err());
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
    let service = Arc::new(Service::default());
    let server = Server::with_options(ConnectionOptions::default().with_credits(2));
    let (_server, _listening) =
        serve("flow-give-up-credits", server, service_object(&service)).await;
    let control: ControlProxy = Client::new()
        .connect(&url("flow-give-up-credits"))
        .await
        .unwrap();

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
    let result = tokio::time::timeout(Duration::from_secs(5), async {
        let mut tasks = Vec::new();
        for token in 0..20u64 {
            let control = control.clone();
            tasks.push(tokio::spawn(
                async move { control.sleep_ms(5, token).await },
            ));
        }
        let mut tokens = Vec::new();
        for task in tasks {
            tokens.push(task.await.unwrap().unwrap());
        }
        tokens
    })
    .await
    .expect("calls stalled: credits of abandoned calls were not returned");
    assert_eq!(result, (0..20).collect::<Vec<u64>>());
    assert_eq!(service.max_active(), 2);
    assert_eq!(control.echo(6).await, Ok(6));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zero_credits_are_clamped_to_one() {
    let service = Arc::new(Service::default());
    let server = Server::with_options(ConnectionOptions::default().with_credits(0));
    let (_server, _listening) = serve("flow-zero-credits", server, service_object(&service)).await;
    let control: ControlProxy = Client::new()
        .connect(&url("flow-zero-credits"))
        .await
        .unwrap();

    let mut tasks = Vec::new();
    for token in 0..8u64 {
        let control = control.clone();
        tasks.push(tokio::spawn(
            async move { control.sleep_ms(10, token).await },
        ));
    }
    for (token, task) in tasks.into_iter().enumerate() {
        assert_eq!(task.await.unwrap(), Ok(token as u64));
    }
    assert_eq!(service.max_active(), 1);
    assert_eq!(service.completed(), 8);
}
