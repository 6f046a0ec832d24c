//! Client-side object references.

use std::sync::Arc;

use crate::connection::Connection;
use crate::error::{Error, ErrorKind};
use crate::id::InterfaceId;
use crate::proxy::{Proxy, ProxyCore};

/// A reference to a remote object: the connection it lives behind, its handle there, and
/// the list of interfaces it implements. Asking for another interface
/// ([`ObjectRef::query`]) is answered from that list, with no round trip.
#[derive(Clone)]
pub struct ObjectRef {
    inner: Arc<RefInner>,
}

struct RefInner {
    connection: Arc<Connection>,
    handle: u64,
    interfaces: Vec<InterfaceId>,
}

impl ObjectRef {
    pub(crate) fn new(
        connection: Arc<Connection>,
        handle: u64,
        interfaces: Vec<InterfaceId>,
    ) -> ObjectRef {
        ObjectRef {
            inner: Arc::new(RefInner {
                connection,
                handle,
                interfaces,
            }),
        }
    }

    /// The interfaces the object implements.
    pub fn interfaces(&self) -> &[InterfaceId] {
        &self.inner.interfaces
    }

    /// True if the object implements interface `P`.
    pub fn supports<P: Proxy>(&self) -> bool {
        self.inner.interfaces.contains(&P::INTERFACE_ID)
    }

    /// A proxy for interface `P` of this object. Answered locally from the reference's
    /// interface list; fails with [`ErrorKind::Unimplemented`] if the object does not
    /// implement `P`. The first call through the new proxy is one request like any other.
    pub fn query<P: Proxy>(&self) -> Result<P, Error> {
        let slot = self
            .inner
            .interfaces
            .iter()
            .position(|id| *id == P::INTERFACE_ID)
            .ok_or_else(|| {
                Error::new(
                    ErrorKind::Unimplemented,
                    format!(
                        "the object at {} does not implement {} ({}); it implements {:?}",
                        self.peer(),
                        P::INTERFACE_NAME,
                        P::INTERFACE_ID,
                        self.inner.interfaces
                    ),
                )
            })?;
        Ok(P::__from_core(ProxyCore::new(self.clone(), slot as u16)))
    }

    /// Where the object lives (for messages).
    pub fn peer(&self) -> &str {
        self.inner.connection.peer()
    }

    pub(crate) fn connection(&self) -> &Arc<Connection> {
        &self.inner.connection
    }

    pub(crate) fn handle(&self) -> u64 {
        self.inner.handle
    }
}

impl std::fmt::Debug for ObjectRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectRef")
            .field("peer", &self.peer())
            .field("interfaces", &self.inner.interfaces)
            .finish_non_exhaustive()
    }
}
