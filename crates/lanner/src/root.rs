//! The root object every server connection starts with (handle 0): it resolves published
//! names to object references, and creates instances of registered classes (activation).
//! These are the only calls that name an object by string or class; calls themselves
//! carry only (handle, slot, method).

use std::sync::Arc;

use lanner_proto::{MessageBuilder, Response, Status};
use serde::{Deserialize, Serialize};

use crate::call::{IncomingCall, Reply};
use crate::connection::{Connection, Denied, Discard};
use crate::context::CallContext;
use crate::error::{Error, ErrorKind};
use crate::handoff::{Redeemed, Token};
use crate::id::{ClassId, InterfaceId, MethodInfo, method_fingerprint};
use crate::marshal::{self, Inline};
use crate::object::{DispatchFuture, Object, Stub};
use crate::reference::ObjectRef;
use crate::server::NameRegistry;

const ROOT_INTERFACE: InterfaceId =
    InterfaceId::from_u128(0x4c41_4e4e_4552_0000_726f_6f74_0000_0001);
const RESOLVE_SIGNATURE: &str = "resolve(String)->Result<ObjectRef,Error>";
const CREATE_SIGNATURE: &str = "create(ClassId,InterfaceId)->Result<ObjectRef,Error>";
const REDEEM_SIGNATURE: &str = "redeem([u8;16])->Result<ObjectRef,Error>";
static ROOT_METHODS: [MethodInfo; 3] = [
    MethodInfo {
        name: "resolve",
        ordinal: 0,
        fingerprint: method_fingerprint(RESOLVE_SIGNATURE),
        signature: RESOLVE_SIGNATURE,
    },
    MethodInfo {
        name: "create",
        ordinal: 1,
        fingerprint: method_fingerprint(CREATE_SIGNATURE),
        signature: CREATE_SIGNATURE,
    },
    MethodInfo {
        name: "redeem",
        ordinal: 2,
        fingerprint: method_fingerprint(REDEEM_SIGNATURE),
        signature: REDEEM_SIGNATURE,
    },
];

/// An object reference as it travels: the handle on this connection and the interfaces.
#[derive(Debug, Serialize, Deserialize)]
struct WireRef {
    handle: u64,
    interfaces: Vec<InterfaceId>,
}

struct RootStub {
    names: Arc<NameRegistry>,
}

impl Stub for RootStub {
    fn interface_id(&self) -> InterfaceId {
        ROOT_INTERFACE
    }

    fn interface_name(&self) -> &'static str {
        "lanner::Root"
    }

    fn methods(&self) -> &'static [MethodInfo] {
        &ROOT_METHODS
    }

    fn dispatch(&self, call: IncomingCall<'_>) -> DispatchFuture {
        let reply = match call.route(self.interface_name(), &ROOT_METHODS) {
            Ok(0) => self.resolve(&call),
            Ok(1) => self.create(&call),
            Ok(_) => return self.redeem(&call),
            Err(reply) => reply,
        };
        marshal::answered(reply)
    }
}

impl RootStub {
    /// A third party redeems a hand-off token (see [`crate::handoff`]); waits a moment
    /// for a grant it may have overtaken.
    fn redeem(&self, call: &IncomingCall<'_>) -> DispatchFuture {
        let (token,): (Token,) = match marshal::decode_arguments(call, &ROOT_METHODS[2]) {
            Ok(args) => args,
            Err(reply) => return marshal::answered(reply),
        };
        let handoffs = self.names.handoffs.clone();
        let connection = call.connection.clone();
        Box::pin(async move {
            // A redemption whose caller gave up (or whose connection ended) stops waiting
            // and leaves the token: taken, it would be spent on an answer nobody
            // receives, and the object dropped with it, where a later redemption (the
            // third party retrying on a new connection) could still have had it.
            let redeemed = handoffs.redeem(token, connection.redemptions_waiting());
            let redeemed = match CallContext::current_cancellation() {
                None => Some(redeemed.await),
                Some(cancellation) => tokio::select! {
                    biased;
                    () = cancellation.cancelled() => None,
                    redeemed = redeemed => Some(redeemed),
                },
            };
            let result = match redeemed {
                Some(Redeemed::Object(granted)) => hand_out(
                    &connection,
                    &granted.object,
                    Handed::Over(granted.name.as_deref()),
                    || "the object handed over".to_owned(),
                ),
                Some(Redeemed::Unknown) => Err(Error::new(
                    ErrorKind::NotFound,
                    "no object waits for this hand-off token: it is unknown, was redeemed already, or its lease expired",
                )),
                None => Err(Error::new(
                    ErrorKind::Cancelled,
                    "the redemption was given up before its grant came: the token is still there",
                )),
                // A client retries this kind; it remembers NotFound.
                Some(Redeemed::Busy) => Err(Error::new(
                    ErrorKind::Overloaded,
                    "no object waits for this hand-off token yet, and too many redemptions already wait for theirs: try again",
                )),
            };
            handing_out(&connection, result)
        })
    }

