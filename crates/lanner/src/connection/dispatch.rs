//! Serving the peer's calls: look up (object handle, interface slot) in O(1), hand the
//! call to the stub, run it, write the reply.
//!
//! Eager dispatch: the method's future is first polled right here on the reader, the
//! thread that received the request. A method that completes without waiting (the common
//! case for cheap methods) is answered immediately, with no task hand-off; one that has to
//! wait continues on its own task, so a slow method never holds up the connection's other
//! calls while it waits. (A method that computes for long without awaiting does delay the
//! calls behind it on the same connection; move such work to `spawn_blocking`.)

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures_util::FutureExt;
use lanner_proto::{MessageBuilder, Request, Status};

use super::Connection;
use crate::call::IncomingCall;
use crate::context::CallContext;
use crate::server::CallLimit;

impl Connection {
    /// Serves one request; `cx` is the receiving task's context, used for the first poll.
    pub(super) fn dispatch(self: &Arc<Self>, request: Request, cx: &mut Context<'_>) {
        let call_id = request.call_id;
        let one_way = request.one_way;
        if let Some(limit) = self.call_limit.as_ref().filter(|limit| limit.is_full()) {
            let reply = MessageBuilder::error_response(Status::Overloaded, &limit.full_message());
            return self.answer(call_id, one_way, reply);
        }
        let slot = self.exports().slot(request.object, request.slot);
        let slot = match slot {
            Ok(slot) => slot,
            Err(message) => {
                let reply = MessageBuilder::error_response(Status::NotFound, &message);
                return self.answer(call_id, one_way, reply);
            }
        };
        // 0: no deadline; the largest value: "at least that long", which is no deadline the
        // method could act on either.
        let deadline = (request.timeout_us != 0 && request.timeout_us != u32::MAX)
            .then(|| Instant::now() + Duration::from_micros(request.timeout_us.into()));
        let call = IncomingCall {
            request,
            connection: self,
            access: &slot.access,
        };
        let context = CallContext::new(deadline, self.identity().clone());
        let mut future = context.scope(slot.stub.dispatch(call));
        match std::panic::catch_unwind(AssertUnwindSafe(|| future.poll_unpin(cx))) {
            Ok(Poll::Ready(reply)) => self.answer(call_id, one_way, reply_of(self, Ok(reply))),
            Err(panic) => self.answer(call_id, one_way, reply_of(self, Err(panic))),
            Ok(Poll::Pending) => {
                // Only a call that outlives its first poll can be cancelled: a CANCEL is
                // processed by the same receiver, after this returns.
                self.serving().insert(call_id, future.cancel_token());
                let suspended = self.call_limit.clone().map(CallLimit::suspend);
                let connection = self.clone();
                let future = AssertUnwindSafe(future).catch_unwind();
                tokio::spawn(async move {
                    let reply = reply_of(&connection, future.await);
                    drop(suspended);
                    connection.serving().remove(&call_id);
                    connection.answer(call_id, one_way, reply);
                });
            }
        }
    }

    /// Ends the peer's call `call_id`: sends its reply, or for a one-way call (whose
    /// caller wants none) returns its credit and logs a failure.
    fn answer(self: &Arc<Self>, call_id: u64, one_way: bool, reply: MessageBuilder) {
        if one_way {
            self.finish_one_way(call_id, &reply);
        } else {
            self.respond(call_id, reply);
        }
    }

    /// The peer no longer waits for its call `call_id`: tell the method (if it is still
    /// running; the answer may have crossed the CANCEL).
    pub(super) fn cancel_incoming(&self, call_id: u64) {
        if let Some(token) = self.serving().get(&call_id) {
            token.cancel();
        }
    }
}

fn reply_of(
    connection: &Connection,
    outcome: Result<crate::call::Reply, Box<dyn std::any::Any + Send>>,
) -> MessageBuilder {
    match outcome {
        Ok(reply) => reply.0,
        Err(panic) => {
            let message = panic_message(&panic);
            tracing::error!(peer = %connection.peer(), %message, "method panicked");
            MessageBuilder::error_response(
                Status::Internal,
                &format!("the method panicked: {message}"),
            )
        }
    }
}

fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(text) = panic.downcast_ref::<&str>() {
        (*text).to_owned()
    } else if let Some(text) = panic.downcast_ref::<String>() {
        text.clone()
    } else {
        "(non-string panic payload)".to_owned()
    }
}
