//! Serving the peer's calls: look up (object handle, interface slot) in O(1), hand the
//! call to the stub, run it, write the reply.
//!
//! Eager dispatch: the method's future is first polled right here on the reader, the
//! thread that received the request. A method that completes without waiting (the common
//! case for cheap methods) is answered immediately, with no task hand-off; one that has to
//! wait continues on its own task, so a slow method never holds up the connection's other
//! calls while it waits. (A method that computes for long without awaiting does delay the
//! calls behind it on the same connection, and on tokio's multi-thread runtime another
//! connection's reader woken on the same worker, which waits in that worker's LIFO slot
//! where other workers do not steal it; move such work to `spawn_blocking`.)

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures_util::FutureExt;
use lanner_proto::{ProtocolError, Request, Status};
use tokio_util::sync::CancellationToken;

use super::Connection;
use super::reader::Receiving;
use crate::call::{IncomingCall, Reply};
use crate::connection::exports::ExportedSlot;
use crate::context::{CallContext, InCall};
use crate::marshal;
use crate::object::DispatchFuture;
use crate::occasional::occasionally;
use crate::phase_marks::{self, Mark};
use crate::server::{CallLimit, SuspendedCall};

/// Who answers a call of the peer's.
#[derive(Clone, Copy)]
pub(crate) enum AnsweredBy<'a> {
    /// The receive attempt that received it, still holding the receive lock: the answer
    /// is stamped without the state's lock and counted by the receiver itself (see
    /// [`Connection::count_answers_here`]).
    Receiver(&'a Receiving),
    /// Anyone else (the task a call that waited goes on in, an apartment's turn): the
    /// answer is stamped and counted under the state's lock.
    Elsewhere,
}

impl Connection {
    /// Serves one request on `slot`, the interface it calls (looked up when the request
    /// was received); `cx` is the receiving task's context, used for the first poll.
    /// `in_place`: the request was read where the peer wrote it (a shared-memory ring).
    /// True if the call goes on elsewhere (its method waited, so it continues in a task of
    /// its own, or its apartment was busy): that task may need this thread to run.
    pub(super) fn dispatch(
        self: &Arc<Self>,
        mut request: Request,
        slot: Result<ExportedSlot, String>,
        in_place: bool,
        cx: &mut Context<'_>,
        receiving: &Receiving,
    ) -> bool {
        let by = AnsweredBy::Receiver(receiving);
        let call_id = request.call_id;
        let mut to = AnswerTo::of(&request);
        // Refused by the stub (see `IncomingCall::__find`), which first decodes the
        // arguments so that the references among them are released.
        let overloaded = self.call_limit.as_deref().filter(|limit| limit.is_full());
        let ExportedSlot {
            direct,
            access,
            apartment,
        } = match slot {
            Ok(slot) => slot,
            Err(message) => {
                let reply = Reply::status(Status::NotFound, &message).arguments_unread();
                self.answer(call_id, to, reply, by);
                return false;
            }
        };
        // A call that will wait in line behind its apartment's running call holds its
        // arguments meanwhile: read in place, they would hold the ring behind them, and a
        // running call that waits on this peer (a callback) would then wait for an answer
        // with no room to come in. Copied out instead. (The apartment may turn busy just
        // after this look, when several connections call it: one call may then wait in
        // place, which holds the ring only until its turn.)
        if in_place
            && apartment
                .as_ref()
                .is_some_and(|apartment| apartment.is_busy())
        {
            request.payload = request.payload.detached();
        }
        // 0: no deadline; the largest value: "at least that long", which is no deadline the
        // method could act on either.
        let deadline = (request.timeout_us != 0 && request.timeout_us != u32::MAX)
            .then(|| Instant::now() + Duration::from_micros(request.timeout_us.into()));
        let arguments_read = AtomicBool::new(false);
        let call = IncomingCall {
            request,
            connection: self,
            access: &access,
            overloaded,
            arguments_read: &arguments_read,
        };
        let mut context = CallContext::new(deadline, self.identity().clone());
        if to.one_way {
            context = context.one_way();
        }
        if let Some(apartment) = &apartment {
            context = context.in_apartment(apartment.id());
        }
        if apartment.is_some() {
            // A mark left by some other answer on this thread.
            marshal::take_answered();
        }
        // The stub routes and decodes the arguments here, before the method's future
        // exists: a user's `Deserialize` that panics on what the peer sent fails this
        // call, as a panicking method does, not the connection's receiver.
        let dispatched = std::panic::catch_unwind(AssertUnwindSafe(|| direct.dispatch(call)));
        // Whatever the reply says, what the stub did not decode is not its.
        to.unread = !arguments_read.load(Ordering::Relaxed);
        let future = match dispatched {
            Ok(future) => future,
            Err(panic) => {
                self.answer(call_id, to, panicked(self, panic), by);
                return false;
            }
        };
        // Refused by the stub: nothing of the object runs.
        let refused = apartment.is_some() && marshal::take_answered();
        let call = Served {
            future: context.scope(future),
            call_id,
            to,
        };
        match &apartment {
            // A refusal is answered at once, never queued behind the apartment's calls
            // (where an overloaded server's would count against the very limit it refuses
            // for, and any other would wait for calls it has nothing to do with).
            Some(apartment) if overloaded.is_none() && !refused => apartment.enter(self, call, cx),
            _ => match self.run_inline(call, cx, by) {
                Some(waiting) => {
                    // On the connection's runtime, not the current one: a caller spinning
                    // for its reply receives here, and may be polled by any executor (a
                    // `block_on` outside any runtime, or a runtime that ends before the
                    // call does).
                    drop(self.runtime.spawn(waiting.finish()));
                    true
                }
                None => false,
            },
        }
    }

