//! Client-side object references.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::client::Client;
use crate::connection::Connection;
use crate::error::{Error, ErrorKind};
use crate::handoff::Token;
use crate::id::InterfaceId;
use crate::proxy::{Proxy, ProxyCore};
use crate::url::{Endpoint, ObjectUrl};

/// A reference to a remote object: the connection it lives behind, its handle there, and
/// the list of interfaces it implements. Asking for another interface
/// ([`ObjectRef::query`]) is answered from that list, with no round trip.
///
/// A reference obtained from a URL ([`Client::resolve`], [`crate::connect`]) remembers it:
/// once its connection breaks (the server was killed, or shut down), the next call through
/// it or any proxy made from it connects and resolves the name again, so a restarted server
/// is picked up without rebuilding proxies. Failed attempts back off exponentially (from
/// 50 ms to 5 s); calls made meanwhile fail at once with `Unavailable` (not sent).
#[derive(Clone)]
pub struct ObjectRef {
    inner: Arc<RefInner>,
}

// What every call reads (the target and the flag) comes first.
#[repr(C)]
struct RefInner {
    /// Where calls go (replaced when the reference reconnects or is claimed). A short
    /// lock rather than an `ArcSwap`: the target lives inline, so a call through a cold
    /// reference touches one cache line of it, not two.
    target: Mutex<Target>,
    /// False only for a reference handed over by a third party and not claimed yet: calls
    /// then claim it first (see [`Origin::Handoff`]).
    claimed: AtomicBool,
    /// This reference holds one count on the object's exporter, released when it is
    /// dropped (false once handed over to another reference).
    counted: AtomicBool,
    /// The reference was handed back to the object's exporter in a message: its release
    /// says so (see [`lanner_proto::frame::FLAG_HANDED_BACK`]).
    handed_back: AtomicBool,
    /// Read only when the target's connection is unusable or the reference unclaimed.
    origin: Option<Box<Origin>>,
    interfaces: Vec<InterfaceId>,
    /// Where the object was first found (for messages).
    peer: String,
}

impl Drop for RefInner {
    fn drop(&mut self) {
        if self.counted.load(Ordering::Relaxed) {
            let origin = self.origin.as_deref();
            let target = self.target.get_mut().unwrap_or_else(|e| e.into_inner());
            if keeps_in_use(origin, target.handle) {
                target.connection.reference_let_go();
            }
            if target.handle != crate::connection::ROOT_HANDLE {
                let handed_back = self.handed_back.load(Ordering::Relaxed);
                target.connection.release_remote(target.handle, handed_back);
            }
        }
    }
}

/// Whether a reference from `origin` holding a count on the object `handle` keeps its
/// connection in use (see `Connection::reference_held`): it could not find the object
/// again if the connection closed (it was not found by URL, and it is not the root).
fn keeps_in_use(origin: Option<&Origin>, handle: u64) -> bool {
    !matches!(origin, Some(Origin::Url(_))) && handle != crate::connection::ROOT_HANDLE
}

/// Counts of the messages (frames) a connection carried after its handshake.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct Traffic {
    /// Messages written (requests, responses, credits, cancels, keepalive probes…).
    pub messages_sent: u64,
    /// Whole messages received (among them the PONG frames a TCP peer may send as padding
    /// before a large payload).
    pub messages_received: u64,
    /// Bulk payloads sent by reference from this side's loan area (shared memory) rather
    /// than through the ring: those built in loans (see [`crate::Loan`]), never copied,
    /// and those of 256 KiB or more copied there once instead of into the ring.
    pub payloads_lent: u64,
    /// Replies received by the call waiting for them, polling the connection itself
    /// while nothing else was outstanding (the "private socket" path: no hand-off from
    /// the connection's reader to the caller's thread).
    pub replies_to_their_caller: u64,
    /// Calls whose caller spun for its reply on its own thread and gave up before it came
    /// (the spin budget passed, or what arrived meanwhile was work for others): the thread
    /// was held for nothing. Frequent when the peer's answers are slower than the spin
    /// budget (lower it, see [`crate::ConnectionOptions::with_spin`]); a caller whose peer
    /// runs on its own thread (a server on the same current-thread runtime) is kept from
    /// spinning in vain on every call.
    pub spins_unanswered: u64,
}

