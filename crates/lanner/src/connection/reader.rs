//! Receiving: one attempt at a time, by whoever is waiting.
//!
//! One attempt takes every complete frame that arrived together (up to [`BURST_FRAMES`],
//! more for a deep pipeline, fewer for a shallow pipeline's answers over shared memory)
//! and holds back the answers it produces until the last of them is processed: one read
//! drains many frames, one write carries their answers.
//!
//! The transport's receiving half sits behind a short lock that is held only for one
//! non-blocking attempt and the processing of the frame it yields, so frames are processed
//! in arrival order whoever receives them. Two parties receive:
//!
//! - a caller whose call is the only one outstanding on the connection receives its own
//!   reply, spinning on the socket for the spin budget (the DCE "private socket": no
//!   hand-off to another task or thread on the critical path), for a millisecond at most
//!   in busy-poll mode, and not once the thread has work for others (see
//!   [`Connection::spin_for_reply`]);
//! - the connection's reader task receives everything else: it tries a non-blocking
//!   receive in a loop for the spin budget after each frame, letting other tasks run in
//!   between, then registers with the reactor and sleeps. Before each attempt it writes
//!   the requests callers deferred to it (one batch). It is kicked back into spinning
//!   when someone will wait on it: a caller not receiving its own reply, a flusher
//!   draining a large frame or finishing it, or a reply just sent (the peer's next
//!   request follows). See [`crate::ConnectionOptions`].

use std::future::{Future, poll_fn};
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::{Arc, TryLockError, Weak};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::FutureExt;
use lanner_proto::{Event, ExternalSegments, OutFrame, ProtocolError};

use super::{Answer, Connection, Handled, ReaderSignal, Side};
use crate::error::Error;
use crate::phase_marks::{self, Mark};
use crate::transport::{FrameSource, Received, RecvError};

/// What one receive attempt achieved.
pub(super) enum Progress {
    /// The response the receiving caller waits for.
    Mine(Answer),
    /// A request's method waits: the call goes on in a task of its own (or in its
    /// apartment's queue), which may be able to run only on this thread.
    Handed,
    /// A response was delivered to its call's slot.
    Delivered,
    /// Some other frame was processed, or part of a frame arrived.
    Other,
    /// Nothing arrived (or another party is receiving right now).
    Empty,
}

impl Progress {
    /// What this step achieved, to combine with others (see [`Seen`]); `None` for
    /// [`Progress::Mine`], which ends a burst at once.
    fn seen(&self) -> Option<Seen> {
        match self {
            Progress::Mine(_) => None,
            Progress::Handed => Some(Seen::Handed),
            Progress::Delivered => Some(Seen::Delivered),
            Progress::Other => Some(Seen::Other),
            Progress::Empty => Some(Seen::Empty),
        }
    }
}

/// What the frames of one burst achieved together, ranked: a delivery outranks a
/// hand-off (the reader's yield after one lets a caller in `block_on`'s root future run
/// too, see `spin_while_busy`, and both end a caller's spin), which outranks any other
/// frame. Combined with `max` as each frame is processed: one byte, where combining
/// [`Progress`] values (which can hold an answer) moved the whole enum twice per frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Seen {
    Empty,
    Other,
    Handed,
    Delivered,
}

impl From<Seen> for Progress {
    fn from(seen: Seen) -> Progress {
        match seen {
            Seen::Empty => Progress::Empty,
            Seen::Other => Progress::Other,
            Seen::Handed => Progress::Handed,
            Seen::Delivered => Progress::Delivered,
        }
    }
}

/// Frames taken in one receive attempt, at most (when that many arrived together), unless
/// the pipeline is deep (see [`Connection::burst_limit`]): their answers go out together
/// afterwards. Bounded so that the peer gets the first answers (and can work on them)
/// while this side works through the rest: batches that are too large turn a pipeline
/// into a lock-step exchange in which each side waits for the other.
const BURST_FRAMES: usize = 16;

/// The fewest frames one receive attempt takes, when more arrived together, from a
/// transport that batches cheaply and a pipeline of fewer than two bursts
/// (see [`shallow_burst_limit`]).
const SHALLOW_BURST_FRAMES: usize = 4;

/// The most frames one receive attempt takes when the pipeline is deep.
const DEEP_BURST_FRAMES: usize = 64;

/// How often the reader task lets the reactor run while spinning (every N-th burst), so that
/// other tasks waiting for I/O are not held up (after every burst while this connection's
/// flusher waits for room).
const REACTOR_EVERY: u32 = 4;

/// Empty bursts in a row after which the reader sends the credits of the peer's one-way
/// calls held back (see `Writer::return_credit`), if any, and again after each as many
/// more: the peer has stopped sending for a moment (a few microseconds over shared
/// memory, more over a socket, where each attempt is a system call), so they are not
/// worth holding for a batch any more. (Also before the reader sleeps, and while it
/// sleeps; with no spin budget it sleeps after one attempt.)
const IDLE_BURSTS_BEFORE_CREDITS: u32 = 16;

