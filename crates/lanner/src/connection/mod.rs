//! A live connection between two peers, shared by every proxy and call on it.
//!
//! Either side may call the other (the roles differ only in the handshake). Callers stamp
//! and write their own requests (no hand-off to a writer task for a lone call); one reader
//! task per connection receives frames, completes pending calls and dispatches incoming
//! requests. Flow-control credits and call accounting live in the protocol core's state
//! machine, under one short lock.
//!
//! Many calls outstanding travel in batches (see the writer module): a caller with other
//! calls in flight leaves its request to the reader, which writes every waiting request at
//! once before it receives, and frames that arrived together are processed before their
//! answers are written, together.

use std::collections::HashMap;
use std::future::poll_fn;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Waker};
use std::time::Duration;

use futures_util::task::AtomicWaker;
use lanner_proto::{Event, OutFrame};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::access::PeerIdentity;
use crate::error::Error;
use crate::id_hasher::IdBuildHasher;
use crate::object::Object;
use crate::occasional::occasionally;
use crate::server::{CallLimit, NameRegistry};
use crate::transport::{FrameSink, FrameSource};

mod answers;
mod calls;
mod control;
mod delivery_marks;
mod dispatch;
mod exports;
mod hand_backs;
mod handshake;
mod idle;
mod keepalive;
mod lending;
mod lone_caller;
mod outgoing;
mod pending_calls;
mod pending_reply;
mod poll_interval;
mod reader;
mod releases;
mod runtime_watch;
mod writer;

pub(crate) use calls::{Discard, until};
pub(crate) use control::GOAWAY_ANSWER_WAIT;
pub(crate) use dispatch::{AnsweredBy, Queued, Served, Waiting};
pub(crate) use exports::{Denied, ExportTable, ExportedSlot, MAX_EXPORTS, ROOT_HANDLE};
pub(crate) use hand_backs::Answer;
pub(crate) use handshake::{Admission, HandshakeDeadline, accept, connect, refuse};
pub(crate) use outgoing::Outgoing;

use reader::Receiving;
use writer::{Flushed, When, Writer};

pub(crate) struct Connection {
    state: Mutex<State>,
    source: Mutex<Box<dyn FrameSource>>,
    /// Whether anything may have arrived, read without the source's lock.
    arrival: Option<Box<dyn crate::transport::ArrivalHint>>,
    writer: Mutex<Writer>,
    /// A flusher task waits for room on the transport: the reader then lets the reactor
    /// run after every spin, so the flusher hears about room promptly.
    flusher_active: AtomicBool,
    /// Frames wait in the writer for the reader to flush them (see [`When::Deferred`]).
    deferred: AtomicBool,
    /// The writer may hold credits of the peer's one-way calls (see
    /// `Writer::return_credit`): set under the writer's lock when one is held, cleared by
    /// the reader when it looks, so that a reader with none to send takes no lock. Credits
    /// that leave with another frame leave it set: the reader then takes the lock once and
    /// finds none.
    credits_held: AtomicBool,
    /// Writing stopped because the peer stopped reading; the reader goes on with what it
    /// sent before (see [`Connection::written`]).
    writes_stopped: AtomicBool,
    /// The caller that may spin for its reply at once (see [`Connection::call`]).
    lone_caller: lone_caller::LoneCaller,
    /// Lets a waiting call skip the state's lock when no answer came for it.
    marks: delivery_marks::DeliveryMarks,
    /// Bumped whenever the flusher writes something: the reader counts it as activity and
    /// keeps spinning while a large frame drains (bounded: a peer that stops reading stops
    /// the progress).
    write_progress: AtomicU64,
    runtime: tokio::runtime::Handle,
    /// Whether that runtime still runs.
    runtime_watch: runtime_watch::RuntimeWatch,
    credit_available: Notify,
    signal: Arc<ReaderSignal>,
    /// Where the export table's entries are, to look ahead at a request's object without
    /// the lock.
    export_entries: Arc<exports::EntriesView>,
    /// The peer's calls still running after their first poll, or waiting for their turn
    /// in an apartment, by call id (to cancel them).
    serving: Mutex<HashMap<u64, dispatch::Serving, IdBuildHasher>>,
    peer: String,
    /// Who the peer is (as the handshake established) and what it may call.
    identity: Arc<PeerIdentity>,
    spin: Duration,
    /// How long a call waits for its answer unless its proxy says otherwise.
    call_timeout: Option<Duration>,
    /// Frames received so far, and parts of frames: the keepalive's sign of life.
    frames_received: AtomicU64,
    /// Answers to the peer's calls sent by the receiver without the state's lock and not
    /// yet counted in the protocol state (see [`Connection::count_answers_here`]). Written
    /// only under the receive lock (no read-modify-write).
    answered_here: AtomicU32,
    /// No answer may be stamped any more (the connection closed, or is closing): what the
    /// state's lock tells an answer stamped under it, for one stamped without.
    answers_stopped: AtomicBool,
    /// The connection has ended and let go of its transport (socket, queued answers): a
    /// lingering close holds them for a while after it ended (see
    /// [`Connection::holds_resources`]).
    let_go: AtomicBool,
    /// The largest frame the peer accepts (settled by the handshake).
    peer_max_frame_size: u32,
    /// Whole frames received so far (see [`crate::Traffic`]).
    messages_received: AtomicU64,
    /// Replies the waiting caller received itself (see [`crate::Traffic`]).
    replies_to_their_caller: AtomicU64,
    /// Spins for a reply that ended without it (see [`crate::Traffic`]).
    spins_unanswered: AtomicU64,
    /// Handles of the peer's objects whose last reference here was dropped, to be sent
    /// in the next RELEASE frame.
    releases: Mutex<releases::QueuedReleases>,
    /// Answers that hand back our objects not decoded yet, and the peer's releases that
    /// wait for them (see `hand_backs`).
    hand_backs: Mutex<hand_backs::HandBacks>,
    /// The server's bound on suspended calls (server side only).
    call_limit: Option<Arc<CallLimit>>,
    /// The server's published names (server side only): an object handed out without
    /// its name still obeys the access rules for its name.
    names: Option<Arc<NameRegistry>>,
    /// New calls can be made: cleared when the connection fails or the peer sends
    /// GOAWAY (read on every call through a reference that can reconnect).
    usable: AtomicBool,
    /// Client side: where this connection leads (see [`Onward`]).
    onward: Option<Onward>,
    /// Server side: hand-off tokens the peer's principal granted that are still waiting
    /// (shared by all its connections).
    granted: Arc<AtomicUsize>,
    /// The peer answered the PING that followed our GOAWAY (see `Connection::go_away`).
    goaway_heard: AtomicBool,
    /// Server side: the peer's redemptions of hand-off tokens waiting for their grant
    /// (see [`crate::handoff::MAX_WAITING_PER_CONNECTION`]).
    redemptions_waiting: AtomicUsize,
    /// Where this side's loans come from (shared-memory transports).
    loans: lending::Lending,
    /// References to the peer's objects that this side holds and could not find again if
    /// the connection closed (see `Connection::reference_held`).
    references_held: AtomicUsize,
}

