//! Third-party hand-off: process A passes to C a reference to an object that lives in B.
//!
//! A cannot ask B for anything while it encodes the message (encoding does not wait), and
//! B must keep the object alive even if A drops its own reference the moment the message
//! is out. So A mints the token itself:
//!
//! 1. A draws a random 128-bit token and sends `GRANT(handle, token)` to B on the A–B
//!    connection (a control frame, no credit, no answer), before the message carrying the
//!    reference leaves for C. Only a client may grant: the reference needs an address a
//!    third party can connect to, and A knows B's only because A connected to it.
//! 2. The reference travels to C as (B's endpoint, token, interfaces).
//! 3. B parks the object under the token ([`Handoffs::park`]) for the server's lease.
//! 4. C's first call through the reference connects to B, reusing C's connection to that
//!    endpoint if it has one, and redeems the token (one round trip to B's root object).
//!    B exports the object to C's connection under B's access policy for C, exactly as if
//!    C had resolved it, and forgets the token: a token is redeemed once.
//! 5. A token never redeemed is dropped when its lease ends, and with it B's hold on the
//!    object.
//!
//! C's redemption can overtake A's grant (they travel on different connections), so B
//! waits a short grace period for an unknown token before answering that it knows
//! nothing of it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use tokio::sync::Notify;

use crate::client::Client;
use crate::object::Object;

/// An unguessable hand-off token.
pub(crate) type Token = [u8; 16];

/// How long a granted object waits for its token by default.
pub(crate) const DEFAULT_LEASE: Duration = Duration::from_secs(30);

/// How long a redemption waits for a grant it may have overtaken (at most the lease).
const REDEEM_GRACE: Duration = Duration::from_secs(1);

/// The most redemptions that wait for their grant at once on one connection, and on the
/// whole server. Every server has the redeeming method, and a redemption of a token nobody
/// granted waits (for a grant it may have overtaken) as a suspended call, woken by every
/// grant: without a bound any peer could keep the server's suspended calls (a limit all
/// connections share) full of such waits, each grant waking them all. Beyond either bound
/// a redemption still takes its object if the grant is there; if not, it is answered
/// [`Redeemed::Busy`] at once (`Overloaded`, which a client retries, not `NotFound`, which
/// it remembers). The per-connection bound keeps one connection from taking the whole
/// server's share; a third party's redemptions overtake their grants only when they race
/// them, which few calls at once do.
pub(crate) const MAX_WAITING_PER_CONNECTION: usize = 16;

/// See [`MAX_WAITING_PER_CONNECTION`].
pub(crate) const MAX_WAITING_PER_SERVER: usize = 1024;

/// An object granted for a third party, with the name its grantor held it under (`None`:
/// handed to the grantor without one). The third party gets it under that name's rules:
/// passing a reference on grants no more than the reference carried, even once the name is
/// withdrawn (the object would otherwise obey the rules of an unnamed object).
pub(crate) struct Granted {
    pub(crate) object: Object,
    pub(crate) name: Option<String>,
}

impl From<Object> for Granted {
    fn from(object: Object) -> Granted {
        Granted { object, name: None }
    }
}

/// What a redemption found.
pub(crate) enum Redeemed {
    /// The object granted for the token.
    Object(Granted),
    /// No object waits for the token: it is unknown, was redeemed already, or expired.
    Unknown,
    /// No object waits for the token yet, and too many redemptions wait already (see
    /// [`MAX_WAITING_PER_CONNECTION`]) for this one to wait for its grant.
    Busy,
}

/// The most tokens one principal may have waiting at once, over all its connections
/// (tokens outlive the connection that granted them, so a per-connection bound would not
/// hold a client that reconnects): a client cannot make the server hold objects without
/// bound. Beyond it, grants are refused (and logged); the third party's redemption then
/// fails with `NotFound`.
pub(crate) const MAX_PARKED_PER_PRINCIPAL: usize = 16_384;

