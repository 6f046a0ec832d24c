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
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Payload {
    frame: Bytes,
    inline_start: usize,
    inline_end: usize,
    segments: u16,
    /// Segments whose bytes are not in `frame` (nearly always `None`).
    external: Option<Box<[(u16, Bytes)]>>,
}

impl Payload {
    /// Validates the payload part of `frame` that starts at `start`: inline data of
    /// `inline_len` bytes, a table of `segments` lengths, then exactly the segments that
    /// are not among `external` (which must match the table; see [`ExternalSegments`]).
    pub(crate) fn parse(
        frame: Bytes,
        start: usize,
        inline_len: u32,
        segments: u16,
        external: ExternalSegments,
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
        let declared_len = |i: usize| u64::from(le_u32(&frame, inline_end + i * 4));
        check_external(&external, segments, declared_len)?;
        let declared: u64 = (0..usize::from(segments))
            .filter(|&i| !is_external(&external, i))
            .map(declared_len)
            .sum();
        let bulk_available = frame.len() - table_end;
        if declared != bulk_available as u64 {
            return Err(FrameError::BulkMismatch {
                declared,
                available: bulk_available,
            });
        }
        Ok(Payload {
            frame,
            inline_start: start,
            inline_end,
            segments,
            external: (!external.is_empty()).then(|| external.into_boxed_slice()),
        })
    }

    /// The inline part: the small values, encoded once.
    pub fn inline(&self) -> Bytes {
        self.frame.slice(self.inline_start..self.inline_end)
    }

    /// The inline part as a borrowed slice.
    pub fn inline_slice(&self) -> &[u8] {
        &self.frame[self.inline_start..self.inline_end]
    }

    /// Number of bulk segments.
    pub fn segment_count(&self) -> usize {
        usize::from(self.segments)
    }

    /// How many bulk segments the transport delivered by reference, apart from the frame
    /// (see [`ExternalSegments`]).
    pub fn external_count(&self) -> usize {
        self.external.as_deref().map_or(0, <[_]>::len)
    }

    /// The bulk segment at `index`, as a slice of the received frame (or the bytes the
    /// transport delivered for it by reference); `None` if absent. Only the table is read
    /// to find it: the segments before it are not sliced.
    pub fn segment(&self, index: usize) -> Option<Bytes> {
        if index >= self.segment_count() {
            return None;
        }
        if let Some(bytes) = self.external_segment(index) {
            return Some(bytes.clone());
        }
        let start = self.bulk_start()
            + (0..index)
                .filter(|&i| self.external_segment(i).is_none())
                .map(|i| self.segment_len(i))
                .sum::<usize>();
        Some(self.frame.slice(start..start + self.segment_len(index)))
    }

    /// All bulk segments in order.
    pub fn segments(&self) -> impl Iterator<Item = Bytes> + '_ {
        let mut offset = self.bulk_start();
        (0..self.segment_count()).map(move |i| {
            if let Some(bytes) = self.external_segment(i) {
                return bytes.clone();
            }
            let len = self.segment_len(i);
            let segment = self.frame.slice(offset..offset + len);
            offset += len;
            segment
        })
    }

    /// The bytes delivered by reference for segment `index`, if it was.
    fn external_segment(&self, index: usize) -> Option<&Bytes> {
        let external = self.external.as_deref()?;
        external
            .iter()
            .find(|(i, _)| usize::from(*i) == index)
            .map(|(_, bytes)| bytes)
    }

    /// Length of segment `i`, from the table that follows the inline part.
    fn segment_len(&self, i: usize) -> usize {
        le_u32(&self.frame, self.inline_end + i * 4) as usize
    }

    /// Where the first bulk segment starts: after the inline part and the table.
    fn bulk_start(&self) -> usize {
        self.inline_end + self.segment_count() * 4
    }
}

fn is_external(external: &[(u16, Bytes)], index: usize) -> bool {
    external.iter().any(|(i, _)| usize::from(*i) == index)
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
