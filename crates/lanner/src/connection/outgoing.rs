//! A request on its way out: built ([`MessageBuilder`]) or plain ([`PlainRequest`]: no
//! inline arguments, one bulk segment at most), and once the connection stamped it, a
//! frame or a header with its bulk segment.
//!
//! A plain request is stamped from its fields, and its header, encoded on the stack, goes
//! with its bulk straight into a transport that takes frames so
//! ([`FrameSink::try_send_parts`], the shared-memory ring) when nothing waits to be
//! written before it: no header buffer is taken from the pool, filled, moved through the
//! writer in an [`OutFrame`] and given back. On a stream of one-way 64 KiB calls over
//! shared memory (`bench bandwidth`) that took the throughput from 0.74–0.80 of the raw
//! ring's to 0.81–0.84 (see docs/decisions.md, twenty-third session). Whatever cannot go
//! so becomes the frame a builder would have made.
//!
//! [`FrameSink::try_send_parts`]: crate::transport::FrameSink::try_send_parts

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Waker};

use bytes::Bytes;
use lanner_proto::{MessageBuilder, OutFrame, PlainHead, PlainRequest, SendError};

use super::Connection;
use super::writer::{Flushed, When};
use crate::error::Error;

/// A request not stamped yet.
#[derive(Debug)]
pub(crate) enum Outgoing {
    /// Built the general way.
    Built(MessageBuilder),
    /// Kept as its fields (see the module docs).
    Plain(PlainRequest),
}

impl Outgoing {
    /// Marks the request one-way: no answer is wanted.
    pub(crate) fn set_one_way(&mut self) {
        match self {
            Outgoing::Built(message) => message.set_one_way(),
            Outgoing::Plain(request) => request.one_way = true,
        }
    }

    /// Sets how long the callee is told it has (the request carries a timeout).
    pub(crate) fn set_timeout(&mut self, timeout: std::time::Duration) {
        match self {
            Outgoing::Built(message) => message.set_timeout(timeout),
            Outgoing::Plain(request) => request.timeout = Some(timeout),
        }
    }

    /// Stamps the request with a fresh call id and spends a credit (see
    /// [`lanner_proto::Connection::send_request`]); without credit (or on any other
    /// refusal) the request is handed back.
    pub(super) fn stamp(
        self,
        proto: &mut lanner_proto::Connection,
    ) -> Result<(u64, Stamped), (SendError, Outgoing)> {
        match self {
            Outgoing::Built(message) => proto
                .send_request(message)
                .map(|(call_id, frame)| (call_id, Stamped::Frame(frame)))
                .map_err(|(error, message)| (error, Outgoing::Built(message))),
            Outgoing::Plain(request) => proto
                .stamp_plain_request(request)
                .map(|(call_id, head, bulk)| (call_id, Stamped::Parts(head, bulk)))
                .map_err(|(error, request)| (error, Outgoing::Plain(request))),
        }
    }

    /// Whether the request is one-way.
    pub(crate) fn is_one_way(&self) -> bool {
        match self {
            Outgoing::Built(message) => message.is_one_way(),
            Outgoing::Plain(request) => request.one_way,
        }
    }
}

impl From<MessageBuilder> for Outgoing {
    fn from(message: MessageBuilder) -> Outgoing {
        Outgoing::Built(message)
    }
}

/// A request the connection stamped, ready to write.
pub(super) enum Stamped {
    /// A built request's frame.
    Frame(OutFrame),
    /// A plain request's header and bulk segment.
    Parts(PlainHead, Option<Bytes>),
}

impl Stamped {
    /// The frame's length in bytes.
    pub(super) fn len(&self) -> usize {
        match self {
            Stamped::Frame(frame) => frame.remaining(),
            Stamped::Parts(head, _) => head.frame_len(),
        }
    }
}

impl Connection {
    /// [`Connection::send_frame`] for a stamped request. Returns whether it went out
    /// whole.
    pub(super) fn send_stamped(self: &Arc<Self>, stamped: Stamped) -> Result<bool, Error> {
        match stamped {
            Stamped::Frame(frame) => self.send_frame(frame),
            Stamped::Parts(head, bulk) => self.send_parts(head, bulk, false),
        }
    }

    /// [`Connection::send_deferred`] for a stamped request.
    pub(super) fn send_deferred_stamped(self: &Arc<Self>, stamped: Stamped) -> Result<bool, Error> {
        match stamped {
            Stamped::Frame(frame) => self.send_deferred(frame),
            Stamped::Parts(head, bulk) => self.send_deferred_parts(head, bulk),
        }
    }

    /// [`Connection::send_deferred`] for a plain message's header and bulk segment: written
    /// into the transport now and shown to the peer with the reader's next batch if the
    /// transport takes them so (see [`super::writer::Writer::try_defer_parts`]), which
    /// spares the request a buffer and a place in the queue; else made a frame and
    /// deferred as any other.
    pub(super) fn send_deferred_parts(
        self: &Arc<Self>,
        head: PlainHead,
        bulk: Option<Bytes>,
    ) -> Result<bool, Error> {
        // A sleeping reader would not flush soon: `send_deferred` writes at once then.
        if !self.signal.asleep.load(Ordering::SeqCst) {
            let written = self
                .writer()
                .try_defer_parts(head.as_bytes(), bulk.as_deref().unwrap_or_default());
            match written {
                Ok(true) => {
                    self.note_deferred();
                    return Ok(false);
                }
                Ok(false) => {}
                Err(error) => return self.after_write(Err(error)),
            }
        }
        self.send_deferred(head.into_frame(bulk))
    }

    /// A plain message's header and bulk segment written straight into the transport if
    /// it takes them so now (see [`super::writer::Writer::try_send_parts`]), else made a
    /// frame and sent as any other (`returns_credit`: an answer, see
    /// [`Connection::send_credit_return`]).
    pub(super) fn send_parts(
        self: &Arc<Self>,
        head: PlainHead,
        bulk: Option<Bytes>,
        returns_credit: bool,
    ) -> Result<bool, Error> {
        let mut writer = self.writer();
        let result =
            match writer.try_send_parts(head.as_bytes(), bulk.as_deref().unwrap_or_default()) {
                Ok(true) => Ok(Flushed::Done),
                Ok(false) => writer.send(
                    head.into_frame(bulk),
                    returns_credit,
                    When::Now,
                    &mut Context::from_waker(Waker::noop()),
                ),
                Err(error) => Err(error),
            };
        drop(writer);
        self.after_write(result)
    }
}
