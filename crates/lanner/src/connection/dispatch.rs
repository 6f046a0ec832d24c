//! Serving the peer's calls: look up (object handle, interface slot) in O(1), hand the
//! call to the stub, run it on its own task, write the reply.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures_util::FutureExt;
use lanner_proto::{MessageBuilder, Request, Status};

use super::Connection;
use crate::call::IncomingCall;

impl Connection {
    pub(super) fn dispatch(self: &Arc<Self>, request: Request) {
        let call_id = request.call_id;
        let object = self.exports().get(request.object);
        let stub = match &object {
            None => Err(format!(
                "no object with handle {:#x} on this connection",
                request.object
            )),
            Some(object) => object.stub(request.slot).cloned().ok_or_else(|| {
                format!(
                    "the object has {} interfaces; there is no interface slot {}",
                    object.interfaces().len(),
                    request.slot
                )
            }),
        };
        let connection = self.clone();
        match stub {
            Ok(stub) => {
                let call = IncomingCall {
                    request,
                    connection: self.clone(),
                };
                let future = stub.dispatch(call);
                tokio::spawn(async move {
                    let reply = match AssertUnwindSafe(future).catch_unwind().await {
                        Ok(reply) => reply.0,
                        Err(panic) => {
                            let message = panic_message(&panic);
                            tracing::error!(peer = %connection.peer(), %message, "method panicked");
                            MessageBuilder::error_response(
                                Status::Internal,
                                &format!("the method panicked: {message}"),
                            )
                        }
                    };
                    connection.respond(call_id, reply).await;
                });
            }
            Err(message) => {
                tokio::spawn(async move {
                    let reply = MessageBuilder::error_response(Status::NotFound, &message);
                    connection.respond(call_id, reply).await;
                });
            }
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