    /// Polls a call once on this thread, answering it (`by`) if it completes; else it
    /// becomes a [`Waiting`] call, to be finished elsewhere.
    pub(crate) fn run_inline(
        self: &Arc<Self>,
        mut call: Served,
        cx: &mut Context<'_>,
        by: AnsweredBy<'_>,
    ) -> Option<Waiting> {
        phase_marks::mark(Mark::Dispatched);
        match std::panic::catch_unwind(AssertUnwindSafe(|| call.future.poll_unpin(cx))) {
            Ok(Poll::Ready(reply)) => {
                phase_marks::mark(Mark::MethodReady);
                self.answer(call.call_id, call.to, reply, by);
                None
            }
            Err(panic) => {
                self.answer(call.call_id, call.to, panicked(self, panic), by);
                None
            }
            Ok(Poll::Pending) => Some(self.suspend(call)),
        }
    }

    /// A call that did not complete where it was received (or did not run yet): it can
    /// now be cancelled, and counts against the server's limit until answered.
    pub(crate) fn suspend(self: &Arc<Self>, call: Served) -> Waiting {
        self.suspend_as(call, None)
    }

    /// A call queued in an apartment, not started: [`Connection::suspend`], and a CANCEL
    /// of its caller takes it out of `queued` and answers it at once (see
    /// [`Connection::cancel_incoming`]).
    pub(crate) fn suspend_queued(self: &Arc<Self>, call: Served, queued: &Queued) -> Waiting {
        self.suspend_as(call, Some(queued.clone()))
    }

    fn suspend_as(self: &Arc<Self>, mut call: Served, queued: Option<Queued>) -> Waiting {
        // A CANCEL is processed by the same receiver, after this returns.
        let token = call.future.cancel_token();
        let serving = Serving {
            token: token.clone(),
            queued,
        };
        let reused = self.serving().insert(call.call_id, serving);
        if let Some(Serving { token: earlier, .. }) = reused {
            // The peer picks call ids. One reused while its call is served would take
            // that call out of reach of CANCEL and of the connection's end (whichever
            // finishes first removes the other's token): a protocol violation.
            earlier.cancel();
            token.cancel();
            let violation = ProtocolError::DuplicateCall {
                call_id: call.call_id,
            };
            // Ended in a task of its own: this may run under an apartment's lock, and
            // ending drops what the peer held (user code). Not failed at once either:
            // the CLOSE saying why is queued behind the receiver's cork, and failing
            // would drop it unwritten.
            let error = self.protocol_violation(violation);
            let connection = self.clone();
            self.runtime
                .spawn(async move { connection.end_lingering(error) });
        } else if self.state().closed.is_some() {
            // The connection ended after this call was received but before it was listed
            // here, so its end did not cancel it (it cancels what is listed, after
            // marking itself closed under the same lock as this check).
            token.cancel();
        }
        Waiting {
            limit: self.call_limit.clone().map(CallLimit::suspend),
            connection: self.clone(),
            call,
        }
    }

