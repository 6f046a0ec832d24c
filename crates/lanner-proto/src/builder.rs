//! Building outgoing REQUEST and RESPONSE messages without copying bulk payloads.
//!
//! The fixed header and the inline data share one small buffer; bulk segments stay in
//! the caller's buffers and are written after it with one vectored write. Fields only the
//! connection knows (call id, piggybacked credits) are patched in by
//! [`crate::Connection`] when the message is sent.

use bytes::{BufMut, Bytes, BytesMut};
use smallvec::SmallVec;

use crate::error::SendError;
use crate::frame::{
    FLAG_ARGUMENTS_UNREAD, FLAG_HANDS_BACK, FLAG_ONE_WAY, FLAG_REFERENCES, FrameKind,
    REQUEST_FIXED_LEN, RESPONSE_FIXED_LEN,
};
use crate::limits::MAX_BULK_SEGMENTS;
use crate::out_frame::OutFrame;
use crate::status::Status;

/// A message's bulk segments; the first is stored inline (no allocation for the common
/// case of zero or one bulk argument). One, not two: every message and frame carries this
/// by value through several calls, and each inline slot costs 32 bytes there.
pub(crate) type Segments = SmallVec<[Bytes; 1]>;

/// An outgoing REQUEST or RESPONSE under construction.
#[derive(Debug)]
pub struct MessageBuilder {
    kind: FrameKind,
    buf: BytesMut,
    bulk: Segments,
    /// The header's flag bits (see [`crate::frame`]).
    flags: u8,
}

impl MessageBuilder {
    /// Starts a request for `method` (ordinal and fingerprint) on interface `slot` of
    /// `object`.
    pub fn request(object: u64, slot: u16, method: u16, fingerprint: u32) -> MessageBuilder {
        // The fixed part is assembled on the stack and copied in once. Call id, timeout,
        // inline length and the common header are filled in later.
        let mut fixed = [0u8; REQUEST_FIXED_LEN];
        fixed[16..24].copy_from_slice(&object.to_le_bytes());
        fixed[24..26].copy_from_slice(&slot.to_le_bytes());
        fixed[26..28].copy_from_slice(&method.to_le_bytes());
        fixed[28..32].copy_from_slice(&fingerprint.to_le_bytes());
        MessageBuilder::starting_with(FrameKind::Request, &fixed)
    }

    /// Starts a response with `status`.
    pub fn response(status: Status) -> MessageBuilder {
        // Call id, credits, inline length and the common header are filled in later.
        let mut fixed = [0u8; RESPONSE_FIXED_LEN];
        fixed[16] = status.to_wire();
        MessageBuilder::starting_with(FrameKind::Response, &fixed)
    }

    fn starting_with(kind: FrameKind, fixed: &[u8]) -> MessageBuilder {
        let mut buf = crate::head_pool::take();
        buf.extend_from_slice(fixed);
        MessageBuilder {
            kind,
            buf,
            bulk: Segments::new(),
            flags: 0,
        }
    }

    /// A response carrying only `status` and a UTF-8 message as its inline data.
    pub fn error_response(status: Status, message: &str) -> MessageBuilder {
        let mut builder = MessageBuilder::response(status);
        builder.inline().put_slice(message.as_bytes());
        builder
    }

    /// The kind of message being built.
    pub fn kind(&self) -> FrameKind {
        self.kind
    }