/// Where calls through a reference go: a connection and the object's handle on it.
#[derive(Clone)]
pub(crate) struct Target {
    pub(crate) connection: Arc<Connection>,
    pub(crate) handle: u64,
}

/// Where a reference came from, when that matters after it was made.
enum Origin {
    /// Found by URL: it can be found again if its connection breaks.
    Url(UrlOrigin),
    /// Handed over by a third party: redeemed at the object's server before first use.
    Handoff(Handoff),
}

/// How to find a named object again.
struct UrlOrigin {
    client: Client,
    url: ObjectUrl,
    backoff: tokio::sync::Mutex<Backoff>,
    /// The reconnect under way, if any: callers wait for this one rather than start their
    /// own (see [`ObjectRef::reconnecting`]).
    reconnecting: Mutex<Option<Claim>>,
}

/// A reference a third party handed over (see [`crate::handoff`]): until redeemed, its
/// target is the connection it arrived on, which it never calls.
struct Handoff {
    client: Client,
    endpoint: Endpoint,
    token: Token,
    /// The answer that refused the claim, if one did (the token is spent: every later
    /// call fails the same way). Claims run one at a time (see `claim`), so this needs
    /// no lock held across the claim.
    refused: Mutex<Option<Error>>,
    /// The claim under way, if any: every caller waits for this one (see
    /// [`ObjectRef::settle_target`]) rather than starting its own.
    claim: Mutex<Option<Claim>>,
}

/// A claim running on a task of its own, shared by the callers waiting for it.
/// (A `watch` rather than a `futures::Shared`: a `Shared` clone that polls the claim and is
/// then dropped, by a caller giving up, can swallow the wake-up of the others, which then
/// wait forever: futures-rs issue 2706.) `None` while the claim runs; the channel closes
/// without a value if its task is dropped (it panicked, or its runtime shut down).
type Claim = tokio::sync::watch::Receiver<Option<Result<Target, Error>>>;

/// How long a claim may take before it gives up (connecting is bounded by the handshake
/// timeout, redeeming by the server's wait for the grant; this bounds a server that
/// accepts and never answers, now that no caller's deadline cuts the claim short). Past
/// it, the object's server has let its token go with its lease anyway (30 s by default).
const CLAIM_LIMIT: Duration = Duration::from_secs(60);

/// Exponential backoff between reconnection attempts.
struct Backoff {
    delay: Duration,
    not_before: Option<Instant>,
}

/// The first wait after a failed reconnection attempt, and the longest.
const BACKOFF_MIN: Duration = Duration::from_millis(50);
const BACKOFF_MAX: Duration = Duration::from_secs(5);

impl ObjectRef {
    pub(crate) fn new(
        connection: Arc<Connection>,
        handle: u64,
        interfaces: Vec<InterfaceId>,
    ) -> ObjectRef {
        ObjectRef::build(connection, handle, interfaces, None)
    }

    fn build(
        connection: Arc<Connection>,
        handle: u64,
        interfaces: Vec<InterfaceId>,
        origin: Option<Box<Origin>>,
    ) -> ObjectRef {
        if keeps_in_use(origin.as_deref(), handle) {
            connection.reference_held();
        }
        ObjectRef {
            inner: Arc::new(RefInner {
                peer: connection.peer().to_owned(),
                target: Mutex::new(Target { connection, handle }),
                interfaces,
                origin,
                claimed: AtomicBool::new(true),
                counted: AtomicBool::new(true),
                handed_back: AtomicBool::new(false),
            }),
        }
    }

    /// A reference handed over by a third party, on `arrived_on`: the object lives at
    /// `endpoint`, whose server holds it for `token`. Redeemed (through `client`) by the
    /// first call; it holds no count on anyone until then.
    pub(crate) fn handed_over(
        arrived_on: Arc<Connection>,
        client: Client,
        endpoint: Endpoint,
        token: Token,
        interfaces: Vec<InterfaceId>,
    ) -> ObjectRef {
        ObjectRef {
            inner: Arc::new(RefInner {
                peer: endpoint.to_string(),
                target: Mutex::new(Target {
                    connection: arrived_on,
                    handle: crate::connection::ROOT_HANDLE,
                }),
                interfaces,
                origin: Some(Box::new(Origin::Handoff(Handoff {
                    client,
                    endpoint,
                    token,
                    refused: Mutex::new(None),
                    claim: Mutex::new(None),
                }))),
                claimed: AtomicBool::new(false),
                counted: AtomicBool::new(false),
                handed_back: AtomicBool::new(false),
            }),
        }
    }

