//! What a method being served knows about its call: the caller's deadline and whether the
//! caller still waits.
//!
//! A method reads it with [`CallContext::current`] from anywhere inside its body (it is
//! scoped to the method's future, like a task-local), so trait methods need no extra
//! parameter:
//!
//! ```ignore
//! async fn scan(&self, range: Range) -> Result<u64, lanner::Error> {
//!     let call = lanner::CallContext::current().expect("called remotely");
//!     for chunk in range.chunks() {
//!         if call.is_cancelled() {
//!             return Err(lanner::Error::new(lanner::ErrorKind::Cancelled, "the caller gave up"));
//!         }
//!         process(chunk).await;
//!     }
//!     Ok(range.len())
//! }
//! ```
//!
//! Cancellation is cooperative, as in gRPC: when the caller drops its call or its deadline
//! passes, the method keeps running until it returns (its answer is then discarded by the
//! caller). A method that may run long should watch [`CallContext::cancelled`] or check
//! [`CallContext::is_cancelled`].
//!
//! The deadline is passed on, as gRPC does: a call the method makes (through any proxy, to
//! its caller or to another server, and the name resolution of a `connect`) ends no later
//! than the method's own deadline, and fails with [`crate::ErrorKind::DeadlineExceeded`],
//! unsent, once that has passed. (Opening a connection keeps its own handshake timeout.)
//! So is cancellation: when the caller gives up (or its connection ends), a call the
//! method is waiting on through a proxy is given up too, and fails with
//! [`crate::ErrorKind::Cancelled`] (its callee is sent a CANCEL, and so on down the
//! chain). That also ends the wait of an apartment method whose callback calls back into
//! the same apartment, which otherwise waits behind it (see
//! [`crate::Object::in_apartment`]). A one-way call's method passes nothing on: it runs
//! whatever its deadline, nobody waits for it. A call that must outlive the caller's patience (cleanup after the caller gave
//! up, say) is made from a task of its own (`tokio::spawn`), where no call is current.

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use std::sync::Arc;

use lanner_proto::Principal;

use crate::access::PeerIdentity;
use crate::transport::PeerCredentials;

thread_local! {
    /// The context of the call being polled on this thread, set only during its polls.
    static CURRENT: RefCell<Option<CallContext>> = const { RefCell::new(None) };
}

/// The context of one call being served. Cheap to clone.
#[derive(Debug, Clone)]
pub struct CallContext {
    deadline: Option<Instant>,
    /// The caller: its principal, roles and credentials (shared by its connection's calls).
    peer: Arc<PeerIdentity>,
    /// Created when first needed (the method asks for its context, or the call outlives
    /// its first poll and so can be cancelled): a call that needs neither costs nothing.
    cancel: Option<CancellationToken>,
    /// The apartment the call runs in (its address), if its object has one: while the
    /// call is polled, it is the only call of that apartment running (see
    /// [`crate::ApartmentCell`]).
    apartment: Option<usize>,
    /// Whether the calls the method makes inherit the deadline and cancellation: not for
    /// a one-way call, which runs whatever its deadline (nobody waits for it).
    passes_deadline_on: bool,
}

impl CallContext {
    pub(crate) fn new(deadline: Option<Instant>, peer: Arc<PeerIdentity>) -> CallContext {
        CallContext {
            deadline,
            peer,
            cancel: None,
            apartment: None,
            passes_deadline_on: true,
        }
    }

    /// This context, for a one-way call: the calls its method makes do not inherit its
    /// deadline (see `marshal::call_timeout`).
    pub(crate) fn one_way(mut self) -> CallContext {
        self.passes_deadline_on = false;
        self
    }

    /// This context, for a call that runs in the apartment with id `apartment`.
    pub(crate) fn in_apartment(mut self, apartment: usize) -> CallContext {
        self.apartment = Some(apartment);
        self
    }

    /// The apartment of the call being polled on this thread, if any.
    pub(crate) fn current_apartment() -> Option<usize> {
        CURRENT.with(|current| current.borrow().as_ref()?.apartment)
    }

    /// Who called, as the connection's handshake established it (see [`crate::ServerAuth`]):
    /// a local process (peer credentials), a key id, a certificate subject, or anonymous.
    pub fn principal(&self) -> &Principal {
        &self.peer.principal
    }

