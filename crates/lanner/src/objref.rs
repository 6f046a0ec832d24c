//! Object references as values: an [`ObjRef`] can be an argument or a result of any
//! method. Passing one hands the object to the connection the call goes on, so the peer
//! can call it (a server returns a new object; a client passes a callback that the server
//! calls back on the same connection).
//!
//! On the wire a reference is `(who holds it, handle, interfaces)`:
//!
//! - an object of the sender's is exported to the connection (handles are per connection
//!   and random: capabilities) and arrives as a proxy whose calls go back to the sender;
//! - a reference the sender got from the receiver arrives as the receiver's own object;
//! - a reference to an object behind a third connection is handed off: it travels as that
//!   object's server's endpoint and a token the server keeps the object for, and the
//!   receiver's first call claims it there (see [`crate::handoff`]).
//!
//! Encoding and decoding need the connection the message travels on: the marshalling
//! code sets it for the value's duration (see [`encoding`], [`decoding`]); inside a method being
//! served it is the call's connection.

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::connection::{Connection, Denied};
use crate::context::CallContext;
use crate::error::{Error, ErrorKind};
use crate::handoff::Token;
use crate::id::InterfaceId;
use crate::object::Object;
use crate::proxy::Proxy;
use crate::reference::ObjectRef;
use crate::url::Endpoint;

mod counting;

pub(crate) use counting::{UnsentExports, decoding_arguments, decoding_result, tracking_exports};
use counting::{note_decoded, note_exported, tracking};

scoped_tls::scoped_thread_local!(static CONNECTION: Arc<Connection>);

thread_local! {
    /// References to the peer's own objects handed back by the message being encoded:
    /// the caller keeps them alive until the message is out, so that their release cannot
    /// overtake it.
    static HANDED_BACK: std::cell::RefCell<Vec<ObjectRef>> =
        const { std::cell::RefCell::new(Vec::new()) };

    /// Whether `HANDED_BACK` holds any: checked first, because every access to a
    /// thread-local with a destructor also checks that it is registered, and nearly every
    /// message hands back nothing.
    static ANY_HANDED_BACK: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };

    /// Set while a method's result is encoded (see [`collecting`]).
    static COLLECTING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// The references handed back since the last call (see `HANDED_BACK`).
#[inline]
fn take_handed_back() -> Vec<ObjectRef> {
    if !ANY_HANDED_BACK.replace(false) {
        return Vec::new();
    }
    HANDED_BACK.with(|handed_back| std::mem::take(&mut *handed_back.borrow_mut()))
}

thread_local! {
    /// Why the last reference could not be encoded or decoded, and what kind of failure
    /// that is: postcard keeps only that a custom error happened, not its message.
    static FAILURE: std::cell::RefCell<Option<(ErrorKind, String)>> =
        const { std::cell::RefCell::new(None) };
}

/// The kind and message of the reference that just failed to encode or decode, if one
/// did.
pub(crate) fn take_failure() -> Option<(ErrorKind, String)> {
    FAILURE.with(|failure| failure.borrow_mut().take())
}

fn remember(message: impl fmt::Display) -> String {
    remember_as(ErrorKind::InvalidArgument, message)
}

fn remember_as(kind: ErrorKind, message: impl fmt::Display) -> String {
    let message = message.to_string();
    FAILURE.with(|failure| *failure.borrow_mut() = Some((kind, message.clone())));
    message
}

fn failed<E: serde::ser::Error>(message: impl fmt::Display) -> E {
    E::custom(remember(message))
}

/// [`failed`] for a failure of another kind than a bad argument (a reference whose
/// connection is gone is `Unavailable`: worth trying again).
fn failed_as<E: serde::ser::Error>(kind: ErrorKind, message: impl fmt::Display) -> E {
    E::custom(remember_as(kind, message))
}

fn failed_de<E: serde::de::Error>(message: impl fmt::Display) -> E {
    E::custom(remember(message))
}

/// Runs `f`, which decodes a message received on `connection`.
pub(crate) fn decoding<R>(connection: &Arc<Connection>, f: impl FnOnce() -> R) -> R {
    CONNECTION.set(connection, f)
}

