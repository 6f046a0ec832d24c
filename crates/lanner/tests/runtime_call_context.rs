//! The call context and deadlines: a call fails at its deadline even if the server never
//! answers, the server sees the time left, learns when the caller gives up and who the
//! caller is, and every error says whether the request may have run.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use lanner::{CallContext, Client, ConnectionOptions, ErrorKind, Object, Proxy, Server};
use tokio::sync::Notify;

/// A service whose methods wait for the caller to give up.
#[lanner::interface]
trait Patient {
    /// Waits until the call is cancelled (or `max_ms` passes); true if it was cancelled.
    async fn wait(&self, max_ms: u64) -> Result<bool, lanner::Error>;
    /// The time left as the method saw it, in microseconds (None: no deadline).
    async fn remaining_us(&self) -> Result<Option<u64>, lanner::Error>;
    /// Answers at once.
    async fn ping(&self) -> Result<u32, lanner::Error>;
    /// The calling process's pid and uid, as the call context reports them.
    async fn caller(&self) -> Result<Option<(i32, u32)>, lanner::Error>;
    /// A value nested `depth` levels deep (counted in `NESTED_RUNS`).
    async fn nested(&self, depth: u32) -> Result<Nest, lanner::Error>;
}

/// A type that contains itself.
#[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
enum Nest {
    Leaf,
    Node(Box<Nest>),
}

/// Runs of `nested`.
static NESTED_RUNS: AtomicU32 = AtomicU32::new(0);

#[derive(Default)]
struct PatientService {
    /// Calls of `wait` that saw their cancellation.
    cancelled: AtomicU32,
    changed: Notify,
    /// Calls of `ping` that ran.
    pings: AtomicU32,
}

impl PatientService {
    async fn wait_for_cancellations(&self, count: u32) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.cancelled.load(Ordering::SeqCst) < count {
            assert!(Instant::now() < deadline, "the server saw no cancellation");
            let _ = tokio::time::timeout(Duration::from_millis(10), self.changed.notified()).await;
        }
    }
}

impl Patient for PatientService {
    async fn wait(&self, max_ms: u64) -> Result<bool, lanner::Error> {
        let call = CallContext::current().expect("a served call has a context");
        let cancelled = tokio::select! {
            () = call.cancelled() => true,
            () = tokio::time::sleep(Duration::from_millis(max_ms)) => false,
        };
        if cancelled {
            assert!(call.is_cancelled());
            self.cancelled.fetch_add(1, Ordering::SeqCst);
            self.changed.notify_waiters();
            // The method sees its deadline at about the moment the caller does: answer well
            // after it (even on a loaded machine whose timers run late), so that the
            // caller's failure at the deadline is what the tests see.
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
        Ok(cancelled)
    }

    async fn remaining_us(&self) -> Result<Option<u64>, lanner::Error> {
        let call = CallContext::current().expect("a served call has a context");
        Ok(call.remaining().map(|left| left.as_micros() as u64))
    }

    async fn ping(&self) -> Result<u32, lanner::Error> {
        self.pings.fetch_add(1, Ordering::SeqCst);
        Ok(7)
    }

    async fn nested(&self, depth: u32) -> Result<Nest, lanner::Error> {
        NESTED_RUNS.fetch_add(1, Ordering::SeqCst);
        Ok((0..depth).fold(Nest::Leaf, |nest, _| Nest::Node(Box::new(nest))))
    }

    async fn caller(&self) -> Result<Option<(i32, u32)>, lanner::Error> {
        let call = CallContext::current().expect("a served call has a context");
        Ok(call.peer_credentials().map(|peer| (peer.pid, peer.uid)))
    }
}

async fn serve(
    endpoint: &str,
    client_options: ConnectionOptions,
) -> (Server, lanner::Listening, Arc<PatientService>, PatientProxy) {
    let service = Arc::new(PatientService::default());
    let server = Server::new();
    server.publish("patient", Object::new(PatientStub::new(service.clone())));
    let listening = server.listen(endpoint).await.expect("listen");
    let url = listening.endpoint().object_url("patient");
    let proxy = Client::with_options(client_options)
        .connect::<PatientProxy>(&url)
        .await
        .expect("connect");
    (server, listening, service, proxy)
}

/// A call that waited for a credit tells the callee the time it has left when it is sent,
/// not what it had when it was made.
#[tokio::test]
async fn a_call_that_waited_for_a_credit_tells_the_callee_the_time_left() {
    let service = Arc::new(PatientService::default());
    let server = Server::with_options(ConnectionOptions::default().with_credits(1));
    server.publish("patient", Object::new(PatientStub::new(service)));
    let listening = server.listen("mem://deadline-after-credit").await.unwrap();
    let patient: PatientProxy = Client::new()
        .connect(&listening.endpoint().object_url("patient"))
        .await
        .unwrap();
    // The only credit, held for 300 ms.
    let holder = patient.clone();
    let holding = tokio::spawn(async move { holder.wait(300).await });
    tokio::time::sleep(Duration::from_millis(20)).await;
    let started = Instant::now();
    let left = patient
        .with_timeout(Duration::from_secs(1))
        .remaining_us()
        .await
        .unwrap()
        .expect("the call has a deadline");
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(200),
        "the call did not wait for the credit ({waited:?})"
    );
    let told = Duration::from_micros(left);
    assert!(
        told + waited <= Duration::from_millis(1_010),
        "the callee was told {told:?} after a wait of {waited:?}"
    );
    assert_eq!(holding.await.unwrap(), Ok(false));
}