    /// An append-only writer for the inline data.
    pub fn inline(&mut self) -> InlineWriter<'_> {
        InlineWriter { buf: &mut self.buf }
    }

    /// Bytes of inline data written so far.
    pub fn inline_len(&self) -> usize {
        self.buf.len() - self.fixed_len()
    }

    /// Appends a bulk segment; it is sent from its own buffer, not copied.
    pub fn push_segment(&mut self, segment: Bytes) {
        self.bulk.push(segment);
    }

    /// The response status (None for a request).
    pub fn status(&self) -> Option<Status> {
        match self.kind {
            FrameKind::Response => Some(Status::from_wire(self.buf[16])),
            _ => None,
        }
    }

    /// The frame's total encoded size so far.
    pub fn encoded_len(&self) -> u64 {
        let bulk: u64 = self.bulk.iter().map(|b| b.len() as u64).sum();
        self.buf.len() as u64 + 4 * self.bulk.len() as u64 + bulk
    }

    fn fixed_len(&self) -> usize {
        match self.kind {
            FrameKind::Request => REQUEST_FIXED_LEN,
            _ => RESPONSE_FIXED_LEN,
        }
    }

    /// Sets the object a request calls (its handle on the connection it is sent on). Does
    /// nothing to a response.
    pub fn set_object(&mut self, object: u64) {
        if self.kind == FrameKind::Request {
            self.buf[16..24].copy_from_slice(&object.to_le_bytes());
        }
    }

    /// Makes a request one-way: the callee will send no answer (see
    /// [`crate::frame::FLAG_ONE_WAY`]). Does nothing to a response.
    pub fn set_one_way(&mut self) {
        if self.kind == FrameKind::Request {
            self.flags |= FLAG_ONE_WAY;
        }
    }

    /// Whether this is a one-way request.
    pub fn is_one_way(&self) -> bool {
        self.kind == FrameKind::Request && self.flags & FLAG_ONE_WAY != 0
    }

    /// Marks a response as answering a call whose arguments were never decoded (see
    /// [`crate::frame::FLAG_ARGUMENTS_UNREAD`]). Does nothing to a request.
    pub fn set_arguments_unread(&mut self) {
        if self.kind == FrameKind::Response {
            self.flags |= FLAG_ARGUMENTS_UNREAD;
        }
    }

    /// Marks a response whose result hands back some of the caller's own objects (see
    /// [`crate::frame::FLAG_HANDS_BACK`]). Does nothing to a request.
    pub fn set_hands_back(&mut self) {
        if self.kind == FrameKind::Response {
            self.flags |= FLAG_HANDS_BACK;
        }
    }

    /// Whether the response is marked as answering a call whose arguments were never
    /// decoded (see [`MessageBuilder::set_arguments_unread`]).
    pub fn is_arguments_unread(&self) -> bool {
        self.kind == FrameKind::Response && self.flags & FLAG_ARGUMENTS_UNREAD != 0
    }

    /// Ends the inline part with a reference table listing `handles`, the sender's
    /// objects the message exported (see [`crate::frame::FLAG_REFERENCES`]). Call it once,
    /// after the value is written; nothing is added for no handles.
    #[inline]
    pub fn end_with_references(&mut self, handles: &[u64]) {
        if !handles.is_empty() {
            self.put_reference_table(handles);
        }
    }

    /// [`MessageBuilder::end_with_references`] for some handles (out of line: nearly every
    /// message has none).
    #[cold]
    fn put_reference_table(&mut self, handles: &[u64]) {
        debug_assert_eq!(self.flags & FLAG_REFERENCES, 0, "one reference table only");
        for handle in handles {
            self.buf.put_u64_le(*handle);
        }
        // More handles than a u32 counts could not fit a frame (u32 bytes) anyway: the
        // frame is refused by `check` as too large.
        self.buf
            .put_u32_le(u32::try_from(handles.len()).unwrap_or(u32::MAX));
        self.flags |= FLAG_REFERENCES;
    }

    /// Sets how long the caller will wait for the answer (a request's `timeout_us`;
    /// rounded up to whole microseconds and capped at the field's largest value, which
    /// means "at least this long"). Does nothing to a response.
    pub fn set_timeout(&mut self, timeout: std::time::Duration) {
        if self.kind != FrameKind::Request {
            return;
        }
        self.buf[32..36].copy_from_slice(&timeout_micros(timeout).to_le_bytes());
    }

    pub(crate) fn set_call_id(&mut self, call_id: u64) {
        self.buf[8..16].copy_from_slice(&call_id.to_le_bytes());
    }

    pub(crate) fn set_credits(&mut self, credits: u32) {
        debug_assert_eq!(self.kind, FrameKind::Response);
        self.buf[20..24].copy_from_slice(&credits.to_le_bytes());
    }

    /// Checks the message against the peer's maximum frame size and the segment limit.
    pub fn check(&self, max_frame_size: u32) -> Result<(), SendError> {
        if self.bulk.len() > usize::from(MAX_BULK_SEGMENTS) {
            return Err(SendError::TooManySegments {
                count: self.bulk.len(),
                max: MAX_BULK_SEGMENTS,
            });
        }
        let total = self.encoded_len();
        if total > u64::from(max_frame_size) {
            return Err(SendError::TooLarge {
                len: total,
                max: max_frame_size,
            });
        }
        Ok(())
    }

    /// Completes the frame. Call [`MessageBuilder::check`] first: lengths are truncated to
    /// their wire widths here.
    pub(crate) fn finish(mut self) -> OutFrame {
        let fixed_len = self.fixed_len();
        let inline_len = self.inline_len() as u32;
        let mut bulk_len = 0u64;
        for segment in &self.bulk {
            self.buf.put_u32_le(segment.len() as u32);
            bulk_len += segment.len() as u64;
        }
        let total = self.buf.len() as u64 + bulk_len;
        let segments = self.bulk.len() as u16;
        let flags = self.flags;
        let fixed = &mut self.buf[..fixed_len];
        fixed[0..4].copy_from_slice(&(total as u32).to_le_bytes());
        fixed[4] = self.kind as u8;
        fixed[5] = flags;
        fixed[6..8].copy_from_slice(&segments.to_le_bytes());
        fixed[fixed_len - 4..].copy_from_slice(&inline_len.to_le_bytes());
        OutFrame::new(self.buf, self.bulk)
    }
}

/// A request's timeout as the wire carries it: whole microseconds, rounded up (a timeout
/// of under a microsecond is one, not "no deadline"), at most `u32::MAX` ("at least that
/// long").
pub(crate) fn timeout_micros(timeout: std::time::Duration) -> u32 {
    let micros = timeout.as_nanos().div_ceil(1000).max(1);
    u32::try_from(micros).unwrap_or(u32::MAX)
}

/// Append-only access to a message's inline data: it cannot disturb the header.
#[derive(Debug)]
pub struct InlineWriter<'a> {
    buf: &'a mut BytesMut,
}

impl InlineWriter<'_> {
    /// Appends bytes.
    pub fn put_slice(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }
}

impl std::io::Write for InlineWriter<'_> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.put_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
