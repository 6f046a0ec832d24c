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

use super::{Connection, calls};
use crate::object::Object;
use crate::occasional::occasionally;

/// How long released handles gather before they are sent (the timer's resolution).
const RELEASE_DELAY: std::time::Duration = std::time::Duration::from_millis(1);

/// The longest a release received waits for the answers that arrived before it to be
/// taken by their callers (see `Connection::released`).
const RELEASE_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// The most handles that wait to be released at once (see `release_when_answers_taken`).
const MAX_RELEASES_WAITING: usize = 1 << 16;

/// How often releases that wait for answers to be taken look again.
const RELEASE_RECHECK: std::time::Duration = std::time::Duration::from_millis(1);

/// The releases received while answers that arrived before them waited for their
/// callers, joined in one.
pub(super) struct WaitingRelease {
    /// The handles to release (one reference each).
    handles: Vec<u64>,
    /// The calls whose answers were waiting in their slots.
    after: Vec<u64>,
    /// When the release is applied whether they were taken or not (on the runtime's
    /// clock, which its timers use).
    until: tokio::time::Instant,
}

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
    pub(crate) fn release_remote(self: &Arc<Self>, handle: u64) {
        let mut queued = self.releases.lock().unwrap_or_else(|e| e.into_inner());
        queued.push(handle);
        if queued.len() > 1 {
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
            self.release_remote(handle);
        }
    }

    fn flush_releases(self: &Arc<Self>) {
        let handles = std::mem::take(&mut *self.releases.lock().unwrap_or_else(|e| e.into_inner()));
        let Some(peer_max) = self.with_open_proto(|proto| proto.peer_limits().max_frame_size)
        else {
            return;
        };
        // Within the peer's frame limit (as small as 4 KiB).
        let per_frame = (peer_max as usize - HEADER_LEN) / 8;
        for chunk in handles.chunks(per_frame.min(MAX_RELEASES_PER_FRAME)) {
            if self
                .send_frame(OutFrame::contiguous(encode_release(chunk)))
                .is_err()
            {
                return;
            }
        }
    }

    /// The peer dropped its references to these objects of ours. Not while answers that
    /// arrived before the release are still waiting for their callers to take them: an
    /// answer may hand one of these objects back to us (a callback the peer returns, then
    /// lets go of), and its caller, decoding it later, must still find the object. Those
    /// releases wait (see [`Connection::release_when_answers_taken`]).
    pub(crate) fn released(self: &Arc<Self>, handles: &[u64]) {
        let untaken = calls::answers_untaken(&self.state().pending);
        if untaken.is_empty() {
            self.unexport(handles);
        } else {
            self.release_when_answers_taken(handles.to_vec(), untaken);
        }
    }

    /// Unexports one reference of each of `handles` now (released by the peer, or counted
    /// for a message that will not be sent).
    pub(crate) fn unexport(&self, handles: &[u64]) {
        let unexported: Vec<_> = {
            let mut exports = self.exports();
            handles.iter().filter_map(|h| exports.release(*h)).collect()
        };
        // User objects are dropped here, outside the table's lock.
        self.drop_unexported(unexported);
    }

    /// Releases `handles` once none of the calls `after` has its answer waiting in its
    /// slot (each was taken, or its call went away), or after [`RELEASE_WAIT`] at most (a
    /// caller may keep its call's future without ever polling it again). Looked at every
    /// [`RELEASE_RECHECK`] by one task while one waits. A release that waits only keeps a
    /// count higher for a while: counts are added and taken in any order.
    fn release_when_answers_taken(self: &Arc<Self>, mut handles: Vec<u64>, after: Vec<u64>) {
        let mut waiting = self.releases_waiting();
        if let Some(release) = waiting.as_mut() {
            // Joined to the release waiting already, which now waits for the answers
            // untaken at this later time (those taken since do not matter), until the
            // earlier deadline: one entry, however many releases come meanwhile.
            release.handles.append(&mut handles);
            release.after = after;
            if release.handles.len() > MAX_RELEASES_WAITING {
                // A peer sending releases of what it never held, at length: applied now
                // (a handle not exported is ignored), as they were before releases waited.
                let due = std::mem::take(&mut release.handles);
                drop(waiting);
                self.unexport(&due);
            }
            // The task that looks at it runs already.
            return;
        }
        *waiting = Some(WaitingRelease {
            handles,
            after,
            until: tokio::time::Instant::now() + RELEASE_WAIT,
        });
        drop(waiting);
        let connection = self.clone();
        drop(self.runtime.spawn(async move {
            loop {
                tokio::time::sleep(RELEASE_RECHECK).await;
                // Decided under the lock (the state's taken inside it; nothing takes them
                // the other way round), so a release joining it either comes before
                // (and is applied with it) or finds none waiting (and starts this anew).
                let mut waiting = connection.releases_waiting();
                let Some(release) = waiting.as_ref() else {
                    return;
                };
                let due = connection.ended()
                    || tokio::time::Instant::now() >= release.until
                    || !calls::any_answer_untaken(&connection.state().pending, &release.after);
                if due {
                    let release = waiting.take();
                    drop(waiting);
                    if let Some(release) = release {
                        connection.unexport(&release.handles);
                    }
                    return;
                }
            }
        }));
    }

    fn releases_waiting(&self) -> std::sync::MutexGuard<'_, Option<WaitingRelease>> {
        self.releases_waiting
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Drops objects the peer no longer holds, outside every lock. Their `Drop` is the
    /// user's code, run on the connection's receiver (or on the task that applies the
    /// releases that waited, see [`Connection::released`]): one that panics is logged, and the
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