struct State {
    proto: lanner_proto::Connection,
    pending: pending_calls::PendingCalls,
    /// Calls made and received so far (for the idle check).
    calls: u64,
    closed: Option<Error>,
    credit_waiters: usize,
    /// One-way calls sent whose credit has not come back yet (see
    /// [`Connection::try_send_one_way`]). CREDIT frames that grant more credits count against
    /// it too, so it may fall short; it only decides how one-way requests are batched.
    one_way_out: u32,
    /// This side's objects the peer may call (see [`ExportTable`]). Under the same lock as
    /// the protocol state, so that a request is decoded and its object looked up in one
    /// critical section (a lock of its own cost every request two more read-modify-writes;
    /// see `docs/decisions.md`, twentieth session). Borrowed alone through
    /// [`Connection::exports`].
    exports: ExportTable,
}

impl State {
    /// Whether the one call registered is the only one this side has outstanding or
    /// answered but not yet taken by its caller. An answer waiting in its slot counts:
    /// its caller has yet to run, and a caller that took the connection for its own and
    /// spun through its next calls would keep it from running (futures joined in one task
    /// are polled only when the one running returns).
    fn alone(&self) -> bool {
        self.pending.len() == 1 && self.proto.in_flight() <= 1
    }

    /// Counts a one-way call just sent; whether it is the only thing outstanding: no call
    /// waits for an answer and no earlier one-way call's credit is still out.
    fn one_way_sent(&mut self) -> bool {
        let alone = self.pending.is_empty() && self.one_way_out == 0;
        self.one_way_out = self.one_way_out.saturating_add(1);
        alone
    }
}

/// The export table, borrowed under the state's lock ([`Connection::exports`]).
pub(crate) struct ExportsGuard<'a>(MutexGuard<'a, State>);

impl std::ops::Deref for ExportsGuard<'_> {
    type Target = ExportTable;

    fn deref(&self) -> &ExportTable {
        &self.0.exports
    }
}

impl std::ops::DerefMut for ExportsGuard<'_> {
    fn deref_mut(&mut self) -> &mut ExportTable {
        &mut self.0.exports
    }
}

