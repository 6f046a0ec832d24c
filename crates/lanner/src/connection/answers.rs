//! Answering the peer's calls: stamping each answer with its call id and the credit it
//! returns, and counting it as answered in the protocol state.
//!
//! An answer made by the receive attempt that received its request (the common case: a
//! method that completes on its first poll) is stamped without the state's lock. The
//! receiver counts it in `answered_here`, which only the holder of the receive lock
//! writes, and folds that count into the protocol state the next time it takes the
//! state's lock for a frame (before a request's credit check reads it). Whoever reads the
//! peer's calls outstanding under the state's lock subtracts what is not folded yet. A
//! request is counted under the state's lock before its answer is counted in
//! `answered_here`, so a reader holding that lock never subtracts an answer whose request
//! it does not see. Every other answer (a call that waited, an apartment's turn) is
//! stamped and counted under the state's lock as before.
//!
//! Why: the lock was two read-modify-writes and a closure per request on the serving
//! path. Same-run A/B (twentieth session, slow host state), null calls at 32 outstanding
//! over tcp: 1.50–1.60 M calls/s against 1.45–1.52 M; the shm null call's latency did not
//! move (see `docs/decisions.md`).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use lanner_proto::{MessageBuilder, OutFrame};

use super::reader::Receiving;
use super::{AnsweredBy, Connection, State};
use crate::call::ReplyMessage;
use crate::objref::UnsentExports;
use crate::phase_marks::{self, Mark};

impl Connection {
    /// Answers the peer's call `call_id`, then has the reader spin for the peer's next
    /// request (as the raw baseline does after replying).
    /// `exported`: this side's objects the reply exported (see [`Connection::stamp_response`]).
    pub(crate) fn respond(
        self: &Arc<Self>,
        call_id: u64,
        reply: ReplyMessage,
        exported: UnsentExports,
        by: AnsweredBy<'_>,
    ) {
        match (reply, by) {
            (ReplyMessage::Plain(bulk), AnsweredBy::Receiver(receiving)) => {
                // A plain reply's value carries no references: nothing was exported.
                debug_assert!(exported.is_empty());
                self.respond_plain_here(call_id, bulk, receiving);
            }
            (reply, by) => {
                let reply = reply.into_builder();
                if let Some(frame) = self.stamp_response(call_id, reply, exported, by) {
                    phase_marks::mark(Mark::AnswerStamped);
                    let _ = self.send_credit_return(frame);
                }
            }
        }
        self.signal.kick();
    }

    /// [`Connection::respond`] by the receiver with a plain reply: its header stamped on
    /// the stack and written with its bulk straight into the transport where it can be
    /// (see the `outgoing` module). One too large for the peer goes the ordinary way,
    /// which makes it an error.
    fn respond_plain_here(
        self: &Arc<Self>,
        call_id: u64,
        bulk: Option<Bytes>,
        receiving: &Receiving,
    ) {
        let Some(head) =
            lanner_proto::stamp_plain_response(call_id, bulk.as_deref(), self.peer_max_frame_size)
        else {
            let reply = ReplyMessage::Plain(bulk).into_builder();
            let frame = self.stamp_response_here(call_id, reply, receiving);
            if let Some(frame) = frame {
                let _ = self.send_credit_return(frame);
            }
            return;
        };
        if self.count_answer_here(receiving) {
            phase_marks::mark(Mark::AnswerStamped);
            let _ = self.send_parts(head, bulk, true);
        }
    }

    /// Stamps the answer to the peer's call `call_id`. A result over the peer's frame
    /// limit goes as an error instead (see [`lanner_proto::Connection::send_response`]):
    /// the references it exported never reach the peer, so they are unexported.
    fn stamp_response(
        &self,
        call_id: u64,
        reply: MessageBuilder,
        exported: UnsentExports,
        by: AnsweredBy<'_>,
    ) -> Option<OutFrame> {
        let whole = exported.is_empty() || reply.check(self.peer_max_frame_size).is_ok();
        let frame = match by {
            AnsweredBy::Receiver(receiving) => {
                self.stamp_response_here(call_id, reply, receiving)?
            }
            AnsweredBy::Elsewhere => {
                match self.with_open_proto(|proto| proto.send_response(call_id, reply))? {
                    Ok(frame) => frame,
                    Err(error) => {
                        tracing::warn!(peer = %self.peer, %error, "response not sent");
                        return None;
                    }
                }
            }
        };
        if whole {
            exported.sent();
        }
        Some(frame)
    }

    /// [`Connection::stamp_response`] by the receiver, without the state's lock (see the
    /// module docs). Counted in `answered_here`. None once answers have stopped.
    fn stamp_response_here(
        &self,
        call_id: u64,
        reply: MessageBuilder,
        receiving: &Receiving,
    ) -> Option<OutFrame> {
        if !self.count_answer_here(receiving) {
            return None;
        }
        Some(lanner_proto::connection::stamp_response(
            call_id,
            reply,
            self.peer_max_frame_size,
        ))
    }

    /// Counts an answer the receiver is about to send in `answered_here`; false (nothing
    /// counted, nothing to send) once answers have stopped.
    fn count_answer_here(&self, _: &Receiving) -> bool {
        if self.answers_stopped.load(Ordering::Acquire) {
            return false;
        }
        let answered = self.answered_here.load(Ordering::Relaxed);
        self.answered_here.store(answered + 1, Ordering::Release);
        true
    }

    /// Counts the answers the receiver stamped without the state's lock in the protocol
    /// state (`answered_here`), under both locks: before the receiver hands it a frame
    /// (a request's credit check counts them), and so that the count stays small.
    pub(super) fn count_answers_here(&self, state: &mut State, _: &Receiving) {
        let answered = self.answered_here.load(Ordering::Relaxed);
        if answered != 0 {
            self.answered_here.store(0, Ordering::Relaxed);
            let counted = state.proto.responses_sent(answered);
            debug_assert!(counted.is_ok(), "answered calls that were not outstanding");
        }
    }

    /// How many of the peer's calls are not answered yet, under the state's lock: the
    /// protocol state's count less the answers the receiver has not counted in it yet
    /// (read under the state's lock, the count can only lag the answers it subtracts,
    /// never run ahead of the requests the state counted).
    pub(super) fn peer_in_flight(&self, state: &State) -> u32 {
        let answered = self.answered_here.load(Ordering::Acquire);
        state.proto.peer_in_flight().saturating_sub(answered)
    }
}