/// The longest a caller spins for its own reply on its own thread whatever else arrives
/// meanwhile (frames extend the spin budget), unless the spin budget is longer; and the
/// longest in busy-poll mode, whose budget has no end. Then it waits like any other call,
/// for the reader (which in busy-poll mode keeps polling). Replies that take longer gain
/// little from the spin, and its thread's other tasks (which the reply may depend on,
/// unknown to Lanner) get to run. See [`Connection::caller_spin_limit`].
const CALLER_SPIN_LIMIT: Duration = Duration::from_millis(1);

/// How long the reader polls at most, taking frames that wake nobody, before it yields to
/// the scheduler (and the reactor) anyway. A steady stream of such frames (requests
/// answered where they arrived, pings, pieces of a large frame) otherwise kept it polling
/// without end: on a current-thread runtime every other task waited for the stream to
/// stop. (Measured in time, not bursts: in a tight ping-pong nearly every burst takes a
/// request, and a yield every 16 of them cost 0.01–0.05 µs per call.)
const BUSY_POLL_BEFORE_YIELD: Duration = Duration::from_micros(200);

/// Receive attempts per spin, back to back, before the reader lets other tasks run. A
/// burst is a few microseconds: short enough not to hold up other tasks noticeably, long
/// enough that the reader notices arriving data about as fast as a plain `recv` loop.
const BURST: u32 = 8;

/// [`BURST`] on a transport with an arrival hint ([`Connection::receive_if_arrived`]): an
/// attempt the hint answers is one load and a `pause`, about 30 ns, so a burst of these is
/// still about two microseconds, and the reader goes through the scheduler between bursts
/// (where nothing is received) eight times less often. Same-run A/B, slow host state,
/// four rounds: shm null-call p50 1.10–1.11 µs against 1.12–1.13 with [`BURST`]. What
/// counts in bursts stretches with them: an idle reader lets the reactor run every
/// [`REACTOR_EVERY`] bursts, about every 8 µs (other sockets' readiness is noticed that
/// much later; the tasks themselves still run between bursts), and gives back held
/// one-way credits after [`IDLE_BURSTS_BEFORE_CREDITS`], about 32 µs of silence (the
/// peer keeps most of its window meanwhile: the credits held are fewer than a batch).
const HINTED_BURST: u32 = 64;

impl Connection {
    /// One non-blocking receive attempt; processes the frame if one arrived, and every
    /// other complete frame that arrived with it (one read drains many frames). Answers
    /// produced meanwhile are held back and written together after the last of them. An
    /// error means the connection is finished (the caller must [`Connection::fail`] it).
    /// `mine` is the call the receiving caller waits for, if any: its reply ends the
    /// attempt at once.
    pub(super) fn receive_once(
        self: &Arc<Self>,
        cx: &mut Context<'_>,
        mine: Option<u64>,
    ) -> Result<Progress, Error> {
        let mut source = match self.source.try_lock() {
            Ok(source) => source,
            Err(TryLockError::WouldBlock) => return Ok(Progress::Empty),
            Err(TryLockError::Poisoned(_)) => return Err(receiver_panicked()),
        };
        let mut seen = Seen::Empty;
        let mut corked = false;
        let mut frames = 0;
        let mut deliveries = 0;
        let mut limit = BURST_FRAMES;
        // Whole frames were already here when the last one was taken.
        let mut left_behind = false;
        let result = loop {
            let (frame, external) = match source.try_recv() {
                Ok(Received::Frame(frame)) => (frame, None),
                Ok(Received::Shared) => match shared_frame(&mut **source) {
                    Ok((frame, segments)) => (frame, Some(segments)),
                    Err(error) => break Err(error),
                },
                Ok(Received::Partial) => {
                    self.note_sign_of_life();
                    break Ok(seen.max(Seen::Other).into());
                }
                Ok(Received::Empty) => break Ok(seen.into()),
                Ok(Received::Closed) => {
                    break Err(Error::unavailable("the peer closed the connection"));
                }
                Err(error) => break Err(self.receive_failed(error)),
            };
            phase_marks::mark(Mark::FrameTaken);
            frames += 1;
            // A cold object's table entry is on its way while the request is decoded.
            if let Some(object) = lanner_proto::frame::peek_request_object(&frame) {
                self.export_entries.prefetch(object);
            }
            let ready = source.frame_ready();
            left_behind = ready;
            if ready && answers_so_far(frames, deliveries) && source.batches_cheaply() {
                limit = self.shallow_burst_limit();
            }
            if frames == BURST_FRAMES && ready {
                limit = self.burst_limit(source.frames_ready(DEEP_BURST_FRAMES));
            }
            let more = frames < limit && ready;
            if more && !corked {
                self.cork();
                corked = true;
            }
            match self.process(frame, external, cx, mine, &Receiving(())) {
                Ok(step) => match step.seen() {
                    Some(step) => {
                        deliveries += usize::from(step == Seen::Delivered);
                        seen = seen.max(step);
                    }
                    None => break Ok(step),
                },
                Err(error) => break Err(error),
            }
            if !more {
                break Ok(seen.into());
            }
        };
        // Uncorked before the receive lock is let go: the next receiver's cork is its own.
        if corked {
            // A reply already taken from its call's slot still goes to its caller: the
            // failed write has failed the connection, which later calls will see.
            if let Err(error) = self.fatal_for_reader(self.uncork())
                && !matches!(result, Ok(Progress::Mine(_)))
            {
                return Err(error);
            }
        }
        // Whole frames left behind (a caller that stopped at its own reply, or a burst at
        // its limit) are read already: nothing will come from the transport to wake a
        // reader that sleeps waiting for it. Wake it (nothing if it is awake).
        if left_behind {
            self.signal.kick();
        }
        drop(source);
        result
    }

