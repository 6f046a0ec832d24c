//! The objects a connection's peer may call, by handle.
//!
//! Handles are per connection, so they are capabilities: a peer can call only what was
//! handed to it on this connection. A handle is the object's index in this connection's
//! table (low 24 bits) and a random 40-bit tag drawn when the object was exported: lookup
//! is one array access (one cache miss for a cold object, where a hash table costs two),
//! and a handle that was never handed over, or was released, names no object: its tag
//! does not match (a stale handle never reaches an object exported later in its place).
//! Guessing a tag gains a peer nothing it does not have: the table holds only what was
//! handed to this very peer. Each exported interface carries what the peer may call on it
//! (decided once, at export: see [`crate::access`]).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};

use smallvec::SmallVec;

use crate::access::{MethodAccess, PeerIdentity};
use crate::apartment::Apartment;
use crate::direct::Direct;
use crate::object::{Object, Stub};
use crate::prefetch::prefetch_line;

/// The handle of the connection's root object (name resolution): index 0, tag 0.
pub(crate) const ROOT_HANDLE: u64 = 0;

/// Bits of a handle that index the table.
const INDEX_BITS: u32 = 24;
const INDEX_MASK: u64 = (1 << INDEX_BITS) - 1;

/// The most objects one connection may have exported at once (the index space): a peer
/// cannot make a server hold objects without bound.
pub(crate) const MAX_EXPORTS: usize = 1 << INDEX_BITS;

/// One interface of an exported object: how calls reach its implementation and what the
/// peer may call on it. Cheap to clone (a call takes a copy, so the table's lock is not
/// held while it runs).
#[derive(Clone)]
pub(crate) struct ExportedSlot {
    pub(crate) direct: Direct,
    pub(crate) access: MethodAccess,
    /// The object's apartment, if its calls run one at a time.
    pub(crate) apartment: Option<Arc<Apartment>>,
}

/// What a call reads of an exported object: its handle and its interfaces, in one cache
/// line, so a call through a cold object misses once here. The rest of what the table
/// keeps per object ([`Holding`]) is apart: with many objects, the array calls index is
/// half the size it would be with everything together, which keeps more of it cached.
#[repr(C, align(64))]
struct Exported {
    /// [`FREE`] for an index not in use.
    handle: u64,
    slots: SmallVec<[ExportedSlot; 1]>,
}

// What a call reads must be one cache line.
const _: () = assert!(std::mem::size_of::<Exported>() == 64);

/// The part of an exported object only exporting and releasing read (same index as its
/// [`Exported`]): held (so its identity is not reused while exported), and how many
/// references to it the peer holds.
struct Holding {
    /// References handed to the peer and not released yet (the root is never released).
    references: u64,
    /// `None` for an index not in use.
    object: Option<Object>,
    /// The key it is found by in `by_identity`.
    key: (usize, Option<String>),
    /// Handed out by name resolution: a client can find it again by its URL.
    resolvable: bool,
}

/// The handle of an index not in use: no handle a peer can name (no tag is all ones).
const FREE: u64 = u64::MAX;

impl Exported {
    fn free() -> Exported {
        Exported {
            handle: FREE,
            slots: SmallVec::new(),
        }
    }
}

impl Holding {
    fn free() -> Holding {
        Holding {
            references: 0,
            object: None,
            key: (0, None),
            resolvable: true,
        }
    }
}

/// Where the table's entries are, readable without the table's lock: for a receiver to
/// ask for the entry a request names while it decodes the request (see
/// [`EntriesView::prefetch`]). Published by the table after every change that may move
/// or resize its entries.
#[derive(Debug, Default)]
pub(crate) struct EntriesView {
    base: AtomicPtr<u8>,
    len: AtomicUsize,
}

