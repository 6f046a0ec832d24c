//! The calls this side has outstanding, by call id.
//!
//! A call made while no other is outstanding (a caller making its calls one after
//! another, the common case) is kept in a slot of its own rather than in the map: its
//! registration and its removal when the reply comes are a compare and a few stores,
//! where the map hashed the id, probed a group and moved a whole entry (about 140 bytes)
//! in and out. Both happen under the state's lock on the critical path of every
//! sequential call (`docs/decisions.md`, "Thirty-second session"). Calls made while one is
//! outstanding go to the map; the slot's call stays where it is until it is removed.

use std::collections::HashMap;

use super::calls::PendingCall;
use crate::id_hasher::IdBuildHasher;

/// Outstanding calls by call id (see the module docs).
#[derive(Default)]
pub(super) struct PendingCalls {
    /// The call registered while no other was outstanding, with its id.
    lone: Option<(u64, PendingCall)>,
    /// Every other outstanding call.
    others: HashMap<u64, PendingCall, IdBuildHasher>,
}

impl PendingCalls {
    /// Registers `call` as `call_id` (unique among the outstanding calls).
    pub(super) fn insert(&mut self, call_id: u64, call: PendingCall) {
        debug_assert!(self.get_mut(call_id).is_none(), "call id {call_id} reused");
        if self.lone.is_none() && self.others.is_empty() {
            self.lone = Some((call_id, call));
        } else {
            self.others.insert(call_id, call);
        }
    }

    /// The outstanding call `call_id`, if it is.
    pub(super) fn get_mut(&mut self, call_id: u64) -> Option<&mut PendingCall> {
        match &mut self.lone {
            Some((id, call)) if *id == call_id => Some(call),
            _ => self.others.get_mut(&call_id),
        }
    }

    /// Takes the call `call_id` out, if it is outstanding.
    pub(super) fn remove(&mut self, call_id: u64) -> Option<PendingCall> {
        match &self.lone {
            Some((id, _)) if *id == call_id => self.lone.take().map(|(_, call)| call),
            _ => self.others.remove(&call_id),
        }
    }

    /// How many calls are outstanding.
    pub(super) fn len(&self) -> usize {
        usize::from(self.lone.is_some()) + self.others.len()
    }

    /// Whether no call is outstanding.
    pub(super) fn is_empty(&self) -> bool {
        self.lone.is_none() && self.others.is_empty()
    }

    /// Keeps only the calls for which `keep` says so.
    pub(super) fn retain(&mut self, mut keep: impl FnMut(&mut PendingCall) -> bool) {
        if self.lone.as_mut().is_some_and(|(_, call)| !keep(call)) {
            self.lone = None;
        }
        self.others.retain(|_, call| keep(call));
    }

    /// Every outstanding call.
    pub(super) fn calls_mut(&mut self) -> impl Iterator<Item = &mut PendingCall> {
        self.lone
            .as_mut()
            .map(|(_, call)| call)
            .into_iter()
            .chain(self.others.values_mut())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(pending: &mut PendingCalls) -> Vec<u64> {
        let mut ids: Vec<u64> = [1u64, 2, 3, 4, 5]
            .into_iter()
            .filter(|&id| pending.get_mut(id).is_some())
            .collect();
        ids.sort_unstable();
        ids
    }

    #[test]
    fn calls_are_found_and_removed_whether_in_the_slot_or_the_map() {
        let mut pending = PendingCalls::default();
        assert!(pending.is_empty());
        pending.insert(1, PendingCall::default());
        pending.insert(2, PendingCall::default());
        pending.insert(3, PendingCall::default());
        assert!(pending.lone.as_ref().is_some_and(|(id, _)| *id == 1));
        assert_eq!((pending.len(), ids(&mut pending)), (3, vec![1, 2, 3]));
        // The slot's call leaves; the map's stay, and the slot is not refilled while
        // they are outstanding.
        assert!(pending.remove(1).is_some());
        assert!(pending.remove(1).is_none());
        pending.insert(4, PendingCall::default());
        assert!(pending.lone.is_none());
        assert_eq!((pending.len(), ids(&mut pending)), (3, vec![2, 3, 4]));
        assert!(pending.remove(2).is_some() && pending.remove(3).is_some());
        assert!(pending.remove(4).is_some());
        assert!(pending.is_empty());
        // Empty again: the next call takes the slot.
        pending.insert(5, PendingCall::default());
        assert!(pending.lone.as_ref().is_some_and(|(id, _)| *id == 5));
        assert_eq!(pending.calls_mut().count(), 1);
    }

    #[test]
    fn retain_applies_to_the_slot_and_the_map() {
        let mut pending = PendingCalls::default();
        for id in 1..=4 {
            pending.insert(id, PendingCall::default());
        }
        // Every other call goes, the slot's first.
        let mut seen = 0;
        pending.retain(|_| {
            seen += 1;
            seen % 2 == 0
        });
        assert_eq!(seen, 4);
        assert!(pending.lone.is_none());
        assert_eq!(pending.len(), 2);
        let mut emptied = PendingCalls::default();
        emptied.insert(7, PendingCall::default());
        emptied.retain(|_| false);
        assert!(emptied.is_empty() && emptied.lone.is_none());
    }
}