/// How many credits of the peer's one-way calls are held before they go back on their own
/// (see `Writer::return_credit`), with `window` credits granted to the peer: a quarter,
/// so that the peer still has most of its window while they are held (one at a time with
/// a window of less than eight).
fn credit_batch(window: u32) -> u32 {
    (window / 4).max(1)
}

/// How callers nudge a sleeping reader into spinning again, and how a dropped connection
/// tells its reader to stop.
#[derive(Default)]
pub(crate) struct ReaderSignal {
    asleep: AtomicBool,
    kicked: AtomicBool,
    shutdown: AtomicBool,
    waker: AtomicWaker,
}

impl ReaderSignal {
    fn kick(&self) {
        if self.asleep.load(Ordering::SeqCst) {
            self.kicked.store(true, Ordering::SeqCst);
            self.waker.wake();
        }
    }
}

/// A received frame after the state machine saw it.
enum Handled {
    /// The response the receiving caller waits for.
    Mine(Answer),
    /// A response, delivered to its call's slot.
    Delivered,
    /// A request, and the interface of the object it calls (looked up under the same
    /// lock), or why there is none.
    Request(lanner_proto::Request, Result<ExportedSlot, String>),
    /// Any other event.
    Event(Event),
}

/// Which side of the connection this is. A server-side connection resolves names from its
/// server's registry, counts its suspended calls against the server's limit, and lives as
/// long as its peer stays connected (its reader task keeps it alive); a client-side one
/// lives while proxies hold it.
pub(crate) enum Side {
    Client(Onward),
    Server(Arc<NameRegistry>, Arc<CallLimit>),
}

/// What a client-side connection knows of where it leads: the endpoint it connected to
/// (the address it hands to third parties with references to the peer's objects) and
/// the client that opened it (which connects onward to the servers of references handed
/// to this side).
#[derive(Clone)]
pub(crate) struct Onward {
    pub(crate) endpoint: crate::url::Endpoint,
    pub(crate) client: crate::client::WeakClient,
}

impl Connection {
    pub(crate) fn start(
        proto: lanner_proto::Connection,
        mut sink: Box<dyn FrameSink>,
        mut source: Box<dyn FrameSource>,
        peer: String,
        mut identity: PeerIdentity,
        side: Side,
        options: &crate::ConnectionOptions,
    ) -> Arc<Connection> {
        source.set_max_frame_size(proto.max_incoming_frame_size());
        source.peer_authenticated();
        sink.set_room_spin(options.spin);
        let peer_window = proto.peer_window();
        let peer_max_frame_size = proto.peer_limits().max_frame_size;
        let loans = sink.loan_area();
        let signal = Arc::new(ReaderSignal::default());
        let mut exports = ExportTable::new();
        let mut call_limit = None;
        let mut names = None;
        let mut onward = None;
        let mut granted = Arc::default();
        match &side {
            Side::Server(registry, limit) => {
                granted = registry.handoffs.quota(&identity.principal);
                exports.set_root(crate::root::root_object(registry.clone()));
                call_limit = Some(limit.clone());
                names = Some(registry.clone());
            }
            Side::Client(to) => onward = Some(to.clone()),
        }
        let export_entries = exports.view();
        let (runtime_watch, watching) = runtime_watch::new();
        let connection = Arc::new_cyclic(|weak| {
            identity.connection = weak.clone();
            Connection {
                state: Mutex::new(State {
                    proto,
                    pending: pending_calls::PendingCalls::default(),
                    calls: 0,
                    closed: None,
                    credit_waiters: 0,
                    one_way_out: 0,
                    exports,
                }),
                arrival: source.arrival_hint(),
                source: Mutex::new(source),
                writer: Mutex::new(Writer::new(sink, credit_batch(peer_window))),
                credits_held: AtomicBool::new(false),
                flusher_active: AtomicBool::new(false),
                deferred: AtomicBool::new(false),
                writes_stopped: AtomicBool::new(false),
                lone_caller: lone_caller::LoneCaller::default(),
                marks: delivery_marks::DeliveryMarks::new(),
                write_progress: AtomicU64::new(0),
                runtime: tokio::runtime::Handle::current(),
                runtime_watch,
                credit_available: Notify::new(),
                signal: signal.clone(),
                export_entries,
                serving: Mutex::new(HashMap::default()),
                peer,
                identity: Arc::new(identity),
                // Deadlines are computed as now + spin: keep that representable.
                spin: options.spin.min(crate::ConnectionOptions::BUSY_POLL),
                call_timeout: options.call_timeout,
                frames_received: AtomicU64::new(0),
                answered_here: AtomicU32::new(0),
                answers_stopped: AtomicBool::new(false),
                let_go: AtomicBool::new(false),
                peer_max_frame_size,
                messages_received: AtomicU64::new(0),
                replies_to_their_caller: AtomicU64::new(0),
                spins_unanswered: AtomicU64::new(0),
                releases: Mutex::default(),
                hand_backs: Mutex::default(),
                call_limit,
                names,
                usable: AtomicBool::new(true),
                onward,
                granted,
                redemptions_waiting: AtomicUsize::new(0),
                goaway_heard: AtomicBool::new(false),
                loans: lending::Lending::new(loans),
                references_held: AtomicUsize::new(0),
            }
        });
        watching.start(Arc::downgrade(&connection));
        reader::spawn(&connection, signal, &side);
        if let Some(timeout) = options.idle_timeout {
            idle::spawn(Arc::downgrade(&connection), timeout);
        }
        if let Some(interval) = options.keepalive {
            keepalive::spawn(
                Arc::downgrade(&connection),
                interval,
                options.keepalive_timeout,
            );
        }
        connection
    }

