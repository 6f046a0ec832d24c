//! Apartments: objects whose calls run one at a time, in arrival order (COM's
//! single-threaded apartment, without its thread hop).
//!
//! An apartment is a FIFO of calls and a flag saying whether one is running. A call that
//! arrives while the apartment is idle runs at once on the thread that received it
//! (inline, as free-threaded calls do); if it completes without waiting, it is answered
//! there and the apartment is idle again, so a cheap call costs two uncontended lock
//! operations more than a free-threaded one. A call that has to wait, and every call that
//! arrives meanwhile (from any connection), is finished by the apartment's task (one at a
//! time) in order, each to its end before the next starts.
//!
//! That task runs on the runtime of the connection whose call it is running: when the
//! next call in line came on another connection, the task ends and a new one starts on
//! that connection's runtime. A server may serve connections on several runtimes (a
//! runtime per core, say), and a runtime shut down takes its tasks with it: the call the
//! task was running is lost with it, as are the calls of that runtime's own connections,
//! but those connections are gone too. If the task dies before the apartment is idle, it
//! hands the queue on ([`CarryOn`]): the calls of other connections still run, in order,
//! and the apartment does not stay busy for ever.

use std::collections::{HashSet, VecDeque};
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Context;

use crate::connection::{Connection, Queued, Served, Waiting};

/// Whether a call's method has started (been polled): one that has is run to its end.
#[derive(Clone, Copy)]
enum Started {
    Yes,
    No,
}

/// The calls of one apartment object.
pub(crate) struct Apartment {
    /// Names this apartment for as long as the process runs (never reused, unlike its
    /// address): see [`crate::ApartmentCell`].
    id: usize,
    state: Mutex<State>,
}

/// The next apartment's id (0 names none).
static NEXT_ID: AtomicUsize = AtomicUsize::new(1);

/// The ids of the apartments that exist now.
static LIVE: Mutex<Option<HashSet<usize>>> = Mutex::new(None);

fn live() -> std::sync::MutexGuard<'static, Option<HashSet<usize>>> {
    LIVE.lock().unwrap_or_else(|e| e.into_inner())
}

impl Default for Apartment {
    fn default() -> Apartment {
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        live().get_or_insert_with(HashSet::new).insert(id);
        Apartment {
            id,
            state: Mutex::default(),
        }
    }
}

impl Drop for Apartment {
    fn drop(&mut self) {
        if let Some(live) = live().as_mut() {
            live.remove(&self.id);
        }
    }
}

/// Whether the apartment `id` still exists. One that does not runs no call any more: every
/// call it runs holds it (inline, queued, or on its task).
pub(crate) fn exists(id: usize) -> bool {
    live().as_ref().is_some_and(|live| live.contains(&id))
}

#[derive(Default)]
struct State {
    /// A call is running (inline or on the apartment's task).
    busy: bool,
    /// Calls waiting for their turn, in arrival order (some maybe taken out already by
    /// their caller's CANCEL, see [`Queued`]).
    queue: VecDeque<Queued>,
    /// The queue's length at which its empty slots are swept out next (see
    /// [`State::queue`]).
    sweep_at: usize,
}

/// The shortest queue whose empty slots are swept out.
const SWEEP_FROM: usize = 64;

impl State {
    /// Queues `queued`. The slots of calls answered early (cancelled while they waited)
    /// stay in the queue until their turn, so a caller that keeps calling and cancelling
    /// while one long call holds the apartment would grow it without end: once it is
    /// twice as long as after the last sweep, the empty slots are swept out (constant
    /// time per call, amortized; the queue stays within twice the calls really waiting).
    fn queue(&mut self, queued: Queued) {
        if self.queue.len() >= self.sweep_at.max(SWEEP_FROM) {
            self.queue
                .retain(|queued| queued.lock().unwrap_or_else(|e| e.into_inner()).is_some());
            self.sweep_at = 2 * self.queue.len();
        }
        self.queue.push_back(queued);
    }

    /// The next call whose turn it is, if any (skipping those answered already).
    fn next_in_line(&mut self) -> Option<Waiting> {
        while let Some(queued) = self.queue.pop_front() {
            let waiting = queued.lock().unwrap_or_else(|e| e.into_inner()).take();
            if waiting.is_some() {
                return waiting;
            }
        }
        // Drained: the next sweep is measured from here, not from the last peak.
        self.sweep_at = 0;
        None
    }
}

