//! Calls through generated proxies on the in-memory transport: typed results, typed
//! application errors, bulk `Bytes` arguments and results, and many concurrent callers.

mod common;

use std::sync::Arc;

use common::*;
use lanner::{Bytes, Proxy, Server};

#[tokio::test]
async fn typed_results_round_trip() {
    let (_server, _listening, _service) = serve_service("calls-typed-results", Server::new()).await;
    let calc: CalculatorProxy = lanner::connect(&url("calls-typed-results")).await.unwrap();

    assert_eq!(calc.add(2, 3).await, Ok(5));
    assert_eq!(calc.add(-7, 3).await, Ok(-4));
    assert_eq!(calc.add(i64::MIN, i64::MAX).await, Ok(-1));
    assert_eq!(calc.divide(-9, 2).await, Ok(-4));
    assert_eq!(calc.ping().await, Ok(()));
    assert_eq!(
        calc.stats(vec![4, -2, 19, 7], Some("week 3".into())).await,
        Ok(Stats {
            count: 4,
            min: -2,
            max: 19,
            sum: 28,
            label: Some("week 3".into()),
        })
    );
    assert_eq!(
        calc.stats(vec![i64::MAX, i64::MAX], None).await,
        Ok(Stats {
            count: 2,
            min: i64::MAX,
            max: i64::MAX,
            sum: 2 * i128::from(i64::MAX),
            label: None,
        })
    );
}

#[tokio::test]
async fn typed_application_errors_arrive_as_the_declared_type() {
    let (_server, _listening, _service) = serve_service("calls-app-errors", Server::new()).await;
    let calc: CalculatorProxy = lanner::connect(&url("calls-app-errors")).await.unwrap();

    assert_eq!(
        calc.divide(7, 0).await,
        Err(CalcError::DivideByZero { dividend: 7 })
    );
    assert_eq!(
        calc.add(i64::MAX, 1).await,
        Err(CalcError::Overflow(format!("{} + 1", i64::MAX)))
    );
    assert_eq!(
        calc.divide(i64::MIN, -1).await,
        Err(CalcError::Overflow(format!("{} / -1", i64::MIN)))
    );
    assert_eq!(calc.stats(Vec::new(), None).await, Err(CalcError::Empty));
    assert_eq!(
        calc.fail(Failure::App).await,
        Err(CalcError::Overflow("asked to fail".into()))
    );
    // An application error is an ordinary reply: the next call works.
    assert_eq!(calc.add(1, 1).await, Ok(2));

    let blobs: BlobsProxy = calc.query().unwrap();
    assert_eq!(
        blobs
            .mix("t".into(), Bytes::new(), 0, Bytes::new(), 17, Bytes::new())
            .await,
        Err(BlobError::TooMany { repeat: 17 })
    );
}

/// Generic code written against the trait runs the same on a local object and a proxy.
async fn sum_all(calc: &impl Calculator, values: &[i64]) -> Result<i64, CalcError> {
    let mut total = 0;
    for value in values {
        total = calc.add(total, *value).await?;
    }
    Ok(total)
}

#[tokio::test]
async fn code_against_the_trait_works_locally_and_remotely() {
    let (_server, _listening, service) = serve_service("calls-generic", Server::new()).await;
    let calc: CalculatorProxy = lanner::connect(&url("calls-generic")).await.unwrap();

    let values = [10, -3, 250, 7];
    assert_eq!(sum_all(service.as_ref(), &values).await, Ok(264));
    assert_eq!(sum_all(&calc, &values).await, Ok(264));
    assert_eq!(
        sum_all(&calc, &[i64::MAX, 1]).await,
        Err(CalcError::Overflow(format!("{} + 1", i64::MAX)))
    );
}