    /// Who is on the other side.
    pub(crate) fn peer(&self) -> &str {
        &self.peer
    }

    /// The runtime the connection's tasks run on.
    pub(crate) fn runtime(&self) -> &tokio::runtime::Handle {
        &self.runtime
    }

    /// Whether [`Connection::runtime`] still runs (see the `runtime_watch` module).
    pub(crate) fn runtime_alive(&self) -> bool {
        self.runtime_watch.runtime_alive()
    }

    /// The runtime to time a deadline of a call on this connection on: the connection's
    /// while it runs (the caller may be polled where no runtime runs, `block_on` on a
    /// plain thread, or in a runtime without timers or that nobody drives); once it has
    /// shut down, the caller's, if it runs in one (a timer of a runtime that shut down
    /// panics when polled).
    pub(crate) fn timer_runtime(&self) -> tokio::runtime::Handle {
        if !self.runtime_alive() {
            if let Ok(here) = tokio::runtime::Handle::try_current() {
                return here;
            }
        }
        self.runtime.clone()
    }

    /// Fails the connection because its runtime shut down (see the `runtime_watch`
    /// module).
    pub(super) fn runtime_shut_down(&self) {
        // What callers queued (one-way calls, told they were sent) goes out as far as the
        // transport takes it without waiting, as when a connection is dropped: nothing
        // will flush it later.
        let _ = self.writer().flush(&mut Context::from_waker(Waker::noop()));
        self.fail(Error::new(
            crate::ErrorKind::Unavailable,
            "the connection's runtime has shut down (a connection is served by the tokio \
             runtime it was made on; connect again from a runtime that runs)",
        ));
        // Writing stops here even if `fail` found the connection ended already: one closed
        // on purpose just before left the rest of its writing (and the letting go of its
        // transport) to a task of this runtime, which will not run now.
        self.abort_writes();
    }

    /// How much the connection is used (see the idle module).
    fn activity(&self) -> idle::Activity {
        self.activity_in(&self.state())
    }

    /// [`Connection::activity`], under the state lock the caller holds.
    fn activity_in(&self, state: &State) -> idle::Activity {
        let calls_outstanding = !state.pending.is_empty()
            || state.proto.in_flight() > 0
            || self.peer_in_flight(state) > 0;
        idle::Activity {
            calls: state.calls,
            calls_outstanding,
            // Either side holding references it could not find again still uses the
            // connection.
            busy: calls_outstanding
                || state.exports.holds_unresolvable()
                || self.holds_peer_references(),
        }
    }

    /// How long a call waits for its answer by default.
    pub(crate) fn call_timeout(&self) -> Option<Duration> {
        self.call_timeout
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The export table, under the state's lock (not to be taken while that is held).
    pub(crate) fn exports(&self) -> ExportsGuard<'_> {
        ExportsGuard(self.state())
    }

    fn serving(&self) -> MutexGuard<'_, HashMap<u64, dispatch::Serving, IdBuildHasher>> {
        self.serving.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Makes `object` (published as `name`, if it was) callable by the peer on this
    /// connection, as far as the server's access policy lets it; returns its handle.
    pub(crate) fn export(&self, object: &Object, name: Option<&str>) -> Result<u64, Denied> {
        // Only a name given here (resolution) lets the peer find the object again.
        self.export_as(object, name, name.is_some())
    }

    /// [`Connection::export`], saying whether the peer could find the object again by
    /// `name` (a name a hand-off carried names the rules, but the peer did not resolve it).
    pub(crate) fn export_as(
        &self,
        object: &Object,
        name: Option<&str>,
        resolvable: bool,
    ) -> Result<u64, Denied> {
        let published = match (name, &self.names) {
            (None, Some(names)) => names.name_of(object),
            _ => None,
        };
        let name = name.or(published.as_deref());
        self.exports()
            .export(object, name, resolvable, &self.identity)
    }