    fn create(&self, call: &IncomingCall<'_>) -> Reply {
        let (class, interface): (ClassId, InterfaceId) =
            match marshal::decode_arguments(call, &ROOT_METHODS[1]) {
                Ok(args) => args,
                Err(reply) => return reply,
            };
        // The policy is asked before the factory runs: a peer that could use nothing of
        // the instance does not get to make the server build one.
        let identity = call.connection.identity();
        if !identity.may_reach(None, interface) {
            return marshal::reply::<Inline<WireRef>, Error>(Err(Error::new(
                ErrorKind::PermissionDenied,
                format!(
                    "{} may not use interface {interface} of instances of class {class}",
                    identity.principal
                ),
            )));
        }
        let unimplemented = || {
            Err(Error::new(
                ErrorKind::Unimplemented,
                format!("instances of class {class} do not implement interface {interface}"),
            ))
        };
        // Nor does it for an interface the class is known not to implement.
        if self.names.class_lacks(class, interface) {
            return handing_out(call.connection, unimplemented());
        }
        let result = match self.names.instantiate(class) {
            None => Err(Error::new(
                ErrorKind::NotFound,
                format!("no class {class} is registered on this server"),
            )),
            Some(object) if !object.implements(interface) => unimplemented(),
            Some(object) => hand_out(call.connection, &object, Handed::Made, || {
                format!("instances of class {class}")
            }),
        };
        handing_out(call.connection, result)
    }

    fn resolve(&self, call: &IncomingCall<'_>) -> Reply {
        let (name,): (String,) = match marshal::decode_arguments(call, &ROOT_METHODS[0]) {
            Ok(args) => args,
            Err(reply) => return reply,
        };
        let result = match self.names.get(&name) {
            Some(object) => hand_out(call.connection, &object, Handed::Resolved(&name), || {
                format!("the object published as {name:?}")
            }),
            None => Err(Error::new(
                ErrorKind::NotFound,
                format!("no object is published as {} on this server", shown(&name)),
            )),
        };
        handing_out(call.connection, result)
    }
}

/// The reply handing out what [`hand_out`] exported: undone unless the reply reaches the
/// caller as it is (a one-way root call, a reply over the caller's frame limit; see
/// [`crate::objref::UnsentExports`]), and listed in the reply's reference table (see
/// [`lanner_proto::frame::FLAG_REFERENCES`]) like any result's.
fn handing_out(connection: &Arc<Connection>, result: Result<WireRef, Error>) -> Reply {
    let handles = result.as_ref().map_or(Vec::new(), |wire| vec![wire.handle]);
    let exported = crate::objref::UnsentExports::new(connection, handles);
    let mut reply = marshal::reply::<Inline<WireRef>, Error>(result);
    if reply.message.status() == Status::Ok {
        // A `WireRef` holds no `ObjRef`: encoding it exported nothing, and listed nothing.
        debug_assert!(reply.exported.is_empty());
        reply
            .message
            .builder_mut()
            .end_with_references(exported.handles());
        reply.exported = exported;
    }
    // (Otherwise dropped here, which undoes it: the answer became an error.)
    reply
}

