//! The closer thread: closes descriptors whose close a hostile peer may have made slow.
//!
//! Closing a descriptor can block. The final close of a TCP socket with `SO_LINGER` set
//! and unsent data waits up to the linger time, and a peer can pass us such a socket
//! (`SCM_RIGHTS`). So can the final close of a Unix socket whose receive queue holds
//! messages with descriptors attached: the kernel closes those with it. None of these
//! closes may run on a thread that serves other connections (a runtime worker), so they
//! are handed to one thread, started on first use and fed by a channel, which closes them
//! in turn.
//!
//! That thread can itself be held up for as long as a peer's socket lingers, and then
//! closes what was handed to it after that one only later: descriptors stay open longer,
//! nothing else waits. Peers that must learn at once that a socket was dropped are told
//! by a `shutdown` first ([`crate::doorbell::Doorbell`] does that when dropped).

use std::fmt;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::sync::{Mutex, PoisonError, mpsc};

/// The closer thread's queue, once the thread is started.
static CLOSER: Mutex<Option<mpsc::Sender<OwnedFd>>> = Mutex::new(None);

/// Held by a test, keeps the closer thread from closing anything (see [`pause`]).
#[cfg(test)]
static PAUSE: Mutex<()> = Mutex::new(());

/// Keeps the closer thread from closing anything until the guard is dropped: a test can
/// then see that a descriptor handed to it is still open when the call that received it
/// has returned (the kernel closes one that found no room before that).
#[cfg(test)]
pub(crate) fn pause() -> std::sync::MutexGuard<'static, ()> {
    PAUSE.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Closes `fds` on the closer thread, in the order given, without waiting.
///
/// If the thread cannot be started (the process is out of threads or memory), they are
/// closed here and now: a descriptor leak would be worse than the rare stall.
pub fn close_later(fds: impl IntoIterator<Item = OwnedFd>) {
    let mut closer = CLOSER.lock().unwrap_or_else(PoisonError::into_inner);
    if closer.is_none() {
        *closer = start();
    }
    let Some(sender) = closer.as_ref() else {
        drop(closer);
        fds.into_iter().for_each(drop);
        return;
    };
    for fd in fds {
        // Fails only if the thread is gone, which it never is (it loops until the sender,
        // a static, is dropped): the descriptor then comes back and is closed here.
        if let Err(mpsc::SendError(fd)) = sender.send(fd) {
            drop(fd);
        }
    }
}

/// Starts the closer thread; `None` if it cannot be.
fn start() -> Option<mpsc::Sender<OwnedFd>> {
    let (sender, receiver) = mpsc::channel::<OwnedFd>();
    std::thread::Builder::new()
        .name("lanner-fd-closer".to_owned())
        .spawn(move || {
            for fd in receiver {
                #[cfg(test)]
                let _paused = pause();
                drop(fd);
            }
        })
        .ok()?;
    Some(sender)
}

/// An owned descriptor closed on the closer thread ([`close_later`]) when dropped: for the
/// sockets a peer could have queued descriptors on.
pub struct ClosedLater {
    /// Always `Some` until the drop (or [`ClosedLater::into_inner`]) takes it.
    fd: Option<OwnedFd>,
}

impl ClosedLater {
    /// Takes ownership of `fd`.
    pub fn new(fd: OwnedFd) -> ClosedLater {
        ClosedLater { fd: Some(fd) }
    }

    /// Gives the descriptor back, to be closed as its new owner decides.
    pub fn into_inner(mut self) -> OwnedFd {
        self.fd
            .take()
            .expect("the descriptor is taken only when dropped")
    }
}

impl Drop for ClosedLater {
    fn drop(&mut self) {
        if let Some(fd) = self.fd.take() {
            close_later([fd]);
        }
    }
}

impl AsFd for ClosedLater {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd
            .as_ref()
            .expect("the descriptor is taken only when dropped")
            .as_fd()
    }
}

impl AsRawFd for ClosedLater {
    fn as_raw_fd(&self) -> RawFd {
        self.as_fd().as_raw_fd()
    }
}

impl fmt::Debug for ClosedLater {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("ClosedLater")
            .field(&self.as_raw_fd())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::net::UnixStream;

    use super::*;
    use crate::tests::{closed_soon, closed_soon_within};

    #[test]
    fn descriptors_are_closed_on_another_thread_soon() {
        let (ours, theirs) = UnixStream::pair().unwrap();
        let paused = pause();
        close_later([OwnedFd::from(ours)]);
        assert!(!closed_soon_within(&theirs, 50), "closed while paused");
        drop(paused);
        assert!(closed_soon(&theirs), "the closer did not close it");
        let (ours, theirs) = UnixStream::pair().unwrap();
        drop(ClosedLater::new(ours.into()));
        assert!(closed_soon(&theirs), "the closer did not close it");
    }
}