    /// Ends the peer's call `call_id`: sends its reply, or for a one-way call (whose
    /// caller wants none) returns its credit and logs a failure. If the arguments went
    /// unread, the references among them, which the caller counted, are released.
    fn answer(self: &Arc<Self>, call_id: u64, to: AnswerTo, reply: Reply, by: AnsweredBy<'_>) {
        let Reply {
            message,
            handed_back,
            exported,
        } = reply;
        let unread = message.is_arguments_unread();
        if to.one_way {
            self.finish_one_way(call_id, message.status());
            // The result goes nowhere: what it exported is unexported.
            drop(exported);
        } else {
            self.respond(call_id, message, exported, by);
        }
        if unread || to.unread {
            self.release_listed(to.listed.iter().copied());
        }
        // The reply is written or queued: a release sent from now on follows it.
        drop(handed_back);
    }

    /// The peer no longer waits for its call `call_id`: tell the method (if it is still
    /// running; the answer may have crossed the CANCEL). A call still waiting for its turn
    /// in an apartment is answered now, without running (as it would be when its turn
    /// came, see [`Waiting::finish_unless_abandoned`]): until it is answered its caller
    /// does not get its credit back, and a few calls given up behind a long one would
    /// otherwise use up the caller's whole window, holding up its calls to every other
    /// object on the connection.
    pub(super) fn cancel_incoming(self: &Arc<Self>, call_id: u64) {
        let queued = match self.serving().get(&call_id) {
            Some(serving) => {
                serving.token.cancel();
                serving.queued.clone()
            }
            None => return,
        };
        if let Some(queued) = queued {
            withdraw(&queued);
        }
    }

    /// The connection ended: its calls still waiting for their turn in an apartment are
    /// answered now, without running (see [`Waiting::finish_unless_abandoned`]), instead
    /// of keeping the connection's memory, their arguments and their place in the
    /// server's limit of suspended calls until their turn comes. (Their tokens were
    /// cancelled first.)
    pub(super) fn withdraw_queued_calls(&self) {
        let queued: Vec<Queued> = self
            .serving()
            .values()
            .filter_map(|serving| serving.queued.clone())
            .collect();
        for queued in &queued {
            withdraw(queued);
        }
    }
}

impl Connection {
    /// A call just queued in an apartment: withdrawn at once (see [`withdraw`]) if the
    /// connection has ended meanwhile, whose end may have missed it (see
    /// [`Connection::withdraw_queued_calls`]).
    pub(crate) fn withdraw_if_ended(&self, queued: &Queued) {
        if self.state().closed.is_some() {
            withdraw(queued);
        }
    }
}

/// Takes a call out of its apartment's queue and answers it without running, if it has
/// not started and may be answered so (see [`Waiting::abandoned`]).
fn withdraw(queued: &Queued) {
    let withdrawn = {
        let mut slot = queued.lock().unwrap_or_else(|e| e.into_inner());
        match slot.as_ref() {
            Some(waiting) if waiting.abandoned() => slot.take(),
            _ => None,
        }
    };
    // The arguments it holds are dropped here, outside every lock.
    if let Some(waiting) = withdrawn {
        waiting.answer_abandoned();
    }
}

/// A call of the peer's being served (or waiting for its turn), as its CANCEL finds it.
pub(super) struct Serving {
    /// Tells its method that nobody waits for it any more.
    pub(super) token: CancellationToken,
    /// Where it waits for its turn in an apartment, if it does and has not started.
    queued: Option<Queued>,
}

/// A call waiting for its turn in an apartment. Whoever comes first takes it out: its
/// turn (the apartment's task, which then skips an empty one), or its caller's CANCEL.
pub(crate) type Queued = Arc<Mutex<Option<Waiting>>>;

/// A call being served: its method's future (with the call's context), and how to answer.
pub(crate) struct Served {
    future: InCall<DispatchFuture>,
    call_id: u64,
    to: AnswerTo,
}

