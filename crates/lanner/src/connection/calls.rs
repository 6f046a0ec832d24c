//! The calling side: a call takes a credit, is written by its caller, and waits for its
//! reply in a slot of the pending-call table (no channel allocated per call).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use lanner_proto::{OutFrame, PlainRequest, Response, SendError};

use crate::id::MethodInfo;

use super::outgoing::{Outgoing, Stamped};
use super::pending_calls::PendingCalls;
use super::{Answer, Connection, State};
use crate::error::{Error, ErrorKind};

/// One outstanding call: its reply once it arrives, and who to wake then.
#[derive(Default)]
pub(super) struct PendingCall {
    reply: Option<Result<Answer, Error>>,
    waker: Option<Waker>,
    /// Set when the caller gave up on the call: its reply is decoded and dropped when it
    /// comes (see [`Discard`]).
    discard: Option<Discard>,
}

/// How to dispose of the reply of a call nobody waits for any more. A reply may carry
/// references to the peer's objects, each of which the peer counts until it is released:
/// dropped undecoded, they would stay counted (and their objects alive) as long as the
/// connection lasts. Decoding the reply makes a proxy of each, and dropping those releases
/// them. Only the caller's code knows the reply's type, so it leaves this behind.
#[derive(Clone, Copy)]
pub(crate) struct Discard {
    /// Decodes the reply of `method` on the connection, and drops what it decoded.
    pub(crate) run: fn(&Arc<Connection>, &'static MethodInfo, &Response),
    /// The method called.
    pub(crate) method: &'static MethodInfo,
}

impl Discard {
    /// Runs on the connection's receiver: a decoder that panics (the user's types decode
    /// themselves) costs the answer nobody waits for, not the connection.
    fn apply(self, connection: &Arc<Connection>, answer: Answer) {
        let decoded = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            (self.run)(connection, self.method, &answer);
        }));
        if decoded.is_err() {
            tracing::warn!(
                peer = %connection.peer(),
                method = self.method.name,
                "decoding an abandoned call's answer panicked"
            );
        }
    }
}

/// The largest one-way request (whole frame, in bytes) queued for the reader's next batch
/// rather than written at once when other calls are outstanding (see
/// [`Connection::try_send_one_way`]).
const BATCHED_ONE_WAY_MAX: usize = 32 * 1024;

/// Whether a one-way request of `len` bytes is written at once rather than queued for the
/// reader's next batch (see [`Connection::try_send_one_way`]).
fn one_way_goes_now(alone: bool, len: usize) -> bool {
    alone || len > BATCHED_ONE_WAY_MAX
}

/// A call stamped and registered: its id, its request, and whether it is the only one
/// outstanding.
pub(super) type Begun = (u64, Stamped, bool);

/// Fails every outstanding call with `error`; returns the wakers to wake (outside the lock).
/// Calls their callers gave up on are forgotten: no answer will come for them.
pub(super) fn fail_all(pending: &mut PendingCalls, error: &Error) -> Vec<Waker> {
    pending.retain(|call| call.discard.is_none());
    pending
        .calls_mut()
        .filter_map(|call| {
            call.reply.get_or_insert_with(|| Err(error.clone()));
            call.waker.take()
        })
        .collect()
}

impl Connection {
    /// Sends a one-way request if a credit is at hand, without waiting: the request back
    /// (`Ok(Err(..))`) if there is none (then [`Connection::wait_to_send_one_way`]). No
    /// answer comes; the peer returns the credit when the call is done.
    ///
    /// A one-way call made while nothing else is outstanding is written at once. One made
    /// while calls or earlier one-way calls are (their credits not back yet: a stream of
    /// them) is queued for the reader's next batch when it is small, as a call with others
    /// in flight is: otherwise every small one-way call would cost a write of its own
    /// (a system call per message over a socket). A large one is written at once: its
    /// bytes cost more than the write.
    pub(crate) fn try_send_one_way(
        self: &Arc<Self>,
        request: Outgoing,
    ) -> Result<Result<(), Outgoing>, Error> {
        debug_assert!(request.is_one_way());
        let request = match request {
            Outgoing::Plain(request) => return self.try_send_plain_one_way(request),
            built => built,
        };
        match self.try_begin(request, false)? {
            Ok((_, stamped, alone)) => self.send_begun_one_way(stamped, alone).map(Ok),
            Err(request) => Ok(Err(request)),
        }
    }