    /// How many frames the receive attempt that has just taken [`SHALLOW_BURST_FRAMES`] of
    /// them, answers to this side's calls before the last, takes in all (see
    /// [`shallow_burst_limit`]).
    fn shallow_burst_limit(&self) -> usize {
        shallow_burst_limit(self.state().pending.len())
    }

    /// How many frames the receive attempt that has just taken [`BURST_FRAMES`] of them
    /// takes in all, `buffered` complete frames being already here. Batches of half the
    /// pipeline's depth keep two of them in flight, so both sides stay busy with fewer
    /// writes: this side's calls outstanding say how deep it is (answers come back in
    /// batches of their requests), and so do the peer's requests already buffered here
    /// (at least twice a burst: one batch is being answered, another is here). A shallow
    /// pipeline (32 outstanding) keeps bursts of 16: larger ones there made each side wait
    /// for the other's whole batch (throughput benchmark, concurrency 32, -15%).
    fn burst_limit(&self, buffered: usize) -> usize {
        burst_limit(self.state().proto.in_flight() as usize, buffered)
    }

    /// Like [`Connection::receive_once`], but registers `cx` to be woken when the transport
    /// has data. `Pending` if nothing arrived; part of a frame counts as progress.
    fn poll_receive(self: &Arc<Self>, cx: &mut Context<'_>) -> Poll<Result<Progress, Error>> {
        let mut source = match self.source.try_lock() {
            Ok(source) => source,
            // Someone else is receiving right now; look again soon.
            Err(TryLockError::WouldBlock) => return Poll::Ready(Ok(Progress::Empty)),
            Err(TryLockError::Poisoned(_)) => return Poll::Ready(Err(receiver_panicked())),
        };
        match source.poll_recv(cx) {
            Poll::Ready(Ok(Received::Frame(frame))) => {
                Poll::Ready(self.process(frame, None, cx, None, &Receiving(())))
            }
            Poll::Ready(Ok(Received::Shared)) => {
                Poll::Ready(shared_frame(&mut **source).and_then(|(frame, segments)| {
                    self.process(frame, Some(segments), cx, None, &Receiving(()))
                }))
            }
            Poll::Ready(Ok(Received::Partial | Received::Empty)) => {
                self.note_sign_of_life();
                Poll::Ready(Ok(Progress::Other))
            }
            Poll::Ready(Ok(Received::Closed)) => {
                Poll::Ready(Err(Error::unavailable("the peer closed the connection")))
            }
            Poll::Ready(Err(error)) => Poll::Ready(Err(self.receive_failed(error))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn receive_failed(self: &Arc<Self>, error: RecvError) -> Error {
        match error {
            RecvError::Io(error) => Error::io("reading from the peer", &error),
            RecvError::Frame(error) => self.protocol_violation(error.into()),
        }
    }

    /// Tells the peer why the connection closes (CLOSE); the error to fail it with. On a
    /// connection closed already (frames that were on their way when this side sent its
    /// CLOSE find the protocol state closed), nothing more is said: the peer has its CLOSE.
    pub(super) fn protocol_violation(self: &Arc<Self>, error: ProtocolError) -> Error {
        if self.answers_stopped.load(Ordering::Acquire) {
            return Error::from_protocol(&error);
        }
        tracing::warn!(peer = %self.peer(), %error, "closing connection");
        let _ = self.send_frame(OutFrame::contiguous(error.close_frame()));
        Error::from_protocol(&error)
    }

    /// Something arrived (a frame or part of one): the keepalive's sign of life. Receiving
    /// happens one attempt at a time (under the receive lock): no read-modify-write.
    fn note_sign_of_life(&self) {
        let received = self.frames_received.load(Ordering::Relaxed);
        self.frames_received.store(received + 1, Ordering::Relaxed);
    }

    /// A request may use only credits the peer has received: those returned in answers
    /// still queued here have not reached it. Without this check a peer that stops
    /// reading could keep sending and make the answers pile up without bound.
    fn check_credits(self: &Arc<Self>) -> Result<(), Error> {
        if !self.flusher_active.load(Ordering::Relaxed) {
            // The transport takes what is written: what waits is at most the answers a
            // cork holds back, one burst's worth, written when the burst ends, and the
            // credits of one-way calls held for a batch (fewer than a batch, sent when the
            // reader goes idle). Both are bounded, and so is the slack they leave a peer that
            // spends credits it has not received yet; the protocol core still refuses
            // more calls than the window.
            return Ok(());
        }
        let queued = self.writer().queued_credits();
        let (in_flight, window) = {
            let state = self.state();
            (self.peer_in_flight(&state), state.proto.peer_window())
        };
        if in_flight.saturating_add(queued) > window {
            return Err(self.protocol_violation(ProtocolError::CreditViolation {
                in_flight: in_flight + queued,
                window,
            }));
        }
        Ok(())
    }

    fn process(
        self: &Arc<Self>,
        frame: Bytes,
        shared: Option<ExternalSegments>,
        cx: &mut Context<'_>,
        mine: Option<u64>,
        receiving: &Receiving,
    ) -> Result<Progress, Error> {
        self.note_sign_of_life();
        // Frames are processed one at a time (under the receive lock): no read-modify-write.
        let received = self.messages_received.load(Ordering::Relaxed);
        self.messages_received
            .store(received + 1, Ordering::Relaxed);
        let in_place = shared.is_some();
        let handled = self.handle_frame(frame, shared, mine, receiving);
        phase_marks::mark(Mark::FrameHandled);
        match handled {
            Ok(Handled::Mine(response)) => {
                // Under the receive lock too.
                let mine = self.replies_to_their_caller.load(Ordering::Relaxed);
                self.replies_to_their_caller
                    .store(mine + 1, Ordering::Relaxed);
                Ok(Progress::Mine(response))
            }
            Ok(Handled::Delivered) => Ok(Progress::Delivered),
            // `handle_frame` routes both itself (delivered, or `Handled::Request`).
            Ok(Handled::Event(Event::Response(_) | Event::Request(_))) => {
                Err(Error::protocol("a request or response was not routed"))
            }
            Ok(Handled::Request(request, slot)) => {
                self.check_credits()?;
                // A caller spinning for its reply may be polled where no runtime runs (a
                // `block_on` on a plain thread): the method's first poll runs inside the
                // connection's, as it would on the reader task (timers, spawns, calls with
                // deadlines need one). The reader task is inside it already.
                let _entered = mine.is_some().then(|| self.runtime.enter());
                Ok(
                    match self.dispatch(request, slot, in_place, cx, receiving) {
                        true => Progress::Handed,
                        false => Progress::Other,
                    },
                )
            }
            Ok(Handled::Event(Event::Ping { pong })) => {
                self.answer_ping(pong);
                Ok(Progress::Other)
            }
            Ok(Handled::Event(Event::Pong(nonce))) => {
                if nonce == super::control::GOAWAY_PROBE {
                    self.goaway_heard.store(true, Ordering::Release);
                }
                Ok(Progress::Other)
            }
            Ok(Handled::Event(Event::GoingAway)) => {
                tracing::debug!(peer = %self.peer(), "the peer is shutting down");
                self.peer_going_away();
                Ok(Progress::Other)
            }
            Ok(Handled::Event(Event::Cancel(call_id))) => {
                self.cancel_incoming(call_id);
                Ok(Progress::Other)
            }
            Ok(Handled::Event(Event::Released(release))) => {
                self.released(&release.handles, release.handed_back);
                Ok(Progress::Other)
            }
            Ok(Handled::Event(Event::Granted(grant))) => {
                self.park_grant(grant);
                Ok(Progress::Other)
            }
            Ok(Handled::Event(Event::Credit(credits))) => {
                self.credits_granted(credits);
                Ok(Progress::Other)
            }
            Ok(Handled::Event(Event::Closed(close))) => {
                Err(Error::from_protocol(&ProtocolError::PeerClosed {
                    status: close.status,
                    reason: close.reason,
                }))
            }
            Ok(Handled::Event(
                Event::Accepted { .. } | Event::Established { .. } | Event::Authenticated,
            )) => Err(Error::protocol("handshake event on an open connection")),
            Err(error) => Err(self.protocol_violation(error)),
        }
    }

    /// [`Connection::receive_once`], unless the transport can tell, without its lock and
    /// without a read-modify-write, that nothing arrived since a receive last found it
    /// empty (shared memory: one load of the header word where the next record will start;
    /// see [`crate::transport::ArrivalHint`]): then [`Progress::Empty`] at once. Spinning
    /// receivers look this way: an empty poll through the receive lock costs two
    /// read-modify-writes and a hundred instructions, and a poll that cheap notices an
    /// arrival sooner (the shm null call's median fell by 0.05–0.15 µs,
    /// `docs/decisions.md`, eighteenth session). Where the transport has no such hint
    /// (sockets), always a receive attempt.
    pub(super) fn receive_if_arrived(
        self: &Arc<Self>,
        cx: &mut Context<'_>,
        mine: Option<u64>,
    ) -> Result<Progress, Error> {
        if self
            .arrival
            .as_ref()
            .is_some_and(|hint| !hint.maybe_arrived())
        {
            return Ok(Progress::Empty);
        }
        self.receive_once(cx, mine)
    }

    /// How long a caller spins for its own reply at most (see [`CALLER_SPIN_LIMIT`]): the
    /// spin budget if it is longer than that limit, the limit otherwise or in busy-poll
    /// mode.
    fn caller_spin_limit(&self) -> Duration {
        if self.spin >= crate::ConnectionOptions::BUSY_POLL {
            CALLER_SPIN_LIMIT
        } else {
            self.spin.max(CALLER_SPIN_LIMIT)
        }
    }

    /// The private-socket path: the only outstanding caller spins on the transport for its
    /// own reply, for the spin budget (extended while a large reply keeps arriving), never
    /// past the call's deadline nor [`Connection::caller_spin_limit`]. `None` if one of
    /// them passed first, or if what arrived gave this thread work for others: a caller
    /// woken with its reply, or a request whose method waits and goes on in a task of its
    /// own. Those may be able to run only on this thread (a current-thread runtime; a
    /// worker's next-task slot, which other workers do not take), so spinning on would
    /// hold them up, and if our reply waits for them (a callback the server awaits), until
    /// the spin ends. `mark` is the call's delivery mark read before its request was
    /// written (see `delivery_marks`).
    pub(super) fn spin_for_reply(
        self: &Arc<Self>,
        cx: &mut Context<'_>,
        call_id: u64,
        mut mark: u32,
        call_deadline: Option<Instant>,
    ) -> Option<Result<Answer, Error>> {
        // The clock is read only every few tries (and not at all for a quick reply).
        let mut spin_end: Option<Instant> = None;
        let mut limit: Option<Instant> = None;
        let mut tries = 0u32;
        loop {
            match self.receive_if_arrived(cx, Some(call_id)) {
                Ok(Progress::Empty) => {}
                Ok(Progress::Mine(response)) => return Some(Ok(response)),
                Ok(Progress::Handed | Progress::Delivered) => return None,
                // What it processed left the transport a frame to finish (an answer to a
                // callback larger than the socket takes at once): the flusher task, which
                // may be able to run only on this thread, must finish it, and our reply
                // may wait for it (the peer awaits that answer before it answers us).
                Ok(Progress::Other) if self.flusher_active.load(Ordering::Relaxed) => {
                    return None;
                }
                Ok(Progress::Other) => spin_end = None,
                Err(error) => {
                    self.fail(error);
                    return self.take_reply(call_id);
                }
            }
            tries = tries.wrapping_add(1);
            if tries % 8 == 0 {
                // On a multi-threaded runtime the reader task may have received our reply
                // while we spun; it bumps the call's delivery mark after storing it. The
                // spin looks under the state's lock only when the mark has moved since
                // `mark`, read before the request was written: a lock every few tries
                // made the spin notice an arriving reply later.
                let now_marked = self.marks.read(call_id);
                if now_marked != mark {
                    mark = now_marked;
                    if let Some(reply) = self.take_reply(call_id) {
                        return Some(reply);
                    }
                }
                // Requests other threads' callers deferred to the reader meanwhile go out
                // as the reader would send them, before it receives: the reader may be
                // unable to run while this spins (a task of this very thread, awake, so
                // they did not write them themselves), and our reply may wait for them.
                // A failed write has been settled (the connection failed, or only
                // writing stopped): the next look finds what that left.
                let _ = self.flush_deferred();
                let now = Instant::now();
                if call_deadline.is_some_and(|deadline| now >= deadline)
                    || now >= *limit.get_or_insert_with(|| now + self.caller_spin_limit())
                {
                    return None;
                }
                match spin_end {
                    None => spin_end = Some(now + self.spin),
                    Some(end) if now >= end => return None,
                    Some(_) => {}
                }
            }
            std::hint::spin_loop();
        }
    }
}

/// Proof that the receive lock is held: made only where a receive attempt holds it, and
/// handed down to what may use state that only its holder writes (see
/// [`Connection::count_answers_here`]).
pub(crate) struct Receiving(());

/// The frame a receive attempt announced as [`Received::Shared`], and its lent segments.
fn shared_frame(source: &mut dyn FrameSource) -> Result<(Bytes, ExternalSegments), Error> {
    source
        .take_shared()
        .map(|shared| (shared.frame, shared.segments))
        .ok_or_else(|| Error::protocol("a frame in shared memory announced but not there"))
}

enum Holder {
    Strong(Arc<Connection>),
    Weak(Weak<Connection>),
}

impl Holder {
    fn get(&self) -> Option<Arc<Connection>> {
        match self {
            Holder::Strong(connection) => Some(connection.clone()),
            Holder::Weak(connection) => connection.upgrade(),
        }
    }
}

/// Prepares the transport's receiving half and starts the reader task.
pub(super) fn spawn(connection: &Arc<Connection>, signal: Arc<ReaderSignal>, side: &Side) {
    let holder = match side {
        Side::Server(..) => Holder::Strong(connection.clone()),
        Side::Client(_) => Holder::Weak(Arc::downgrade(connection)),
    };
    let spin = connection.spin;
    tokio::spawn(async move {
        // A panic while receiving (outside the methods' own guards: in a waker, a log
        // subscriber…) fails the connection, so that its callers get an error instead of
        // waiting for a reader that is gone; then it goes on unwinding the task.
        let ended = AssertUnwindSafe(read_loop(&holder, &signal, spin))
            .catch_unwind()
            .await;
        // The connection has ended (or is gone): its receiving half, if writing has
        // stopped too and nobody else let go of it yet.
        let release = |holder: &Holder| {
            if let Some(connection) = holder.get() {
                connection.release_source();
            }
        };
        let error = match ended {
            Ok(Ok(())) => return release(&holder),
            Ok(Err(error)) => error,
            Err(panic) => {
                if let Some(connection) = holder.get() {
                    connection.fail(receiver_panicked());
                }
                std::panic::resume_unwind(panic);
            }
        };
        if let Some(connection) = holder.get() {
            connection.fail(error);
        }
        release(&holder);
    });
}

/// The error of a connection whose receiving side panicked.
fn receiver_panicked() -> Error {
    Error::new(
        crate::ErrorKind::Internal,
        "the connection's receiver panicked; the connection is closed",
    )
}

async fn read_loop(holder: &Holder, signal: &ReaderSignal, spin: Duration) -> Result<(), Error> {
    loop {
        if signal.shutdown.load(Ordering::Relaxed) {
            return Ok(());
        }
        // Awake: hold the connection while spinning (bounded by the spin budget), let go of
        // it while asleep so that a client connection nobody uses any more can be dropped.
        let Some(connection) = holder.get() else {
            return Ok(());
        };
        spin_while_busy(&connection, signal, spin).await?;
        drop(connection);
        sleep(holder, signal).await?;
    }
}

/// Receives until the spin budget passes with nothing arriving.
async fn spin_while_busy(
    connection: &Arc<Connection>,
    signal: &ReaderSignal,
    spin: Duration,
) -> Result<(), Error> {
    let frames_at_wake = connection.messages_received.load(Ordering::Relaxed);
    let mut spin_until = Instant::now() + spin;
    // Whether the transport may still be watched by the reactor (see `UNWATCH_AFTER_FRAMES`).
    let mut watched = !spin.is_zero();
    // Empty bursts since something last arrived.
    let mut idle_bursts = 0u32;
    // When the reader began taking frames without letting other tasks run, if it is
    // doing so (see `BUSY_POLL_BEFORE_YIELD`).
    let mut busy_since: Option<Instant> = None;
    let mut write_progress = connection.write_progress.load(Ordering::Relaxed);
    let attempts = attempts_per_burst(spin, connection.arrival.is_some());
    loop {
        // Requests deferred by callers go out in one batch before each receive burst.
        connection.fatal_for_reader(connection.flush_deferred())?;
        let burst = poll_fn(|cx| {
            // The last attempt of a burst receives whatever the hint says: the transport
            // notices there that its peer is gone, which a reader that spins for ever
            // (busy-poll mode) would otherwise never learn.
            for _ in 1..attempts {
                match connection.receive_if_arrived(cx, None) {
                    Ok(Progress::Empty) => std::hint::spin_loop(),
                    other => return Poll::Ready(other),
                }
            }
            Poll::Ready(connection.receive_once(cx, None))
        });
        match burst.await? {
            Progress::Handed => {
                idle_bursts = 0;
                watched = watched && still_watched(connection, frames_at_wake);
                spin_until = Instant::now() + spin;
                // Let the call that went on in a task of its own start.
                yield_once().await;
                busy_since = None;
            }
            Progress::Delivered | Progress::Mine(_) => {
                idle_bursts = 0;
                watched = watched && still_watched(connection, frames_at_wake);
                // Let the caller we just woke run before we try the socket again. A deferred
                // yield, because a caller in `block_on`'s root future only runs once the
                // scheduler finds no other task ready.
                spin_until = Instant::now() + spin;
                tokio::task::yield_now().await;
                busy_since = None;
            }
            Progress::Other => {
                idle_bursts = 0;
                watched = watched && still_watched(connection, frames_at_wake);
                let now = Instant::now();
                spin_until = now + spin;
                let since = *busy_since.get_or_insert(now);
                if now.saturating_duration_since(since) >= BUSY_POLL_BEFORE_YIELD {
                    // Frames keep coming (a busy peer, or one that never stops): the other
                    // tasks of this thread, the reactor and the timers get a turn anyway.
                    tokio::task::yield_now().await;
                    busy_since = None;
                }
            }
            Progress::Empty => {
                if spin.is_zero() || signal.shutdown.load(Ordering::Relaxed) {
                    return Ok(());
                }
                idle_bursts = idle_bursts.wrapping_add(1);
                if idle_bursts % IDLE_BURSTS_BEFORE_CREDITS == 0 {
                    // Again every so often: a method that finishes on a task of its own
                    // holds its credit while the reader keeps polling.
                    connection.fatal_for_reader(connection.return_held_credits())?;
                }
                let flushing = connection.flusher_active.load(Ordering::Relaxed);
                if flushing {
                    let progress = connection.write_progress.load(Ordering::Relaxed);
                    if progress != write_progress {
                        write_progress = progress;
                        spin_until = Instant::now() + spin;
                    }
                }
                if idle_bursts % REACTOR_EVERY == 0 || flushing {
                    if Instant::now() >= spin_until {
                        return Ok(());
                    }
                    tokio::task::yield_now().await;
                } else {
                    yield_once().await;
                }
                busy_since = None;
            }
        }
    }
}

/// How many whole frames a reader must have received since it last woke before it has
/// the transport stop being watched by the reactor (see `transport/watched_socket.rs`). A
/// connection whose reader sleeps between frames (large messages, sparse calls) stays
/// watched: taking the socket out and putting it back around every sleep cost more there
/// (1 MiB echoes over TCP, same-run A/B) than the watch costs. A busy one receives many
/// frames per wake and gains what the watch costs each message. (Counted in frames, not
/// time: a reader that had slept through a pause would otherwise keep the watch for the
/// first stretch of every busy period.)
const UNWATCH_AFTER_FRAMES: u64 = 16;

/// Whether the transport stays watched: it stops once the reader has received
/// [`UNWATCH_AFTER_FRAMES`] frames since it woke (`frames_at_wake`).
fn still_watched(connection: &Connection, frames_at_wake: u64) -> bool {
    let received = connection.messages_received.load(Ordering::Relaxed);
    if received.wrapping_sub(frames_at_wake) < UNWATCH_AFTER_FRAMES {
        return true;
    }
    connection
        .source
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .stop_watching();
    false
}

/// Sleeps until the transport has data (and processes it), someone kicks us, or the
/// connection is dropped.
async fn sleep(holder: &Holder, signal: &ReaderSignal) -> Result<(), Error> {
    signal.asleep.store(true, Ordering::SeqCst);
    let result = poll_fn(|cx| {
        signal.waker.register(cx.waker());
        if signal.kicked.swap(false, Ordering::SeqCst) || signal.shutdown.load(Ordering::SeqCst) {
            return Poll::Ready(Ok(()));
        }
        let Some(connection) = holder.get() else {
            return Poll::Ready(Ok(()));
        };
        // Frames deferred just before we announced sleep: wake up and write them.
        if connection.deferred.load(Ordering::SeqCst) {
            return Poll::Ready(Ok(()));
        }
        // The credits held back go before the reader sleeps. Checked after `asleep` was
        // set: a one-way method that finishes on a task of its own sets `credits_held`
        // before its `kick` reads `asleep`, so either this sees the flag or the kick sees
        // the reader asleep and wakes it (both sequentially consistent).
        if let Err(error) = connection.fatal_for_reader(connection.return_held_credits()) {
            return Poll::Ready(Err(error));
        }
        connection
            .poll_receive(cx)
            .map(|progress| progress.map(drop))
    })
    .await;
    signal.asleep.store(false, Ordering::SeqCst);
    result
}

/// Receive attempts per burst with a spin budget of `spin`. Without one, a single attempt
/// finds what has arrived and the reader then sleeps at once: a burst of attempts would be
/// a short spin, and on a Unix socket it outlasted a round trip, so "pure blocking"
/// connections never slept (nine `recvfrom` per call, 0.7 cores per side at one call in
/// flight). `hinted`: the transport has an arrival hint (see [`HINTED_BURST`]).
fn attempts_per_burst(spin: Duration, hinted: bool) -> u32 {
    match (spin.is_zero(), hinted) {
        (true, _) => 1,
        (false, false) => BURST,
        (false, true) => HINTED_BURST,
    }
}

/// See [`Connection::burst_limit`]: `in_flight` calls of this side outstanding, `buffered`
/// complete frames already here after the first [`BURST_FRAMES`] were taken.
fn burst_limit(in_flight: usize, buffered: usize) -> usize {
    let depth = if buffered >= 2 * BURST_FRAMES {
        in_flight.max(BURST_FRAMES + buffered)
    } else {
        in_flight
    };
    (depth / 2).clamp(BURST_FRAMES, DEEP_BURST_FRAMES)
}

/// Whether a receive attempt that has taken `frames` frames, `deliveries` of them answers
/// to this side's calls, has just reached [`SHALLOW_BURST_FRAMES`] with answers only
/// before the last: the bursts [`shallow_burst_limit`] may cut. A side that also serves
/// its peer's requests (a callback, calls both ways) keeps its bursts for them.
fn answers_so_far(frames: usize, deliveries: usize) -> bool {
    frames == SHALLOW_BURST_FRAMES && deliveries == SHALLOW_BURST_FRAMES - 1
}

/// How many frames a receive attempt that has just taken [`SHALLOW_BURST_FRAMES`] of them
/// takes in all, from a transport that batches cheaply, with `calls` of this side's calls
/// registered (outstanding, or answered and not yet taken by their callers: the depth of
/// the pipeline, which stays put while a burst of answers is taken, where the count of
/// calls outstanding drops with each). A pipeline shallower than two bursts arrives whole
/// (eight answers at once for eight calls) and, taken in one batch, runs in turns: each
/// side idles while the other works through all of it. Half of it at a time keeps both
/// busy (throughput benchmark over shm, alternated, three rounds: 8 outstanding
/// 0.92-1.14 M -> 1.31-1.50 M calls/s, 16 outstanding 0.92-1.19 M -> 1.50-1.97 M). Not
/// over sockets, where each batch costs a system call (tcp lost 10-25% at 8 and 16
/// outstanding); deeper pipelines keep their bursts of 16 and more, which already
/// overlap. Only bursts of answers are cut: requests keep their bursts, on a server and
/// on a side that serves while it has calls of its own out, because the count of the
/// peer's requests in hand drops as each is answered within the burst (as the count of
/// this side's calls outstanding drops with each answer taken), so it does not say how
/// deep the peer's pipeline is, and a server's answers to a shallow pipeline already go
/// out as its requests came, half at a time.
fn shallow_burst_limit(calls: usize) -> usize {
    if calls == 0 || calls >= 2 * BURST_FRAMES {
        return BURST_FRAMES;
    }
    (calls / 2).max(SHALLOW_BURST_FRAMES)
}

/// Yields to the runtime by waking itself: other ready tasks run first, but unlike
/// `tokio::task::yield_now` it does not force a poll of the reactor (a system call) on
/// every spin.
pub(super) fn yield_once() -> impl Future<Output = ()> {
    struct YieldOnce(bool);

    impl Future for YieldOnce {
        type Output = ();

        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            if self.0 {
                return Poll::Ready(());
            }
            self.0 = true;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }

    YieldOnce(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_a_spin_budget_the_reader_tries_once_before_it_sleeps() {
        assert_eq!(attempts_per_burst(Duration::ZERO, false), 1);
        assert_eq!(attempts_per_burst(Duration::ZERO, true), 1);
        assert_eq!(attempts_per_burst(Duration::from_nanos(1), false), BURST);
        assert_eq!(
            attempts_per_burst(crate::ConnectionOptions::BUSY_POLL, false),
            BURST
        );
        assert_eq!(
            attempts_per_burst(crate::ConnectionOptions::BUSY_POLL, true),
            HINTED_BURST
        );
    }

    #[test]
    fn a_shallow_pipeline_keeps_bursts_of_sixteen() {
        assert_eq!(burst_limit(0, 0), BURST_FRAMES);
        assert_eq!(burst_limit(16, 16), BURST_FRAMES, "32 outstanding");
        assert_eq!(burst_limit(0, 2 * BURST_FRAMES - 1), BURST_FRAMES);
    }

    #[test]
    fn a_deep_pipeline_takes_half_of_it_at_a_time() {
        assert_eq!(
            burst_limit(112, 0),
            56,
            "this side's calls: 128 outstanding"
        );
        assert_eq!(
            burst_limit(0, 48),
            32,
            "the peer's requests: 16 taken, 48 here"
        );
        assert_eq!(burst_limit(1_000, 0), DEEP_BURST_FRAMES);
        assert_eq!(burst_limit(0, DEEP_BURST_FRAMES), 40);
    }

    #[test]
    fn only_a_burst_of_answers_is_cut_short() {
        assert!(answers_so_far(
            SHALLOW_BURST_FRAMES,
            SHALLOW_BURST_FRAMES - 1
        ));
        assert!(
            !answers_so_far(SHALLOW_BURST_FRAMES, SHALLOW_BURST_FRAMES - 2),
            "a request among them: the peer's pipeline may be deep"
        );
        assert!(!answers_so_far(
            SHALLOW_BURST_FRAMES - 1,
            SHALLOW_BURST_FRAMES - 1
        ));
        assert!(
            !answers_so_far(SHALLOW_BURST_FRAMES + 1, SHALLOW_BURST_FRAMES),
            "decided once"
        );
    }

    #[test]
    fn a_pipeline_shallower_than_two_bursts_is_taken_half_at_a_time_where_batches_are_cheap() {
        assert_eq!(
            shallow_burst_limit(8),
            SHALLOW_BURST_FRAMES,
            "8 outstanding"
        );
        assert_eq!(shallow_burst_limit(16), 8);
        assert_eq!(shallow_burst_limit(31), 15);
        assert_eq!(shallow_burst_limit(5), SHALLOW_BURST_FRAMES, "never fewer");
        assert_eq!(
            shallow_burst_limit(2 * BURST_FRAMES),
            BURST_FRAMES,
            "32 outstanding"
        );
        assert_eq!(
            shallow_burst_limit(0),
            BURST_FRAMES,
            "a server keeps its bursts"
        );
    }
}
