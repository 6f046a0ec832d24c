//! A call in flight: the future [`Connection::call`] returns.
//!
//! The call starts when it is made, not when it is first polled: the credit is taken, the
//! call registered and the request written (or queued for the reader's next batch)
//! synchronously, so that the future only has to wait. That keeps it small (a few words,
//! instead of an `async fn` holding the request and every wait's state at once): callers
//! move it into sets and tasks, and each move copies it.
//!
//! Waiting has three ways, tried in order (see [`Phase`]): a caller whose request went out
//! alone spins on the transport for its own reply (the DCE "private socket"); otherwise,
//! or once the spin budget is spent, it waits for the reader to deliver the reply into its
//! slot of the pending-call table; the call's deadline, if any, bounds both.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use super::calls::{Begun, Discard};
use super::delivery_marks::LastLook;
use super::outgoing::{Outgoing, Stamped};
use super::{Answer, Connection};
use crate::error::{Error, ErrorKind};
use crate::objref::UnsentExports;
use crate::phase_marks::{self, Mark};

/// Waiting for a credit, boxed: the rare case, kept out of every call's future.
type CreditWait = Pin<Box<dyn Future<Output = Result<Begun, Error>> + Send>>;

/// Where a call stands.
enum Phase {
    /// It could not start; the error is handed out on the first poll.
    Failed(Option<Error>),
    /// No credit was at hand: waits for one, then sends.
    Credit(CreditWait),
    /// The request went out alone: on the first poll, decides whether to spin for the
    /// reply on this thread (see [`PendingReply::spin_or_wait`]).
    Alone,
    /// The caller yielded once to let calls the same thread was about to make start
    /// first.
    Yielded,
    /// The request went out with others in flight: on the first poll, notes that its
    /// caller makes concurrent calls (see [`PendingReply::not_alone`]), then waits.
    Deferred,
    /// The reader task delivers the reply.
    Wait,
}

/// A call whose request is out (or queued, or waiting for a credit): resolves to the
/// reply. Dropping it before then abandons the call: the peer is sent a CANCEL and the
/// answer, when it comes, is dropped. At the deadline it resolves to `DeadlineExceeded`
/// (and abandons the call likewise).
pub(crate) struct PendingReply<'a> {
    /// Borrowed from whoever made the call (a proxy's destination, which the proxy
    /// method's future holds until the call ends; the caller of a root method): no
    /// reference count per call.
    connection: &'a Arc<Connection>,
    call_id: u64,
    deadline: Option<Instant>,
    phase: Phase,
    /// Registered and not answered yet: dropping abandons the call.
    armed: bool,
    /// The deadline's timer, made on the first wait that needs it.
    timer: Option<Pin<Box<tokio::time::Sleep>>>,
    /// How to dispose of the reply if the call is abandoned (see [`Discard`]).
    discard: Option<Discard>,
    /// What the last look for the reply under the lock saw (see `delivery_marks`).
    last_look: Option<LastLook>,
    /// The call's delivery mark, read before its request was written if it went out
    /// alone: a reply stored later moves it (see [`Connection::spin_for_reply`]).
    mark_before_sending: u32,
    /// This side's objects the request exported, while it waits for a credit:
    /// unexported if it is dropped unsent (see [`PendingReply::unless_sent`]).
    unsent: UnsentExports,
}

impl Connection {
    /// Makes one call, starting it at once: takes a credit (or waits for one in the
    /// returned future), registers the call and writes the request. The future resolves
    /// to the reply. A call that is alone on the connection receives its own reply (see
    /// the reader module).
    ///
    /// At `deadline` the call fails with `DeadlineExceeded`; dropping the returned future
    /// abandons the call. Either way, once the request is out the peer is sent a CANCEL
    /// and the answer, when it comes, is dropped (decoded first if the caller left a
    /// [`Discard`]).
    ///
    /// The returned future borrows the connection: the caller keeps it for as long as the
    /// call (only the rare wait for a credit takes a reference count, for its boxed future).
    pub(crate) fn call(
        self: &Arc<Self>,
        request: Outgoing,
        deadline: Option<Instant>,
    ) -> PendingReply<'_> {
        phase_marks::mark(Mark::CallStart);
        let mut pending = PendingReply {
            connection: self,
            call_id: 0,
            deadline,
            phase: Phase::Wait,
            armed: false,
            timer: None,
            discard: None,
            last_look: None,
            mark_before_sending: 0,
            unsent: UnsentExports::default(),
        };
        match pending.connection.try_begin(request, false) {
            Ok(Ok(begun)) => pending.send(begun),
            Ok(Err(request)) => {
                let connection = Arc::clone(pending.connection);
                pending.phase = Phase::Credit(Box::pin(async move {
                    connection.begin_call_by(request, deadline).await
                }));
            }
            Err(error) => pending.phase = Phase::Failed(Some(error)),
        }
        pending
    }
}