    /// True for a reference handed over by a third party and not redeemed yet.
    pub(crate) fn awaits_redemption(&self) -> bool {
        !self.inner.claimed.load(Ordering::Acquire)
    }

    /// Hands this reference's count on the exporter over to whoever takes its target
    /// (or, for arguments that failed to decode, back to the exporter: see
    /// [`crate::objref::decoding_arguments`]).
    pub(crate) fn disown(&self) {
        if self.inner.counted.swap(false, Ordering::Relaxed) {
            let target = self.target();
            if keeps_in_use(self.inner.origin.as_deref(), target.handle) {
                target.connection.reference_let_go();
            }
        }
    }

    /// This reference, remembering that it was found at `url` through `client`.
    pub(crate) fn found_at(self, client: Client, url: ObjectUrl) -> ObjectRef {
        self.disown();
        let target = self.current_target();
        ObjectRef::build(
            target.connection.clone(),
            target.handle,
            self.inner.interfaces.clone(),
            Some(Box::new(Origin::Url(UrlOrigin {
                client,
                url,
                backoff: tokio::sync::Mutex::new(Backoff {
                    delay: BACKOFF_MIN,
                    not_before: None,
                }),
                reconnecting: Mutex::new(None),
            }))),
        )
    }

    /// Messages sent and received so far on the connection this reference calls through
    /// (shared by every reference to that endpoint), handshake excluded: a call is one
    /// request and one response.
    pub fn traffic(&self) -> Traffic {
        self.current_target().connection.traffic()
    }

    /// A buffer of `len` bytes for a bulk payload to pass to this object (or to any object
    /// at its endpoint): on a `shm://` connection, a block of memory the server reads in
    /// place, so the payload frozen from it is sent by reference, never copied; elsewhere
    /// (or when the connection's loan area has no room) ordinary memory. See
    /// [`crate::Loan`].
    pub fn loan(&self, len: usize) -> crate::Loan {
        self.current_target().connection.loan(len)
    }

    /// Where calls go now, if the reference can be called as it is (it is not waiting to
    /// be claimed from a third party).
    pub(crate) fn claimed_target(&self) -> Option<Target> {
        self.inner
            .claimed
            .load(Ordering::Acquire)
            .then(|| self.current_target())
    }

    /// Where calls go now.
    pub(crate) fn current_target(&self) -> Target {
        self.target().clone()
    }

    fn target(&self) -> std::sync::MutexGuard<'_, Target> {
        self.inner.target.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The target to call through: `current` if its connection takes new calls, else, if
    /// the reference knows its URL, a fresh one (reconnecting, with backoff, giving up at
    /// `deadline`). A reference without a URL keeps its target: the call then fails with
    /// the connection's own error. A reference handed over by a third party is redeemed
    /// first. A new connection runs on the caller's runtime, or, for a caller outside any,
    /// on the old connection's while that one runs.
    pub(crate) async fn usable_target(
        &self,
        current: Target,
        deadline: Option<Instant>,
    ) -> Result<Target, Error> {
        if self.inner.claimed.load(Ordering::Acquire)
            && current.connection.usable()
            && !self.is_placeholder(&current)
        {
            return Ok(current);
        }
        // Reconnecting and claiming are rare and their futures large: boxed, so that every
        // call's future (moved whenever a caller pushes it into a set or a task) stays small.
        Box::pin(self.settle_target(current, deadline)).await
    }

    /// Whether `target` is what a reference handed over by a third party calls before it
    /// is claimed (the connection it arrived on, handle 0): read before a concurrent claim
    /// completed, it must not be called.
    fn is_placeholder(&self, target: &Target) -> bool {
        target.handle == crate::connection::ROOT_HANDLE
            && matches!(self.inner.origin.as_deref(), Some(Origin::Handoff(_)))
    }