/// Who a call's outcome goes to, and what to release if its arguments go unread.
pub(crate) struct AnswerTo {
    /// A one-way call: nobody waits for the outcome.
    one_way: bool,
    /// What the request's reference table lists (see
    /// [`lanner_proto::frame::FLAG_REFERENCES`]; empty, unallocated, for nearly every
    /// call): released if the arguments go unread, as nobody else will release them.
    listed: Box<[u64]>,
    /// The stub never started decoding the arguments (see [`IncomingCall`]): `listed` is
    /// released whatever the reply says.
    unread: bool,
}

impl AnswerTo {
    fn of(request: &Request) -> AnswerTo {
        AnswerTo {
            one_way: request.one_way,
            listed: request.payload.references().collect(),
            unread: false,
        }
    }
}

/// A call suspended (or queued): finished by a task of its own or by its apartment.
pub(crate) struct Waiting {
    call: Served,
    connection: Arc<Connection>,
    limit: Option<SuspendedCall>,
}

impl Waiting {
    /// The connection the call arrived on.
    pub(crate) fn connection(&self) -> &Arc<Connection> {
        &self.connection
    }

    /// Runs the call to its end and answers it; a call that waited its turn (in an
    /// apartment) and whose caller no longer waits by then is answered without running.
    /// Not a one-way call, whose caller never waits (its connection's end, or its
    /// deadline, does not say it is unwanted: a client that sends one-way calls and exits
    /// still has them run), nor a call whose request lists references while its
    /// connection can still answer: whether those went unread (and are the caller's to
    /// take back) or were decoded (and are released as the call is dropped) only its
    /// answer can tell, so it runs (a refusal among them answers at once). Once the
    /// connection has ended no answer goes anywhere, and the references name objects of a
    /// connection that is gone: running would only hand the method proxies of it.
    pub(crate) async fn finish_unless_abandoned(self) {
        if self.abandoned() {
            self.answer_abandoned();
            return;
        }
        self.finish().await;
    }

    /// Whether nobody waits for the call any more and it may be answered without running
    /// (see [`Waiting::finish_unless_abandoned`]).
    fn abandoned(&self) -> bool {
        self.call.future.is_cancelled()
            && !self.call.to.one_way
            && (self.call.to.listed.is_empty()
                || self.connection.answers_stopped.load(Ordering::Acquire))
    }

    /// Answers an abandoned call without running it.
    fn answer_abandoned(self) {
        let Waiting {
            call,
            connection,
            limit,
        } = self;
        drop(limit);
        connection.serving().remove(&call.call_id);
        let reply = Reply::status(
            Status::Cancelled,
            "the call was cancelled, or its deadline passed, before its turn came: it did not run",
        );
        let Served {
            future,
            call_id,
            to,
        } = call;
        connection.answer(call_id, to, reply, AnsweredBy::Elsewhere);
        // The method's future, with the arguments the stub decoded, is dropped here (on
        // the receiver, for a CANCEL; in the connection's end): a user type's drop that
        // panics costs this call, as it would have inside the method, not the receiver or
        // the end of the connection half done.
        let dropped = std::panic::catch_unwind(AssertUnwindSafe(|| drop(future)));
        if let Err(panic) = dropped {
            let message = crate::error::panic_message(panic.as_ref());
            occasionally!(
                error,
                peer = %connection.peer(),
                %message,
                "dropping a call that did not run panicked"
            );
        }
    }

    /// Runs the call to its end and answers it.
    pub(crate) async fn finish(self) {
        let Waiting {
            call,
            connection,
            limit,
        } = self;
        let outcome = AssertUnwindSafe(call.future).catch_unwind().await;
        let reply = outcome.unwrap_or_else(|panic| panicked(&connection, panic));
        drop(limit);
        connection.serving().remove(&call.call_id);
        connection.answer(call.call_id, call.to, reply, AnsweredBy::Elsewhere);
    }
}

/// The answer to a call whose method (or stub) panicked. Out of line: the path of a
/// call that completes moves its reply straight to the answer, not through a `Result`
/// assembled around it.
#[cold]
#[inline(never)]
fn panicked(connection: &Connection, panic: Box<dyn std::any::Any + Send>) -> Reply {
    let message = crate::error::panic_message(panic.as_ref());
    // A peer can make a method panic on every call.
    occasionally!(error, peer = %connection.peer(), %message, "method panicked");
    Reply::status(Status::Internal, &format!("the method panicked: {message}"))
}