/// A server's objects waiting for third parties, by token.
pub(crate) struct Handoffs {
    parked: Mutex<HashMap<Token, Parked>>,
    /// Waiting tokens per granting principal (by name).
    quotas: Mutex<HashMap<String, Arc<AtomicUsize>>>,
    /// The redemptions waiting for their grant, by token: a grant wakes only those
    /// waiting for its own token (a peer that grants in a loop would otherwise wake every
    /// waiting redemption of the server each time).
    awaited: Mutex<HashMap<Token, Awaited>>,
    /// Redemptions waiting for their grant (see [`MAX_WAITING_PER_SERVER`]).
    redemptions_waiting: AtomicUsize,
    /// Numbers the grants parked, so that a lease ends only its own grant (see
    /// [`Parked::grant`]).
    grants: AtomicU64,
    settings: Mutex<Settings>,
}

struct Parked {
    object: Granted,
    /// The count of tokens the granting principal has waiting.
    from: Arc<AtomicUsize>,
    /// The task that ends the lease: stopped when the token is taken, so that the tasks
    /// alive are never more than the tokens waiting. Set just after the token is parked
    /// (the task is spawned outside the lock).
    expiry: Option<tokio::task::AbortHandle>,
    /// Which grant this is: the lease of an earlier grant of the same token (taken, and
    /// then granted again before its stopped task was dropped) leaves it alone.
    grant: u64,
}

struct Settings {
    lease: Duration,
    /// How this server's connections reach the servers of references handed to them.
    client: Option<Client>,
}

/// Why a grant was not parked.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Refused {
    /// The granting principal has [`MAX_PARKED_PER_PRINCIPAL`] tokens waiting.
    TooMany,
    /// The token is already waiting (a client reusing tokens only confuses itself).
    Duplicate,
}

impl Default for Handoffs {
    fn default() -> Self {
        Handoffs {
            parked: Mutex::new(HashMap::new()),
            quotas: Mutex::new(HashMap::new()),
            awaited: Mutex::new(HashMap::new()),
            redemptions_waiting: AtomicUsize::new(0),
            grants: AtomicU64::new(0),
            settings: Mutex::new(Settings {
                lease: DEFAULT_LEASE,
                client: None,
            }),
        }
    }
}

impl Handoffs {
    fn parked(&self) -> MutexGuard<'_, HashMap<Token, Parked>> {
        self.parked.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn awaited(&self) -> MutexGuard<'_, HashMap<Token, Awaited>> {
        self.awaited.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn settings(&self) -> MutexGuard<'_, Settings> {
        self.settings.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sets how long a parked object waits for its token.
    pub(crate) fn set_lease(&self, lease: Duration) {
        self.settings().lease = lease;
    }

    /// Sets the client that connects to the servers of references handed to this server.
    pub(crate) fn set_client(&self, client: Client) {
        self.settings().client = Some(client);
    }

    /// The client that connects to the servers of references handed to this server
    /// (default: the process-wide one).
    pub(crate) fn client(&self) -> Client {
        self.settings()
            .client
            .clone()
            .unwrap_or_else(|| Client::global().clone())
    }

    /// The count of waiting tokens `principal` granted, shared by all its connections
    /// (and all its processes: a local user is one principal whatever its pid).
    pub(crate) fn quota(&self, principal: &lanner_proto::Principal) -> Arc<AtomicUsize> {
        let mut quotas = self.quotas.lock().unwrap_or_else(|e| e.into_inner());
        // Counts no connection holds and no token uses are forgotten: the map holds the
        // principals connected or with tokens waiting, not every one ever seen.
        quotas.retain(|_, count| Arc::strong_count(count) > 1 || count.load(Ordering::Relaxed) > 0);
        let key = principal.names().swap_remove(0);
        quotas.entry(key).or_default().clone()
    }

