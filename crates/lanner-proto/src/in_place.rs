//! Frames received in memory their sender can still write.
//!
//! A transport that hands over large frames in place (the shared-memory transport: a view
//! of the ring, which the peer process maps writable) gives the receiver bytes that may
//! change under it. Decoding reads each field once, and [`crate::Payload`] checks every
//! range it reads from the segment table again when it uses it, so bulk segments can be
//! taken straight from such a frame. The inline arguments cannot: the runtime decodes
//! them (a string is checked for UTF-8, then copied), and a peer rewriting them in
//! between could make the receiver hold values nobody checked. So [`decode`] keeps a
//! frame where it lies only when its inline part is empty (a call whose arguments are all
//! bulk, the common case for large frames); otherwise [`copy_structure`] copies what is
//! read as structure (header, fixed fields, inline part, segment table; a few bytes to a
//! few hundred, nearly always) into memory of the receiver's own and leaves only the bulk
//! segments in place, delivered apart from the frame ([`ExternalSegments`]). Bulk bytes
//! can still change while the receiver reads them: that is the sender's own data, which
//! it could as well have sent garbled.

use bytes::Bytes;

use crate::error::FrameError;
use crate::frame::{
    Frame, FrameKind, HEADER_LEN, REQUEST_FIXED_LEN, REQUEST_INLINE_LEN_AT, RESPONSE_FIXED_LEN,
    RESPONSE_INLINE_LEN_AT, le_u16, le_u32,
};
use crate::limits::MAX_BULK_SEGMENTS;
use crate::payload::ExternalSegments;

/// Decodes the frame in `shared`, memory its sender can still write, some of whose bulk
/// segments may have been delivered apart from it (`apart`, as for
/// [`Frame::decode_with`]; see the module docs). The result never depends on a byte of
/// `shared` read twice. The same outcome as [`Frame::decode_with`] for bytes that do not
/// change.
pub fn decode(shared: Bytes, apart: ExternalSegments) -> Result<Frame, FrameError> {
    if apart.is_empty() {
        let frame = Frame::decode(shared.clone())?;
        // No inline bytes at all: neither a value nor a reference table.
        let nothing_inline = |payload: &crate::Payload| {
            payload.inline_slice().is_empty() && payload.references_len() == 0
        };
        let inline_empty = match &frame {
            Frame::Request(request) => nothing_inline(&request.payload),
            Frame::Response(response) => nothing_inline(&response.payload),
            // Any other kind this large is malformed or rare: decoded from a copy below.
            // It must be: only these two kinds' decoders read each byte once (a CLOSE's
            // reason, for one, is checked for UTF-8 and then copied, two reads), so no
            // other frame decoded in place may be kept.
            _ => false,
        };
        if inline_empty {
            return Ok(frame);
        }
    }
    let (frame, apart) = copy_structure(&shared, apart);
    Frame::decode_with(frame, apart)
}

/// The frame in `shared` (whose bulk segments listed in `apart`, if any, were delivered
/// apart from it) as a frame in memory of its own plus its bulk segments apart: decode the
/// result with [`crate::Frame::decode_with`]. The bulk segments in `shared` stay where they
/// are (slices of it, no copy); everything else is copied once, and no byte of `shared` is
/// read twice. A frame without bulk segments in it, or whose structure does not add up (a
/// length field or segment table that disagrees with its size), is copied whole, with
/// `apart` unchanged, so that decoding it reports what is wrong.
pub fn copy_structure(shared: &Bytes, apart: ExternalSegments) -> (Bytes, ExternalSegments) {
    match structure(shared, &apart) {
        Some((frame, table_at)) => {
            let segments = bulk_apart(shared, &frame, table_at, apart);
            (frame, segments)
        }
        None => (Bytes::copy_from_slice(shared), apart),
    }
}