    /// [`ObjectRef::usable_target`] when the reference must reconnect or be claimed.
    async fn settle_target(
        &self,
        current: Target,
        deadline: Option<Instant>,
    ) -> Result<Target, Error> {
        match self.inner.origin.as_deref() {
            Some(Origin::Handoff(handoff)) if !self.inner.claimed.load(Ordering::Acquire) => {
                // The claim runs on a task of its own: a caller that gives up (its deadline
                // passes, or it drops the call) stops waiting for it, not the claim. Given
                // up halfway, the claim would spend the token on an answer nobody takes,
                // and the reference could never be claimed again.
                let mut claim = self.claim(handoff, &current);
                let endpoint = handoff.endpoint.clone();
                let claim = async move {
                    match claim.wait_for(Option::is_some).await {
                        Ok(done) => done
                            .clone()
                            .expect("`wait_for` returns once there is a value"),
                        Err(_) => Err(Error::unavailable(format!(
                            "claiming the object at {endpoint} handed over by a third party stopped: it panicked, or its runtime shut down"
                        ))),
                    }
                };
                let runtime = current.connection.timer_runtime();
                crate::connection::until(&runtime, deadline, claim, || {
                    Error::new(
                        ErrorKind::DeadlineExceeded,
                        format!(
                            "the deadline passed while claiming the object at {} handed over by a third party (the request was not sent; the claim goes on for the next call)",
                            handoff.endpoint
                        ),
                    )
                })
                .await?
            }
            // Claimed since `current` was read: that may be the placeholder (the
            // connection the reference arrived on, which it never calls).
            Some(Origin::Handoff(_)) => Ok(self.current_target()),
            Some(Origin::Url(origin)) if !current.connection.usable() => {
                // The new connection runs on the caller's runtime, and its setup is timed
                // there anyway; for a caller outside any (`block_on` on a plain thread),
                // on the old connection's, which must be driven (a current-thread runtime
                // outside its `block_on` runs no task, and the caller waits until it
                // does). The reconnect runs as a task of its own, shared by the callers
                // that want it meanwhile: a caller whose deadline passes (or that drops
                // the call) stops waiting for it, not the reconnect. Cut short, it would
                // leave the reference unable to reconnect whenever calls time out sooner
                // than a connection takes to open, each call opening and abandoning one
                // of its own.
                let runtime = match tokio::runtime::Handle::try_current() {
                    Ok(here) => here,
                    Err(_) if current.connection.runtime_alive() => {
                        current.connection.runtime().clone()
                    }
                    Err(_) => {
                        return Err(Error::unavailable(format!(
                            "cannot reconnect to {} outside a tokio runtime: the runtime the connection ran on has shut down",
                            origin.url
                        )));
                    }
                };
                let mut reconnecting = self.reconnecting(origin, &runtime);
                let url = &origin.url;
                let reconnected = async move {
                    match reconnecting.wait_for(Option::is_some).await {
                        Ok(done) => done
                            .clone()
                            .expect("`wait_for` returns once there is a value"),
                        Err(_) => Err(Error::unavailable(format!(
                            "reconnecting to {url} stopped: it panicked, or its runtime shut down (the request was not sent)"
                        ))),
                    }
                };
                let expired = || reconnect_expired(&origin.url);
                crate::connection::until(&runtime, deadline, reconnected, expired).await?
            }
            _ => Ok(current),
        }
    }

    /// Starts reconnecting, on a task of the caller's runtime, a reference found by URL
    /// whose connection is unusable (nothing for any other reference, or outside a
    /// runtime). The backoff applies as it does to calls.
    pub(crate) fn reconnect_soon(&self) {
        if let (Some(Origin::Url(origin)), Ok(here)) = (
            self.inner.origin.as_deref(),
            tokio::runtime::Handle::try_current(),
        ) {
            drop(self.reconnecting(origin, &here));
        }
    }

    /// The reconnect of this reference under way, or a new one, started on `runtime`.
    fn reconnecting(&self, origin: &UrlOrigin, runtime: &tokio::runtime::Handle) -> Claim {
        let mut reconnecting = origin
            .reconnecting
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        // Still running: no value yet, and its task still holds the sender.
        if let Some(running) = reconnecting
            .as_ref()
            .filter(|running| running.borrow().is_none() && running.has_changed().is_ok())
        {
            return running.clone();
        }
        let (done, running) = tokio::sync::watch::channel(None);
        let reference = self.clone();
        drop(runtime.spawn(async move {
            let reconnected = match reference.inner.origin.as_deref() {
                Some(Origin::Url(origin)) => reference.reconnect(origin).await,
                _ => Ok(reference.current_target()),
            };
            done.send_replace(Some(reconnected));
        }));
        *reconnecting = Some(running.clone());
        running
    }