impl EntriesView {
    /// Asks the cache for the entry `handle` would name (its index only: the tag is
    /// checked at the lookup, under the lock). With many objects exported the entry is
    /// usually not cached, and the lookup waits for it after the request is decoded; asked
    /// for first, it arrives meanwhile. The position and the length are read apart, and
    /// may be from before the table last grew or shrank: then the line asked for is one
    /// the lookup does not read (or memory given back), which costs the hint and nothing
    /// else.
    pub(crate) fn prefetch(&self, handle: u64) {
        let index = (handle & INDEX_MASK) as usize;
        if index < self.len.load(Ordering::Relaxed) {
            let base = self.base.load(Ordering::Relaxed);
            prefetch_line(base.wrapping_add(index * std::mem::size_of::<Exported>()));
        }
    }
}

pub(crate) struct ExportTable {
    /// Exported objects by index (entries whose handle is [`FREE`] are not in use).
    entries: Vec<Exported>,
    /// Where `entries` is, for lock-free readers.
    view: Arc<EntriesView>,
    /// The rest of each exported object, by the same index.
    holdings: Vec<Holding>,
    /// Free indexes, reused last-freed first. Some may be past the table's end, cut off by
    /// [`ExportTable::trim`] (`stale_free` of them): skipped when reused.
    free: Vec<u32>,
    /// How many of `free` are past the table's end.
    stale_free: usize,
    /// Handles by (object identity, published name): an object published under two names
    /// may be subject to different rules under each.
    by_identity: HashMap<(usize, Option<String>), u64>,
    /// Exported objects the peer could not find again if the connection closed (results,
    /// callbacks, created instances): while there are any, the connection is in use.
    unresolvable: usize,
    /// The connection ended ([`ExportTable::close`]): nothing is exported any more.
    closed: bool,
}

/// Why an object was not exported.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Denied {
    /// The peer may call nothing on it.
    Nothing,
    /// The connection has [`MAX_EXPORTS`] objects exported.
    Full,
    /// The connection ended: nobody will call through the handle.
    Closed,
}

impl ExportTable {
    pub(crate) fn new() -> ExportTable {
        ExportTable {
            entries: Vec::new(),
            view: Arc::default(),
            holdings: Vec::new(),
            free: Vec::new(),
            stale_free: 0,
            by_identity: HashMap::default(),
            unresolvable: 0,
            closed: false,
        }
    }

    /// Where the entries are, for looking ahead without the lock (kept up to date).
    pub(crate) fn view(&self) -> Arc<EntriesView> {
        self.view.clone()
    }

    /// Tells [`ExportTable::view`] where the entries are now: after every change that may
    /// have moved or resized them.
    fn publish_view(&self) {
        self.view.base.store(
            self.entries.as_ptr().cast::<u8>().cast_mut(),
            Ordering::Relaxed,
        );
        self.view.len.store(self.entries.len(), Ordering::Relaxed);
    }

    /// The index `handle` names, if it is exported (its tag matches).
    fn index_of(&self, handle: u64) -> Option<usize> {
        let index = (handle & INDEX_MASK) as usize;
        self.entries
            .get(index)
            .filter(|entry| entry.handle == handle && handle != FREE)
            .map(|_| index)
    }

    /// The entry `handle` names, if it is exported.
    fn entry(&self, handle: u64) -> Option<&Exported> {
        self.index_of(handle).map(|index| &self.entries[index])
    }

    pub(crate) fn set_root(&mut self, root: Object) {
        let slots = slots(&root, |_| MethodAccess::All);
        let entry = Exported {
            handle: ROOT_HANDLE,
            slots,
        };
        let holding = Holding {
            references: 1,
            key: (root.identity(), None),
            object: Some(root),
            resolvable: true,
        };
        if self.entries.is_empty() {
            self.entries.push(entry);
            self.holdings.push(holding);
            self.publish_view();
        } else {
            self.entries[0] = entry;
            self.holdings[0] = holding;
        }
    }

    /// Interface `slot` of object `handle`, or why there is none.
    pub(crate) fn slot(&self, handle: u64, slot: u16) -> Result<ExportedSlot, String> {
        let slots = &self
            .entry(handle)
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
        self.holdings[self.index_of(handle)?].object.clone()
    }

