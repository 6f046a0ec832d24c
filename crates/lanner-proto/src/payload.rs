//! The payload of a received REQUEST or RESPONSE: inline bytes plus bulk segments, all of
//! them slices of the received frame (no copy).

use bytes::Bytes;

use crate::error::FrameError;
use crate::frame::{check_segment_count, le_u32};

/// A received payload. Cloning is cheap (reference-counted).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Payload {
    frame: Bytes,
    inline_start: usize,
    inline_end: usize,
    segments: u16,
}

impl Payload {
    /// Validates the payload part of `frame` that starts at `start`: inline data of
    /// `inline_len` bytes, a table of `segments` lengths, then exactly the segments.
    pub(crate) fn parse(
        frame: Bytes,
        start: usize,
        inline_len: u32,
        segments: u16,
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
        let declared: u64 = (0..usize::from(segments))
            .map(|i| u64::from(le_u32(&frame, inline_end + i * 4)))
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

    /// The bulk segment at `index`, as a slice of the received frame; `None` if absent.
    /// Only the table is read to find it: the segments before it are not sliced.
    pub fn segment(&self, index: usize) -> Option<Bytes> {
        if index >= self.segment_count() {
            return None;
        }
        let start = self.bulk_start() + (0..index).map(|i| self.segment_len(i)).sum::<usize>();
        Some(self.frame.slice(start..start + self.segment_len(index)))
    }

    /// All bulk segments in order.
    pub fn segments(&self) -> impl Iterator<Item = Bytes> + '_ {
        let mut offset = self.bulk_start();
        (0..self.segment_count()).map(move |i| {
            let len = self.segment_len(i);
            let segment = self.frame.slice(offset..offset + len);
            offset += len;
            segment
        })
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