    /// The claim of this reference under way, or a new one (the last one failed in a way
    /// worth trying again, or none ran yet), started on the runtime of the connection it
    /// arrived on.
    fn claim(&self, handoff: &Handoff, current: &Target) -> Claim {
        let mut claim = handoff.claim.lock().unwrap_or_else(|e| e.into_inner());
        // Still running: no value yet, and its task still holds the sender.
        if let Some(running) = claim
            .as_ref()
            .filter(|running| running.borrow().is_none() && running.has_changed().is_ok())
        {
            return running.clone();
        }
        let (done, running) = tokio::sync::watch::channel(None);
        let reference = self.clone();
        drop(current.connection.runtime().spawn(async move {
            let claimed = tokio::time::timeout(CLAIM_LIMIT, reference.redeem_handed_over())
                .await
                .unwrap_or_else(|_| {
                    Err(Error::unavailable(format!(
                        "claiming the object at {} handed over by a third party: no answer within {CLAIM_LIMIT:?}",
                        reference.peer()
                    )))
                });
            done.send_replace(Some(claimed));
        }));
        *claim = Some(running.clone());
        running
    }

    /// [`ObjectRef::redeem`] for this reference's own hand-off.
    async fn redeem_handed_over(&self) -> Result<Target, Error> {
        match self.inner.origin.as_deref() {
            Some(Origin::Handoff(handoff)) => self.redeem(handoff).await,
            _ => Ok(self.current_target()),
        }
    }

    /// Connects to the server of a reference handed over by a third party and redeems
    /// its token; the reference then calls the object there, and holds a count on it.
    async fn redeem(&self, handoff: &Handoff) -> Result<Target, Error> {
        if self.inner.claimed.load(Ordering::Acquire) {
            return Ok(self.current_target());
        }
        let refusal = || handoff.refused.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(refused) = refusal().clone() {
            return Err(refused);
        }
        let refused = |e: &Error| *refusal() = Some(e.clone());
        let claiming = |e: Error| {
            Error::new(
                e.kind(),
                format!(
                    "claiming the object at {} handed over by a third party: {} (the request was not sent)",
                    handoff.endpoint,
                    e.message()
                ),
            )
        };
        if !handoff.client.may_claim_at(&handoff.endpoint) {
            let e = claiming(Error::new(
                ErrorKind::PermissionDenied,
                "this client's hand-off filter does not let it connect there",
            ));
            refused(&e);
            return Err(e);
        }
        // Failing to connect can be retried; an answer refusing the token cannot.
        let connection = handoff
            .client
            .connection(&handoff.endpoint)
            .await
            .map_err(claiming)?;
        let claimed = match crate::root::redeem(&connection, handoff.token).await {
            Ok(claimed) => claimed,
            Err(e) => {
                let e = claiming(e);
                if matches!(
                    e.kind(),
                    ErrorKind::PermissionDenied | ErrorKind::NotFound | ErrorKind::Unimplemented
                ) {
                    refused(&e);
                }
                return Err(e);
            }
        };
        claimed.disown();
        let target = claimed.current_target();
        if claimed.inner.interfaces != self.inner.interfaces {
            // The count taken goes back with a release.
            target.connection.release_remote(target.handle, false);
            let mismatch = Error::new(
                ErrorKind::Unimplemented,
                format!(
                    "the object at {} implements {:?}, not {:?} as the reference handed over said",
                    handoff.endpoint, claimed.inner.interfaces, self.inner.interfaces
                ),
            );
            refused(&mismatch);
            return Err(mismatch);
        }
        *self.target() = target.clone();
        if keeps_in_use(self.inner.origin.as_deref(), target.handle) {
            target.connection.reference_held();
        }
        self.inner.counted.store(true, Ordering::Relaxed);
        self.inner.claimed.store(true, Ordering::Release);
        Ok(target)
    }