    /// Hands this side's reference to the peer's object `handle` on to a third party:
    /// sends the peer a GRANT for a fresh token (before the message carrying the
    /// reference goes out, so the grant is ahead of the third party's redemption as far
    /// as this side can make it) and returns the endpoint and token the reference
    /// carries. See [`crate::handoff`].
    pub(crate) fn grant(
        self: &Arc<Self>,
        handle: u64,
    ) -> Result<(crate::url::Endpoint, crate::handoff::Token), Error> {
        let Some(onward) = &self.onward else {
            return Err(Error::new(
                crate::ErrorKind::InvalidArgument,
                format!(
                    "{} connected to this process, so it has no address known here that a third party could connect to",
                    self.peer
                ),
            ));
        };
        if !self.usable() {
            return Err(self.closed().unwrap_or_else(|| {
                Error::unavailable(format!("the connection to {} is closing", self.peer))
            }));
        }
        let token = crate::handoff::new_token();
        let frame = lanner_proto::frame::encode_grant(&lanner_proto::Grant { handle, token });
        self.send_frame(OutFrame::contiguous(frame))?;
        Ok((onward.endpoint.clone(), token))
    }

    /// The client that connects to the servers of references third parties hand to this
    /// side: the one that opened this connection, or the server's hand-off client.
    pub(crate) fn onward_client(&self) -> Result<crate::Client, Error> {
        match (&self.onward, &self.names) {
            (Some(onward), _) => onward.client.upgrade().ok_or_else(|| {
                Error::unavailable(
                    "the Client that opened this connection was dropped: keep it to use references handed over by third parties",
                )
            }),
            (None, Some(names)) => Ok(names.handoffs.client()),
            (None, None) => Err(Error::unavailable("this connection cannot connect onward")),
        }
    }

    /// Server side: parks the object the peer granted for a third party. Not the root
    /// object: every peer holds it, no client hands it on (no proxy of the public API
    /// names it), and a peer granting it would need no object of its own to make the
    /// server park things.
    fn park_grant(&self, grant: lanner_proto::Grant) {
        let Some(names) = &self.names else { return };
        if grant.handle == ROOT_HANDLE {
            occasionally!(warn, peer = %self.peer, "refused a hand-off grant of the root object");
            return;
        }
        let Some((object, name)) = self.exports().object_and_name(grant.handle) else {
            tracing::debug!(peer = %self.peer, handle = grant.handle, "a grant for an object the peer does not hold");
            return;
        };
        // Under the name the peer holds it by: the third party gets that name's rules.
        let granted = crate::handoff::Granted { object, name };
        if let Err(refused) =
            names
                .handoffs
                .park(grant.token, granted, &self.granted, &self.runtime)
        {
            // Peers may send grants without end.
            occasionally!(warn, peer = %self.peer, ?refused, "refused a hand-off grant");
        }
    }

    /// The peer's redemptions of hand-off tokens that wait for their grant now.
    pub(crate) fn redemptions_waiting(&self) -> &AtomicUsize {
        &self.redemptions_waiting
    }

    /// Who the peer is and what it may call.
    pub(crate) fn identity(&self) -> &Arc<PeerIdentity> {
        &self.identity
    }

    /// Messages sent and received on this connection so far.
    pub(crate) fn traffic(&self) -> crate::Traffic {
        let messages_sent = self.writer().frames_sent();
        crate::Traffic {
            messages_sent,
            messages_received: self.messages_received.load(Ordering::Relaxed),
            payloads_lent: self.loans.payloads_lent(),
            replies_to_their_caller: self.replies_to_their_caller.load(Ordering::Relaxed),
            spins_unanswered: self.spins_unanswered.load(Ordering::Relaxed),
        }
    }

    /// A caller spun for its reply and gave up (see [`crate::Traffic`]). Callers of other
    /// threads may count at once: a read-modify-write, off the path of an answered call.
    pub(super) fn count_unanswered_spin(&self) {
        self.spins_unanswered.fetch_add(1, Ordering::Relaxed);
    }

    /// A buffer of `len` bytes for a payload to send on this connection: in its loan area
    /// if it has one with room (see [`crate::Loan`]).
    pub(crate) fn loan(&self, len: usize) -> crate::Loan {
        self.loans.loan(len)
    }

    /// The error the connection closed with, if it has.
    pub(crate) fn closed(&self) -> Option<Error> {
        self.state().closed.clone()
    }