async fn deadline_fails_the_call_and_cancels_it_on_the_server(
    endpoint: &str,
    options: ConnectionOptions,
) {
    let (_server, _listening, service, patient) = serve(endpoint, options).await;
    let started = Instant::now();
    let error = patient
        .with_timeout(Duration::from_millis(100))
        .wait(60_000)
        .await
        .expect_err("the server never answers in time");
    let waited = started.elapsed();
    assert_eq!(error.kind(), ErrorKind::DeadlineExceeded, "{error}");
    assert!(error.may_have_executed(), "the request was sent: {error}");
    assert!(
        waited >= Duration::from_millis(100),
        "failed early, after {waited:?}"
    );
    // The server hears that the caller gave up.
    service.wait_for_cancellations(1).await;
    // The connection is intact.
    assert_eq!(patient.ping().await, Ok(7));
}

#[tokio::test]
async fn a_call_fails_at_its_deadline_and_the_server_stops_waiting() {
    deadline_fails_the_call_and_cancels_it_on_the_server(
        "mem://deadline-adaptive",
        ConnectionOptions::default(),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadline_ends_even_a_busy_polling_wait() {
    deadline_fails_the_call_and_cancels_it_on_the_server(
        "mem://deadline-busy",
        ConnectionOptions::default().busy_poll(),
    )
    .await;
}

#[tokio::test]
async fn a_deadline_over_a_unix_socket() {
    let path = std::env::temp_dir().join(format!("lanner-deadline-{}.sock", std::process::id()));
    let _ = std::fs::remove_file(&path);
    deadline_fails_the_call_and_cancels_it_on_the_server(
        &format!("unix://{}", path.display()),
        ConnectionOptions::default(),
    )
    .await;
    let _ = std::fs::remove_file(&path);
}

#[tokio::test]
async fn the_server_sees_the_time_left() {
    let (_server, _listening, _service, patient) =
        serve("mem://deadline-remaining", ConnectionOptions::default()).await;
    assert_eq!(patient.remaining_us().await, Ok(None));
    let left = patient
        .with_timeout(Duration::from_secs(10))
        .remaining_us()
        .await
        .unwrap()
        .expect("a deadline was set");
    assert!(left <= 10_000_000, "{left} µs left of 10 s");
    assert!(left > 5_000_000, "only {left} µs left of 10 s");
    // A proxy for another interface of the same object keeps the timeout; a plain one has
    // none.
    let timed: PatientProxy = patient
        .with_timeout(Duration::from_secs(3))
        .query()
        .unwrap();
    assert!(timed.remaining_us().await.unwrap().is_some());
}

#[tokio::test]
async fn the_client_default_timeout_applies_to_every_proxy() {
    let options = ConnectionOptions::default().with_call_timeout(Duration::from_millis(50));
    let (_server, _listening, service, patient) = serve("mem://deadline-default", options).await;
    let left = patient
        .remaining_us()
        .await
        .unwrap()
        .expect("default deadline");
    assert!(left <= 50_000);
    let error = patient.wait(60_000).await.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::DeadlineExceeded);
    service.wait_for_cancellations(1).await;
    // A proxy's own timeout overrides the default.
    assert_eq!(
        patient
            .with_timeout(Duration::from_secs(10))
            .wait(200)
            .await,
        Ok(false)
    );
}

#[tokio::test]
async fn dropping_a_call_cancels_it_on_the_server() {
    let (_server, _listening, service, patient) =
        serve("mem://deadline-drop", ConnectionOptions::default()).await;
    for round in 1..=3 {
        let call = patient.wait(60_000);
        // Give the request time to reach the server, then give up on it.
        assert!(
            tokio::time::timeout(Duration::from_millis(20), call)
                .await
                .is_err()
        );
        service.wait_for_cancellations(round).await;
    }
    assert_eq!(patient.ping().await, Ok(7));
}

#[tokio::test]
async fn errors_say_whether_the_request_may_have_run() {
    let (_server, listening, _service, patient) =
        serve("mem://deadline-executed", ConnectionOptions::default()).await;
    // Refused by the server before anything ran.
    let unknown = Client::new()
        .connect::<PatientProxy>(&listening.endpoint().object_url("nobody"))
        .await
        .unwrap_err();
    assert_eq!(unknown.kind(), ErrorKind::NotFound);
    assert!(!unknown.may_have_executed(), "{unknown}");
    // Sent, then given up on: it may have run.
    let late = patient
        .with_timeout(Duration::from_millis(10))
        .wait(60_000)
        .await
        .unwrap_err();
    assert!(late.may_have_executed(), "{late}");
    // An answer that ran but cannot be decoded (here: nested deeper than a decoder goes)
    // may have executed: it did.
    assert!(matches!(patient.nested(3).await, Ok(Nest::Node(_))));
    let runs = NESTED_RUNS.load(Ordering::SeqCst);
    let undecodable = patient.nested(300).await.unwrap_err();
    assert_eq!(
        undecodable.kind(),
        ErrorKind::InvalidArgument,
        "{undecodable}"
    );
    assert!(undecodable.may_have_executed(), "{undecodable}");
    assert_eq!(NESTED_RUNS.load(Ordering::SeqCst), runs + 1);
    // Both facts survive the trip inside an application error.
    let decoded: lanner::Error =
        serde_json::from_str(&serde_json::to_string(&late).unwrap()).unwrap();
    assert_eq!(decoded, late);
}

#[tokio::test]
async fn the_method_sees_the_callers_kernel_verified_identity() {
    let path = std::env::temp_dir().join(format!("lanner-caller-{}.sock", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let (_server, _listening, _service, patient) = serve(
        &format!("unix://{}", path.display()),
        ConnectionOptions::default(),
    )
    .await;
    // SAFETY: getuid has no preconditions and cannot fail.
    let uid = unsafe { libc::getuid() };
    assert_eq!(
        patient.caller().await,
        Ok(Some((std::process::id() as i32, uid)))
    );
    let _ = std::fs::remove_file(&path);
    let shm = format!("shm://lanner-caller-{}", std::process::id());
    let (_server, _listening, _service, patient) = serve(&shm, ConnectionOptions::default()).await;
    assert_eq!(
        patient.caller().await,
        Ok(Some((std::process::id() as i32, uid)))
    );
    // In memory, the caller is this very process.
    let (_server, _listening, _service, patient) =
        serve("mem://deadline-caller", ConnectionOptions::default()).await;
    assert_eq!(
        patient.caller().await,
        Ok(Some((std::process::id() as i32, uid)))
    );
}

/// A service that calls on to a [`Patient`] from inside its own methods.
#[lanner::interface]
trait Relay {
    /// The time left (µs) that the patient saw on a call made from inside this one through
    /// a proxy with a timeout of `own_ms` (none if 0).
    async fn onward_remaining_us(&self, own_ms: u64) -> Result<Option<u64>, lanner::Error>;
    /// Waits until this call's deadline has passed, then calls the patient; the outcome
    /// goes to `RelayService::report`.
    async fn call_after_deadline(&self) -> Result<(), lanner::Error>;
    /// Asks the patient for the time it has left; the answer goes to
    /// `RelayService::report`.
    #[oneway]
    async fn one_way_onward(&self) -> Result<(), lanner::Error>;
}

/// What a relay's onward call came to.
type Onward = Result<Option<u64>, lanner::Error>;

struct RelayService {
    patient: PatientProxy,
    /// Where the outcome of an onward call the caller does not see goes.
    report: tokio::sync::mpsc::UnboundedSender<Onward>,
}

impl Relay for RelayService {
    async fn onward_remaining_us(&self, own_ms: u64) -> Result<Option<u64>, lanner::Error> {
        match own_ms {
            0 => self.patient.remaining_us().await,
            ms => {
                let patient = self.patient.with_timeout(Duration::from_millis(ms));
                patient.remaining_us().await
            }
        }
    }

    async fn call_after_deadline(&self) -> Result<(), lanner::Error> {
        let call = CallContext::current().expect("a served call has a context");
        let deadline = call.deadline().expect("called with a deadline");
        tokio::time::sleep_until((deadline + Duration::from_millis(10)).into()).await;
        // A proxy timeout longer than what is left does not lengthen it.
        let outcome = self
            .patient
            .with_timeout(Duration::from_secs(60))
            .ping()
            .await;
        let _ = self.report.send(outcome.map(|_| None));
        Ok(())
    }

    async fn one_way_onward(&self) -> Result<(), lanner::Error> {
        let _ = self.report.send(self.patient.remaining_us().await);
        Ok(())
    }
}

/// A relay on one server calling a patient on another: the servers, the patient, the
/// client's proxy to the relay and what the relay reports.
struct Relayed {
    _servers: Vec<(Server, lanner::Listening)>,
    patient: Arc<PatientService>,
    relay: RelayProxy,
    reports: tokio::sync::mpsc::UnboundedReceiver<Onward>,
}

impl Relayed {
    async fn start(name: &str) -> Relayed {
        let (patient_server, patient_listening, patient, proxy) = serve(
            &format!("mem://{name}-patient"),
            ConnectionOptions::default(),
        )
        .await;
        let (report, reports) = tokio::sync::mpsc::unbounded_channel();
        let service = Arc::new(RelayService {
            patient: proxy,
            report,
        });
        let server = Server::new();
        server.publish("relay", Object::new(RelayStub::new(service)));
        let listening = server
            .listen(&format!("mem://{name}-relay"))
            .await
            .expect("listen");
        let url = listening.endpoint().object_url("relay");
        let relay = Client::new().connect::<RelayProxy>(&url).await.unwrap();
        Relayed {
            _servers: vec![(patient_server, patient_listening), (server, listening)],
            patient,
            relay,
            reports,
        }
    }

    async fn next_report(&mut self) -> Onward {
        tokio::time::timeout(Duration::from_secs(10), self.reports.recv())
            .await
            .expect("the relay made its onward call")
            .expect("the relay is alive")
    }
}

#[tokio::test]
async fn a_call_made_while_serving_one_inherits_its_deadline() {
    let Relayed { relay, .. } = Relayed::start("deadline-inherited").await;
    // Without a deadline, none is passed on.
    assert_eq!(relay.onward_remaining_us(0).await, Ok(None));
    let relay = relay.with_timeout(Duration::from_secs(10));
    // The onward call's own timeout, longer, does not lengthen it; none is no longer.
    for own_ms in [0, 60_000] {
        let left = relay
            .onward_remaining_us(own_ms)
            .await
            .unwrap()
            .expect("the onward call inherited the deadline");
        assert!(left <= 10_000_000, "{left} µs left of 10 s");
        assert!(left > 5_000_000, "only {left} µs left of 10 s");
    }
    // A shorter one is kept.
    let left = relay.onward_remaining_us(1_000).await.unwrap().unwrap();
    assert!(left <= 1_000_000, "{left} µs left of 1 s");
}

#[tokio::test]
async fn a_call_made_after_the_inherited_deadline_fails_unsent() {
    let mut relayed = Relayed::start("deadline-inherited-passed").await;
    let error = relayed
        .relay
        .with_timeout(Duration::from_millis(50))
        .call_after_deadline()
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::DeadlineExceeded, "{error}");
    let onward = relayed.next_report().await.unwrap_err();
    assert_eq!(onward.kind(), ErrorKind::DeadlineExceeded, "{onward}");
    assert!(!onward.may_have_executed(), "{onward}");
    assert!(onward.message().contains("inherits"), "{onward}");
    assert_eq!(relayed.patient.pings.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_one_way_call_passes_no_deadline_on() {
    let mut relayed = Relayed::start("deadline-one-way").await;
    relayed
        .relay
        .with_timeout(Duration::from_secs(10))
        .one_way_onward()
        .await
        .unwrap();
    // Nobody waits for a one-way call: what it calls on gets no deadline from it.
    assert_eq!(relayed.next_report().await, Ok(None));
}