/// How a root method hands an object out, which decides the rules it is exported under.
enum Handed<'a> {
    /// Resolved by this name: its rules, and the peer can find it again.
    Resolved(&'a str),
    /// A new instance (activation): the rules of the name it is published under, if any.
    Made,
    /// Redeemed for a hand-off token: the rules of the name its grantor held it under
    /// (`None`: the name it is published under, if any).
    Over(Option<&'a str>),
}

/// Exports `object` to the caller's `connection` as `handed`; the access policy may
/// refuse (`what` names the object in the error).
fn hand_out(
    connection: &Arc<Connection>,
    object: &Object,
    handed: Handed<'_>,
    what: impl FnOnce() -> String,
) -> Result<WireRef, Error> {
    let exported = match handed {
        Handed::Resolved(name) => connection.export(object, Some(name)),
        Handed::Made => connection.export(object, None),
        Handed::Over(name) => connection.export_as(object, name, false),
    };
    match exported {
        Ok(handle) => Ok(WireRef {
            handle,
            interfaces: object.interfaces().to_vec(),
        }),
        Err(Denied::Nothing) => Err(Error::new(
            ErrorKind::PermissionDenied,
            format!("{} may not use {}", connection.identity().principal, what()),
        )),
        Err(Denied::Full) => Err(Error::new(
            ErrorKind::Overloaded,
            format!(
                "this connection holds {} objects already: release some first",
                crate::connection::MAX_EXPORTS
            ),
        )),
        Err(Denied::Closed) => Err(Error::new(
            ErrorKind::Unavailable,
            "the connection is closed",
        )),
    }
}

/// Characters of a name the peer sent that an error message shows at most.
const NAME_SHOWN: usize = 256;

/// `name`, which the peer sent, quoted for an error message, cut to [`NAME_SHOWN`]
/// characters: it may be a frame long, and escaped whole (`{:?}`, up to ten characters
/// for one) it made an answer several times the request.
fn shown(name: &str) -> String {
    match name.char_indices().nth(NAME_SHOWN) {
        None => format!("{name:?}"),
        Some((cut, _)) => format!("{:?}... ({} bytes)", &name[..cut], name.len()),
    }
}

pub(crate) fn root_object(names: Arc<NameRegistry>) -> Object {
    Object::new(RootStub { names })
}

/// Resolves `name` on the peer of `connection` (one round trip).
pub(crate) async fn resolve(connection: &Arc<Connection>, name: &str) -> Result<ObjectRef, Error> {
    call_root(
        connection,
        &ROOT_METHODS[0],
        &(name,),
        connection.call_timeout(),
    )
    .await
}

/// Creates an instance of `class` on the peer of `connection` and returns a reference to
/// it, checking it implements `interface` (one round trip).
pub(crate) async fn create(
    connection: &Arc<Connection>,
    class: ClassId,
    interface: InterfaceId,
) -> Result<ObjectRef, Error> {
    call_root(
        connection,
        &ROOT_METHODS[1],
        &(class, interface),
        connection.call_timeout(),
    )
    .await
}

/// Redeems a hand-off `token` at the peer of `connection` (one round trip): the object
/// the token stands for, now handed to this connection. Not bounded by the connection's
/// call timeout: the peer answers once the grant is there (it may come after the
/// redemption), and a redemption given up spends the token on an answer nobody takes,
/// leaving the reference unable to reach its object ever after. (The claim that redeems
/// has a limit of its own, longer than a token's lease.)
pub(crate) async fn redeem(connection: &Arc<Connection>, token: Token) -> Result<ObjectRef, Error> {
    call_root(connection, &ROOT_METHODS[2], &(token,), None).await
}

/// Calls `method` of the peer's root object with `args`, waiting `timeout` at most (less
/// inside a served call whose deadline is sooner); it answers with a reference.
async fn call_root(
    connection: &Arc<Connection>,
    method: &'static MethodInfo,
    args: &impl Serialize,
    timeout: Option<std::time::Duration>,
) -> Result<ObjectRef, Error> {
    let mut request = MessageBuilder::request(
        crate::connection::ROOT_HANDLE,
        0,
        method.ordinal,
        method.fingerprint,
    );
    postcard::to_io(args, request.inline())
        .map_err(|e| Error::new(ErrorKind::InvalidArgument, format!("{}: {e}", method.name)))?;
    let deadline = marshal::set_deadline(&mut request, timeout)?;
    let mut pending = connection.call(request.into(), deadline);
    // The peer counted the reference it answers with: if this call is given up (its
    // deadline passed, its future was dropped), the answer is still decoded when it
    // comes, and the reference dropped, so that it is released. Otherwise the object
    // would stay exported as long as the connection, and a hand-off token spent on it.
    pending.discard_with(Discard {
        run: discard_reference,
        method,
    });
    let response = pending.await?;
    reference_in(connection, &response)
}

/// The reference a root method answered with, or the error it answered with. An answer
/// that does not decode releases what its reference table lists: the peer counted it.
fn reference_in(connection: &Arc<Connection>, response: &Response) -> Result<ObjectRef, Error> {
    let wire: WireRef = match response.status {
        Status::Ok => {
            marshal::decode_inline(response.payload.inline_slice()).inspect_err(|_| {
                connection.release_listed(response.payload.references());
            })?
        }
        Status::AppError => {
            return Err(marshal::decode_inline::<Error>(
                response.payload.inline_slice(),
            )?);
        }
        status => return Err(marshal::error_from_payload(status, &response.payload)),
    };
    Ok(ObjectRef::new(
        connection.clone(),
        wire.handle,
        wire.interfaces,
    ))
}

/// Disposes of the answer to a root call its caller gave up on: the reference in it is
/// dropped, which releases it (or, if it does not decode, what its table lists is).
fn discard_reference(
    connection: &Arc<Connection>,
    _method: &'static MethodInfo,
    response: &Response,
) {
    drop(reference_in(connection, response));
}