    async fn reconnect(&self, origin: &UrlOrigin) -> Result<Target, Error> {
        let mut backoff = origin.backoff.lock().await;
        // Another caller may have reconnected while this one waited for the lock.
        let current = self.current_target();
        if current.connection.usable() {
            return Ok(current);
        }
        let now = Instant::now();
        if let Some(not_before) = backoff.not_before.filter(|t| now < *t) {
            return Err(Error::unavailable(format!(
                "{} is unreachable; reconnecting in {:?} (the request was not sent)",
                origin.url,
                not_before - now
            )));
        }
        let fresh = match origin.client.resolve_url(&origin.url).await {
            Ok(fresh) => fresh,
            Err(error) => {
                // A deadline that passed (this caller's, or one it inherited from the call
                // it serves) says nothing of the server: later callers try at once.
                if error.kind() != ErrorKind::DeadlineExceeded {
                    backoff.not_before = Some(now + backoff.delay);
                    backoff.delay = (backoff.delay * 2).min(BACKOFF_MAX);
                }
                return Err(Error::new(
                    error.kind(),
                    format!(
                        "reconnecting: {} (the request was not sent)",
                        error.message()
                    ),
                ));
            }
        };
        if fresh.inner.interfaces != self.inner.interfaces {
            // Not worth a connection per call to find out again.
            backoff.not_before = Some(now + BACKOFF_MAX);
            return Err(Error::new(
                ErrorKind::Unimplemented,
                format!(
                    "{} now implements other interfaces ({:?}, was {:?}): connect to it again",
                    origin.url, fresh.inner.interfaces, self.inner.interfaces
                ),
            ));
        }
        *backoff = Backoff {
            delay: BACKOFF_MIN,
            not_before: None,
        };
        fresh.disown();
        let target = fresh.current_target();
        *self.target() = target.clone();
        tracing::debug!(url = %origin.url, "reconnected");
        Ok(target)
    }

    /// The reference is being handed back to the object's exporter (see
    /// [`lanner_proto::frame::FLAG_HANDED_BACK`]).
    pub(crate) fn mark_handed_back(&self) {
        self.inner.handed_back.store(true, Ordering::Relaxed);
    }

    /// The interfaces the object implements.
    pub fn interfaces(&self) -> &[InterfaceId] {
        &self.inner.interfaces
    }

    /// True if the object implements interface `P`.
    pub fn supports<P: Proxy>(&self) -> bool {
        self.inner.interfaces.contains(&P::INTERFACE_ID)
    }

    /// A proxy for interface `P` of this object. Answered locally from the reference's
    /// interface list; fails with [`ErrorKind::Unimplemented`] if the object does not
    /// implement `P`. The first call through the new proxy is one request like any other.
    pub fn query<P: Proxy>(&self) -> Result<P, Error> {
        let slot = self.slot_of::<P>()?;
        Ok(P::__from_core(ProxyCore::new(self.clone(), slot)))
    }

    /// Where interface `P` is in the object's interface list, or why it is not there.
    pub(crate) fn slot_of<P: Proxy>(&self) -> Result<u16, Error> {
        let slot = self
            .inner
            .interfaces
            .iter()
            .position(|id| *id == P::INTERFACE_ID)
            .ok_or_else(|| {
                Error::new(
                    ErrorKind::Unimplemented,
                    format!(
                        "the object at {} does not implement {} ({}); it implements {:?}",
                        self.peer(),
                        P::INTERFACE_NAME,
                        P::INTERFACE_ID,
                        self.inner.interfaces
                    ),
                )
            })?;
        Ok(slot as u16)
    }

    /// Where the object lives (for messages).
    pub fn peer(&self) -> &str {
        &self.inner.peer
    }
}

impl std::fmt::Debug for ObjectRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectRef")
            .field("peer", &self.peer())
            .field("interfaces", &self.inner.interfaces)
            .finish_non_exhaustive()
    }
}

/// A reconnect to `url` ran into its caller's deadline.
fn reconnect_expired(url: &ObjectUrl) -> Error {
    Error::new(
        ErrorKind::DeadlineExceeded,
        format!("the deadline passed while reconnecting to {url} (the request was not sent)"),
    )
}
