//! The objects a connection's peer may call, by handle.
//!
//! Handles are per connection and random, so they are capabilities: a peer can call only
//! what was handed to it on this connection, and cannot guess anything else. Lookup is one
//! hash probe whatever the number of objects. Each exported interface carries what the
//! peer may call on it (decided once, at export: see [`crate::access`]).

use std::collections::HashMap;
use std::sync::Arc;

use crate::access::{MethodAccess, PeerIdentity};
use crate::apartment::Apartment;
use crate::id_hasher::IdBuildHasher;
use crate::object::{Object, Stub};

/// The handle of the connection's root object (name resolution).
pub(crate) const ROOT_HANDLE: u64 = 0;

/// One interface of an exported object: its stub and what the peer may call on it.
pub(crate) struct ExportedSlot {
    pub(crate) stub: Arc<dyn Stub>,
    pub(crate) access: MethodAccess,
    /// The object's apartment, if its calls run one at a time.
    pub(crate) apartment: Option<Arc<Apartment>>,
}

/// An exported object: held (so its identity is not reused while exported), its
/// interfaces, and how many references to it the peer holds.
struct Exported {
    object: Object,
    slots: Box<[Arc<ExportedSlot>]>,
    /// References handed to the peer and not released yet (the root is never released).
    references: u64,
    /// The key it is found by in `by_identity`.
    key: (usize, Option<String>),
    /// Handed out by name resolution: a client can find it again by its URL.
    resolvable: bool,
}

pub(crate) struct ExportTable {
    by_handle: HashMap<u64, Exported, IdBuildHasher>,
    /// Handles by (object identity, published name): an object published under two names
    /// may be subject to different rules under each.
    by_identity: HashMap<(usize, Option<String>), u64>,
    /// Exported objects the peer could not find again if the connection closed (results,
    /// callbacks, created instances): while there are any, the connection is in use.
    unresolvable: usize,
}

/// The peer may call nothing on the object it asked for.
pub(crate) struct Denied;

impl ExportTable {
    pub(crate) fn new() -> ExportTable {
        ExportTable {
            by_handle: HashMap::default(),
            by_identity: HashMap::default(),
            unresolvable: 0,
        }
    }

    pub(crate) fn set_root(&mut self, root: Object) {
        let slots = slots(&root, |_| MethodAccess::All);
        self.by_handle.insert(
            ROOT_HANDLE,
            Exported {
                key: (root.identity(), None),
                object: root,
                slots,
                references: 1,
                resolvable: true,
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

    /// The object exported as `handle`, if any.
    pub(crate) fn object(&self, handle: u64) -> Option<Object> {
        self.by_handle
            .get(&handle)
            .map(|exported| exported.object.clone())
    }

    /// Exports `object` (published as `name`, if it was) to a peer who is `peer`,
    /// reusing its handle if it was exported before, and counts one more reference the
    /// peer holds (see [`ExportTable::release`]). Denied if the peer may call nothing on
    /// it.
    pub(crate) fn export(
        &mut self,
        object: &Object,
        name: Option<&str>,
        resolvable: bool,
        peer: &PeerIdentity,
    ) -> Result<u64, Denied> {
        let key = (object.identity(), name.map(str::to_owned));
        if let Some(handle) = self.by_identity.get(&key) {
            if let Some(exported) = self.by_handle.get_mut(handle) {
                exported.references += 1;
            }
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
        self.by_identity.insert(key.clone(), handle);
        self.unresolvable += usize::from(!resolvable);
        self.by_handle.insert(
            handle,
            Exported {
                object: object.clone(),
                slots,
                references: 1,
                key,
                resolvable,
            },
        );
        Ok(handle)
    }

    /// The peer dropped one reference to `handle`: the object is unexported (and dropped,
    /// unless someone else holds it) with its last one. Returns the object if it was
    /// unexported, so that the caller drops it outside the table's lock. A handle the peer
    /// does not hold (never handed, released already, the root) is ignored: the peer can
    /// only confuse itself.
    pub(crate) fn release(&mut self, handle: u64) -> Option<Object> {
        if handle == ROOT_HANDLE {
            return None;
        }
        let exported = self.by_handle.get_mut(&handle)?;
        exported.references -= 1;
        if exported.references > 0 {
            return None;
        }
        let exported = self.by_handle.remove(&handle)?;
        self.by_identity.remove(&exported.key);
        self.unresolvable -= usize::from(!exported.resolvable);
        Some(exported.object)
    }

    /// Whether the peer holds references it could not find again (see `unresolvable`).
    pub(crate) fn holds_unresolvable(&self) -> bool {
        self.unresolvable > 0
    }

    /// Unexports everything (the connection ended); returns the objects, to be dropped
    /// outside the table's lock.
    pub(crate) fn clear(&mut self) -> Vec<Object> {
        self.by_identity.clear();
        self.unresolvable = 0;
        self.by_handle
            .drain()
            .map(|(_, exported)| exported.object)
            .collect()
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
                apartment: object.apartment().cloned(),
            })
        })
        .collect()
}