    /// The object exported as `handle`, if any, with the name it was exported under (whose
    /// rules the peer's calls on it obey).
    pub(crate) fn object_and_name(&self, handle: u64) -> Option<(Object, Option<String>)> {
        let holding = &self.holdings[self.index_of(handle)?];
        Some((holding.object.clone()?, holding.key.1.clone()))
    }

    /// Exports `object` (published as `name`, if it was) to a peer who is `peer`,
    /// reusing its handle if it was exported before, and counts one more reference the
    /// peer holds (see [`ExportTable::release`]). Denied if the peer may call nothing on
    /// it, or the table is full.
    pub(crate) fn export(
        &mut self,
        object: &Object,
        name: Option<&str>,
        resolvable: bool,
        peer: &PeerIdentity,
    ) -> Result<u64, Denied> {
        if self.closed {
            // Kept, the object would live as long as the dead connection's memory: a
            // method that finishes after its caller went away must not leak its result.
            return Err(Denied::Closed);
        }
        let key = (object.identity(), name.map(str::to_owned));
        if let Some(handle) = self.by_identity.get(&key).copied() {
            if let Some(index) = self.index_of(handle) {
                let holding = &mut self.holdings[index];
                holding.references += 1;
                // Resolved by name first, now handed out another way (a result, say):
                // the peer may hold a reference it could not find again.
                if holding.resolvable && !resolvable {
                    holding.resolvable = false;
                    self.unresolvable += 1;
                }
            }
            return Ok(handle);
        }
        let slots = slots(object, |stub| peer.access(name, stub));
        if slots.iter().all(|slot| slot.access.is_none()) {
            return Err(Denied::Nothing);
        }
        let reused = loop {
            match self.free.pop() {
                Some(index) if (index as usize) < self.entries.len() => break Some(index as usize),
                Some(_) => self.stale_free -= 1,
                None => break None,
            }
        };
        let index = match reused {
            Some(index) => index,
            None if self.entries.len() < MAX_EXPORTS => {
                // Index 0 is the root's, even on a connection without one.
                if self.entries.is_empty() {
                    self.entries.push(Exported::free());
                    self.holdings.push(Holding::free());
                }
                self.entries.push(Exported::free());
                self.holdings.push(Holding::free());
                self.publish_view();
                self.entries.len() - 1
            }
            None => return Err(Denied::Full),
        };
        // A tag of 0 would make index 0 the root's handle; all ones could make FREE.
        let tag = loop {
            let tag = rand::random::<u64>() >> INDEX_BITS;
            if tag != 0 && tag != FREE >> INDEX_BITS {
                break tag;
            }
        };
        let handle = (tag << INDEX_BITS) | index as u64;
        self.by_identity.insert(key.clone(), handle);
        self.unresolvable += usize::from(!resolvable);
        self.entries[index] = Exported { handle, slots };
        self.holdings[index] = Holding {
            references: 1,
            object: Some(object.clone()),
            key,
            resolvable,
        };
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
        let index = self.index_of(handle)?;
        let holding = &mut self.holdings[index];
        holding.references -= 1;
        if holding.references > 0 {
            return None;
        }
        self.entries[index] = Exported::free();
        let holding = std::mem::replace(&mut self.holdings[index], Holding::free());
        self.free.push(index as u32);
        self.by_identity.remove(&holding.key);
        self.unresolvable -= usize::from(!holding.resolvable);
        if index + 1 == self.entries.len() {
            self.trim();
        }
        holding.object
    }