    /// [`Connection::try_send_one_way`] for a plain request, on a path of its own: a
    /// stream of one-way bulk calls measured 4% more throughput than through the general
    /// one (`bench bandwidth --sizes 65536` over shm), which moves the request and its
    /// stamped form through enums sized for built frames.
    fn try_send_plain_one_way(
        self: &Arc<Self>,
        request: PlainRequest,
    ) -> Result<Result<(), Outgoing>, Error> {
        let (head, bulk, alone) = {
            let mut state = self.state();
            self.takes_calls(&state)?;
            match state.proto.stamp_plain_request(request) {
                Ok((_, head, bulk)) => {
                    state.calls += 1;
                    (head, bulk, state.one_way_sent())
                }
                Err((SendError::NoCredits, request)) => return Ok(Err(Outgoing::Plain(request))),
                Err((error, _)) => return Err(Error::from_send(error)),
            }
        };
        let sent = if one_way_goes_now(alone, head.frame_len()) {
            self.send_parts(head, bulk, false)
        } else {
            self.send_deferred_parts(head, bulk)
        };
        sent.map(|_| Ok(())).map_err(Error::after_sending)
    }

    /// Sends a one-way request that found no credit at hand: waits for one (until
    /// `deadline`), then sends it as [`Connection::try_send_one_way`] does.
    pub(crate) async fn wait_to_send_one_way(
        self: &Arc<Self>,
        request: Outgoing,
        deadline: Option<Instant>,
    ) -> Result<(), Error> {
        debug_assert!(request.is_one_way());
        let (_, stamped, alone) = self.begin_call_by(request, deadline).await?;
        self.send_begun_one_way(stamped, alone)
    }

    /// Credits come back in the peer's frames, which only a receive takes in. A caller
    /// that has not yielded since it last sent (a sender streaming one-way calls never
    /// waits for an answer) has not let the reader run: when its credits run out, those
    /// the peer returned meanwhile are usually here already, unread. This receives what
    /// has arrived on the caller's own thread (as a lone caller receives its own reply)
    /// and tries again, before the caller yields, and the reader (woken by the reactor if
    /// it slept) takes them in. `bench bandwidth --sizes 65536` ran out every 256 calls.
    async fn begin_after_receiving(
        self: &Arc<Self>,
        request: Outgoing,
    ) -> Result<Result<Begun, Outgoing>, Error> {
        // On the caller's thread, which may run no runtime: requests received here are
        // first polled inside the connection's (see `Connection::process`).
        let received = std::future::poll_fn(|cx| {
            let _entered = self.runtime.enter();
            Poll::Ready(self.receive_if_arrived(cx, None))
        });
        if let Err(error) = received.await {
            self.fail(error);
        }
        self.try_begin(request, false)
    }

    fn send_begun_one_way(self: &Arc<Self>, stamped: Stamped, alone: bool) -> Result<(), Error> {
        let sent = if one_way_goes_now(alone, stamped.len()) {
            self.send_stamped(stamped)
        } else {
            self.send_deferred_stamped(stamped)
        };
        sent.map(drop).map_err(Error::after_sending)
    }

    /// Stamps a request that just found no credit at hand ([`Connection::try_begin`]) once
    /// one is available (first taking in those that arrived unread, see
    /// [`Connection::begin_after_receiving`]), and registers the call; gives up at `deadline` (the request is
    /// then not sent). Also says whether the call is the only one outstanding.
    pub(super) async fn begin_call_by(
        self: &Arc<Self>,
        request: Outgoing,
        deadline: Option<Instant>,
    ) -> Result<Begun, Error> {
        let request = match self.begin_after_receiving(request).await? {
            Ok(begun) => return Ok(begun),
            Err(request) => request,
        };
        until(
            &self.timer_runtime(),
            deadline,
            self.wait_for_credit(request, deadline),
            credit_deadline_passed,
        )
        .await?
    }

