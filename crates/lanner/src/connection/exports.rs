//! The objects a connection's peer may call, by handle.
//!
//! Handles are per connection and random, so they are capabilities: a peer can call only
//! what was handed to it on this connection, and cannot guess anything else. Lookup is one
//! hash probe whatever the number of objects. Each exported interface carries what the
//! peer may call on it (decided once, at export: see [`crate::access`]).

use std::collections::HashMap;
use std::sync::Arc;

use crate::access::{MethodAccess, PeerIdentity};
use crate::id_hasher::IdBuildHasher;
use crate::object::{Object, Stub};

/// The handle of the connection's root object (name resolution).
pub(crate) const ROOT_HANDLE: u64 = 0;

/// One interface of an exported object: its stub and what the peer may call on it.
pub(crate) struct ExportedSlot {
    pub(crate) stub: Arc<dyn Stub>,
    pub(crate) access: MethodAccess,
}

/// An exported object: held (so its identity is not reused while exported) and its
/// interfaces.
struct Exported {
    _object: Object,
    slots: Box<[Arc<ExportedSlot>]>,
}

pub(crate) struct ExportTable {
    by_handle: HashMap<u64, Exported, IdBuildHasher>,
    /// Handles by (object identity, published name): an object published under two names
    /// may be subject to different rules under each.
    by_identity: HashMap<(usize, Option<String>), u64>,
}

/// The peer may call nothing on the object it asked for.
pub(crate) struct Denied;

impl ExportTable {
    pub(crate) fn new() -> ExportTable {
        ExportTable {
            by_handle: HashMap::default(),
            by_identity: HashMap::default(),
        }
    }

    pub(crate) fn set_root(&mut self, root: Object) {
        let slots = slots(&root, |_| MethodAccess::All);
        self.by_handle.insert(
            ROOT_HANDLE,
            Exported {
                _object: root,
                slots,
            },
        );
    }

    /// Interface `slot` of object `handle`, or why there is none.
    pub(crate) fn slot(&self, handle: u64, slot: u16) -> Result<Arc<ExportedSlot>, String> {
        let slots = &self
            .by_handle
            .get(&handle)
            .ok_or_else(|| format!("no object with handle {handle:#x} on this connection"))?
            .slots;
        slots.get(usize::from(slot)).cloned().ok_or_else(|| {
            format!(
                "the object has {} interfaces; there is no interface slot {slot}",
                slots.len()
            )
        })
    }

    /// Exports `object` (published as `name`, if it was) to a peer who is `peer`,
    /// reusing its handle if it was exported before. Denied if the peer may call nothing
    /// on it.
    pub(crate) fn export(
        &mut self,
        object: &Object,
        name: Option<&str>,
        peer: &PeerIdentity,
    ) -> Result<u64, Denied> {
        let key = (object.identity(), name.map(str::to_owned));
        if let Some(handle) = self.by_identity.get(&key) {
            return Ok(*handle);
        }
        let slots = slots(object, |stub| peer.access(name, stub));
        if slots.iter().all(|slot| slot.access.is_none()) {
            return Err(Denied);
        }
        let handle = loop {
            let candidate: u64 = rand::random();
            if candidate != ROOT_HANDLE && !self.by_handle.contains_key(&candidate) {
                break candidate;
            }
        };
        self.by_handle.insert(
            handle,
            Exported {
                _object: object.clone(),
                slots,
            },
        );
        self.by_identity.insert(key, handle);
        Ok(handle)
    }
}

fn slots(object: &Object, access: impl Fn(&dyn Stub) -> MethodAccess) -> Box<[Arc<ExportedSlot>]> {
    object
        .stubs()
        .iter()
        .map(|stub| {
            Arc::new(ExportedSlot {
                stub: stub.clone(),
                access: access(stub.as_ref()),
            })
        })
        .collect()
}