/// What encoding a message on a connection produced besides the message (see
/// [`encoding`]).
#[derive(Default)]
pub(crate) struct Encoded {
    /// References to the peer's objects handed back: to keep alive until the message is
    /// out, so that their release cannot overtake it.
    pub(crate) handed_back: Vec<ObjectRef>,
    /// This side's objects the message exported: unexported unless it is sent.
    pub(crate) unsent: UnsentExports,
}

/// Runs `f`, which encodes a message to send on `connection`. What it exported is
/// unexported when the result is dropped, unless the message is sent (see
/// [`UnsentExports`]): a message that failed to encode undoes its exports as it is
/// dropped.
pub(crate) fn encoding<T, E>(
    connection: &Arc<Connection>,
    f: impl FnOnce() -> Result<T, E>,
) -> (Result<T, E>, Encoded) {
    let unwinding = ForgetHandedBack;
    // Tracking inside the connection's scope: a panicking encoding unexports on it.
    let (result, exported) = CONNECTION.set(connection, || tracking_exports(f));
    std::mem::forget(unwinding);
    let encoded = Encoded {
        handed_back: take_handed_back(),
        unsent: UnsentExports::new(connection, exported),
    };
    (result, encoded)
}

/// Dropped only by unwinding out of an encoding (a user's `Serialize` panicked): drops
/// what the message handed back, which no message will carry, rather than leave it to
/// whatever this thread encodes next (or to nothing, keeping the peer's objects alive).
/// An enclosing encoding's references go too (the list is one per thread); it can only
/// be unwinding as well, unless a `Serialize` catches the panic of an encoding inside it.
struct ForgetHandedBack;

impl Drop for ForgetHandedBack {
    fn drop(&mut self) {
        drop(take_handed_back());
    }
}

/// While a method's result is encoded (on the call's connection, found through the call
/// context): collects the references it hands back to the peer, to keep alive until the
/// reply is out. Restores the previous state when dropped, even if encoding panics (a
/// user's `Serialize` may); the references handed back by a reply that panicked are
/// dropped then (see [`ForgetHandedBack`]).
pub(crate) struct Collecting {
    outer: bool,
    finished: bool,
}

impl Collecting {
    #[inline]
    pub(crate) fn start() -> Collecting {
        Collecting {
            outer: COLLECTING.replace(true),
            finished: false,
        }
    }

    /// The references handed back meanwhile (none if this runs inside another scope
    /// that collects: that one keeps them).
    #[inline]
    pub(crate) fn finish(mut self) -> Vec<ObjectRef> {
        self.finished = true;
        if self.outer {
            return Vec::new();
        }
        take_handed_back()
    }
}

impl Drop for Collecting {
    #[inline]
    fn drop(&mut self) {
        COLLECTING.set(self.outer);
        if !self.finished && !self.outer {
            drop(take_handed_back());
        }
    }
}

/// The connection a reference being encoded or decoded travels on.
fn marshalling_connection() -> Option<Arc<Connection>> {
    if CONNECTION.is_set() {
        return Some(CONNECTION.with(Arc::clone));
    }
    // A method's result is encoded inside the call it answers.
    CallContext::current_connection()
}

/// Keeps `reference` alive until the message being encoded is out (if it is encoded in a
/// scope that collects them).
fn keep_until_sent(reference: &ObjectRef) {
    if CONNECTION.is_set() || COLLECTING.get() {
        HANDED_BACK.with(|handed_back| handed_back.borrow_mut().push(reference.clone()));
        ANY_HANDED_BACK.set(true);
    }
}

/// A reference to an object with interface `P` (a generated proxy type, such as
/// `CounterProxy`), usable as a method argument or result.
///
/// ```ignore
/// #[lanner::interface]
/// trait Factory {
///     async fn counter(&self, start: u64) -> Result<ObjRef<CounterProxy>, lanner::Error>;
///     async fn subscribe(&self, listener: ObjRef<ListenerProxy>) -> Result<(), lanner::Error>;
/// }
/// // server side: hand out a new object
/// // (`MyCounter`: a type of yours implementing `Counter`)
/// Ok(ObjRef::new(Object::new(CounterStub::new(Arc::new(MyCounter::new(start))))))
/// // client side: call it
/// let counter = factory.counter(5).await?.into_proxy()?;
/// ```
pub struct ObjRef<P: Proxy> {
    held: Held<P>,
}

