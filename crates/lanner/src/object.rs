//! Server-side objects: an [`Object`] is one or more interface [`Stub`]s over the same
//! implementation, published under a name or handed out as a reference.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use crate::apartment::Apartment;
use crate::call::{IncomingCall, Reply};
use crate::id::{InterfaceId, MethodInfo};

/// The future a stub returns for one call: it runs the method and encodes its reply.
pub type DispatchFuture = Pin<Box<dyn Future<Output = Reply> + Send + 'static>>;

/// Server-side glue for one interface of one object: decodes a call's arguments, runs the
/// method on the implementation and encodes the result. `#[lanner::interface]` generates
/// one (`<Trait>Stub<T>`) for every interface trait.
pub trait Stub: Send + Sync + 'static {
    /// The interface this stub serves.
    fn interface_id(&self) -> InterfaceId;

    /// The interface's name, for error messages.
    fn interface_name(&self) -> &'static str;

    /// The interface's methods, indexed by ordinal (access rules name methods by name).
    fn methods(&self) -> &'static [MethodInfo];

    /// Stubs for the interfaces this one extends (`trait V2: V1`), over the same
    /// implementation: an object serving this interface serves those too, so that clients
    /// of an older version keep working. Generated; empty for an interface that extends
    /// none.
    fn bases(&self) -> Vec<Arc<dyn Stub>> {
        Vec::new()
    }

    /// Runs one call. Dispatch is by the method ordinal the request carries (O(1)); the
    /// fingerprint is checked against the method's signature. The call is read here; the
    /// returned future owns everything it needs.
    fn dispatch(&self, call: IncomingCall<'_>) -> DispatchFuture;

    /// The implementation and the function serving calls on it, if calls can reach it
    /// without going through the stub (generated stubs can; see `lanner::__private::Direct`).
    /// Calls are then served from the connection's table entry directly, one cache miss
    /// fewer on an object not called lately. `None` (the default): calls go through
    /// [`Stub::dispatch`].
    #[doc(hidden)]
    fn __direct(&self) -> Option<crate::direct::Direct> {
        None
    }
}

/// A remote object: the list of interfaces it implements, each with its stub.
///
/// ```ignore
/// let calc = Arc::new(MyCalculator::default());
/// let object = Object::new(CalculatorStub::new(calc.clone()))
///     .with(ScientificStub::new(calc));
/// server.publish("calc", object);
/// ```
#[derive(Clone)]
pub struct Object {
    inner: Arc<ObjectInner>,
}

struct ObjectInner {
    stubs: Vec<Arc<dyn Stub>>,
    interfaces: Vec<InterfaceId>,
    /// Set for an object whose calls run one at a time ([`Object::in_apartment`]).
    apartment: Option<Arc<Apartment>>,
}

impl Object {
    /// An object implementing one interface (and the interfaces it extends, if any).
    pub fn new(stub: impl Stub) -> Object {
        let bases = stub.bases();
        let mut stubs: Vec<Arc<dyn Stub>> = vec![Arc::new(stub)];
        add_bases(&mut stubs, bases);
        let interfaces = stubs.iter().map(|s| s.interface_id()).collect();
        Object {
            inner: Arc::new(ObjectInner {
                stubs,
                interfaces,
                apartment: None,
            }),
        }
    }

    /// The same object implementing one more interface (and those it extends). Adding an
    /// interface the object already has replaces that interface's stub.
    pub fn with(self, stub: impl Stub) -> Object {
        let mut stubs = self.inner.stubs.clone();
        let id = stub.interface_id();
        let bases = stub.bases();
        let stub: Arc<dyn Stub> = Arc::new(stub);
        match stubs.iter().position(|s| s.interface_id() == id) {
            Some(slot) => stubs[slot] = stub,
            None => stubs.push(stub),
        }
        add_bases(&mut stubs, bases);
        let interfaces = stubs.iter().map(|s| s.interface_id()).collect();
        Object {
            inner: Arc::new(ObjectInner {
                stubs,
                interfaces,
                apartment: self.inner.apartment.clone(),
            }),
        }
    }

    /// The same object, served in an apartment: its calls (on all its interfaces, from
    /// all connections) run one at a time, each to its end, in the order they arrived.
    /// For implementations that must not be entered concurrently (state without its own
    /// locking, calls that must not interleave at their awaits). A call that arrives while
    /// the apartment is idle still runs at once on the thread that received it; calls
    /// that find it busy wait their turn. Free-threaded objects (the default) run every
    /// call at once, concurrently. Like COM's apartments without their re-entrancy: a
    /// method that waits for a call back into the same object (directly or through a
    /// callback on its caller) waits behind itself until that call's deadline, or until
    /// its own caller gives up (which gives up the calls it waits on, down the chain:
    /// see [`crate::CallContext`]). A one-way method has no caller waiting, so nothing
    /// gives up for it: one that waits for such a call back holds the apartment until the
    /// call's own deadline, or for good without one. Give onward calls made from one-way
    /// methods of an apartment a timeout ([`crate::Proxy::with_timeout`]).
    pub fn in_apartment(self) -> Object {
        Object {
            inner: Arc::new(ObjectInner {
                stubs: self.inner.stubs.clone(),
                interfaces: self.inner.interfaces.clone(),
                apartment: Some(Arc::default()),
            }),
        }
    }

    /// The object's apartment, if it is served in one.
    pub(crate) fn apartment(&self) -> Option<&Arc<Apartment>> {
        self.inner.apartment.as_ref()
    }

    /// The interfaces this object implements, in slot order.
    pub fn interfaces(&self) -> &[InterfaceId] {
        &self.inner.interfaces
    }

    /// True if the object implements `id`.
    pub fn implements(&self, id: InterfaceId) -> bool {
        self.inner.interfaces.contains(&id)
    }

    pub(crate) fn stubs(&self) -> &[Arc<dyn Stub>] {
        &self.inner.stubs
    }

    /// Identity of the object (two clones of one object share it).
    pub(crate) fn identity(&self) -> usize {
        Arc::as_ptr(&self.inner) as usize
    }
}

/// Adds the stubs of extended interfaces the object does not serve already (an explicit
/// stub for an interface wins over one inherited).
fn add_bases(stubs: &mut Vec<Arc<dyn Stub>>, bases: Vec<Arc<dyn Stub>>) {
    for base in bases {
        if !stubs
            .iter()
            .any(|s| s.interface_id() == base.interface_id())
        {
            stubs.push(base);
        }
    }
}

impl std::fmt::Debug for Object {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<_> = self
            .inner
            .stubs
            .iter()
            .map(|s| s.interface_name())
            .collect();
        f.debug_struct("Object")
            .field("interfaces", &names)
            .finish()
    }
}