    /// The caller's roles under the server's access policy (see [`crate::AccessPolicy`]),
    /// sorted; empty without a policy.
    pub fn roles(&self) -> &[String] {
        &self.peer.roles
    }

    /// Whether the caller has role `role`.
    pub fn has_role(&self, role: &str) -> bool {
        self.peer.roles.iter().any(|r| r == role)
    }

    /// Who called, as the kernel vouches for it: the caller process's pid, uid and gid on
    /// `unix://`, `shm://` and `mem://` connections (from `SO_PEERCRED` when the
    /// connection was made, whatever the authentication mechanism); `None` on TCP.
    pub fn peer_credentials(&self) -> Option<PeerCredentials> {
        self.peer.credentials
    }

    /// The connection of the call whose method is running on this thread, if any.
    pub(crate) fn current_connection() -> Option<Arc<crate::connection::Connection>> {
        CURRENT.with(|current| {
            let current = current.borrow();
            current.as_ref()?.peer.connection.upgrade()
        })
    }

    /// The token that cancels the call whose method is running on this thread (created if
    /// needed, shared with the call), for the calls it makes to be given up with it; `None`
    /// outside a served call and in a one-way call's method.
    pub(crate) fn current_cancellation() -> Option<CancellationToken> {
        CURRENT.with(|current| {
            let mut current = current.borrow_mut();
            let context = current.as_mut().filter(|c| c.passes_deadline_on)?;
            Some(context.token().clone())
        })
    }

    /// The deadline of the call whose method is running on this thread, if it has one
    /// (the calls it makes inherit it: see `marshal::call_timeout`).
    pub(crate) fn current_deadline() -> Option<Instant> {
        CURRENT.with(|current| {
            let current = current.borrow();
            let context = current.as_ref()?;
            context.deadline.filter(|_| context.passes_deadline_on)
        })
    }

    /// The context of the call whose method is running, or `None` outside a served call.
    /// It is set while the method's future is polled, not while a stub reads the call
    /// (decodes the arguments, or a hand-written [`crate::Stub::dispatch`] runs): that code
    /// has the call itself ([`crate::IncomingCall`]) and may run inside another call's
    /// method (a callback received while that method waits for a reply of its own), whose
    /// context it would see here.
    pub fn current() -> Option<CallContext> {
        CURRENT.with(|current| {
            let mut current = current.borrow_mut();
            let context = current.as_mut()?;
            context.token();
            Some(context.clone())
        })
    }

    /// The cancellation token, created if needed.
    fn token(&mut self) -> &CancellationToken {
        self.cancel.get_or_insert_with(CancellationToken::new)
    }

    /// When the caller stops waiting, on this host's clock (the request carries the time
    /// left, not a date, so the peers' clocks need not agree). `None` if the caller set no
    /// deadline.
    pub fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    /// How long the caller still waits (zero once the deadline has passed); `None` if it set
    /// no deadline.
    pub fn remaining(&self) -> Option<Duration> {
        self.deadline
            .map(|deadline| deadline.saturating_duration_since(Instant::now()))
    }

    /// Whether the caller no longer waits: it cancelled the call (dropped it) or the
    /// deadline has passed.
    pub fn is_cancelled(&self) -> bool {
        self.cancel
            .as_ref()
            .is_some_and(CancellationToken::is_cancelled)
            || self.deadline.is_some_and(|d| Instant::now() >= d)
    }

    /// Completes when the caller no longer waits (see [`CallContext::is_cancelled`]).
    pub async fn cancelled(&self) {
        let cancelled = async {
            match &self.cancel {
                Some(token) => token.cancelled().await,
                // Not reachable for a context from `current`, which always has a token.
                None => std::future::pending().await,
            }
        };
        match self.deadline {
            None => cancelled.await,
            Some(deadline) => {
                tokio::select! {
                    () = cancelled => {}
                    () = tokio::time::sleep_until(deadline.into()) => {}
                }
            }
        }
    }

    /// Runs `future` with this context as the current one.
    pub(crate) fn scope<F: Future + Unpin>(self, future: F) -> InCall<F> {
        InCall {
            context: Some(self),
            inner: future,
        }
    }
}