enum Held<P> {
    /// An object of this process.
    Local(Object),
    /// An object behind a connection.
    Remote(P),
}

impl<P: Proxy> ObjRef<P> {
    /// A reference to `object`, an object of this process. It must implement `P`
    /// (checked when it is sent).
    pub fn new(object: Object) -> ObjRef<P> {
        ObjRef {
            held: Held::Local(object),
        }
    }

    /// A reference to the remote object `proxy` calls.
    pub fn from_proxy(proxy: P) -> ObjRef<P> {
        ObjRef {
            held: Held::Remote(proxy),
        }
    }

    /// The proxy to call the object through, if it is remote.
    pub fn proxy(&self) -> Option<&P> {
        match &self.held {
            Held::Remote(proxy) => Some(proxy),
            Held::Local(_) => None,
        }
    }

    /// The object, if it lives in this process (for example a callback handed back to
    /// the side that made it).
    pub fn local(&self) -> Option<&Object> {
        match &self.held {
            Held::Local(object) => Some(object),
            Held::Remote(_) => None,
        }
    }

    /// The proxy to call the object through; fails with `InvalidArgument` for an object
    /// of this process (call it directly: [`ObjRef::local`]).
    pub fn into_proxy(self) -> Result<P, Error> {
        match self.held {
            Held::Remote(proxy) => Ok(proxy),
            Held::Local(_) => Err(Error::new(
                ErrorKind::InvalidArgument,
                format!(
                    "this reference to a {} is an object of this process: call it directly",
                    P::INTERFACE_NAME
                ),
            )),
        }
    }
}

impl<P: Proxy> From<P> for ObjRef<P> {
    fn from(proxy: P) -> Self {
        ObjRef::from_proxy(proxy)
    }
}

impl<P: Proxy> Clone for ObjRef<P> {
    fn clone(&self) -> Self {
        ObjRef {
            held: match &self.held {
                Held::Local(object) => Held::Local(object.clone()),
                Held::Remote(proxy) => Held::Remote(proxy.clone()),
            },
        }
    }
}

impl<P: Proxy> fmt::Debug for ObjRef<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let place = match &self.held {
            Held::Local(_) => "local".to_owned(),
            Held::Remote(proxy) => proxy.object().peer().to_owned(),
        };
        f.debug_struct("ObjRef")
            .field("interface", &P::INTERFACE_NAME)
            .field("at", &place)
            .finish()
    }
}

/// Who holds the object a reference on the wire designates, from the sender's side.
#[derive(Serialize, Deserialize)]
enum Holder {
    /// The sender exported it to this connection.
    Sender,
    /// The receiver exported it earlier; the sender hands it back.
    Receiver,
    /// A third process, the server at `endpoint`, keeps it for whoever presents `token`.
    Elsewhere { endpoint: String, token: Token },
}

/// A reference as it travels.
#[derive(Serialize, Deserialize)]
struct WireObjRef {
    holder: Holder,
    handle: u64,
    /// The object's interfaces (empty when handed back to its holder, who knows them).
    interfaces: Vec<InterfaceId>,
}

