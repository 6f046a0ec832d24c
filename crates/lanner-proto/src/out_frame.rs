//! An encoded frame ready for a transport: a header buffer plus bulk segments, written with
//! one vectored write and advanced across partial writes without copying.

use std::io::IoSlice;

use bytes::{Buf, Bytes, BytesMut};

/// An outgoing frame as a list of segments.
#[derive(Debug, Clone, Default)]
pub struct OutFrame {
    head: Bytes,
    bulk: Vec<Bytes>,
    /// Index of the first bulk segment not fully written.
    next_bulk: usize,
}

impl OutFrame {
    pub(crate) fn new(head: Bytes, bulk: Vec<Bytes>) -> OutFrame {
        OutFrame {
            head,
            bulk,
            next_bulk: 0,
        }
    }

    /// A frame that is one contiguous buffer (handshake, credit and close frames).
    pub fn contiguous(frame: Bytes) -> OutFrame {
        OutFrame::new(frame, Vec::new())
    }

    /// Bytes not yet written.
    pub fn remaining(&self) -> usize {
        self.head.len()
            + self.bulk[self.next_bulk..]
                .iter()
                .map(Bytes::len)
                .sum::<usize>()
    }

    /// True once everything has been written.
    pub fn is_done(&self) -> bool {
        self.head.is_empty() && self.bulk[self.next_bulk..].iter().all(Bytes::is_empty)
    }

    /// Fills `slices` with the unwritten segments, in order; returns how many were filled.
    pub fn io_slices<'a>(&'a self, slices: &mut [IoSlice<'a>]) -> usize {
        let mut filled = 0;
        let segments = std::iter::once(&self.head).chain(&self.bulk[self.next_bulk..]);
        for segment in segments.filter(|s| !s.is_empty()) {
            if filled == slices.len() {
                break;
            }
            slices[filled] = IoSlice::new(segment);
            filled += 1;
        }
        filled
    }

    /// Marks `n` bytes as written.
    pub fn advance(&mut self, mut n: usize) {
        let from_head = n.min(self.head.len());
        self.head.advance(from_head);
        n -= from_head;
        while n > 0 && self.next_bulk < self.bulk.len() {
            let segment = &mut self.bulk[self.next_bulk];
            let step = n.min(segment.len());
            segment.advance(step);
            n -= step;
            if segment.is_empty() {
                self.next_bulk += 1;
            }
        }
    }

    /// The unwritten bytes as one buffer. Copies only when the frame has bulk segments;
    /// for message transports that cannot carry a segment list.
    pub fn into_contiguous(self) -> Bytes {
        if self.bulk[self.next_bulk..].iter().all(Bytes::is_empty) {
            return self.head;
        }
        let mut buf = BytesMut::with_capacity(self.remaining());
        buf.extend_from_slice(&self.head);
        for segment in &self.bulk[self.next_bulk..] {
            buf.extend_from_slice(segment);
        }
        buf.freeze()
    }
}
