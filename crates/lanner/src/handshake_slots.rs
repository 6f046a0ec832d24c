//! The bound on connections of one endpoint in their handshake.
//!
//! A client that connects and says nothing holds a handshake until its deadline. Were the
//! server to stop accepting while its slots are full, a few hundred such clients, renewed
//! every handshake timeout, would keep every honest client waiting in the kernel's backlog
//! behind them (and over TCP, past a full backlog, have their connections dropped). So the
//! server always accepts, and when a new connection would exceed the bound, the oldest
//! handshake still under way is dropped to make room. An honest handshake takes a round
//! trip or two; to lose its slot, it would have to be outlived by as many newer
//! connections as there are slots, all arriving while it runs.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::task::{AbortHandle, JoinHandle};

/// The handshakes under way at one endpoint, oldest first.
pub(crate) struct HandshakeSlots {
    max: usize,
    tasks: Mutex<Tasks>,
}

#[derive(Default)]
struct Tasks {
    /// The number the next handshake gets (numbers grow with age: the first is oldest).
    next: u64,
    /// The handshakes under way, by number (with their task once it is spawned).
    running: BTreeMap<u64, Option<AbortHandle>>,
}

/// A handshake's place among the slots, given back when dropped (once the handshake is
/// over, whichever way).
pub(crate) struct HandshakeSlot {
    slots: Arc<HandshakeSlots>,
    number: u64,
}

impl HandshakeSlots {
    /// Slots for at most `max` handshakes at once (at least one).
    pub(crate) fn new(max: usize) -> Arc<HandshakeSlots> {
        Arc::new(HandshakeSlots {
            max: max.max(1),
            tasks: Mutex::default(),
        })
    }

    /// Starts a handshake with `spawn`, which is given the handshake's slot to drop when
    /// the handshake is over. If every slot is taken, the oldest handshake under way is
    /// stopped (its task aborted, which drops its connection); returns whether one was.
    pub(crate) fn start(
        self: &Arc<Self>,
        spawn: impl FnOnce(HandshakeSlot) -> JoinHandle<()>,
    ) -> bool {
        let (number, oldest) = {
            let mut tasks = self.tasks();
            let oldest = if tasks.running.len() >= self.max {
                tasks.running.pop_first().and_then(|(_, oldest)| oldest)
            } else {
                None
            };
            let number = tasks.next;
            tasks.next += 1;
            // Listed before it is spawned, its task not known yet: a task that ends at
            // once (or is dropped unpolled) finds it to take off.
            tasks.running.insert(number, None);
            (number, oldest)
        };
        // Neither spawned nor aborted under the lock: a task dropped on the spot gives
        // its slot back, which takes the lock.
        let task = spawn(HandshakeSlot {
            slots: self.clone(),
            number,
        });
        if let Some(listed) = self.tasks().running.get_mut(&number) {
            *listed = Some(task.abort_handle());
        }
        oldest.map(|oldest| oldest.abort()).is_some()
    }

    /// How many handshakes are under way.
    #[cfg(test)]
    fn running(&self) -> usize {
        self.tasks().running.len()
    }

    fn tasks(&self) -> MutexGuard<'_, Tasks> {
        self.tasks.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for HandshakeSlot {
    fn drop(&mut self) {
        self.slots.tasks().running.remove(&self.number);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::time::Duration;

    /// A handshake that holds its slot until `finish` is told (or for ever).
    fn handshake(
        slots: &Arc<HandshakeSlots>,
        finish: tokio::sync::oneshot::Receiver<()>,
        dropped: tokio::sync::mpsc::UnboundedSender<u32>,
        id: u32,
    ) -> bool {
        /// Says when the task is dropped, finished or aborted (polled or not).
        struct Said(tokio::sync::mpsc::UnboundedSender<u32>, u32);
        impl Drop for Said {
            fn drop(&mut self) {
                let _ = self.0.send(self.1);
            }
        }
        let said = Said(dropped, id);
        slots.start(|slot| {
            tokio::spawn(async move {
                let _said = said;
                let _ = finish.await;
                drop(slot);
            })
        })
    }

    #[tokio::test]
    async fn a_new_handshake_beyond_the_bound_stops_the_oldest() {
        let slots = HandshakeSlots::new(2);
        let (dropped, mut ended) = tokio::sync::mpsc::unbounded_channel();
        let mut finishers = Vec::new();
        for id in 0..2 {
            let (finish, waiting) = tokio::sync::oneshot::channel();
            finishers.push(finish);
            assert!(!handshake(&slots, waiting, dropped.clone(), id));
        }
        assert_eq!(slots.running(), 2);
        // A third: the first, oldest, is stopped.
        let (_third, waiting) = tokio::sync::oneshot::channel();
        assert!(handshake(&slots, waiting, dropped.clone(), 2));
        assert_eq!(ended.recv().await, Some(0));
        assert_eq!(slots.running(), 2);
        // The second finishes by itself and gives its slot back: a fourth stops nobody.
        finishers.remove(1).send(()).unwrap();
        assert_eq!(ended.recv().await, Some(1));
        let (_fourth, waiting) = tokio::sync::oneshot::channel();
        assert!(!handshake(&slots, waiting, dropped.clone(), 3));
        assert_eq!(slots.running(), 2);
        assert!(
            tokio::time::timeout(Duration::from_millis(50), ended.recv())
                .await
                .is_err(),
            "a handshake was stopped with a slot free"
        );
    }
}
