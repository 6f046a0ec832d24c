//! The payload of a received REQUEST or RESPONSE: inline bytes plus bulk segments, all of
//! them slices of the received frame (no copy), except segments a transport delivered
//! apart from the frame, by reference (see [`ExternalSegments`]).

use bytes::Bytes;

use crate::error::FrameError;
use crate::frame::{check_segment_count, le_u32};

/// Bulk segments that a transport delivered apart from their frame: the frame's segment
/// table still lists their lengths, but their bytes are not in the frame. The shared-memory
/// transport passes a payload the sender built in memory both processes map (a loan) this
/// way, by reference instead of by copy. Each entry is (segment index, bytes), with
/// indexes strictly ascending.
pub type ExternalSegments = Vec<(u16, Bytes)>;

/// A received payload. Cloning is cheap (reference-counted).
///
/// The segment table is read where it was received, each time a segment is asked for,
/// and that may be memory the sender can still write (a frame read in place from a ring
/// shared with a hostile process): so every range read from it is checked against the
/// frame again when it is used. A table changed after decoding validated it
/// gives missing or empty segments, or the sender's other bytes, never a panic or a read
/// outside the frame.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Payload {
    frame: Bytes,
    // u32 (frames are at most u32::MAX bytes) and a thin box keep the payload, and the
    // requests, responses and events that carry it, as small as before segments could
    // travel apart: a received frame is moved through several layers.
    inline_start: u32,
    /// Where the value ends: `inline_end`, or where a reference table starts (see
    /// [`crate::frame::FLAG_REFERENCES`]).
    value_end: u32,
    inline_end: u32,
    segments: u16,
    /// Segments whose bytes are not in `frame` (nearly always `None`).
    external: Option<Box<ExternalSegments>>,
}

// A received payload is moved through several layers: keep it as small as it was before
// segments could travel apart.
const _: () = assert!(std::mem::size_of::<Payload>() <= 56);

impl Payload {
    /// Validates the payload part of `frame` that starts at `start`: inline data of
    /// `inline_len` bytes, a table of `segments` lengths, then exactly the segments that
    /// are not among `external` (which must match the table; see [`ExternalSegments`]).
    /// `frame` is at most `u32::MAX` bytes (its length field says so). With `references`,
    /// the inline part ends with a reference table (see
    /// [`crate::frame::FLAG_REFERENCES`]), which must fit in it.
    pub(crate) fn parse(
        frame: Bytes,
        start: usize,
        inline_len: u32,
        segments: u16,
        external: Option<Box<ExternalSegments>>,
        references: bool,
    ) -> Result<Payload, FrameError> {
        check_segment_count(segments)?;
        let table_len = usize::from(segments) * 4;
        let table_end = start
            .checked_add(inline_len as usize)
            .and_then(|inline_end| inline_end.checked_add(table_len))
            .filter(|&table_end| table_end <= frame.len())
            .ok_or_else(|| FrameError::InlineOverflow {
                inline_len,
                segments,
                available: frame.len().saturating_sub(start),
            })?;
        let inline_end = table_end - table_len;
        let value_end = match references {
            false => inline_end,
            true => inline_end - reference_table_len(&frame[start..inline_end], inline_len)?,
        };
        let declared_len = |i: usize| u64::from(le_u32(&frame, inline_end + i * 4));
        let declared: u64 = match &external {
            None => (0..usize::from(segments)).map(declared_len).sum(),
            Some(external) => {
                check_external(external, segments, declared_len)?;
                (0..usize::from(segments))
                    .filter(|&i| !is_external(external, i))
                    .map(declared_len)
                    .sum()
            }
        };
        let bulk_available = frame.len() - table_end;
        if declared != bulk_available as u64 {
            return Err(FrameError::BulkMismatch {
                declared,
                available: bulk_available,
            });
        }
        Ok(Payload {
            frame,
            // Both within the frame, which is at most u32::MAX bytes.
            inline_start: start as u32,
            value_end: value_end as u32,
            inline_end: inline_end as u32,
            segments,
            external,
        })
    }

    /// The payload in memory of its own: the frame and the segments delivered apart,
    /// copied. For a payload that will be kept a while and was received in place (a view
    /// of a shared-memory ring holds the ring behind it until dropped; see
    /// [`crate::in_place`]). Ranges are checked again on use, as for the original.
    pub fn detached(&self) -> Payload {
        Payload {
            frame: Bytes::copy_from_slice(&self.frame),
            inline_start: self.inline_start,
            value_end: self.value_end,
            inline_end: self.inline_end,
            segments: self.segments,
            external: self.external.as_ref().map(|external| {
                Box::new(
                    external
                        .iter()
                        .map(|(index, bytes)| (*index, Bytes::copy_from_slice(bytes)))
                        .collect(),
                )
            }),
        }
    }

    /// The inline part: the small values, encoded once (without the reference table, if
    /// the message has one).
    pub fn inline(&self) -> Bytes {
        self.frame
            .slice(self.inline_start as usize..self.value_end as usize)
    }

    /// The inline part as a borrowed slice (without the reference table).
    pub fn inline_slice(&self) -> &[u8] {
        &self.frame[self.inline_start as usize..self.value_end as usize]
    }