    /// Cuts off the free entries at the table's end (the object at its end was just
    /// released) and gives back the memory the table no longer needs: after a peak of
    /// exports, a long-lived connection keeps what its highest index in use needs, not
    /// what the peak did. Each entry is cut off once, after it was freed once: constant
    /// time per release, amortized.
    fn trim(&mut self) {
        let before = self.entries.len();
        // Index 0 stays: the root's, or kept for it.
        while self.entries.len() > 1 && self.entries.last().is_some_and(|e| e.handle == FREE) {
            self.entries.pop();
            self.holdings.pop();
        }
        // Every entry cut off was free, so listed in `free`.
        self.stale_free += before - self.entries.len();
        if self.stale_free * 2 > self.free.len() {
            let len = self.entries.len();
            self.free.retain(|&index| (index as usize) < len);
            self.stale_free = 0;
        }
        shrink(&mut self.entries);
        self.publish_view();
        shrink(&mut self.holdings);
        shrink(&mut self.free);
        if self.by_identity.capacity() > 4 * self.by_identity.len() + 64 {
            self.by_identity.shrink_to(2 * self.by_identity.len());
        }
    }

    /// [`ExportTable::release`] `times` times at once (the peer's releases of `handle`
    /// that waited, see `hand_backs`): unexports the object if that is all the
    /// references the peer holds, or more.
    pub(crate) fn release_times(&mut self, handle: u64, times: u64) -> Option<Object> {
        if times == 0 || handle == ROOT_HANDLE {
            return None;
        }
        let index = self.index_of(handle)?;
        let holding = &mut self.holdings[index];
        holding.references = holding.references.saturating_sub(times - 1).max(1);
        self.release(handle)
    }

    /// Whether `handle` names an object exported now.
    pub(crate) fn is_exported(&self, handle: u64) -> bool {
        self.index_of(handle).is_some()
    }

    /// Whether the peer holds references it could not find again (see `unresolvable`).
    pub(crate) fn holds_unresolvable(&self) -> bool {
        self.unresolvable > 0
    }

    /// Unexports everything and refuses exports from now on (the connection ended);
    /// returns the objects, to be dropped outside the table's lock.
    pub(crate) fn close(&mut self) -> Vec<Object> {
        self.closed = true;
        self.by_identity.clear();
        self.free.clear();
        self.unresolvable = 0;
        self.entries.clear();
        self.publish_view();
        self.holdings
            .drain(..)
            .filter_map(|holding| holding.object)
            .collect()
    }
}

/// Gives back most of `items`' spare memory once it is under a quarter used.
fn shrink<T>(items: &mut Vec<T>) {
    if items.capacity() > 4 * items.len() + 64 {
        items.shrink_to(2 * items.len());
    }
}