    /// Keeps `object` for whoever redeems `token` within the lease; `from` counts the
    /// granting principal's waiting tokens (see [`Handoffs::quota`]). The lease's timer
    /// runs on `runtime`, the granting connection's: the grant may be received by a caller
    /// spinning for its reply on a thread of no runtime. If that runtime shuts down before
    /// the lease ends (a server listening on several runtimes outlives one of them), the
    /// lease ends with it: its timer could not run any more, and the object would
    /// otherwise wait for a redemption for as long as the server lives.
    pub(crate) fn park(
        self: &Arc<Self>,
        token: Token,
        object: impl Into<Granted>,
        from: &Arc<AtomicUsize>,
        runtime: &tokio::runtime::Handle,
    ) -> Result<(), Refused> {
        let object = object.into();
        let duration = self.settings().lease;
        let grant = self.grants.fetch_add(1, Ordering::Relaxed);
        {
            let mut parked = self.parked();
            if parked.contains_key(&token) {
                return Err(Refused::Duplicate);
            }
            if from.load(Ordering::Relaxed) >= MAX_PARKED_PER_PRINCIPAL {
                return Err(Refused::TooMany);
            }
            from.fetch_add(1, Ordering::Relaxed);
            parked.insert(
                token,
                Parked {
                    object,
                    from: from.clone(),
                    expiry: None,
                    grant,
                },
            );
        }
        // Spawned outside the lock, with the lease already made: a runtime that has shut
        // down drops the task inside `spawn` (ending the lease there, which takes the
        // lock), and one that shuts down before the task first runs drops it unpolled;
        // either way the lease ends with it.
        let lease = Lease {
            handoffs: Arc::downgrade(self),
            token,
            grant,
        };
        let expiry = runtime.spawn(expire(lease, duration)).abort_handle();
        match self.parked().get_mut(&token) {
            Some(parked) if parked.grant == grant => parked.expiry = Some(expiry),
            // Taken (or its lease ended) meanwhile.
            _ => expiry.abort(),
        }
        if let Some(awaited) = self.awaited().get(&token) {
            awaited.arrived.notify_waiters();
        }
        Ok(())
    }

    /// Takes the object parked under `token`, waiting a short grace period for a grant
    /// this redemption may have overtaken, unless too many redemptions wait already on
    /// its connection (counted in `on_connection`) or on the server (see
    /// [`MAX_WAITING_PER_CONNECTION`]).
    pub(crate) async fn redeem(&self, token: Token, on_connection: &AtomicUsize) -> Redeemed {
        let Some(_counted) = CountedOut::admit(on_connection, MAX_WAITING_PER_CONNECTION).zip(
            CountedOut::admit(&self.redemptions_waiting, MAX_WAITING_PER_SERVER),
        ) else {
            return self.take(&token).map_or(Redeemed::Busy, Redeemed::Object);
        };
        // Counted out however the wait ends (the call may be cancelled in it).
        self.redeem_within_grace(token)
            .await
            .map_or(Redeemed::Unknown, Redeemed::Object)
    }

    async fn redeem_within_grace(&self, token: Token) -> Option<Granted> {
        let grace = REDEEM_GRACE.min(self.settings().lease);
        let deadline = tokio::time::Instant::now() + grace;
        let awaiting = Awaiting::new(self, token);
        loop {
            let arrived = awaiting.arrived.notified();
            tokio::pin!(arrived);
            // Registered before looking, so that a grant parked in between still wakes it.
            arrived.as_mut().enable();
            if let Some(object) = self.take(&token) {
                return Some(object);
            }
            if tokio::time::timeout_at(deadline, arrived).await.is_err() {
                return self.take(&token);
            }
        }
    }

    /// Removes `token`, returning its object if it was waiting.
    fn take(&self, token: &Token) -> Option<Granted> {
        self.take_if(token, |_| true)
    }

    /// Removes `token` if it waits for `grant` (see [`Parked::grant`]): its lease ended.
    fn expire(&self, token: &Token, grant: u64) -> Option<Granted> {
        self.take_if(token, |parked| parked.grant == grant)
    }

    fn take_if(&self, token: &Token, which: impl FnOnce(&Parked) -> bool) -> Option<Granted> {
        let parked = {
            let mut waiting = self.parked();
            if !waiting.get(token).is_some_and(which) {
                return None;
            }
            waiting.remove(token)?
        };
        parked.from.fetch_sub(1, Ordering::Relaxed);
        if let Some(expiry) = parked.expiry {
            expiry.abort();
        }
        Some(parked.object)
    }

