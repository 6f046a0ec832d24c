//! Frames that manage the connection rather than carry calls: returning a one-way call's
//! credit, GOAWAY on a graceful shutdown, and a deliberate CLOSE.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Waker};
use std::time::Duration;

use bytes::Bytes;
use lanner_proto::{OutFrame, Status};

use super::Connection;
use super::poll_interval::PollInterval;
use crate::error::Error;
use crate::occasional::occasionally;

/// How long a deliberately closed connection keeps writing what it had queued.
pub(super) const CLOSE_LINGER: Duration = Duration::from_secs(5);

/// How long a connection that sent GOAWAY waits, at most, for the peer to answer the PING
/// after it (see [`Connection::go_away`]) before it takes every request the peer sent as
/// arrived: a peer does not answer while it waits for this side to read what it sends,
/// and a hostile one need not answer at all.
pub(crate) const GOAWAY_ANSWER_WAIT: Duration = Duration::from_secs(2);

/// The nonce of the PING that follows a GOAWAY (keepalive probes count up from 1).
pub(super) const GOAWAY_PROBE: u64 = u64::MAX;

impl Connection {
    /// Ends the peer's one-way call `call_id`: gives its credit back (a failure has nobody
    /// to go to but the log).
    pub(crate) fn finish_one_way(self: &Arc<Self>, call_id: u64, status: Status) {
        if status != Status::Ok {
            // A peer can aim one-way calls at nothing without end.
            occasionally!(warn, peer = %self.peer, call_id, ?status, "one-way call failed");
        }
        let Some(finished) = self.with_open_proto(lanner_proto::Connection::finish_one_way_unsent)
        else {
            return;
        };
        match finished {
            Ok(()) => {
                let mut writer = self.writer();
                let returned = writer.return_credit(&mut Context::from_waker(Waker::noop()));
                // Under the writer's lock, before the kick below (see `reader::sleep`); a
                // load first, so that a stream of held credits stores the flag once, not
                // once per call.
                if writer.holds_credits() && !self.credits_held.load(Ordering::SeqCst) {
                    self.credits_held.store(true, Ordering::SeqCst);
                }
                drop(writer);
                let _ = self.after_write(returned);
            }
            Err(error) => tracing::warn!(peer = %self.peer, %error, "credit not returned"),
        }
        self.signal.kick();
    }

    /// Answers the peer's PING with `pong`. Not behind a flusher that waits for the peer
    /// to read (a peer that pings without reading would grow the queue without bound):
    /// the writer then owes it, one at most, until the flusher is done (see
    /// `Writer::answer_ping`). A PONG is never dropped: the peer's GOAWAY probe counts on
    /// it coming after everything this side wrote before.
    pub(super) fn answer_ping(self: &Arc<Self>, pong: Bytes) {
        let probe = pong.ends_with(&GOAWAY_PROBE.to_le_bytes());
        let answered =
            self.writer()
                .answer_ping(pong, probe, &mut Context::from_waker(Waker::noop()));
        let _ = self.after_write(answered);
    }

    /// Whether new calls can be made: open, and the peer has not said it is going away.
    pub(crate) fn usable(&self) -> bool {
        self.usable.load(Ordering::Acquire)
    }

    /// Whether the connection has ended (closed or failed): unlike [`Connection::usable`],
    /// a connection whose peer sent GOAWAY, or that can no longer write, has not ended
    /// while its peer's calls are still received and served.
    pub(crate) fn ended(&self) -> bool {
        self.signal.shutdown.load(Ordering::Acquire)
    }

    /// The peer said it is shutting down: no new calls.
    pub(super) fn peer_going_away(&self) {
        self.usable.store(false, Ordering::Release);
    }

    /// Tells the peer we are shutting down: it should make no new calls. A PING follows
    /// the GOAWAY: the peer answers it after reading the GOAWAY, so once its PONG is here
    /// (see [`Connection::goaway_heard`]) so is every request the peer will ever send.
    pub(crate) fn go_away(self: &Arc<Self>) {
        if let Some(Some(frame)) = self.with_open_proto(|proto| proto.go_away()) {
            self.send_go_away(frame);
        }
    }