fn slots(
    object: &Object,
    access: impl Fn(&dyn Stub) -> MethodAccess,
) -> SmallVec<[ExportedSlot; 1]> {
    object
        .stubs()
        .iter()
        .map(|stub| ExportedSlot {
            direct: Direct::of(stub),
            access: access(stub.as_ref()),
            apartment: object.apartment().cloned(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::access::PeerIdentity;
    use crate::auth::Principal;

    fn object() -> Object {
        crate::root::root_object(Default::default())
    }

    fn anyone() -> PeerIdentity {
        PeerIdentity::new(Principal::Anonymous, None, None)
    }

    #[test]
    fn a_released_handle_never_reaches_the_object_exported_in_its_place() {
        let mut table = ExportTable::new();
        let peer = anyone();
        let first = table.export(&object(), None, false, &peer).unwrap();
        assert!(table.slot(first, 0).is_ok());
        assert!(table.release(first).is_some());
        let second = table.export(&object(), None, false, &peer).unwrap();
        // Same index, another tag.
        assert_eq!(first & INDEX_MASK, second & INDEX_MASK);
        assert_ne!(first, second);
        assert!(table.slot(first, 0).is_err());
        assert!(table.object(first).is_none());
        assert!(table.release(first).is_none());
        assert!(table.slot(second, 0).is_ok());
    }

    /// Whether `table`'s view says where its entries are now.
    fn view_is_current(table: &ExportTable, view: &EntriesView) -> bool {
        view.base.load(Ordering::Relaxed).cast_const() == table.entries.as_ptr().cast::<u8>()
            && view.len.load(Ordering::Relaxed) == table.entries.len()
    }

    #[test]
    fn the_entries_view_follows_the_table_as_it_grows_shrinks_and_closes() {
        let mut table = ExportTable::new();
        let view = table.view();
        let peer = anyone();
        table.set_root(object());
        assert!(view_is_current(&table, &view));
        // Growing moves the entries more than once.
        let handles: Vec<u64> = (0..1_000)
            .map(|_| table.export(&object(), None, false, &peer).unwrap())
            .collect();
        assert!(view_is_current(&table, &view));
        view.prefetch(handles[999]);
        // Releasing from the end cuts the table and gives memory back.
        for &handle in handles.iter().rev().take(990) {
            assert!(table.release(handle).is_some());
        }
        assert_eq!(table.entries.len(), 11);
        assert!(view_is_current(&table, &view));
        // A handle past the end, or one from before the table shrank: a hint, nothing more.
        view.prefetch(handles[999]);
        view.prefetch(u64::MAX);
        drop(table.close());
        assert!(view_is_current(&table, &view));
        assert_eq!(view.len.load(Ordering::Relaxed), 0);
        view.prefetch(handles[0]);
    }

    #[test]
    fn a_table_gives_back_its_memory_after_a_peak() {
        let mut table = ExportTable::new();
        let peer = anyone();
        let handles: Vec<u64> = (0..10_000)
            .map(|_| table.export(&object(), None, false, &peer).unwrap())
            .collect();
        // Index 0 is kept for the root: the eleventh export has index 11.
        let kept = handles[10];
        for &handle in handles.iter().filter(|&&handle| handle != kept) {
            assert!(table.release(handle).is_some());
        }
        assert_eq!(
            table.entries.len(),
            12,
            "cut off after the one still in use"
        );
        assert!(
            table.entries.capacity() < 100,
            "{}",
            table.entries.capacity()
        );
        assert!(table.holdings.capacity() < 100);
        assert_eq!(table.free.len(), 10, "the free indexes below it");
        assert!(table.free.capacity() < 100);
        assert!(table.slot(kept, 0).is_ok());
        assert!(table.slot(handles[9_999], 0).is_err());
        assert!(table.release(handles[9_999]).is_none());
        // New exports take the free indexes below it first, then grow the table again.
        let again: Vec<u64> = (0..20)
            .map(|_| table.export(&object(), None, false, &peer).unwrap())
            .collect();
        let mut indexes: Vec<u64> = again.iter().map(|handle| handle & INDEX_MASK).collect();
        indexes.sort_unstable();
        let expected: Vec<u64> = (1..=10).chain(12..=21).collect();
        assert_eq!(indexes, expected);
        assert!(again.iter().all(|&handle| table.slot(handle, 0).is_ok()));
        // A released handle whose index was cut off and is in use again names nothing.
        assert!(table.slot(handles[11], 0).is_err());
    }

    proptest::proptest! {
        /// Against a model (the handles exported and not released): every handle in it
        /// names its object, every handle released names nothing, and the table is no
        /// longer than its highest index in use needs.
        #[test]
        fn exports_and_releases_in_any_order_agree_with_a_model(
            steps in proptest::collection::vec((0u8..3, 0usize..64), 1..400),
        ) {
            let mut table = ExportTable::new();
            let peer = anyone();
            // Handle, object, references the peer holds.
            let mut live: Vec<(u64, Object, u32)> = Vec::new();
            let mut released: Vec<u64> = Vec::new();
            for (step, pick) in steps {
                match step {
                    // Exported again: the same handle, one more reference.
                    2 if !live.is_empty() => {
                        let at = pick % live.len();
                        let again = table.export(&live[at].1, None, false, &peer).unwrap();
                        proptest::prop_assert_eq!(again, live[at].0);
                        live[at].2 += 1;
                    }
                    1 if !live.is_empty() => {
                        let at = pick % live.len();
                        let dropped = table.release(live[at].0);
                        live[at].2 -= 1;
                        if live[at].2 == 0 {
                            let (handle, object, _) = live.swap_remove(at);
                            let dropped = dropped.expect("the last reference");
                            proptest::prop_assert_eq!(dropped.identity(), object.identity());
                            released.push(handle);
                        } else {
                            proptest::prop_assert!(dropped.is_none());
                        }
                    }
                    _ => {
                        let object = object();
                        let handle = table.export(&object, None, false, &peer).unwrap();
                        live.push((handle, object, 1));
                    }
                }
                for (handle, object, _) in &live {
                    let found = table.object(*handle).expect("a live handle");
                    proptest::prop_assert_eq!(found.identity(), object.identity());
                }
                for handle in &released {
                    proptest::prop_assert!(table.slot(*handle, 0).is_err());
                }
                // The table ends with an entry in use (or index 0, kept for the root).
                let highest = live.iter().map(|(h, _, _)| (h & INDEX_MASK) as usize).max();
                proptest::prop_assert_eq!(table.entries.len(), highest.map_or(1, |h| h + 1));
            }
        }
    }

    #[test]
    fn a_closed_table_gives_back_what_it_held_and_keeps_nothing_new() {
        let mut table = ExportTable::new();
        let peer = anyone();
        let before = table.export(&object(), None, false, &peer).unwrap();
        assert_eq!(table.close().len(), 1);
        assert!(table.slot(before, 0).is_err());
        assert_eq!(
            table.export(&object(), None, false, &peer),
            Err(Denied::Closed)
        );
        assert!(table.close().is_empty(), "an object was kept after closing");
    }

    #[test]
    fn handles_are_counted_per_reference_and_never_the_root() {
        let mut table = ExportTable::new();
        let peer = anyone();
        let shared = object();
        let handle = table.export(&shared, None, false, &peer).unwrap();
        assert_eq!(table.export(&shared, None, false, &peer), Ok(handle));
        assert_ne!(handle, ROOT_HANDLE);
        assert!(table.holds_unresolvable());
        assert!(table.release(handle).is_none());
        assert!(table.release(handle).is_some());
        assert!(!table.holds_unresolvable());
        assert!(table.slot(ROOT_HANDLE, 0).is_err(), "no root on this table");
        assert!(table.slot(FREE, 0).is_err());
        assert!(table.release(FREE).is_none());
    }

    #[test]
    fn an_object_resolved_by_name_and_then_handed_out_otherwise_is_unresolvable() {
        let mut table = ExportTable::new();
        let peer = anyone();
        let shared = object();
        let handle = table.export(&shared, Some("svc"), true, &peer).unwrap();
        assert!(
            !table.holds_unresolvable(),
            "found by name: it can be found again"
        );
        assert_eq!(table.export(&shared, Some("svc"), false, &peer), Ok(handle));
        assert!(table.holds_unresolvable(), "also handed out as a result");
        // It stays so until the peer holds none of it (it cannot say which it dropped).
        assert!(table.release(handle).is_none());
        assert!(table.holds_unresolvable());
        assert!(table.release(handle).is_some());
        assert!(!table.holds_unresolvable());
    }

    #[test]
    fn unknown_handles_and_slots_are_named_in_the_error() {
        let mut table = ExportTable::new();
        table.set_root(object());
        assert!(table.slot(ROOT_HANDLE, 0).is_ok());
        let error = table.slot(ROOT_HANDLE, 3).err().unwrap();
        assert!(error.contains("no interface slot 3"), "{error}");
        let error = table.slot(0xdead_beef, 0).err().unwrap();
        assert!(
            error.contains("no object with handle 0xdeadbeef"),
            "{error}"
        );
        assert!(table.release(ROOT_HANDLE).is_none());
        assert_eq!(table.close().len(), 1);
    }
}