    /// Tokens waiting now.
    #[cfg(test)]
    fn waiting(&self) -> usize {
        self.parked().len()
    }
}

/// The redemptions of one token waiting for its grant.
#[derive(Default)]
struct Awaited {
    /// Woken when the token's grant is parked.
    arrived: Arc<Notify>,
    /// How many redemptions wait (the last one takes the entry off).
    redemptions: usize,
}

/// A redemption waiting for the grant of its token: counted in [`Handoffs::awaited`]
/// while it lives.
struct Awaiting<'a> {
    handoffs: &'a Handoffs,
    token: Token,
    arrived: Arc<Notify>,
}

impl<'a> Awaiting<'a> {
    fn new(handoffs: &'a Handoffs, token: Token) -> Awaiting<'a> {
        let mut awaited = handoffs.awaited();
        let entry = awaited.entry(token).or_default();
        entry.redemptions += 1;
        let arrived = entry.arrived.clone();
        Awaiting {
            handoffs,
            token,
            arrived,
        }
    }
}

impl Drop for Awaiting<'_> {
    fn drop(&mut self) {
        let mut awaited = self.handoffs.awaited();
        if let Some(entry) = awaited.get_mut(&self.token) {
            entry.redemptions -= 1;
            if entry.redemptions == 0 {
                awaited.remove(&self.token);
            }
        }
    }
}

/// One counted in a bounded count, taken off when dropped.
struct CountedOut<'a>(&'a AtomicUsize);

impl<'a> CountedOut<'a> {
    /// Counts one more in `count` if it is below `bound`.
    fn admit(count: &'a AtomicUsize, bound: usize) -> Option<CountedOut<'a>> {
        count
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                (n < bound).then_some(n + 1)
            })
            .ok()
            .map(|_| CountedOut(count))
    }
}

impl Drop for CountedOut<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Ends `lease` after `duration`, or when the task is dropped before that, polled or not
/// (its runtime shut down): see [`Handoffs::park`].
async fn expire(lease: Lease, duration: Duration) {
    tokio::time::sleep(duration).await;
    drop(lease);
}

/// A lease running: ends its grant when dropped (the lease's time is up, or its timer's
/// task is dropped), unless the token was taken meanwhile.
struct Lease {
    handoffs: Weak<Handoffs>,
    token: Token,
    grant: u64,
}

impl Drop for Lease {
    fn drop(&mut self) {
        let Some(handoffs) = self.handoffs.upgrade() else {
            return;
        };
        // Dropped outside the lock: the object's drop is the application's code.
        if let Some(object) = handoffs.expire(&self.token, self.grant) {
            tracing::debug!("a hand-off token expired unredeemed");
            drop(object);
        }
    }
}

