//! Messages without inline data, sent without a [`MessageBuilder`].
//!
//! A request whose method takes no inline arguments and one bulk argument at most (a null
//! call, or `write(payload: Bytes)`), and a successful response whose value is nothing or
//! one bulk segment, have a header of fixed size: the fixed part and, with a bulk
//! segment, its segment table entry. Such a request is kept as its fields until it is sent, and its header
//! is encoded on the stack once the connection has stamped it
//! ([`Connection::stamp_plain_request`]); such a response's header likewise
//! ([`stamp_plain_response`]). A transport that can take the header and the bulk as they
//! are (the shared-memory ring) then copies them straight to where they go: no header
//! buffer is taken from the pool, filled, moved through the layers in an [`OutFrame`]
//! and given back. Whatever cannot go that way becomes an ordinary frame
//! ([`PlainRequest::into_builder`], [`PlainHead::into_frame`]), byte for byte the frame
//! a [`MessageBuilder`] makes of the same message.
//!
//! [`Connection::stamp_plain_request`]: crate::Connection::stamp_plain_request

use std::time::Duration;

use bytes::Bytes;

use crate::builder::{MessageBuilder, Segments, timeout_micros};
use crate::frame::{FLAG_ONE_WAY, FrameKind, REQUEST_FIXED_LEN, RESPONSE_FIXED_LEN};
use crate::out_frame::OutFrame;
use crate::status::Status;

/// The longest header of a plain message (a request's): the fixed part and one segment
/// table entry.
pub const PLAIN_HEAD_MAX: usize = REQUEST_FIXED_LEN + 4;

/// A request without inline data and with at most one bulk segment, kept as its fields.
#[derive(Debug, Clone)]
pub struct PlainRequest {
    /// The object called (its handle on the connection).
    pub object: u64,
    /// The interface's slot on the object.
    pub slot: u16,
    /// The method's ordinal in its interface.
    pub method: u16,
    /// The method's signature fingerprint.
    pub fingerprint: u32,
    /// The time the callee is told it has, if any.
    pub timeout: Option<Duration>,
    /// Whether no answer is wanted.
    pub one_way: bool,
    /// The bulk segment, if the method takes one.
    pub bulk: Option<Bytes>,
}

impl PlainRequest {
    /// The frame's length in bytes: header and bulk.
    pub fn frame_len(&self) -> u64 {
        (self.head_len() + self.bulk_len()) as u64
    }

    fn head_len(&self) -> usize {
        REQUEST_FIXED_LEN + 4 * usize::from(self.bulk.is_some())
    }

    fn bulk_len(&self) -> usize {
        self.bulk.as_ref().map_or(0, Bytes::len)
    }

    /// The same request built the ordinary way (not stamped yet): for a request that
    /// must wait for a credit, or goes where plain requests do not.
    pub fn into_builder(self) -> MessageBuilder {
        let mut message =
            MessageBuilder::request(self.object, self.slot, self.method, self.fingerprint);
        if let Some(timeout) = self.timeout {
            message.set_timeout(timeout);
        }
        if self.one_way {
            message.set_one_way();
        }
        if let Some(bulk) = self.bulk {
            message.push_segment(bulk);
        }
        message
    }

    /// Encodes the header, stamped with `call_id`, and hands over the bulk segment.
    pub(crate) fn stamped(self, call_id: u64) -> (PlainHead, Option<Bytes>) {
        let mut bytes = [0u8; PLAIN_HEAD_MAX];
        let len = self.head_len();
        let segments = u16::from(self.bulk.is_some());
        let flags = if self.one_way { FLAG_ONE_WAY } else { 0 };
        // A stamped request passed the frame size check: its length fits a u32.
        let total = self.frame_len() as u32;
        bytes[0..4].copy_from_slice(&total.to_le_bytes());
        bytes[4] = FrameKind::Request as u8;
        bytes[5] = flags;
        bytes[6..8].copy_from_slice(&segments.to_le_bytes());
        bytes[8..16].copy_from_slice(&call_id.to_le_bytes());
        bytes[16..24].copy_from_slice(&self.object.to_le_bytes());
        bytes[24..26].copy_from_slice(&self.slot.to_le_bytes());
        bytes[26..28].copy_from_slice(&self.method.to_le_bytes());
        bytes[28..32].copy_from_slice(&self.fingerprint.to_le_bytes());
        let timeout = self.timeout.map_or(0, timeout_micros);
        bytes[32..36].copy_from_slice(&timeout.to_le_bytes());
        // Bytes 36..40: no inline data.
        if let Some(bulk) = &self.bulk {
            bytes[REQUEST_FIXED_LEN..PLAIN_HEAD_MAX]
                .copy_from_slice(&(bulk.len() as u32).to_le_bytes());
        }
        (PlainHead { bytes, len }, self.bulk)
    }
}