    /// Sends one frame: queues it and writes what the transport takes now (with whatever
    /// waits before it); a flusher task finishes if the transport is full (see the writer
    /// module). Never waits. Returns whether the frame went out whole (false: it waits in
    /// the queue, or the flusher is still on it).
    pub(crate) fn send_frame(self: &Arc<Self>, frame: OutFrame) -> Result<bool, Error> {
        self.send(frame, false, When::Now)
    }

    /// [`Connection::send_frame`] for an answer, which returns a credit to the peer:
    /// counted until written (see the reader's credit check). A one-way call's credit goes
    /// back through `Writer::return_credit`.
    pub(crate) fn send_credit_return(self: &Arc<Self>, frame: OutFrame) -> Result<bool, Error> {
        self.send(frame, true, When::Now)
    }

    /// Queues a request for the reader to write with the next batch: for a caller whose
    /// request does not need to go out before others (there are calls in flight, so the
    /// reader is spinning or about to). Falls back to writing at once when the reader
    /// sleeps.
    fn send_deferred(self: &Arc<Self>, frame: OutFrame) -> Result<bool, Error> {
        if self.signal.asleep.load(Ordering::SeqCst) {
            let sent = self.send_frame(frame);
            // The reply follows: have the reader spin for it rather than wait for the
            // reactor.
            self.signal.kick();
            return sent;
        }
        let sent = self.send(frame, false, When::Deferred);
        self.note_deferred();
        sent
    }

    /// Tells the reader that a frame waits for its next flush (see
    /// [`Connection::send_deferred`]), after the frame was queued or written unpublished:
    /// a reader going to sleep sees the flag (see `sleep`). Already set, it stays set until
    /// the reader's next flush, which the writer's lock orders after this frame: a plain
    /// load spares a read-modify-write per call when requests pile up.
    pub(super) fn note_deferred(&self) {
        if !self.deferred.load(Ordering::Relaxed) {
            self.deferred.store(true, Ordering::SeqCst);
        }
        self.signal.kick();
    }

    fn send(
        self: &Arc<Self>,
        frame: OutFrame,
        returns_credit: bool,
        when: When,
    ) -> Result<bool, Error> {
        let mut writer = self.writer();
        let result = writer.send(
            frame,
            returns_credit,
            when,
            &mut Context::from_waker(Waker::noop()),
        );
        drop(writer);
        self.after_write(result)
    }

    /// Writes the frames deferred for the reader, if any (see [`When::Deferred`]).
    pub(super) fn flush_deferred(self: &Arc<Self>) -> Result<(), Error> {
        // A plain load first: the reader calls this on every spin, and a swap would take
        // the line from the senders each time.
        if !self.deferred.load(Ordering::Relaxed) || !self.deferred.swap(false, Ordering::SeqCst) {
            return Ok(());
        }
        let result = self.writer().flush(&mut Context::from_waker(Waker::noop()));
        self.after_write(result).map(drop)
    }

    /// Sends the credits of the peer's one-way calls held back so far (see
    /// `Writer::return_credit`): the receiver has run out of work, and the peer may be
    /// waiting for them.
    pub(super) fn return_held_credits(self: &Arc<Self>) -> Result<(), Error> {
        // A load first (a plain one on x86; sequentially consistent for the sleeping
        // reader's check, see `reader::sleep`), and a swap only when set: the reader looks
        // on every idle stretch.
        if !self.credits_held.load(Ordering::SeqCst)
            || !self.credits_held.swap(false, Ordering::SeqCst)
        {
            return Ok(());
        }
        let result = self
            .writer()
            .return_held_credits(&mut Context::from_waker(Waker::noop()));
        self.after_write(result).map(drop)
    }

    /// Holds back frames sent from now on until [`Connection::uncork`]: the receiver is
    /// about to process frames that arrived together.
    pub(super) fn cork(&self) {
        self.writer().cork();
    }

    /// Writes what the cork held back, in one batch.
    pub(super) fn uncork(self: &Arc<Self>) -> Result<(), Error> {
        let result = self
            .writer()
            .uncork(&mut Context::from_waker(Waker::noop()));
        self.after_write(result).map(drop)
    }

    /// See [`crate::transport::FrameSink::unsent`].
    fn writer_unsent(&self) -> Option<usize> {
        self.writer().unsent()
    }