/// A method's future with its call's context current during each poll (like a tokio
/// task-local, but `Unpin` and without an allocation: the context moves into the
/// thread-local slot for the poll and back out after it, even if the poll panics).
pub(crate) struct InCall<F> {
    context: Option<CallContext>,
    inner: F,
}

impl<F> InCall<F> {
    /// Whether the caller no longer waits (see [`CallContext::is_cancelled`]).
    pub(crate) fn is_cancelled(&self) -> bool {
        self.context.as_ref().is_some_and(CallContext::is_cancelled)
    }

    /// The token that cancels this call (shared with every context the method obtained).
    pub(crate) fn cancel_token(&mut self) -> CancellationToken {
        // Between polls the context is back in its future.
        match &mut self.context {
            Some(context) => context.token().clone(),
            None => CancellationToken::new(),
        }
    }
}

impl<F: Future + Unpin> Future for InCall<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.get_mut();
        let outer = CURRENT.with(|current| current.replace(this.context.take()));
        let _restore = Restore {
            outer,
            slot: &mut this.context,
        };
        Pin::new(&mut this.inner).poll(cx)
    }
}

/// Puts the call's context back in its future and the outer one (a call polled inside
/// another's poll) back in the thread-local slot.
struct Restore<'a> {
    outer: Option<CallContext>,
    slot: &'a mut Option<CallContext>,
}

impl Drop for Restore<'_> {
    fn drop(&mut self) {
        *self.slot = CURRENT.with(|current| current.replace(self.outer.take()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn anonymous() -> Arc<PeerIdentity> {
        Arc::new(PeerIdentity::new(Principal::Anonymous, None, None))
    }

    #[test]
    fn outside_a_call_there_is_no_context() {
        assert!(CallContext::current().is_none());
    }

    #[tokio::test]
    async fn inside_its_scope_the_context_is_current() {
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut call = CallContext::new(Some(deadline), anonymous()).scope(Box::pin(async {
            CallContext::current().expect("in scope")
        }));
        let token = call.cancel_token();
        let seen = (&mut call).await;
        assert!(
            CallContext::current().is_none(),
            "not current after the poll"
        );
        assert_eq!(seen.deadline(), Some(deadline));
        assert!(seen.remaining().unwrap() > Duration::from_secs(50));
        assert!(!seen.is_cancelled());
        token.cancel();
        assert!(
            seen.is_cancelled(),
            "the method's context shares the call's token"
        );
        seen.cancelled().await;
    }

    #[test]
    fn a_nested_call_sees_its_own_context_and_restores_the_outer_one() {
        let outer = CallContext::new(None, anonymous());
        let inner = CallContext::new(Some(Instant::now() + Duration::from_secs(1)), anonymous());
        let nested = async move {
            let before = CallContext::current().unwrap().deadline();
            let seen = inner
                .scope(Box::pin(async {
                    CallContext::current().unwrap().deadline()
                }))
                .await;
            let after = CallContext::current().unwrap().deadline();
            (before, seen, after)
        };
        let (before, seen, after) =
            futures_util::FutureExt::now_or_never(outer.scope(Box::pin(nested))).unwrap();
        assert_eq!((before, after), (None, None));
        assert!(seen.is_some());
    }

    #[test]
    fn a_panicking_poll_still_restores_the_slot() {
        let context = CallContext::new(None, anonymous());
        let mut future = context.scope(Box::pin(async { panic!("boom") }));
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            futures_util::FutureExt::now_or_never(&mut future)
        }));
        assert!(result.is_err());
        assert!(CallContext::current().is_none());
        assert!(
            future.context.is_some(),
            "the context went back into its future"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_passed_deadline_counts_as_cancelled() {
        // Far enough that the first look comes before it, however slow the machine
        // (under valgrind in CI, 5 ms once passed before it); the paused clock makes the
        // wait for it instant.
        let mut context =
            CallContext::new(Some(Instant::now() + Duration::from_secs(60)), anonymous());
        context.token();
        assert!(!context.is_cancelled());
        context.cancelled().await;
        assert!(context.remaining().is_some());
        let none = CallContext::new(None, anonymous());
        assert_eq!(none.remaining(), None);
        assert!(!none.is_cancelled());
    }
}
