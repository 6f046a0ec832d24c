//! Distributed reference counting: which of the peer's objects this side still holds, and
//! which of ours the peer still holds.
//!
//! Each reference the peer receives counts one on the exporting side (see
//! [`super::ExportTable::release`]). When the last clone of a reference is dropped here,
//! its handle is queued; a task sends everything queued in one RELEASE frame a moment
//! later ([`RELEASE_DELAY`]), so dropping many references costs one message, not one each.
//! Nothing waits for a release, so the delay costs nothing but the object's lifetime on
//! the peer. A connection that ends unexports everything it held.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use lanner_proto::OutFrame;
use lanner_proto::frame::{HEADER_LEN, MAX_RELEASES_PER_FRAME, encode_release};

use super::Connection;
use crate::object::Object;
use crate::occasional::occasionally;

/// How long released handles gather before they are sent (the timer's resolution).
const RELEASE_DELAY: std::time::Duration = std::time::Duration::from_millis(1);

impl Connection {
    /// This side now holds one more reference to an object of the peer that it could
    /// not find again if the connection closed (one received in a message, or a created
    /// instance, not one found by URL): while it holds any, the connection is in use and
    /// an idle timeout leaves it open.
    pub(crate) fn reference_held(&self) {
        self.references_held.fetch_add(1, Ordering::Relaxed);
    }

    /// One reference counted by [`Connection::reference_held`] is gone (dropped, or its
    /// count handed over).
    pub(crate) fn reference_let_go(&self) {
        let before = self.references_held.fetch_sub(1, Ordering::Relaxed);
        debug_assert!(before > 0, "a reference let go that was never counted");
    }

    /// Whether this side holds references counted by [`Connection::reference_held`].
    pub(crate) fn holds_peer_references(&self) -> bool {
        self.references_held.load(Ordering::Relaxed) > 0
    }

    /// A reference to the peer's object `handle` was dropped: tell the peer (batched).
    /// `handed_back`: the reference was handed back to the peer in a message (see
    /// [`lanner_proto::frame::FLAG_HANDED_BACK`]).
    pub(crate) fn release_remote(self: &Arc<Self>, handle: u64, handed_back: bool) {
        let mut queued = self.releases.lock().unwrap_or_else(|e| e.into_inner());
        match handed_back {
            false => queued.plain.push(handle),
            true => queued.handed_back.push(handle),
        }
        if queued.plain.len() + queued.handed_back.len() > 1 {
            // A flush is already on its way.
            return;
        }
        drop(queued);
        let connection = self.clone();
        // Dropped outside a runtime, or after it shut down: the connection is going
        // away with it, and its end releases everything on the peer's side anyway.
        drop(self.runtime.spawn(async move {
            tokio::time::sleep(RELEASE_DELAY).await;
            connection.flush_releases();
        }));
    }

    /// Releases each of `handles` once: the peer's objects a received message listed in
    /// its reference table (see [`lanner_proto::frame::FLAG_REFERENCES`]), whose
    /// references this side could not take (the value failed to decode, or a one-way
    /// call's arguments went unread).
    pub(crate) fn release_listed(self: &Arc<Self>, handles: impl Iterator<Item = u64>) {
        for handle in handles {
            self.release_remote(handle, false);
        }
    }

    fn flush_releases(self: &Arc<Self>) {
        let queued = std::mem::take(&mut *self.releases.lock().unwrap_or_else(|e| e.into_inner()));
        let Some(peer_max) = self.with_open_proto(|proto| proto.peer_limits().max_frame_size)
        else {
            return;
        };
        // Within the peer's frame limit (as small as 4 KiB).
        let per_frame = ((peer_max as usize - HEADER_LEN) / 8).min(MAX_RELEASES_PER_FRAME);
        for (handles, handed_back) in [(queued.plain, false), (queued.handed_back, true)] {
            for chunk in handles.chunks(per_frame) {
                let frame = encode_release(chunk, handed_back);
                if self.send_frame(OutFrame::contiguous(frame)).is_err() {
                    return;
                }
            }
        }
    }
}

/// Handles of the peer's objects whose last reference here was dropped, waiting for the
/// next RELEASE frames: those never handed back to the peer, and those that were (sent
/// apart, flagged, see [`lanner_proto::frame::FLAG_HANDED_BACK`]).
#[derive(Default)]
pub(super) struct QueuedReleases {
    plain: Vec<u64>,
    handed_back: Vec<u64>,
}

impl Connection {
    /// Unexports `times` references of each handle now (the peer's releases that waited).
    pub(crate) fn unexport_counted(&self, counts: impl IntoIterator<Item = (u64, u64)>) {
        let unexported: Vec<_> = {
            let mut exports = self.exports();
            counts
                .into_iter()
                .filter_map(|(handle, times)| exports.release_times(handle, times))
                .collect()
        };
        // User objects are dropped here, outside the table's lock.
        self.drop_unexported(unexported);
    }

    /// Unexports one reference of each of `handles` now (released by the peer, or counted
    /// for a message that will not be sent).
    pub(crate) fn unexport(&self, handles: &[u64]) {
        self.unexport_counted(handles.iter().map(|handle| (*handle, 1)));
    }

    /// Drops objects the peer no longer holds, outside every lock. Their `Drop` is the
    /// user's code, run on the connection's receiver (or on the task that applies the
    /// releases that waited, see `hand_backs`): one that panics is logged, and the
    /// connection goes on. One at a time: a second panic while the first unwinds through
    /// a collection's drop would abort the process.
    pub(super) fn drop_unexported(&self, objects: Vec<Object>) {
        for object in objects {
            let dropped = std::panic::catch_unwind(AssertUnwindSafe(|| drop(object)));
            if let Err(panic) = dropped {
                let message = crate::error::panic_message(panic.as_ref());
                // A peer can have such objects made and let go of without end.
                occasionally!(error, peer = %self.peer, %message, "dropping an object the peer let go of panicked");
            }
        }
    }
}