    /// [`Connection::go_away`] if `condition` holds, decided under the lock new calls take
    /// (so none slips in between unseen), for a connection this side means to close: it
    /// also makes no new calls of its own from then on (they go to a new connection, or
    /// fail as on a closed one). Returns whether it went away.
    pub(super) fn go_away_if(
        self: &Arc<Self>,
        condition: impl FnOnce(&Connection, &super::State) -> bool,
    ) -> bool {
        let frame = {
            let state = self.state();
            if state.closed.is_some() || !condition(self, &state) {
                return false;
            }
            let Some(frame) = state.proto.go_away() else {
                return false;
            };
            self.usable.store(false, Ordering::Release);
            frame
        };
        self.send_go_away(frame);
        true
    }

    /// Sends `frame` (a GOAWAY) and the PING whose answer says the peer has read it.
    fn send_go_away(self: &Arc<Self>, frame: bytes::Bytes) {
        let _ = self.send_frame(OutFrame::contiguous(frame));
        let probe = lanner_proto::frame::encode_ping(GOAWAY_PROBE);
        let _ = self.send_frame(OutFrame::contiguous(probe));
    }

    /// Whether the peer has answered the PING sent after our GOAWAY (or the connection
    /// has ended): none of its requests are still on their way.
    pub(crate) fn goaway_heard(&self) -> bool {
        self.goaway_heard.load(Ordering::Acquire) || self.ended()
    }

    /// How many of the peer's calls we have not answered yet (none once the connection
    /// has closed: nobody can be answered any more).
    pub(crate) fn calls_being_served(&self) -> u32 {
        let state = self.state();
        if state.closed.is_some() {
            return 0;
        }
        self.peer_in_flight(&state)
    }

    /// Whether frames already sent wait to be written (a large answer to a slow reader,
    /// say, or answers a receiver's cork holds back), on a connection that has not ended.
    /// Takes the writer's lock: not to be called under the state's.
    pub(crate) fn writes_pending(&self) -> bool {
        !self.ended() && !self.writer().is_idle()
    }

    /// Closes the connection on purpose: tells the peer why (CLOSE) and fails what is left.
    pub(crate) fn close(self: &Arc<Self>, status: Status, reason: &str) {
        self.close_if(status, reason, |_, _| true);
    }

    /// [`Connection::close`] if `condition` holds, decided under the same lock that makes
    /// new calls fail (so no call can slip in between); returns whether it closed.
    pub(super) fn close_if(
        self: &Arc<Self>,
        status: Status,
        reason: &str,
        condition: impl FnOnce(&Connection, &super::State) -> bool,
    ) -> bool {
        let frame = {
            let mut state = self.state();
            if state.closed.is_some() || !condition(self, &state) {
                return false;
            }
            self.answers_stopped.store(true, Ordering::Release);
            state.proto.close(status, reason)
        };
        let _ = self.send_frame(OutFrame::contiguous(frame));
        self.end_lingering(Error::from_status(status, format!("closed here: {reason}")));
        true
    }

    /// Ends the connection with `error` after a CLOSE was queued: answers still queued,
    /// and the CLOSE after them, get a while to reach a slow reader before writing stops.
    /// The connection (its socket, its buffers) is held only until they are written: a
    /// peer that reads costs the linger nothing.
    pub(super) fn end_lingering(self: &Arc<Self>, error: Error) {
        if self.end(error) {
            let connection = self.clone();
            self.runtime.spawn(async move {
                let started = tokio::time::Instant::now();
                let mut interval = PollInterval::new();
                // Corked frames too: a receiver's burst may hold answers (or the CLOSE
                // itself) back for a moment.
                while !connection.writer().is_idle() && started.elapsed() < CLOSE_LINGER {
                    interval.tick().await;
                }
                connection.abort_writes();
            });
        }
    }
}
