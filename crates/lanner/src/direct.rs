//! How a call reaches an object's implementation: straight from the export table's entry,
//! without reading the stub on the way.
//!
//! A generated stub is a pointer to the implementation (`Arc<T>`) kept in an allocation of
//! its own (`Arc<dyn Stub>`). Calling through it reads three places that are cold when the
//! object was not called lately: the connection's table entry, the stub, and the
//! implementation, one after the other (each address is read from the one before). A
//! [`Direct`] keeps the implementation pointer and the stub's serving function in the
//! table entry itself, so a call on a cold object misses twice (entry, implementation)
//! instead of three times. With 100,000 objects this is a measurable share of a call.

use std::any::Any;
use std::sync::Arc;

use crate::call::{IncomingCall, Reply};
use crate::error::{Error, ErrorKind};
use crate::marshal::answered;
use crate::object::{DispatchFuture, Stub};

/// An implementation, type-erased (its `Arc` unsized: the pointer is the implementation's
/// own allocation).
pub type Implementation = Arc<dyn Any + Send + Sync>;

/// Serves one call on a type-erased implementation (a generated stub's function).
pub type Serve = fn(Implementation, IncomingCall<'_>) -> DispatchFuture;

/// An implementation and the function that serves calls on it (see the module docs).
#[derive(Clone)]
pub struct Direct {
    target: Implementation,
    serve: Serve,
}

impl Direct {
    /// Calls on `target` are served by `serve` (which receives `target` back).
    pub fn new<T: Send + Sync + 'static>(target: Arc<T>, serve: Serve) -> Direct {
        Direct { target, serve }
    }

    /// How calls reach `stub`: its own [`Direct`] if it has one, else through the stub.
    pub(crate) fn of(stub: &Arc<dyn Stub>) -> Direct {
        stub.__direct().unwrap_or_else(|| Direct {
            target: Arc::new(stub.clone()),
            serve: through_stub,
        })
    }

    /// Runs one call.
    pub(crate) fn dispatch(self, call: IncomingCall<'_>) -> DispatchFuture {
        (self.serve)(self.target, call)
    }

    /// The implementation as a `T`, for a serving function; a reply reporting the mix-up
    /// if it is not one (a stub whose serving function does not match its target). The
    /// reply tells the caller that its arguments were not decoded: answer with it before
    /// decoding any.
    pub fn downcast<T: Send + Sync + 'static>(
        target: Implementation,
    ) -> Result<Arc<T>, DispatchFuture> {
        target.downcast::<T>().map_err(|_| {
            answered(
                Reply::error(&Error::new(
                    ErrorKind::Internal,
                    "the object's stub serves another type than the object's",
                ))
                .arguments_unread(),
            )
        })
    }
}

/// The serving function of a stub without a [`Direct`] of its own: the target is the stub.
/// Such a stub (hand-written) may not route, so the refusals routing makes are made here
/// for it: the server is overloaded, or the access policy denies the method.
fn through_stub(target: Implementation, call: IncomingCall<'_>) -> DispatchFuture {
    if let Some(limit) = call.overloaded {
        return answered(limit.refusal().arguments_unread());
    }
    match Direct::downcast::<Arc<dyn Stub>>(target) {
        Ok(stub) => match call.denial_unrouted(stub.interface_name(), stub.methods()) {
            Some(denied) => answered(denied.arguments_unread()),
            None => stub.dispatch(call),
        },
        Err(reply) => reply,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn downcast_to_another_type_is_an_error_not_a_panic() {
        let target: Implementation = Arc::new(7u32);
        assert!(Direct::downcast::<u64>(target.clone()).is_err());
        assert_eq!(*Direct::downcast::<u32>(target).ok().unwrap(), 7);
    }
}
