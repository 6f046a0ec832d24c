//! The objects a connection's peer may call, by handle.
//!
//! Handles are per connection and random, so they are capabilities: a peer can call only
//! what was handed to it on this connection, and cannot guess anything else. Lookup is one
//! hash probe whatever the number of objects.

use std::collections::HashMap;

use crate::id_hasher::IdBuildHasher;
use std::sync::Arc;

use crate::object::{Object, Stub};

/// The handle of the connection's root object (name resolution).
pub(crate) const ROOT_HANDLE: u64 = 0;

pub(crate) struct ExportTable {
    by_handle: HashMap<u64, Object, IdBuildHasher>,
    by_identity: HashMap<usize, u64, IdBuildHasher>,
}

impl ExportTable {
    pub(crate) fn new() -> ExportTable {
        ExportTable {
            by_handle: HashMap::default(),
            by_identity: HashMap::default(),
        }
    }

    pub(crate) fn set_root(&mut self, root: Object) {
        self.by_handle.insert(ROOT_HANDLE, root);
    }

    /// The stub serving interface `slot` of object `handle`, or why there is none.
    pub(crate) fn stub(&self, handle: u64, slot: u16) -> Result<Arc<dyn Stub>, String> {
        let object = self
            .by_handle
            .get(&handle)
            .ok_or_else(|| format!("no object with handle {handle:#x} on this connection"))?;
        object.stub(slot).cloned().ok_or_else(|| {
            format!(
                "the object has {} interfaces; there is no interface slot {slot}",
                object.interfaces().len()
            )
        })
    }

    /// Exports `object`, reusing its handle if it was exported before.
    pub(crate) fn export(&mut self, object: &Object) -> u64 {
        if let Some(handle) = self.by_identity.get(&object.identity()) {
            return *handle;
        }
        let handle = loop {
            let candidate: u64 = rand::random();
            if candidate != ROOT_HANDLE && !self.by_handle.contains_key(&candidate) {
                break candidate;
            }
        };
        self.by_handle.insert(handle, object.clone());
        self.by_identity.insert(object.identity(), handle);
        handle
    }
}