impl Apartment {
    /// The apartment's id, unique in this process.
    pub(crate) fn id(&self) -> usize {
        self.id
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether a call is running in the apartment now (a call dispatched meanwhile is
    /// queued behind it). A hint: it may change at once.
    pub(crate) fn is_busy(&self) -> bool {
        self.state().busy
    }

    /// Serves `call`, received on `connection`: now if the apartment is idle, else after
    /// the calls before it. True if it, or a call queued before it, goes on in a task
    /// (see `Connection::dispatch`): it was queued, its method waited, or it finished and
    /// the apartment's next call was started.
    pub(crate) fn enter(
        self: &Arc<Self>,
        connection: &Arc<Connection>,
        call: Served,
        cx: &mut Context<'_>,
    ) -> bool {
        let mut state = self.state();
        if state.busy {
            let queued = Queued::default();
            let waiting = connection.suspend_queued(call, &queued);
            *queued.lock().unwrap_or_else(|e| e.into_inner()) = Some(waiting);
            state.queue(queued.clone());
            drop(state);
            // The connection's end withdraws the queued calls it finds, but it may have
            // come between listing this one and filling its slot (or before the request
            // was looked up): then it found nothing to withdraw.
            connection.withdraw_if_ended(&queued);
            return true;
        }
        state.busy = true;
        drop(state);
        match connection.run_inline(call, cx, crate::connection::AnsweredBy::Elsewhere) {
            None => match self.take_next() {
                Some(next) => {
                    self.start(next, Started::No);
                    true
                }
                None => false,
            },
            Some(waiting) => {
                self.start(waiting, Started::Yes);
                true
            }
        }
    }

    /// The next call in line, or none: the apartment is idle then.
    fn take_next(&self) -> Option<Waiting> {
        let mut state = self.state();
        let next = state.next_in_line();
        if next.is_none() {
            state.busy = false;
        }
        next
    }

    /// Starts the apartment's task with `first`, on the runtime of the connection it came
    /// on. A runtime that is shut down drops the task as it is spawned, and `first` with
    /// it: the next call in line is started in its place.
    fn start(self: &Arc<Self>, first: Waiting, started: Started) {
        let (mut first, mut started) = (first, started);
        loop {
            let spawned = Arc::new(AtomicU8::new(SPAWNING));
            let carry_on = CarryOn {
                apartment: self.clone(),
                spawned: spawned.clone(),
                done: false,
            };
            let runtime = first.connection().runtime().clone();
            let task = self.clone().run(first, started, carry_on);
            drop(runtime.spawn(task));
            if spawned.swap(SPAWNED, Ordering::AcqRel) != DROPPED_WHILE_SPAWNING {
                return;
            }
            match self.take_next() {
                Some(next) => (first, started) = (next, Started::No),
                None => return,
            }
        }
    }

    /// Finishes `first`, then the queued calls in order while they came on the same
    /// connection; a call that came on another one is started on a task of its own, on
    /// that connection's runtime (see the module docs). A queued call whose caller
    /// stopped waiting (it cancelled, its deadline passed, its connection ended) is
    /// answered without running: nobody would read its result, and the calls behind it
    /// need not wait for it.
    async fn run(self: Arc<Self>, first: Waiting, started: Started, mut carry_on: CarryOn) {
        let (mut current, mut started) = (first, started);
        loop {
            let connection = current.connection().clone();
            match started {
                Started::Yes => current.finish().await,
                Started::No => current.finish_unless_abandoned().await,
            }
            match self.take_next() {
                Some(next) if Arc::ptr_eq(next.connection(), &connection) => {
                    (current, started) = (next, Started::No);
                }
                Some(next) => {
                    carry_on.done = true;
                    return self.start(next, Started::No);
                }
                None => {
                    carry_on.done = true;
                    return;
                }
            }
        }
    }
}

/// [`CarryOn::spawned`]: the task is being spawned.
const SPAWNING: u8 = 0;
/// [`CarryOn::spawned`]: the task was spawned (and may have run since).
const SPAWNED: u8 = 1;
/// [`CarryOn::spawned`]: the task was dropped as it was spawned: its runtime is shut
/// down. [`Apartment::start`] starts the next call.
const DROPPED_WHILE_SPAWNING: u8 = 2;

/// Held by an apartment's task: if the task is dropped before it is done (its runtime
/// shut down), the next call in line is started on its own connection's runtime, so that
/// the calls of connections on other runtimes are not stranded behind a task that will
/// never run again.
struct CarryOn {
    apartment: Arc<Apartment>,
    /// Tells a drop while [`Apartment::start`] spawns the task, which it handles itself
    /// (no recursion however many calls in line came on a runtime that is shut down),
    /// from a later one.
    spawned: Arc<AtomicU8>,
    /// The task has ended, or handed the apartment on: nothing to carry on.
    done: bool,
}

impl Drop for CarryOn {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let at_once = self.spawned.compare_exchange(
            SPAWNING,
            DROPPED_WHILE_SPAWNING,
            Ordering::AcqRel,
            Ordering::Acquire,
        );
        if at_once.is_ok() {
            return;
        }
        if let Some(next) = self.apartment.take_next() {
            self.apartment.start(next, Started::No);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_slots_of_calls_answered_early_are_swept_out_of_the_queue() {
        let mut state = State::default();
        // Slots whose calls were taken out by their CANCEL (empty), without end.
        for _ in 0..100_000 {
            state.queue(Queued::default());
            assert!(state.queue.len() <= SWEEP_FROM, "{}", state.queue.len());
        }
        assert!(state.next_in_line().is_none());
        assert!(state.queue.is_empty());
    }
}