    fn writer(&self) -> MutexGuard<'_, Writer> {
        self.writer.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Finishes a write: starts a flusher task if the transport is full, fails the
    /// connection if the write failed. Returns whether everything is written.
    fn after_write(self: &Arc<Self>, result: std::io::Result<Flushed>) -> Result<bool, Error> {
        match result {
            Ok(Flushed::Done) => self.written(Ok(())).map(|()| true),
            Ok(Flushed::Queued | Flushed::FlusherRunning) => Ok(false),
            Ok(Flushed::StartFlusher) => {
                self.flusher_active.store(true, Ordering::Relaxed);
                // The reader spins while the frame drains (and catches the reply).
                self.signal.kick();
                let connection = self.clone();
                self.runtime.spawn(async move {
                    let result = poll_fn(|cx| {
                        let mut writer = connection.writer();
                        let flushed = writer.poll_flusher(cx, || {
                            connection.write_progress.fetch_add(1, Ordering::Relaxed);
                        });
                        // Cleared under the writer's lock, where the writer stopped
                        // flushing: a sender that starts the next flusher does so after
                        // this, and its setting of the flag is not undone by this one.
                        if flushed.is_ready() {
                            connection.flusher_active.store(false, Ordering::Relaxed);
                        }
                        flushed
                    })
                    .await;
                    // A large frame just went out whole: its answer (or the next request)
                    // follows, so the reader spins for it.
                    connection.signal.kick();
                    connection.written(result)
                });
                Ok(false)
            }
            Err(error) => self.written(Err(error)).map(|()| false),
        }
    }

    /// Settles a write's outcome. A write that failed because the peer stopped reading
    /// (its end closed or reset) does not end the connection at once: frames it sent before
    /// may be here still (the one-way calls of a client that has just exited, say). The
    /// connection then takes no new calls and writes nothing more, and the reader goes on
    /// with what arrived until it reaches the end, which ends the connection (and fails
    /// the calls still waiting). Any other failure ends the connection at once.
    fn written(&self, result: std::io::Result<()>) -> Result<(), Error> {
        result.map_err(|e| {
            let error = Error::io(&format!("writing to {}", self.peer), &e);
            if peer_stopped_reading(&e) {
                self.writes_stopped.store(true, Ordering::SeqCst);
                self.usable.store(false, Ordering::Release);
                self.abort_writes();
            } else {
                self.fail(error.clone());
            }
            error
        })
    }

    /// A write error from the reader's own flushes, unless it only stopped the writing
    /// (see [`Connection::written`]): the reader then goes on receiving.
    pub(super) fn fatal_for_reader(&self, result: Result<(), Error>) -> Result<(), Error> {
        match result {
            Err(_) if self.writes_stopped.load(Ordering::SeqCst) => Ok(()),
            other => other,
        }
    }

    /// Runs `step` on the protocol state machine, unless the connection has closed.
    fn with_open_proto<T>(
        &self,
        step: impl FnOnce(&mut lanner_proto::Connection) -> T,
    ) -> Option<T> {
        let mut state = self.state();
        if state.closed.is_some() {
            return None;
        }
        Some(step(&mut state.proto))
    }

    /// The connection behind `weak`, if it still exists and is open (for the tasks that
    /// watch a connection without keeping it alive).
    fn upgrade_open(weak: &std::sync::Weak<Connection>) -> Option<Arc<Connection>> {
        weak.upgrade()
            .filter(|connection| connection.closed().is_none())
    }

    fn credits_granted(&self, credits: u32) {
        let waiters = {
            let mut state = self.state();
            state.one_way_out = state.one_way_out.saturating_sub(credits);
            state.credit_waiters
        };
        if waiters > 0 {
            self.credit_available.notify_waiters();
        }
    }

    /// Feeds a received frame to the state machine. A response is delivered under the same
    /// lock: handed straight back if it answers `mine` (the caller receiving), else put in
    /// its call's slot, or (its caller gone) disposed of after the lock is let go.
    /// `shared`: the frame is in shared memory, with these segments lent apart from it
    /// (see [`crate::transport::Received::Shared`]).
    fn handle_frame(
        self: &Arc<Self>,
        frame: bytes::Bytes,
        shared: Option<lanner_proto::ExternalSegments>,
        mine: Option<u64>,
        receiving: &Receiving,
    ) -> Result<Handled, lanner_proto::ProtocolError> {
        let mut state = self.state();
        self.count_answers_here(&mut state, receiving);
        let event = match shared {
            None => state.proto.handle_frame(frame)?,
            Some(segments) => state.proto.handle_frame_with(frame, segments)?,
        };
        match event {
            Event::Response(response) => {
                let wake_credit_waiters = response.credits > 0 && state.credit_waiters > 0;
                let call_id = response.call_id;
                let answer = self.counted_answer(response);
                let delivered = calls::deliver(&mut state.pending, answer, mine, &self.peer);
                drop(state);
                if let calls::Delivered::Stored(_) = delivered {
                    // Before the waiter is woken (see `delivery_marks`).
                    self.marks.bump(call_id);
                }
                if wake_credit_waiters {
                    self.credit_available.notify_waiters();
                }
                Ok(match delivered.complete(self) {
                    Some(response) => Handled::Mine(response),
                    None => Handled::Delivered,
                })
            }
            Event::Request(request) => {
                state.calls += 1;
                let slot = state.exports.slot(request.object, request.slot);
                Ok(Handled::Request(request, slot))
            }
            event => Ok(Handled::Event(event)),
        }
    }