impl PendingReply<'_> {
    /// What the request exported, to undo if the request never goes out: dropped at once
    /// (undoing it) if the call could not start, kept while the request waits for a
    /// credit (undone if the call is given up or fails meanwhile), taken by the peer once
    /// the request is out. (A peer that then leaves the arguments unread releases what
    /// the request's reference table lists itself.)
    #[inline]
    pub(crate) fn unless_sent(&mut self, unsent: UnsentExports) {
        if unsent.is_empty() {
            return;
        }
        match self.phase {
            Phase::Failed(_) => drop(unsent),
            Phase::Credit(_) => self.unsent = unsent,
            _ => unsent.sent(),
        }
    }

    /// If the call is abandoned, its reply is to be disposed of with `discard` rather
    /// than dropped undecoded (see [`Discard`]).
    pub(crate) fn discard_with(&mut self, discard: Discard) {
        self.discard = Some(discard);
    }

    /// The connection the call went on (where references in the reply are decoded).
    pub(crate) fn connection(&self) -> &Arc<Connection> {
        self.connection
    }

    /// The call is registered: writes its request and settles how to wait for the reply.
    fn send(&mut self, (call_id, stamped, alone): Begun) {
        self.call_id = call_id;
        self.armed = true;
        if alone {
            // Only a call that goes out alone spins for its reply (`Phase::Alone`). Not read
            // for the others: in a pipeline the reader bumps these marks all the time, and
            // each read would fetch the line back from it.
            self.mark_before_sending = self.connection.marks.read(call_id);
        }
        self.phase = match self.write(stamped, alone) {
            Ok(phase) => {
                std::mem::take(&mut self.unsent).sent();
                phase
            }
            Err(error) => {
                // The write failed: the peer did not get the handles.
                drop(std::mem::take(&mut self.unsent));
                Phase::Failed(Some(error.after_sending()))
            }
        };
    }

    fn write(&self, stamped: Stamped, alone: bool) -> Result<Phase, Error> {
        let connection = &self.connection;
        if !alone {
            // Other calls are in flight, so the reader spins: it writes this request with
            // the others queued meanwhile, in one batch.
            connection.send_deferred_stamped(stamped)?;
            return Ok(Phase::Deferred);
        }
        let sent_whole = connection.send_stamped(stamped)?;
        // Spinning for the reply here would keep the flusher (which finishes a request
        // the socket could not take at once) from running on this thread: spin only if
        // the request is out.
        if sent_whole && !connection.spin.is_zero() {
            return Ok(Phase::Alone);
        }
        // The reader task receives the reply: have it spin rather than sleep.
        connection.signal.kick();
        Ok(Phase::Wait)
    }

    /// Whether a caller whose request went out alone should spin for its reply on this
    /// thread (the private-socket path). Spinning holds the thread, so calls that the same
    /// task or others on this thread were about to make could not start: the first time a
    /// caller (told apart by its waker) is alone, it yields once, and spins only if it is
    /// still alone afterwards. A caller that makes its calls one after another (the same
    /// waker each time) spins at once from then on, but for one yield every
    /// [`super::lone_caller::RECHECK_EVERY`] calls (see that module).
    fn spin_or_wait(&mut self, cx: &mut Context<'_>) -> Poll<Result<Answer, Error>> {
        let caller = cx.waker().data() as usize;
        let connection = &self.connection;
        let at_once = match self.phase {
            Phase::Alone if !connection.lone_caller.spins_at_once(caller) => {
                self.phase = Phase::Yielded;
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            Phase::Yielded if !connection.state().alone() => {
                connection.signal.kick();
                self.phase = Phase::Wait;
                return self.wait(cx);
            }
            Phase::Yielded => {
                connection.lone_caller.remember(caller);
                false
            }
            _ => true,
        };
        if let Some(reply) =
            connection.spin_for_reply(cx, self.call_id, self.mark_before_sending, self.deadline)
        {
            phase_marks::mark(Mark::ReplyTaken);
            if at_once {
                connection.lone_caller.spun_answered_at_once();
            }
            // Taking the reply removed the call.
            self.armed = false;
            return Poll::Ready(reply.map_err(Error::after_sending));
        }
        // The thread was held for nothing; if the reply can only come once this caller
        // lets go of it (its peer runs here), spinning at once on its next calls would be
        // in vain every time (see `lone_caller`).
        connection.lone_caller.spun_unanswered(caller);
        connection.count_unanswered_spin();
        connection.signal.kick();
        self.phase = Phase::Wait;
        self.wait(cx)
    }

    /// A call that went out with others in flight: if its caller (told apart by its
    /// waker) is the one remembered as calling alone, it is not (any more). Callers that
    /// share a waker (futures joined or selected in one task) would otherwise be taken for
    /// one sequential caller: the first of them to find itself alone would spin at once,
    /// holding the thread while its siblings, whose answers may be waiting, could not run.
    fn not_alone(&mut self, cx: &mut Context<'_>) -> Poll<Result<Answer, Error>> {
        let caller = cx.waker().data() as usize;
        self.connection.lone_caller.forget(caller);
        self.phase = Phase::Wait;
        self.wait(cx)
    }

    /// Waits for the reader to deliver the reply, until the deadline.
    fn wait(&mut self, cx: &mut Context<'_>) -> Poll<Result<Answer, Error>> {
        // Read before looking: an answer stored after the look moves it.
        let mark = self.connection.marks.read(self.call_id);
        let nothing_new = self
            .last_look
            .is_some_and(|look| look.unchanged(mark, cx.waker()));
        if !nothing_new {
            if let Poll::Ready(reply) = self.connection.poll_reply(self.call_id, cx) {
                self.armed = false;
                return Poll::Ready(reply.map_err(Error::after_sending));
            }
            self.last_look = Some(LastLook::new(mark, cx.waker()));
        }
        let Some(deadline) = self.deadline else {
            return Poll::Pending;
        };
        let connection = self.connection;
        let timer = self.timer.get_or_insert_with(|| {
            Box::pin(super::calls::timer(&connection.timer_runtime(), deadline))
        });
        if timer.as_mut().poll(cx).is_pending() {
            return Poll::Pending;
        }
        // Still armed: dropping the future abandons the call.
        Poll::Ready(Err(Error::new(
            ErrorKind::DeadlineExceeded,
            format!(
                "no answer from {} before the call's deadline (the request was sent and may have executed)",
                self.connection.peer
            ),
        )
        .after_sending()))
    }
}

impl Future for PendingReply<'_> {
    type Output = Result<Answer, Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.get_mut().poll_phase(cx)
    }
}

impl PendingReply<'_> {
    fn poll_phase(&mut self, cx: &mut Context<'_>) -> Poll<Result<Answer, Error>> {
        loop {
            match &mut self.phase {
                Phase::Failed(error) => {
                    return Poll::Ready(Err(error.take().unwrap_or_else(|| {
                        Error::protocol("a failed call was polled after it finished")
                    })));
                }
                Phase::Credit(waiting) => match waiting.as_mut().poll(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(Err(error)) => {
                        self.phase = Phase::Failed(None);
                        drop(std::mem::take(&mut self.unsent));
                        return Poll::Ready(Err(error));
                    }
                    Poll::Ready(Ok(begun)) => self.send(begun),
                },
                Phase::Alone | Phase::Yielded => return self.spin_or_wait(cx),
                Phase::Deferred => return self.not_alone(cx),
                Phase::Wait => return self.wait(cx),
            }
        }
    }
}

impl Drop for PendingReply<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.connection.abandon(self.call_id, self.discard);
        }
    }
}