/// A fresh token (from the operating system's generator through `rand`'s thread RNG,
/// a CSPRNG).
pub(crate) fn new_token() -> Token {
    rand::random()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::runtime::Handle;

    impl Redeemed {
        fn is_object(&self) -> bool {
            matches!(self, Redeemed::Object(_))
        }

        fn is_unknown(&self) -> bool {
            matches!(self, Redeemed::Unknown)
        }

        fn is_busy(&self) -> bool {
            matches!(self, Redeemed::Busy)
        }
    }
    use crate::object::Object;

    fn object() -> Object {
        crate::root::root_object(Default::default())
    }

    #[tokio::test(start_paused = true)]
    async fn a_token_is_redeemed_once() {
        let handoffs = Arc::new(Handoffs::default());
        let from = Arc::new(AtomicUsize::new(0));
        let token = new_token();
        handoffs
            .park(token, object(), &from, &Handle::current())
            .unwrap();
        assert_eq!(from.load(Ordering::Relaxed), 1);
        assert!(
            handoffs
                .redeem(token, &AtomicUsize::new(0))
                .await
                .is_object()
        );
        assert_eq!(from.load(Ordering::Relaxed), 0);
        assert!(
            handoffs
                .redeem(token, &AtomicUsize::new(0))
                .await
                .is_unknown()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_redemption_waits_for_a_grant_it_overtook() {
        let handoffs = Arc::new(Handoffs::default());
        let from = Arc::new(AtomicUsize::new(0));
        let token = new_token();
        let later = handoffs.clone();
        let late_from = from.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(200)).await;
            later
                .park(token, object(), &late_from, &Handle::current())
                .unwrap();
        });
        assert!(
            handoffs
                .redeem(token, &AtomicUsize::new(0))
                .await
                .is_object()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_unknown_token_fails_after_the_grace_period() {
        let handoffs = Arc::new(Handoffs::default());
        let started = tokio::time::Instant::now();
        assert!(
            handoffs
                .redeem(new_token(), &AtomicUsize::new(0))
                .await
                .is_unknown()
        );
        assert_eq!(started.elapsed(), REDEEM_GRACE);
    }

    #[tokio::test(start_paused = true)]
    async fn redemptions_beyond_the_bound_per_connection_do_not_wait() {
        let handoffs = Arc::new(Handoffs::default());
        let waiting = Arc::new(AtomicUsize::new(0));
        let mut waits = Vec::new();
        for _ in 0..MAX_WAITING_PER_CONNECTION {
            let (handoffs, waiting) = (handoffs.clone(), waiting.clone());
            waits.push(tokio::spawn(async move {
                handoffs.redeem(new_token(), &waiting).await.is_unknown()
            }));
        }
        tokio::task::yield_now().await;
        assert_eq!(waiting.load(Ordering::Relaxed), MAX_WAITING_PER_CONNECTION);

        // One more is answered at once, busy; a grant that is there is still taken.
        let started = tokio::time::Instant::now();
        assert!(handoffs.redeem(new_token(), &waiting).await.is_busy());
        let token = new_token();
        handoffs
            .park(
                token,
                object(),
                &Arc::new(AtomicUsize::new(0)),
                &Handle::current(),
            )
            .unwrap();
        assert!(handoffs.redeem(token, &waiting).await.is_object());
        assert_eq!(started.elapsed(), Duration::ZERO);

        // Another connection's redemptions still wait, and the waits end with their grace.
        let elsewhere = AtomicUsize::new(0);
        assert!(handoffs.redeem(new_token(), &elsewhere).await.is_unknown());
        assert_eq!(started.elapsed(), REDEEM_GRACE);
        for wait in waits {
            assert!(wait.await.unwrap());
        }
        assert_eq!(waiting.load(Ordering::Relaxed), 0);
        assert_eq!(elsewhere.load(Ordering::Relaxed), 0);

        // A wait given up (its call cancelled) is counted out too.
        let abandoned = tokio::time::timeout(
            Duration::from_millis(10),
            handoffs.redeem(new_token(), &waiting),
        );
        assert!(abandoned.await.is_err());
        assert_eq!(waiting.load(Ordering::Relaxed), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn redemptions_beyond_the_bound_per_server_do_not_wait() {
        let handoffs = Arc::new(Handoffs::default());
        handoffs
            .redemptions_waiting
            .store(MAX_WAITING_PER_SERVER, Ordering::Relaxed);
        let fresh = AtomicUsize::new(0);
        let started = tokio::time::Instant::now();
        assert!(handoffs.redeem(new_token(), &fresh).await.is_busy());
        assert_eq!(started.elapsed(), Duration::ZERO);
        // The connection's count, taken before the server's was found full, is given back.
        assert_eq!(fresh.load(Ordering::Relaxed), 0);
        handoffs
            .redemptions_waiting
            .store(MAX_WAITING_PER_SERVER - 1, Ordering::Relaxed);
        assert!(handoffs.redeem(new_token(), &fresh).await.is_unknown());
        assert_eq!(started.elapsed(), REDEEM_GRACE);
        assert_eq!(
            handoffs.redemptions_waiting.load(Ordering::Relaxed),
            MAX_WAITING_PER_SERVER - 1
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_unredeemed_token_expires_with_its_lease() {
        let handoffs = Arc::new(Handoffs::default());
        handoffs.set_lease(Duration::from_secs(5));
        let from = Arc::new(AtomicUsize::new(0));
        let token = new_token();
        handoffs
            .park(token, object(), &from, &Handle::current())
            .unwrap();
        tokio::time::sleep(Duration::from_secs(4)).await;
        assert_eq!(handoffs.waiting(), 1);
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(handoffs.waiting(), 0);
        assert_eq!(from.load(Ordering::Relaxed), 0);
        assert!(
            handoffs
                .redeem(token, &AtomicUsize::new(0))
                .await
                .is_unknown()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn grants_are_bounded_per_principal_and_unique() {
        let handoffs = Arc::new(Handoffs::default());
        let from = Arc::new(AtomicUsize::new(MAX_PARKED_PER_PRINCIPAL));
        assert_eq!(
            handoffs.park(new_token(), object(), &from, &Handle::current()),
            Err(Refused::TooMany)
        );
        let other = Arc::new(AtomicUsize::new(0));
        let token = new_token();
        handoffs
            .park(token, object(), &other, &Handle::current())
            .unwrap();
        assert_eq!(
            handoffs.park(token, object(), &other, &Handle::current()),
            Err(Refused::Duplicate)
        );
        assert_eq!(other.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn a_principal_has_one_quota_over_all_its_connections() {
        let handoffs = Handoffs::default();
        let alice = lanner_proto::Principal::Key("alice".into());
        let first = handoffs.quota(&alice);
        assert!(Arc::ptr_eq(&first, &handoffs.quota(&alice)));
        assert!(!Arc::ptr_eq(
            &first,
            &handoffs.quota(&lanner_proto::Principal::Anonymous)
        ));
    }

    #[test]
    fn a_local_user_has_one_quota_over_all_its_processes_and_unused_ones_are_forgotten() {
        let handoffs = Handoffs::default();
        let process = |pid| lanner_proto::Principal::Process {
            uid: 1000,
            gid: 1000,
            pid,
        };
        let first = handoffs.quota(&process(1));
        assert!(Arc::ptr_eq(&first, &handoffs.quota(&process(2))));
        for pid in 3..100 {
            drop(handoffs.quota(&lanner_proto::Principal::Key(format!("key{pid}"))));
        }
        // The short-lived principals' counts went with them; the one still held stays.
        let remembered = handoffs.quotas.lock().unwrap().len();
        assert!(remembered <= 2, "{remembered} quotas remembered");
        assert!(Arc::ptr_eq(&first, &handoffs.quota(&process(3))));
    }

    #[tokio::test(start_paused = true)]
    async fn a_redeemed_token_stops_its_lease_timer() {
        let handoffs = Arc::new(Handoffs::default());
        let from = Arc::new(AtomicUsize::new(0));
        let tasks = || {
            tokio::runtime::Handle::current()
                .metrics()
                .num_alive_tasks()
        };
        let before = tasks();
        let tokens: Vec<Token> = (0..10).map(|_| new_token()).collect();
        for token in &tokens {
            handoffs
                .park(*token, object(), &from, &Handle::current())
                .unwrap();
        }
        assert_eq!(tasks(), before + 10);
        for token in &tokens {
            assert!(
                handoffs
                    .redeem(*token, &AtomicUsize::new(0))
                    .await
                    .is_object()
            );
        }
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert_eq!(tasks(), before, "lease timers outlived their tokens");
    }

    /// A runtime for a lease's timer, which a test shuts down.
    fn granting_runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap()
    }

    #[test]
    fn a_lease_ends_when_the_runtime_of_its_timer_shuts_down_before_running_it() {
        let handoffs = Arc::new(Handoffs::default());
        handoffs.set_lease(Duration::from_secs(3600));
        let from = Arc::new(AtomicUsize::new(0));
        let granting = granting_runtime();
        handoffs
            .park(new_token(), object(), &from, granting.handle())
            .unwrap();
        // The runtime never runs the timer's task.
        drop(granting);
        assert_eq!(
            handoffs.waiting(),
            0,
            "the object outlived its lease's timer"
        );
        assert_eq!(from.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn a_lease_ends_at_once_on_a_runtime_shut_down_already() {
        let handoffs = Arc::new(Handoffs::default());
        let from = Arc::new(AtomicUsize::new(0));
        let granting = granting_runtime();
        let handle = granting.handle().clone();
        drop(granting);
        handoffs
            .park(new_token(), object(), &from, &handle)
            .unwrap();
        assert_eq!(handoffs.waiting(), 0);
        assert_eq!(from.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn a_lease_ends_when_the_runtime_of_its_timer_shuts_down() {
        let handoffs = Arc::new(Handoffs::default());
        handoffs.set_lease(Duration::from_secs(3600));
        let from = Arc::new(AtomicUsize::new(0));
        let granting = granting_runtime();
        let token = new_token();
        handoffs
            .park(token, object(), &from, granting.handle())
            .unwrap();
        // The timer's task starts (and its lease with it).
        granting.block_on(tokio::task::yield_now());
        assert_eq!(handoffs.waiting(), 1);
        drop(granting);
        assert_eq!(
            handoffs.waiting(),
            0,
            "the object outlived its lease's timer"
        );
        assert_eq!(from.load(Ordering::Relaxed), 0);
    }

    /// Counts its wake-ups.
    #[derive(Default)]
    struct Wakes(AtomicUsize);

    impl futures_util::task::ArcWake for Wakes {
        fn wake_by_ref(wakes: &Arc<Self>) {
            wakes.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_grant_wakes_only_the_redemptions_of_its_own_token() {
        use std::future::Future;
        use std::task::{Context, Poll};

        let handoffs = Arc::new(Handoffs::default());
        let from = Arc::new(AtomicUsize::new(0));
        let on_connection = AtomicUsize::new(0);
        let wakes = Arc::new(Wakes::default());
        let waker = futures_util::task::waker(wakes.clone());
        let mut cx = Context::from_waker(&waker);
        let token = new_token();
        let mut redemption = Box::pin(handoffs.redeem(token, &on_connection));
        let mut abandoned = Box::pin(handoffs.redeem(new_token(), &on_connection));
        assert!(redemption.as_mut().poll(&mut cx).is_pending());
        assert!(abandoned.as_mut().poll(&mut cx).is_pending());
        for _ in 0..100 {
            handoffs
                .park(new_token(), object(), &from, &Handle::current())
                .unwrap();
        }
        assert_eq!(
            wakes.0.load(Ordering::Relaxed),
            0,
            "other grants woke a redemption"
        );
        handoffs
            .park(token, object(), &from, &Handle::current())
            .unwrap();
        assert_eq!(wakes.0.load(Ordering::Relaxed), 1);
        assert!(matches!(
            redemption.as_mut().poll(&mut cx),
            Poll::Ready(Redeemed::Object(_))
        ));
        // A redemption given up, as one that ended, leaves nothing behind.
        drop(abandoned);
        assert_eq!(handoffs.awaited().len(), 0);
        assert_eq!(on_connection.load(Ordering::Relaxed), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn the_stopped_timer_of_a_redeemed_grant_leaves_a_new_grant_of_its_token_alone() {
        let handoffs = Arc::new(Handoffs::default());
        handoffs.set_lease(Duration::from_secs(5));
        let from = Arc::new(AtomicUsize::new(0));
        let token = new_token();
        handoffs
            .park(token, object(), &from, &Handle::current())
            .unwrap();
        tokio::task::yield_now().await;
        assert!(
            handoffs
                .redeem(token, &AtomicUsize::new(0))
                .await
                .is_object()
        );
        // Granted again before the first grant's stopped timer is dropped.
        handoffs
            .park(token, object(), &from, &Handle::current())
            .unwrap();
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert_eq!(handoffs.waiting(), 1, "the old timer ended the new grant");
        tokio::time::sleep(Duration::from_secs(6)).await;
        assert_eq!(
            handoffs.waiting(),
            0,
            "the new grant has a lease of its own"
        );
    }
}