    /// Closes the connection with `error`: every pending call fails with it, every later
    /// call fails fast with it, and nothing more is written.
    pub(crate) fn fail(&self, error: Error) {
        if self.end(error) {
            self.abort_writes();
        }
    }

    /// Stops writing: what is queued is dropped, and a flusher waiting for a peer that
    /// stopped reading (which would wait forever) ends. On a connection that has ended,
    /// also lets go of the transport's halves and its loan area: a proxy that pins the
    /// connection no longer pins its socket (or shared-memory doorbells and region). They
    /// go once nothing more is written (a shared-memory source hangs up the doorbells the
    /// sink waits on). A caller receiving for itself then finds the end (see
    /// [`crate::transport::Released`]).
    fn abort_writes(&self) {
        let mut writer = self.writer();
        writer.abort();
        if !self.ended() {
            // The peer stopped reading: what it sent before may still be received.
            return;
        }
        let sink = writer.release();
        drop(writer);
        drop(sink);
        self.loans.release();
        self.release_source();
        self.let_go.store(true, Ordering::Release);
    }

    /// Whether the connection still holds what it cost its server: open, or ended but
    /// still lingering with its socket and the answers queued for a slow reader (see
    /// `end_lingering`). A server counts it against its connection limit until then.
    pub(crate) fn holds_resources(&self) -> bool {
        !self.let_go.load(Ordering::Acquire)
    }

    /// Replaces the receiving half with [`crate::transport::Released`] once the connection
    /// has ended and stopped writing. Without waiting for the receive lock: its holder
    /// may be this very thread (a receive attempt whose frame ended the connection); the
    /// reader then lets go of the half when it stops (see `reader::spawn`).
    pub(super) fn release_source(&self) {
        if !self.ended() || !self.writer().is_aborted() {
            return;
        }
        let source = match self.source.try_lock() {
            Ok(mut source) => std::mem::replace(&mut *source, Box::new(crate::transport::Released)),
            Err(_) => return,
        };
        drop(source);
    }

    /// Marks the connection closed with `error` and tells everyone who waits on it;
    /// false if it already was.
    fn end(&self, error: Error) -> bool {
        let wakers = {
            let mut state = self.state();
            if state.closed.is_some() {
                return false;
            }
            state.closed = Some(error.clone());
            self.answers_stopped.store(true, Ordering::Release);
            self.usable.store(false, Ordering::Release);
            calls::fail_all(&mut state.pending, &error)
        };
        self.marks.bump_all();
        tracing::debug!(peer = %self.peer, %error, "connection closed");
        for waker in wakers {
            waker.wake();
        }
        self.credit_available.notify_waiters();
        // Nobody will read the answers of the calls still being served: tell their methods.
        let serving: Vec<CancellationToken> = self
            .serving()
            .values()
            .map(|serving| serving.token.clone())
            .collect();
        for token in serving {
            token.cancel();
        }
        // The peer can call nothing any more: its references are gone. (Dropped outside
        // the table's lock: an object's drop may drop references of its own.)
        let unexported = self.exports().close();
        self.drop_unexported(unexported);
        self.withdraw_queued_calls();
        // Nothing more will be received: the reader stops (with the flusher, the last
        // holder of a server-side connection).
        self.signal.shutdown.store(true, Ordering::SeqCst);
        self.signal.waker.wake();
        true
    }
}

/// Whether a write failed because the peer no longer reads (it closed or reset its end).
fn peer_stopped_reading(error: &std::io::Error) -> bool {
    matches!(
        error.kind(),
        std::io::ErrorKind::BrokenPipe
            | std::io::ErrorKind::ConnectionReset
            | std::io::ErrorKind::ConnectionAborted
    )
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.signal.shutdown.store(true, Ordering::SeqCst);
        self.signal.waker.wake();
        // Requests queued for a batch (one-way calls, whose callers do not wait) go out
        // now, as far as the transport takes them without waiting: their callers were told
        // they were sent.
        let writer = self.writer.get_mut().unwrap_or_else(|e| e.into_inner());
        let _ = writer.flush(&mut Context::from_waker(Waker::noop()));
        // A client connection nobody uses any more goes without `end`: the objects it
        // still exported (callbacks) are dropped here, under the same guard as always.
        let state = self.state.get_mut().unwrap_or_else(|e| e.into_inner());
        let unexported = state.exports.close();
        self.drop_unexported(unexported);
    }
}
