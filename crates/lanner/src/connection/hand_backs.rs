//! Answers that hand back this side's own objects, and the peer's releases that wait for
//! them to be decoded.
//!
//! A callee that returns the caller's own object (a callback passed in, handed back)
//! lets go of its reference once the response is out, and its RELEASE may be read here
//! before the caller's code has decoded the result: the answer waits in its call's slot,
//! or is being decoded on another thread. Applied then, the release could unexport the
//! object, and the decoding would not find it. The callee marks such a response
//! ([`lanner_proto::frame::FLAG_HANDS_BACK`]) and the releases of references it handed
//! back ([`lanner_proto::frame::FLAG_HANDED_BACK`]); while any marked answer is undecoded,
//! the marked releases read meanwhile wait, and the last such answer to be decoded or
//! dropped applies them. The stream's order makes this exact: the callee sends its
//! release only after the response, so the response is counted before the release is
//! read. A release that waits only keeps a count higher for a while (counts are added
//! and taken in any order).

use std::collections::HashMap;
use std::ops::Deref;
use std::sync::{Arc, Weak};

use lanner_proto::Response;

use super::Connection;

/// The answers that hand back our objects not decoded yet, and the releases waiting for
/// them: how many times each handle was released. Only handles exported when their
/// release came are kept (a release of anything else would be ignored anyway), so the
/// map is bounded by the export table, whatever the peer sends, and nothing ever has to
/// be applied early.
#[derive(Default)]
pub(super) struct HandBacks {
    undecoded: usize,
    releases: HashMap<u64, u64, crate::id_hasher::IdBuildHasher>,
}

/// A response delivered to its caller, holding back the peer's later releases until it is
/// decoded or dropped if it hands back our objects. Reads as the [`Response`].
pub(crate) struct Answer {
    response: Response,
    _hold: Option<Hold>,
}

impl Deref for Answer {
    type Target = Response;

    fn deref(&self) -> &Response {
        &self.response
    }
}

/// One answer that hands back our objects, counted until it is dropped.
struct Hold(Weak<Connection>);

impl Drop for Hold {
    fn drop(&mut self) {
        // A connection already gone unexported everything with it.
        if let Some(connection) = self.0.upgrade() {
            connection.hand_back_decoded();
        }
    }
}

impl Connection {
    /// `response`, as delivered to its caller: counted (see the module's docs) if it
    /// hands back our objects. Called in the order responses are read, before any later
    /// frame is processed.
    pub(super) fn counted_answer(self: &Arc<Self>, response: Response) -> Answer {
        let hold = response.hands_back.then(|| {
            self.hand_backs().undecoded += 1;
            Hold(Arc::downgrade(self))
        });
        Answer {
            response,
            _hold: hold,
        }
    }

    /// The peer dropped its references to these objects of ours: unexported now, or, if
    /// those references were handed back to us (`handed_back`), once no answer that
    /// hands back our objects waits to be decoded. Releases of references never handed
    /// back cannot concern such an answer: they never wait, so an answer kept undecoded
    /// (a caller holding its call's future without polling it) holds back only what
    /// the peer handed back.
    pub(crate) fn released(self: &Arc<Self>, handles: &[u64], handed_back: bool) {
        if !handed_back {
            self.unexport(handles);
            return;
        }
        let exported: Vec<u64> = {
            let exports = self.exports();
            handles
                .iter()
                .copied()
                .filter(|handle| exports.is_exported(*handle))
                .collect()
        };
        let mut hand_backs = self.hand_backs();
        if hand_backs.undecoded == 0 {
            drop(hand_backs);
            self.unexport(&exported);
            return;
        }
        for handle in exported {
            let times = hand_backs.releases.entry(handle).or_default();
            *times = times.saturating_add(1);
        }
    }

    /// An answer counted by [`Connection::counted_answer`] was decoded or dropped: the releases
    /// that waited are applied if it was the last. On a task of their own: an answer may
    /// be dropped under the state's lock (one nobody waits for), and unexporting runs
    /// the user's `Drop` of the objects it frees, which may call on this connection.
    fn hand_back_decoded(self: &Arc<Self>) {
        let due = {
            let mut hand_backs = self.hand_backs();
            hand_backs.undecoded -= 1;
            if hand_backs.undecoded > 0 || hand_backs.releases.is_empty() {
                return;
            }
            std::mem::take(&mut hand_backs.releases)
        };
        let connection = self.clone();
        // Outside a runtime, or after it shut down: the connection goes away with it, and
        // its end unexports everything.
        drop(
            self.runtime
                .spawn(async move { connection.unexport_counted(due) }),
        );
    }

    /// Only [`Connection::counted_answer`], [`Connection::released`] and
    /// [`Connection::hand_back_decoded`] take this lock, and take no other inside it.
    fn hand_backs(&self) -> std::sync::MutexGuard<'_, HandBacks> {
        self.hand_backs.lock().unwrap_or_else(|e| e.into_inner())
    }
}