/// The frame's structure, copied (and where its segment table starts in the copy), if the
/// frame is a REQUEST or RESPONSE with bulk segments in it whose lengths account for
/// every byte after the table.
fn structure(shared: &Bytes, apart: &ExternalSegments) -> Option<(Bytes, usize)> {
    // The fixed fields of either kind, read once: every value below comes from a copy.
    let mut fixed = [0u8; REQUEST_FIXED_LEN];
    let fixed_read = shared.len().min(fixed.len());
    fixed[..fixed_read].copy_from_slice(&shared[..fixed_read]);
    if fixed_read < HEADER_LEN {
        return None;
    }
    let (fixed_len, inline_len_at) = match FrameKind::from_wire(fixed[4]).ok()? {
        FrameKind::Request => (REQUEST_FIXED_LEN, REQUEST_INLINE_LEN_AT),
        FrameKind::Response => (RESPONSE_FIXED_LEN, RESPONSE_INLINE_LEN_AT),
        _ => return None,
    };
    let segments = usize::from(le_u16(&fixed, 6));
    if fixed_read < fixed_len || segments == 0 || segments > usize::from(MAX_BULK_SEGMENTS) {
        return None;
    }
    let inline_len = le_u32(&fixed, inline_len_at) as usize;
    let table_at = fixed_len.checked_add(inline_len)?;
    let table_end = table_at
        .checked_add(segments * 4)
        .filter(|&table_end| table_end <= shared.len())?;
    let mut copy = Vec::with_capacity(table_end);
    let from_fixed = table_end.min(fixed_read);
    copy.extend_from_slice(&fixed[..from_fixed]);
    copy.extend_from_slice(shared.get(from_fixed..table_end)?);
    if !apart_listed_in_order(apart, segments) {
        return None;
    }
    // One walk over both (`apart` is in ascending order): linear in the segment count.
    let mut apart_indexes = apart
        .iter()
        .map(|(index, _)| usize::from(*index))
        .peekable();
    let in_frame: usize = (0..segments)
        .filter(|&i| apart_indexes.next_if_eq(&i).is_none())
        .map(|i| le_u32(&copy, table_at + i * 4) as usize)
        .sum();
    (in_frame == shared.len() - table_end).then(|| (Bytes::from(copy), table_at))
}

/// Every bulk segment apart, in index order: those already apart, and those in `shared`
/// after the table, at the lengths the copied table (`frame`, from `table_at`) gives.
fn bulk_apart(
    shared: &Bytes,
    frame: &Bytes,
    table_at: usize,
    apart: ExternalSegments,
) -> ExternalSegments {
    let segments = (frame.len() - table_at) / 4;
    let mut already_apart = apart.into_iter().peekable();
    let mut offset = frame.len();
    (0..segments)
        .map(|i| {
            if let Some(entry) = already_apart.next_if(|(index, _)| usize::from(*index) == i) {
                return entry;
            }
            let len = le_u32(frame, table_at + i * 4) as usize;
            let segment = shared.slice(offset..offset + len);
            offset += len;
            // At most MAX_BULK_SEGMENTS (1024) segments: `i` fits a u16.
            (i as u16, segment)
        })
        .collect()
}