    /// Gives up on the call `call_id` and tells the peer, which may stop working on it.
    /// Its answer is dropped, or with `discard` decoded and dropped (now if it is here
    /// already, else when it comes).
    pub(super) fn abandon(self: &Arc<Self>, call_id: u64, discard: Option<Discard>) {
        let (cancel, arrived) = {
            let mut state = self.state();
            // On a closed connection no answer will come: nothing to wait for.
            let discard = discard.filter(|_| state.closed.is_none());
            let arrived = match state.pending.get_mut(call_id) {
                Some(call) => match (discard, call.reply.take()) {
                    (Some(discard), None) => {
                        call.waker = None;
                        call.discard = Some(discard);
                        None
                    }
                    (discard, reply) => {
                        state.pending.remove(call_id);
                        discard.zip(reply.and_then(Result::ok))
                    }
                },
                None => None,
            };
            let cancel = match state.closed {
                Some(_) => None,
                None => state.proto.cancel(call_id),
            };
            (cancel, arrived)
        };
        if let Some(cancel) = cancel {
            let _ = self.send_frame(OutFrame::contiguous(cancel));
        }
        if let Some((discard, response)) = arrived {
            discard.apply(self, response);
        }
    }

    /// [`Connection::begin_call_by`] without a deadline: registers for the next credit
    /// before it looks again, then waits.
    async fn wait_for_credit(
        &self,
        mut request: Outgoing,
        deadline: Option<Instant>,
    ) -> Result<Begun, Error> {
        loop {
            let notified = self.credit_available.notified();
            let mut notified = std::pin::pin!(notified);
            // Registered before the retry, so a credit that arrives between the retry and
            // the wait is not missed.
            notified.as_mut().enable();
            // The callee is told the time left now, not what was left when the request
            // was made. (A call with a deadline carries a timeout: see
            // `marshal::call_timeout`.)
            if let Some(deadline) = deadline {
                request.set_timeout(deadline.saturating_duration_since(Instant::now()));
            }
            request = match self.try_begin(request, true)? {
                Ok(begun) => return Ok(begun),
                Err(returned) => returned,
            };
            // Counted as a waiter (by `try_begin`) until woken or cancelled.
            let _waiting = CreditWaiter(self);
            notified.await;
        }
    }

    /// One attempt at stamping and registering a call: the request back if there is no credit
    /// (counted as a credit waiter if `will_wait`).
    pub(super) fn try_begin(
        &self,
        request: Outgoing,
        will_wait: bool,
    ) -> Result<Result<Begun, Outgoing>, Error> {
        let mut state = self.state();
        self.takes_calls(&state)?;
        let one_way = request.is_one_way();
        match request.stamp(&mut state.proto) {
            Ok((call_id, frame)) => {
                state.calls += 1;
                let alone = if one_way {
                    state.one_way_sent()
                } else {
                    state.pending.insert(call_id, PendingCall::default());
                    state.alone()
                };
                Ok(Ok((call_id, frame, alone)))
            }
            Err((SendError::NoCredits, returned)) => {
                if will_wait {
                    state.credit_waiters += 1;
                }
                Ok(Err(returned))
            }
            Err((error, _)) => Err(Error::from_send(error)),
        }
    }

    /// Whether a call may start now (checked under the state's lock, `state`): not if the
    /// connection closed, or the peer stopped reading it.
    fn takes_calls(&self, state: &State) -> Result<(), Error> {
        if let Some(error) = &state.closed {
            return Err(error.clone());
        }
        if self.writes_stopped.load(Ordering::SeqCst) {
            // Not sent: the connection ends once the reader has taken what the peer sent.
            return Err(Error::unavailable(format!(
                "{} stopped reading this connection",
                self.peer
            )));
        }
        Ok(())
    }