/// The header of the successful response to the peer's call `call_id` whose value is
/// `bulk` (nothing if `None`), returning the call's credit, as
/// [`crate::connection::stamp_response`] stamps the same response built. `None` if the
/// response is larger than the peer accepts (`peer_max_frame_size`): built and stamped
/// the ordinary way, it becomes an `Internal` error.
pub fn stamp_plain_response(
    call_id: u64,
    bulk: Option<&[u8]>,
    peer_max_frame_size: u32,
) -> Option<PlainHead> {
    let len = RESPONSE_FIXED_LEN + 4 * usize::from(bulk.is_some());
    let total = len as u64 + bulk.map_or(0, |bulk| bulk.len() as u64);
    if total > u64::from(peer_max_frame_size) {
        return None;
    }
    let mut bytes = [0u8; PLAIN_HEAD_MAX];
    bytes[0..4].copy_from_slice(&(total as u32).to_le_bytes());
    bytes[4] = FrameKind::Response as u8;
    // Byte 5: no flags.
    bytes[6..8].copy_from_slice(&u16::from(bulk.is_some()).to_le_bytes());
    bytes[8..16].copy_from_slice(&call_id.to_le_bytes());
    bytes[16] = Status::Ok.to_wire();
    bytes[20..24].copy_from_slice(&1u32.to_le_bytes());
    // Bytes 24..28: no inline data.
    if let Some(bulk) = bulk {
        bytes[RESPONSE_FIXED_LEN..len].copy_from_slice(&(bulk.len() as u32).to_le_bytes());
    }
    Some(PlainHead { bytes, len })
}

/// The encoded header of a stamped plain request ([`PlainRequest`]) or response
/// ([`stamp_plain_response`]): its bulk segment, if any, follows it.
#[derive(Debug, Clone, Copy)]
pub struct PlainHead {
    bytes: [u8; PLAIN_HEAD_MAX],
    len: usize,
}

impl PlainHead {
    /// The header's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }

    /// The whole frame's length in bytes, header and bulk, as the header states it.
    pub fn frame_len(&self) -> usize {
        u32::from_le_bytes([self.bytes[0], self.bytes[1], self.bytes[2], self.bytes[3]]) as usize
    }