/// The segments already apart name segments of the frame, once each, in ascending order.
fn apart_listed_in_order(apart: &ExternalSegments, segments: usize) -> bool {
    apart
        .iter()
        .all(|(index, _)| usize::from(*index) < segments)
        && apart.windows(2).all(|pair| pair[0].0 < pair[1].0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;

    use crate::tests::is_within as within;
    use crate::{MessageBuilder, Status};

    fn request(inline: &[u8], bulk: &[&[u8]]) -> Bytes {
        let mut builder = MessageBuilder::request(7, 1, 2, 0xfeed);
        builder.inline().put_slice(inline);
        for segment in bulk {
            builder.push_segment(Bytes::copy_from_slice(segment));
        }
        builder.set_call_id(9);
        builder.finish().into_contiguous()
    }

    #[test]
    fn the_structure_is_copied_and_the_bulk_stays_in_place() {
        let shared = request(b"inline args", &[b"first bulk", b"", b"third"]);
        let (frame, apart) = copy_structure(&shared, ExternalSegments::new());
        assert!(!within(&frame, &shared), "the structure is a copy");
        assert_eq!(apart.len(), 3);
        for (_, segment) in apart.iter().filter(|(_, s)| !s.is_empty()) {
            assert!(within(segment, &shared), "a bulk segment was copied");
        }
        let Ok(Frame::Request(request)) = Frame::decode_with(frame, apart) else {
            panic!("the copy does not decode");
        };
        assert_eq!((request.call_id, request.object, request.method), (9, 7, 2));
        assert_eq!(request.payload.inline_slice(), b"inline args");
        let bulk: Vec<Bytes> = request.payload.segments().collect();
        assert_eq!(bulk, [&b"first bulk"[..], b"", b"third"]);
    }

    #[test]
    fn a_frame_whose_arguments_are_all_bulk_is_decoded_where_it_lies() {
        let shared = request(b"", &[b"bulk only", b"more"]);
        let Ok(Frame::Request(request)) = decode(shared.clone(), ExternalSegments::new()) else {
            panic!("does not decode");
        };
        assert_eq!(request.payload.external_count(), 0, "nothing was copied");
        for segment in request.payload.segments() {
            assert!(within(&segment, &shared));
        }
    }

    #[test]
    fn a_frame_whose_only_inline_bytes_are_a_reference_table_is_decoded_from_a_copy() {
        let mut builder = MessageBuilder::request(7, 1, 2, 0xfeed);
        builder.end_with_references(&[5, 6]);
        builder.push_segment(Bytes::from_static(b"bulk"));
        builder.set_call_id(9);
        let shared = builder.finish().into_contiguous();
        let Ok(Frame::Request(request)) = decode(shared.clone(), ExternalSegments::new()) else {
            panic!("does not decode");
        };
        assert_eq!(request.payload.references().collect::<Vec<_>>(), [5, 6]);
        // The table is read after decoding: it must not be in memory the sender can write.
        // The structure was copied (the bulk is then delivered apart, in place).
        assert_eq!(request.payload.external_count(), 1, "decoded where it lies");
        assert!(within(&request.payload.segment(0).unwrap(), &shared));
    }

    #[test]
    fn a_frame_with_inline_arguments_is_decoded_from_a_copy_of_its_structure() {
        let shared = request(b"a string", &[b"bulk"]);
        let Ok(Frame::Request(mixed)) = decode(shared.clone(), ExternalSegments::new()) else {
            panic!("does not decode");
        };
        assert_eq!(mixed.payload.inline_slice(), b"a string");
        assert!(!within(&mixed.payload.inline(), &shared));
        assert!(within(&mixed.payload.segment(0).unwrap(), &shared));
        // Inline only: copied whole.
        let shared = request(&[7; 100], &[]);
        let Ok(Frame::Request(inline_only)) = decode(shared.clone(), ExternalSegments::new())
        else {
            panic!("does not decode");
        };
        assert!(!within(&inline_only.payload.inline(), &shared));
    }

    #[test]
    fn segments_already_apart_keep_their_places() {
        let whole = request(b"x", &[b"zero", b"one!", b"two"]);
        // The same frame with segment 1 delivered apart: cut out of the frame.
        let one_at = whole.len() - b"two".len() - b"one!".len();
        let mut shared = BytesMut::from(&whole[..one_at]);
        shared.extend_from_slice(b"two");
        let apart = vec![(1u16, Bytes::from_static(b"one!"))];
        let (frame, apart) = copy_structure(&shared.freeze(), apart);
        let indexes: Vec<u16> = apart.iter().map(|(i, _)| *i).collect();
        assert_eq!(indexes, [0, 1, 2]);
        let Ok(Frame::Request(request)) = Frame::decode_with(frame, apart) else {
            panic!("the copy does not decode");
        };
        let bulk: Vec<Bytes> = request.payload.segments().collect();
        assert_eq!(bulk, [&b"zero"[..], b"one!", b"two"]);
    }

    #[test]
    fn a_frame_without_bulk_or_that_does_not_add_up_is_copied_whole() {
        let response = {
            let mut builder = MessageBuilder::response(Status::Ok);
            builder.inline().put_slice(b"all inline");
            builder.set_call_id(3);
            builder.set_credits(1);
            builder.finish().into_contiguous()
        };
        let mut wrong_table = BytesMut::from(&request(b"", &[b"12345678"])[..]);
        // The table (right after the fixed fields) claims 9 bytes where 8 follow.
        wrong_table[REQUEST_FIXED_LEN] = 9;
        let wrong_table = wrong_table.freeze();
        for shared in [response, wrong_table.clone(), Bytes::from_static(b"\x01")] {
            let (frame, apart) = copy_structure(&shared, ExternalSegments::new());
            assert_eq!(frame, shared);
            assert!(!within(&frame, &shared));
            assert!(apart.is_empty());
        }
        assert!(Frame::decode_with(wrong_table, ExternalSegments::new()).is_err());
    }
}