    /// The reply to `call_id` if it has arrived (removing the call), else registers `cx`.
    pub(super) fn poll_reply(
        &self,
        call_id: u64,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Answer, Error>> {
        let mut state = self.state();
        let Some(call) = state.pending.get_mut(call_id) else {
            return Poll::Ready(Err(Error::unavailable("the call is no longer outstanding")));
        };
        if let Some(reply) = call.reply.take() {
            state.pending.remove(call_id);
            return Poll::Ready(reply);
        }
        match &call.waker {
            Some(waker) if waker.will_wake(cx.waker()) => {}
            _ => call.waker = Some(cx.waker().clone()),
        }
        Poll::Pending
    }

    /// Takes the reply to `call_id` if it has arrived (removing the call).
    pub(super) fn take_reply(&self, call_id: u64) -> Option<Result<Answer, Error>> {
        let mut state = self.state();
        let reply = state.pending.get_mut(call_id)?.reply.take()?;
        state.pending.remove(call_id);
        Some(reply)
    }
}

/// The error of a call whose deadline passed while it waited for a credit.
fn credit_deadline_passed() -> Error {
    Error::new(
        ErrorKind::DeadlineExceeded,
        "the deadline passed while the call waited for a credit (the request was not sent)",
    )
}

/// Runs `future` until `deadline` (if any); `expired` is the error if the deadline comes
/// first. Timed on `runtime` (see [`Connection::timer_runtime`]): the caller may be polled
/// where no runtime runs (`block_on` on a plain thread), which has no timer to register
/// with.
pub(crate) async fn until<F: Future>(
    runtime: &tokio::runtime::Handle,
    deadline: Option<Instant>,
    future: F,
    expired: impl FnOnce() -> Error,
) -> Result<F::Output, Error> {
    let Some(deadline) = deadline else {
        return Ok(future.await);
    };
    let timed = {
        let _entered = runtime.enter();
        tokio::time::timeout_at(deadline.into(), future)
    };
    timed.await.map_err(|_| expired())
}

/// A timer for `deadline` on `runtime` (see [`until`]).
pub(crate) fn timer(runtime: &tokio::runtime::Handle, deadline: Instant) -> tokio::time::Sleep {
    let _entered = runtime.enter();
    tokio::time::sleep_until(deadline.into())
}

/// Where a response went.
pub(super) enum Delivered {
    /// It answers the caller that received it: handed back, the call removed.
    Mine(Answer),
    /// Stored in its call's slot; wake this waiter.
    Stored(Option<Waker>),
    /// Its caller gave up on it: to be disposed of (outside the state's lock).
    Discarded(Discard, Answer),
}

impl Delivered {
    /// Wakes the waiter or disposes of a discarded response; `Some` for the receiving
    /// caller's own response.
    pub(super) fn complete(self, connection: &Arc<Connection>) -> Option<Answer> {
        match self {
            Delivered::Mine(response) => Some(response),
            Delivered::Stored(waker) => {
                if let Some(waker) = waker {
                    waker.wake();
                }
                None
            }
            Delivered::Discarded(discard, response) => {
                discard.apply(connection, response);
                None
            }
        }
    }
}

/// Delivers a response to its call (see [`Delivered`]).
pub(super) fn deliver(
    pending: &mut PendingCalls,
    response: Answer,
    mine: Option<u64>,
    peer: &str,
) -> Delivered {
    let call_id = response.call_id;
    if mine == Some(call_id) {
        pending.remove(call_id);
        return Delivered::Mine(response);
    }
    match pending.get_mut(call_id) {
        Some(call) => {
            if let Some(discard) = call.discard {
                pending.remove(call_id);
                return Delivered::Discarded(discard, response);
            }
            call.reply = Some(Ok(response));
            Delivered::Stored(call.waker.take())
        }
        None => {
            tracing::debug!(peer, call_id, "response to a call nobody awaits any more");
            Delivered::Stored(None)
        }
    }
}

/// One caller waiting for a credit; uncounted when it stops waiting, however it stops.
struct CreditWaiter<'a>(&'a Connection);

impl Drop for CreditWaiter<'_> {
    fn drop(&mut self) {
        self.0.state().credit_waiters -= 1;
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::task::{Context, Poll, Wake, Waker};
    use std::time::{Duration, Instant};

    use super::until;
    use crate::error::{Error, ErrorKind};

    /// Wakes the thread that parked polling.
    struct Unpark(std::thread::Thread);

    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }

    #[test]
    fn a_deadline_is_timed_on_the_connections_runtime_where_no_runtime_runs() {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let deadline = Instant::now() + Duration::from_millis(50);
        let expired = || Error::new(ErrorKind::DeadlineExceeded, "too late");
        // Polled on this thread, which runs no runtime (`block_on` on a plain thread).
        let waiting = until(
            runtime.handle(),
            Some(deadline),
            std::future::pending::<()>(),
            expired,
        );
        let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
        let mut cx = Context::from_waker(&waker);
        let mut waiting = std::pin::pin!(waiting);
        let result = loop {
            if let Poll::Ready(result) = waiting.as_mut().poll(&mut cx) {
                break result;
            }
            std::thread::park_timeout(Duration::from_secs(5));
        };
        assert_eq!(result.unwrap_err().kind(), ErrorKind::DeadlineExceeded);
        assert!(Instant::now() >= deadline);
    }
}