    /// The whole frame as an ordinary [`OutFrame`] (its header in a pooled buffer): for a
    /// transport that does not take a header and a segment apart, or that cannot now.
    pub fn into_frame(self, bulk: Option<Bytes>) -> OutFrame {
        let mut head = crate::head_pool::take();
        head.extend_from_slice(self.as_bytes());
        OutFrame::new(head, bulk.into_iter().collect::<Segments>())
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::frame::Frame;

    fn plain(one_way: bool, timeout: Option<Duration>, bulk: Option<Bytes>) -> PlainRequest {
        PlainRequest {
            object: 0x0102_0304_0506_0708,
            slot: 3,
            method: 17,
            fingerprint: 0xdead_beef,
            timeout,
            one_way,
            bulk,
        }
    }

    /// The frame a builder makes of `request`, stamped with `call_id`.
    fn built(request: PlainRequest, call_id: u64) -> Vec<u8> {
        let mut message = request.into_builder();
        message.set_call_id(call_id);
        let frame = message.finish();
        let mut bytes = Vec::new();
        frame.for_each_unwritten(|part| bytes.extend_from_slice(part));
        bytes
    }

    fn stamped_bytes(request: PlainRequest, call_id: u64) -> Vec<u8> {
        let (head, bulk) = request.stamped(call_id);
        let mut bytes = head.as_bytes().to_vec();
        if let Some(bulk) = bulk {
            bytes.extend_from_slice(&bulk);
        }
        bytes
    }

    proptest! {
        #[test]
        fn a_stamped_plain_request_is_the_frame_a_builder_makes(
            object in any::<u64>(),
            slot in any::<u16>(),
            method in any::<u16>(),
            fingerprint in any::<u32>(),
            timeout_us in proptest::option::of(0u64..10_000_000_000),
            one_way in any::<bool>(),
            bulk in proptest::option::of(proptest::collection::vec(any::<u8>(), 0..300)),
            call_id in 1u64..,
        ) {
            let request = PlainRequest {
                object,
                slot,
                method,
                fingerprint,
                timeout: timeout_us.map(Duration::from_micros),
                one_way,
                bulk: bulk.map(Bytes::from),
            };
            let frame_len = request.frame_len();
            let plain = stamped_bytes(request.clone(), call_id);
            prop_assert_eq!(plain.len() as u64, frame_len);
            prop_assert_eq!(request.clone().stamped(call_id).0.frame_len() as u64, frame_len);
            prop_assert_eq!(&plain, &built(request.clone(), call_id));
            let (head, bulk) = request.stamped(call_id);
            let mut via_frame = Vec::new();
            head.into_frame(bulk).for_each_unwritten(|part| via_frame.extend_from_slice(part));
            prop_assert_eq!(plain, via_frame);
        }
    }

    #[test]
    fn a_stamped_plain_request_decodes_to_its_fields() {
        let payload = Bytes::from_static(b"the bulk segment");
        let request = plain(true, Some(Duration::from_millis(5)), Some(payload.clone()));
        let bytes = Bytes::from(stamped_bytes(request, 42));
        let Frame::Request(decoded) = Frame::decode(bytes).unwrap() else {
            panic!("not a request");
        };
        assert_eq!(decoded.call_id, 42);
        assert_eq!(decoded.object, 0x0102_0304_0506_0708);
        assert_eq!(decoded.slot, 3);
        assert_eq!(decoded.method, 17);
        assert_eq!(decoded.fingerprint, 0xdead_beef);
        assert_eq!(decoded.timeout_us, 5000);
        assert!(decoded.one_way);
        assert!(decoded.payload.inline().is_empty());
        assert_eq!(
            decoded.payload.segments().collect::<Vec<_>>(),
            vec![payload]
        );
    }

    proptest! {
        #[test]
        fn a_plain_response_is_the_frame_a_builder_makes(
            call_id in 1u64..,
            bulk in proptest::option::of(proptest::collection::vec(any::<u8>(), 0..300)),
        ) {
            let mut message = MessageBuilder::response(Status::Ok);
            if let Some(bulk) = &bulk {
                message.push_segment(Bytes::copy_from_slice(bulk));
            }
            let mut built = Vec::new();
            crate::connection::stamp_response(call_id, message, u32::MAX)
                .for_each_unwritten(|part| built.extend_from_slice(part));
            let head = stamp_plain_response(call_id, bulk.as_deref(), u32::MAX).unwrap();
            let mut plain = head.as_bytes().to_vec();
            plain.extend_from_slice(bulk.as_deref().unwrap_or_default());
            prop_assert_eq!(plain, built);
        }
    }

    #[test]
    fn a_plain_response_too_large_for_the_peer_is_left_to_the_builder() {
        let bulk = [7u8; 100];
        let exactly = (RESPONSE_FIXED_LEN + 4 + bulk.len()) as u32;
        assert!(stamp_plain_response(1, Some(&bulk), exactly).is_some());
        assert!(stamp_plain_response(1, Some(&bulk), exactly - 1).is_none());
        assert!(stamp_plain_response(1, None, RESPONSE_FIXED_LEN as u32).is_some());
    }

    #[test]
    fn a_plain_response_decodes_to_an_ok_returning_one_credit() {
        let bulk = Bytes::from_static(b"the value");
        let head = stamp_plain_response(9, Some(&bulk), u32::MAX).unwrap();
        let mut bytes = head.as_bytes().to_vec();
        bytes.extend_from_slice(&bulk);
        let Frame::Response(decoded) = Frame::decode(Bytes::from(bytes)).unwrap() else {
            panic!("not a response");
        };
        assert_eq!(decoded.call_id, 9);
        assert_eq!(decoded.status, Status::Ok);
        assert_eq!(decoded.credits, 1);
        assert!(!decoded.arguments_unread && !decoded.hands_back);
        assert_eq!(decoded.payload.segments().collect::<Vec<_>>(), vec![bulk]);
    }

    #[test]
    fn a_null_plain_request_has_the_fixed_header_only() {
        let request = plain(false, None, None);
        assert_eq!(request.frame_len(), REQUEST_FIXED_LEN as u64);
        let (head, bulk) = request.stamped(7);
        assert_eq!(head.as_bytes().len(), REQUEST_FIXED_LEN);
        assert!(bulk.is_none());
    }
}