impl<P: Proxy> Serialize for ObjRef<P> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        // Outside a message being encoded (a method serializing a reference with serde
        // for its own purposes), what the reference exported would be in no message's
        // accounts: counted for the call's connection for as long as it lasts.
        let connection = marshalling_connection()
            .filter(|_| tracking())
            .ok_or_else(|| {
                failed::<S::Error>(
                    "an ObjRef can only be sent as a Lanner call's argument or result",
                )
            })?;
        let wire = match &self.held {
            Held::Local(object) => {
                if !object.implements(P::INTERFACE_ID) {
                    return Err(failed::<S::Error>(format!(
                        "the object does not implement {}",
                        P::INTERFACE_NAME
                    )));
                }
                let handle = connection.export(object, None).map_err(|denied| {
                    failed::<S::Error>(match denied {
                        Denied::Nothing => format!(
                            "the access policy lets {} use nothing of this {}",
                            connection.identity().principal,
                            P::INTERFACE_NAME
                        ),
                        Denied::Full => format!(
                            "{} holds {} objects of this process already",
                            connection.peer(),
                            crate::connection::MAX_EXPORTS
                        ),
                        Denied::Closed => {
                            format!("the connection to {} is closed", connection.peer())
                        }
                    })
                })?;
                note_exported(handle);
                WireObjRef {
                    holder: Holder::Sender,
                    handle,
                    interfaces: object.interfaces().to_vec(),
                }
            }
            Held::Remote(proxy) => {
                let object = proxy.object();
                if object.awaits_redemption() {
                    return Err(failed::<S::Error>(format!(
                        "the reference to the {} at {} was handed over by a third party and is not claimed yet: call it once before passing it on",
                        P::INTERFACE_NAME,
                        object.peer()
                    )));
                }
                let target = object.current_target();
                if Arc::ptr_eq(&target.connection, &connection) {
                    object.mark_handed_back();
                    keep_until_sent(object);
                    WireObjRef {
                        holder: Holder::Receiver,
                        handle: target.handle,
                        interfaces: Vec::new(),
                    }
                } else {
                    // A reference found by URL whose connection broke reconnects when
                    // called; passed on first, it starts reconnecting now, so that the
                    // caller's next attempt finds it on its new connection (handed back,
                    // if that is the one the call goes on).
                    if !target.connection.usable() {
                        object.reconnect_soon();
                    }
                    let (endpoint, token) =
                        target.connection.grant(target.handle).map_err(|e| {
                            failed_as::<S::Error>(
                                e.kind(),
                                format!(
                                    "handing the {} at {} to {}: {}",
                                    P::INTERFACE_NAME,
                                    object.peer(),
                                    connection.peer(),
                                    e.message()
                                ),
                            )
                        })?;
                    WireObjRef {
                        holder: Holder::Elsewhere {
                            endpoint: endpoint.to_string(),
                            token,
                        },
                        handle: 0,
                        interfaces: object.interfaces().to_vec(),
                    }
                }
            }
        };
        wire.serialize(serializer)
    }
}

impl<'de, P: Proxy> Deserialize<'de> for ObjRef<P> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let wire = WireObjRef::deserialize(deserializer)?;
        let connection = marshalling_connection().ok_or_else(|| {
            failed_de::<D::Error>(
                "an ObjRef can only be received as a Lanner call's argument or result",
            )
        })?;
        match wire.holder {
            Holder::Sender => {
                let reference = ObjectRef::new(connection, wire.handle, wire.interfaces);
                note_decoded(&reference);
                reference
                    .query::<P>()
                    .map(ObjRef::from_proxy)
                    .map_err(|e| failed_de::<D::Error>(e.message()))
            }
            Holder::Receiver => {
                let object = connection.exports().object(wire.handle).ok_or_else(|| {
                    failed_de::<D::Error>(format!(
                        "the peer handed back a reference (handle {:#x}) to no object of ours",
                        wire.handle
                    ))
                })?;
                if !object.implements(P::INTERFACE_ID) {
                    return Err(failed_de::<D::Error>(format!(
                        "the object handed back does not implement {}",
                        P::INTERFACE_NAME
                    )));
                }
                Ok(ObjRef::new(object))
            }
            Holder::Elsewhere { endpoint, token } => {
                let endpoint = Endpoint::parse(&endpoint).map_err(|e| {
                    failed_de::<D::Error>(format!(
                        "a reference handed over names no usable endpoint: {}",
                        e.message()
                    ))
                })?;
                let client = connection
                    .onward_client()
                    .map_err(|e| failed_de::<D::Error>(e.message()))?;
                ObjectRef::handed_over(connection, client, endpoint, token, wire.interfaces)
                    .query::<P>()
                    .map(ObjRef::from_proxy)
                    .map_err(|e| failed_de::<D::Error>(e.message()))
            }
        }
    }
}