const SIZES: [usize; 9] = [0, 1, 2, 255, 4096, 65_535, 65_537, 1 << 20, 4 << 20];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bytes_arguments_and_results_round_trip_exactly() {
    let (_server, _listening, _service) = serve_service("calls-bytes-echo", Server::new()).await;
    let blobs: BlobsProxy = lanner::connect(&url("calls-bytes-echo")).await.unwrap();

    for (index, size) in SIZES.into_iter().enumerate() {
        let data = pattern(size, index as u8);
        let echoed = blobs.echo(data.clone()).await.unwrap();
        assert_eq!(echoed.len(), size, "echo of {size} bytes");
        assert!(echoed == data, "echo of {size} bytes differs");

        let summary = blobs.digest(data.clone()).await.unwrap();
        assert_eq!(summary, digest(&data), "digest of {size} bytes");

        let made = blobs.make(size as u32, index as u8).await.unwrap();
        assert_eq!(made.len(), size, "make of {size} bytes");
        assert!(made == data, "make of {size} bytes differs");
    }
    // A slice of a larger buffer travels as exactly that slice.
    let big = pattern(10_000, 9);
    let slice = big.slice(1_000..1_017);
    assert_eq!(blobs.echo(slice.clone()).await.unwrap(), slice);
    assert_eq!(
        blobs.digest(slice.clone()).await.unwrap(),
        digest(&big[1_000..1_017])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_bytes_arguments_mix_with_inline_arguments() {
    let (_server, _listening, _service) = serve_service("calls-bytes-mix", Server::new()).await;
    let blobs: BlobsProxy = lanner::connect(&url("calls-bytes-mix")).await.unwrap();

    let cases: [(&str, usize, u8, usize, u32, usize); 7] = [
        ("", 0, 0, 0, 0, 0),
        ("empty-middle", 10, b',', 0, 3, 10),
        ("empty-ends", 0, b';', 7, 2, 0),
        ("unicode ✓ tag", 3, 0xff, 1, 1, 5),
        ("big-first", 4 << 20, 1, 3, 2, 9),
        ("big-last", 5, 2, 300, 16, 1 << 20),
        ("all-big", 1 << 20, 3, 1 << 18, 4, 1 << 20),
    ];
    for (tag, first, separator, second, repeat, third) in cases {
        let first = pattern(first, 1);
        let second = pattern(second, 2);
        let third = pattern(third, 3);
        let result = blobs
            .mix(
                tag.to_owned(),
                first.clone(),
                separator,
                second.clone(),
                repeat,
                third.clone(),
            )
            .await
            .unwrap();
        let expected = expected_mix(tag, &first, separator, &second, repeat, &third);
        assert_eq!(result.len(), expected.len(), "case {tag:?}");
        assert!(result == expected, "case {tag:?}: contents differ");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_concurrent_callers_all_get_their_own_answers() {
    const TASKS: i64 = 64;
    const CALLS: i64 = 200;
    let (_server, _listening, service) = serve_service("calls-concurrent", Server::new()).await;
    // One connection, shared by every task.
    let calc: CalculatorProxy = connect("calls-concurrent").await;
    let control: ControlProxy = calc.query().unwrap();

    let proxies = (calc, control.clone());
    let tasks = spawn_each(&proxies, 0..TASKS, |(calc, control), task| async move {
        let mut checked = 0u32;
        for call in 0..CALLS {
            let a = task * 1_000_000 + call;
            match call % 3 {
                0 => assert_eq!(calc.add(a, call * 7).await, Ok(a + call * 7)),
                1 => {
                    let value = (task as u64) << 32 | call as u64;
                    assert_eq!(control.echo(value).await, Ok(value));
                }
                _ => assert_eq!(
                    calc.divide(a, 0).await,
                    Err(CalcError::DivideByZero { dividend: a })
                ),
            }
            checked += 1;
        }
        checked
    });
    let total: u32 = await_all(tasks).await.into_iter().sum();
    assert_eq!(total, (TASKS * CALLS) as u32);
    // Every echo ran exactly once on the server.
    let echoes = (0..CALLS).filter(|call| call % 3 == 1).count() as u64 * TASKS as u64;
    assert_eq!(control.completed().await, Ok(echoes));
    assert_eq!(service.completed(), echoes);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_bulk_calls_do_not_mix_up_payloads() {
    let (_server, _listening, _service) =
        serve_service("calls-concurrent-bulk", Server::new()).await;
    let blobs: BlobsProxy = connect("calls-concurrent-bulk").await;

    let tasks = spawn_each(&blobs, 0..16u8, |blobs, task| async move {
        for call in 0..20usize {
            let size = (usize::from(task) * 7_919 + call * 104_729) % (300 << 10);
            let data = pattern(size, task ^ call as u8);
            let echoed = blobs.echo(data.clone()).await.unwrap();
            assert!(
                echoed == data,
                "task {task} call {call}: {size} bytes differ"
            );
        }
    });
    await_all(tasks).await;
}

/// Parameter names that the generated code also uses for its own variables.
#[lanner::interface]
pub trait Shadowing {
    /// Every parameter named like a variable of the generated proxy or stub, plus a bulk one.
    #[allow(clippy::too_many_arguments)]
    async fn everything(
        &self,
        method: String,
        segments: Vec<u8>,
        this: u32,
        call: u64,
        request: bool,
        methods: i8,
        ordinal: u16,
        data: Bytes,
    ) -> Result<String, lanner::Error>;
    /// Without bulk parameters.
    async fn inline_only(&self, segments: Vec<u8>, method: u8) -> Result<Vec<u8>, lanner::Error>;
}

struct Shadowed;

impl Shadowing for Shadowed {
    async fn everything(
        &self,
        method: String,
        segments: Vec<u8>,
        this: u32,
        call: u64,
        request: bool,
        methods: i8,
        ordinal: u16,
        data: Bytes,
    ) -> Result<String, lanner::Error> {
        Ok(format!(
            "{method} {segments:?} {this} {call} {request} {methods} {ordinal} {data:?}"
        ))
    }

    async fn inline_only(&self, segments: Vec<u8>, method: u8) -> Result<Vec<u8>, lanner::Error> {
        let mut out = segments;
        out.push(method);
        Ok(out)
    }
}

/// A caller and a server on one current-thread runtime (what `#[tokio::test]` makes):
/// the server answers only while the caller lets go of the thread, so a caller that spun
/// at once for each reply, as a sequential caller does, would hold the thread for its
/// whole spin budget on every call. After a spin that went unanswered it is held off,
/// for ever longer, and spins in vain only now and then.
#[tokio::test]
async fn a_caller_whose_server_runs_on_its_thread_seldom_spins_in_vain() {
    let (_server, _listening, _service) = serve_service("calls-same-thread", Server::new()).await;
    let control: ControlProxy = lanner::connect(&url("calls-same-thread")).await.unwrap();
    for i in 0..1000 {
        assert_eq!(control.echo(i).await, Ok(i));
    }
    let traffic = control.object().traffic();
    assert!(
        traffic.spins_unanswered <= 16,
        "{} of 1000 calls spun for their reply in vain",
        traffic.spins_unanswered
    );
}

#[tokio::test]
async fn parameters_may_have_any_name() {
    let object = lanner::Object::new(ShadowingStub::new(Arc::new(Shadowed)));
    let (_server, _listening) = serve("calls-param-names", Server::new(), object).await;
    let proxy: ShadowingProxy = connect("calls-param-names").await;
    assert_eq!(
        proxy
            .everything(
                "m".into(),
                vec![1, 2],
                3,
                4,
                true,
                -5,
                6,
                Bytes::from_static(b"xy")
            )
            .await,
        Ok("m [1, 2] 3 4 true -5 6 b\"xy\"".to_owned())
    );
    assert_eq!(proxy.inline_only(vec![7, 8], 9).await, Ok(vec![7, 8, 9]));
}

/// Callers keep many calls outstanding by moving each call's future into a set or a task,
/// and every move copies it: a call's future holds the call in flight, not the request it
/// sent or the state of every way of waiting (see `docs/decisions.md`, "The call future is
/// small"): 344 bytes in release, 376 in debug builds, 768 before.
#[tokio::test]
async fn a_call_future_stays_small() {
    let (_server, _listening, _service) = serve_service("calls-small", Server::new()).await;
    let blobs: BlobsProxy = lanner::connect(&url("calls-small")).await.unwrap();
    let calc: CalculatorProxy = lanner::connect(&url("calls-small")).await.unwrap();
    let echo = blobs.echo(Bytes::new());
    let add = calc.add(1, 2);
    for size in [std::mem::size_of_val(&echo), std::mem::size_of_val(&add)] {
        assert!(size <= 512, "a call's future is {size} bytes");
    }
    assert_eq!(echo.await.unwrap(), Bytes::new());
    assert_eq!(add.await, Ok(3));
}