    /// The handles the sender's reference table lists (see
    /// [`crate::frame::FLAG_REFERENCES`]); none if it has no table. Read where the frame
    /// was received, like the segment table: a sender that rewrites them after decoding
    /// only misleads the receiver about its own objects.
    pub fn references(&self) -> impl ExactSizeIterator<Item = u64> + '_ {
        // The table's count was checked to fit when the payload was parsed; its last
        // four bytes are the count.
        let table = &self.frame[self.value_end as usize..self.inline_end as usize];
        let handles = &table[..table.len().saturating_sub(REFERENCE_COUNT_LEN)];
        handles
            .chunks_exact(8)
            .map(|handle| u64::from_le_bytes(handle.try_into().unwrap_or_default()))
    }

    /// Bytes the reference table takes at the end of the inline part (0 without one).
    pub fn references_len(&self) -> usize {
        (self.inline_end - self.value_end) as usize
    }

    /// Number of bulk segments.
    pub fn segment_count(&self) -> usize {
        usize::from(self.segments)
    }

    /// How many bulk segments the transport delivered by reference, apart from the frame
    /// (see [`ExternalSegments`]).
    pub fn external_count(&self) -> usize {
        self.external.as_deref().map_or(0, Vec::len)
    }

    /// The bulk segment at `index`, as a slice of the received frame (or the bytes the
    /// transport delivered for it by reference); `None` if absent, or if the segment
    /// table no longer places it inside the frame (see [`Payload`]). Only the table is
    /// read to find it: the segments before it are not sliced.
    pub fn segment(&self, index: usize) -> Option<Bytes> {
        if index >= self.segment_count() {
            return None;
        }
        if let Some(bytes) = self.external_segment(index) {
            return Some(bytes.clone());
        }
        // At most 2^16 lengths of at most 2^32 each: no overflow in a usize of 64 bits.
        let start = self.bulk_start()
            + (0..index)
                .filter(|&i| self.external_segment(i).is_none())
                .map(|i| self.segment_len(i))
                .sum::<usize>();
        self.slice_of_frame(start, self.segment_len(index))
    }

    /// All bulk segments in order. A segment the table no longer places inside the frame
    /// (see [`Payload`]) comes out empty.
    pub fn segments(&self) -> impl Iterator<Item = Bytes> + '_ {
        let mut offset = self.bulk_start();
        (0..self.segment_count()).map(move |i| {
            if let Some(bytes) = self.external_segment(i) {
                return bytes.clone();
            }
            let len = self.segment_len(i);
            let segment = self.slice_of_frame(offset, len).unwrap_or_default();
            offset += len;
            segment
        })
    }

    /// `len` bytes of the frame from `start`, if the frame has them.
    fn slice_of_frame(&self, start: usize, len: usize) -> Option<Bytes> {
        let end = start
            .checked_add(len)
            .filter(|&end| end <= self.frame.len())?;
        Some(self.frame.slice(start..end))
    }

    /// The bytes delivered by reference for segment `index`, if it was.
    fn external_segment(&self, index: usize) -> Option<&Bytes> {
        find_external(self.external.as_deref()?, index)
    }

    /// Length of segment `i`, from the table that follows the inline part.
    fn segment_len(&self, i: usize) -> usize {
        le_u32(&self.frame, self.inline_end as usize + i * 4) as usize
    }

    /// Where the first bulk segment starts: after the inline part and the table.
    fn bulk_start(&self) -> usize {
        self.inline_end as usize + self.segment_count() * 4
    }
}

/// Bytes of a reference table's count (a little-endian u32, at the very end).
const REFERENCE_COUNT_LEN: usize = 4;

/// How many bytes the reference table at the end of `inline` (the whole inline part, of
/// `inline_len` bytes) takes, its count included, if it fits. (Out of line: nearly every
/// message has no table.)
#[cold]
#[inline(never)]
fn reference_table_len(inline: &[u8], inline_len: u32) -> Result<usize, FrameError> {
    let bad = |count| FrameError::BadReferenceTable { inline_len, count };
    let Some(count_at) = inline.len().checked_sub(REFERENCE_COUNT_LEN) else {
        return Err(bad(0));
    };
    let count = le_u32(inline, count_at);
    // At most 2^32 handles of 8 bytes: no overflow in a usize of 64 bits.
    let len = count as usize * 8 + REFERENCE_COUNT_LEN;
    if len > inline.len() {
        return Err(bad(count));
    }
    Ok(len)
}

/// Where segment `index` is among `external`, found by binary search: [`check_external`]
/// has checked that the indexes strictly ascend. (A linear search per segment made a frame
/// with 1,024 segments, all delivered apart, cost a million comparisons to decode.)
fn find_external(external: &[(u16, Bytes)], index: usize) -> Option<&Bytes> {
    external
        .binary_search_by_key(&index, |(i, _)| usize::from(*i))
        .ok()
        .map(|position| &external[position].1)
}

fn is_external(external: &[(u16, Bytes)], index: usize) -> bool {
    find_external(external, index).is_some()
}

/// Segments delivered by reference must name segments the table declares, once each in
/// ascending order, with the declared lengths.
fn check_external(
    external: &[(u16, Bytes)],
    segments: u16,
    declared_len: impl Fn(usize) -> u64,
) -> Result<(), FrameError> {
    let mut previous: Option<u16> = None;
    for (index, bytes) in external {
        if *index >= segments {
            return Err(FrameError::BadExternal(
                "a segment index beyond the frame's segment count",
            ));
        }
        if previous.is_some_and(|previous| previous >= *index) {
            return Err(FrameError::BadExternal(
                "segment indexes not strictly ascending",
            ));
        }
        if declared_len(usize::from(*index)) != bytes.len() as u64 {
            return Err(FrameError::BadExternal(
                "a segment's length differs from the frame's segment table",
            ));
        }
        previous = Some(*index);
    }
    Ok(())
}
