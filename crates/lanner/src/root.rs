//! The root object every server connection starts with (handle 0): it resolves published
//! names to object references. Resolving is the only call that names an object by string;
//! calls themselves carry only (handle, slot, method).

use std::sync::Arc;

use lanner_proto::{MessageBuilder, Status};
use serde::{Deserialize, Serialize};

use crate::call::{IncomingCall, Reply};
use crate::connection::{Connection, Denied};
use crate::error::{Error, ErrorKind};
use crate::id::{InterfaceId, MethodInfo, method_fingerprint};
use crate::marshal::{self, Inline};
use crate::object::{DispatchFuture, Object, Stub};
use crate::reference::ObjectRef;
use crate::server::NameRegistry;

const ROOT_INTERFACE: InterfaceId =
    InterfaceId::from_u128(0x4c41_4e4e_4552_0000_726f_6f74_0000_0001);
const RESOLVE_SIGNATURE: &str = "resolve(String)->Result<ObjectRef,Error>";
static ROOT_METHODS: [MethodInfo; 1] = [MethodInfo {
    name: "resolve",
    ordinal: 0,
    fingerprint: method_fingerprint(RESOLVE_SIGNATURE),
    signature: RESOLVE_SIGNATURE,
}];

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
        let reply = self.resolve(&call);
        Box::pin(std::future::ready(reply))
    }
}

impl RootStub {
    fn resolve(&self, call: &IncomingCall<'_>) -> Reply {
        if let Err(reply) = call.route(self.interface_name(), &ROOT_METHODS) {
            return reply;
        }
        let (name,): (String,) = match marshal::arguments(call, &ROOT_METHODS[0]) {
            Ok(args) => args,
            Err(reply) => return reply,
        };
        let result = match self.names.get(&name) {
            Some(object) => match call.connection.export(&object, Some(&name)) {
                Ok(handle) => Ok(WireRef {
                    handle,
                    interfaces: object.interfaces().to_vec(),
                }),
                Err(Denied) => Err(Error::new(
                    ErrorKind::PermissionDenied,
                    format!(
                        "{} may not use the object published as {name:?}",
                        call.connection.identity().principal
                    ),
                )),
            },
            None => Err(Error::new(
                ErrorKind::NotFound,
                format!("no object is published as {name:?} on this server"),
            )),
        };
        marshal::reply::<Inline<WireRef>, Error>(result)
    }
}

pub(crate) fn root_object(names: Arc<NameRegistry>) -> Object {
    Object::new(RootStub { names })
}

/// Resolves `name` on the peer of `connection` (one round trip).
pub(crate) async fn resolve(connection: &Arc<Connection>, name: &str) -> Result<ObjectRef, Error> {
    let method = &ROOT_METHODS[0];
    let mut request = MessageBuilder::request(
        crate::connection::ROOT_HANDLE,
        0,
        method.ordinal,
        method.fingerprint,
    );
    postcard::to_io(&(name,), request.inline())
        .map_err(|e| Error::new(ErrorKind::InvalidArgument, format!("object name: {e}")))?;
    let deadline = marshal::set_deadline(&mut request, connection.call_timeout());
    let response = connection.call(request, deadline).await?;
    let wire: WireRef = match response.status {
        Status::Ok => marshal::decode_inline(response.payload.inline_slice())?,
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
