//! An encoded frame ready for a transport: a header buffer plus bulk segments, written with
//! one vectored write and advanced across partial writes without copying.

use std::io::IoSlice;

use bytes::{Buf, Bytes, BytesMut};

use crate::builder::Segments;

/// The bytes of a frame that live in one buffer: either built here (header and inline
/// data, owned, never shared) or handed in whole.
#[derive(Debug, Clone)]
enum Head {
    Built(BytesMut),
    Shared(Bytes),
}

impl Head {
    fn bytes(&self) -> &[u8] {
        match self {
            Head::Built(bytes) => bytes,
            Head::Shared(bytes) => bytes,
        }
    }

    fn advance(&mut self, n: usize) {
        match self {
            Head::Built(bytes) => bytes.advance(n),
            Head::Shared(bytes) => bytes.advance(n),
        }
    }
}

/// An outgoing frame as a list of segments.
#[derive(Debug, Clone)]
pub struct OutFrame {
    head: Head,
    bulk: Segments,
    /// Index of the first bulk segment not fully written.
    next_bulk: usize,
    /// Some of the frame was written (or it was marked written).
    started: bool,
}

impl Default for OutFrame {
    fn default() -> Self {
        OutFrame::contiguous(Bytes::new())
    }
}

impl OutFrame {
    pub(crate) fn new(head: BytesMut, bulk: Segments) -> OutFrame {
        OutFrame {
            head: Head::Built(head),
            bulk,
            next_bulk: 0,
            started: false,
        }
    }

    /// A frame that is one contiguous buffer (handshake, credit and close frames).
    pub fn contiguous(frame: Bytes) -> OutFrame {
        OutFrame {
            head: Head::Shared(frame),
            bulk: Segments::new(),
            next_bulk: 0,
            started: false,
        }
    }

    /// Whether a bulk segment (a `Bytes` argument or result, sent from its own buffer) is
    /// still to be written: a transport must not copy those (it may copy the rest, which
    /// the frame's own marshalling built).
    pub fn carries_bulk(&self) -> bool {
        self.bulk[self.next_bulk..]
            .iter()
            .any(|segment| !segment.is_empty())
    }

    /// The frame's parts: the bytes built here (header, inline data, segment table) and
    /// the bulk segments, in order. Meaningful on a frame none of which is written yet, for
    /// a transport that passes some bulk segments by reference instead of writing their
    /// bytes (see [`crate::payload::ExternalSegments`]).
    pub fn parts(&self) -> (&[u8], &[Bytes]) {
        (self.head.bytes(), &self.bulk[self.next_bulk..])
    }

    /// Bytes not yet written.
    pub fn remaining(&self) -> usize {
        self.head.bytes().len()
            + self.bulk[self.next_bulk..]
                .iter()
                .map(Bytes::len)
                .sum::<usize>()
    }

    /// Fills `slices` with the unwritten segments, in order. Returns how many were filled
    /// and how many bytes they hold; the byte count equals [`OutFrame::remaining`] unless
    /// there were more segments than slices.
    pub fn io_slices<'a>(&'a self, slices: &mut [IoSlice<'a>]) -> (usize, usize) {
        let mut filled = 0;
        let mut bytes = 0;
        self.for_each_unwritten(|segment| {
            if filled < slices.len() {
                slices[filled] = IoSlice::new(segment);
                filled += 1;
                bytes += segment.len();
            }
        });
        (filled, bytes)
    }

    /// Calls `f` with each unwritten segment, in order (empty ones skipped).
    pub fn for_each_unwritten<'a>(&'a self, mut f: impl FnMut(&'a [u8])) {
        let head = self.head.bytes();
        if !head.is_empty() {
            f(head);
        }
        for segment in &self.bulk[self.next_bulk..] {
            if !segment.is_empty() {
                f(segment);
            }
        }
    }

    /// Whether none of the frame has been written yet (neither [`OutFrame::advance`] nor
    /// [`OutFrame::mark_written`] was called).
    pub fn is_unwritten(&self) -> bool {
        !self.started
    }

    /// Puts `prefix` before the frame's bytes, to be written with them: whole frames a
    /// transport sends ahead of this one (padding that places the frame's bulk segments
    /// where the kernel copies them fastest, say). Only on a frame none of which is written
    /// yet ([`OutFrame::is_unwritten`]); on another it does nothing and returns false. Costs
    /// a copy of the frame's head, so it suits large frames.
    pub fn prepend(&mut self, prefix: &[u8]) -> bool {
        if self.started {
            return false;
        }
        let head = self.head.bytes();
        let mut joined = BytesMut::with_capacity(prefix.len() + head.len());
        joined.extend_from_slice(prefix);
        joined.extend_from_slice(head);
        // The head it replaces goes back to the pool, as a written frame's does.
        if let Head::Built(old) = std::mem::replace(&mut self.head, Head::Built(joined)) {
            crate::head_pool::give_back(old);
        }
        true
    }

    /// Marks the whole frame as written (cheaper than [`OutFrame::advance`] by its length).
    pub fn mark_written(&mut self) {
        self.started = true;
        match &mut self.head {
            Head::Built(bytes) => bytes.clear(),
            Head::Shared(bytes) => bytes.clear(),
        }
        self.next_bulk = self.bulk.len();
    }

    /// Drops a frame that is written, keeping its header buffer for the next message
    /// built on this thread (see `head_pool`).
    pub fn recycle(self) {
        if let Head::Built(buffer) = self.head {
            crate::head_pool::give_back(buffer);
        }
    }

    /// Marks `n` bytes as written.
    pub fn advance(&mut self, mut n: usize) {
        self.started |= n > 0;
        let from_head = n.min(self.head.bytes().len());
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
            return match self.head {
                Head::Built(bytes) => bytes.freeze(),
                Head::Shared(bytes) => bytes,
            };
        }
        let mut buf = BytesMut::with_capacity(self.remaining());
        buf.extend_from_slice(self.head.bytes());
        for segment in &self.bulk[self.next_bulk..] {
            buf.extend_from_slice(segment);
        }
        buf.freeze()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unwritten_segments_are_visited_in_order_after_a_partial_write() {
        let mut head = BytesMut::new();
        head.extend_from_slice(b"head");
        let bulk: Segments = [
            Bytes::from_static(b"one"),
            Bytes::new(),
            Bytes::from_static(b"two"),
        ]
        .into_iter()
        .collect();
        let mut frame = OutFrame::new(head, bulk);
        frame.advance(5);
        let mut seen = Vec::new();
        frame.for_each_unwritten(|segment| seen.push(segment.to_vec()));
        assert_eq!(seen, [b"ne".to_vec(), b"two".to_vec()]);
        assert_eq!(seen.concat().len(), frame.remaining());
    }

    #[test]
    fn only_unwritten_non_empty_bulk_segments_count_as_bulk() {
        let bulk_of = |segments: &[&'static [u8]]| -> Segments {
            segments.iter().map(|s| Bytes::from_static(s)).collect()
        };
        assert!(!OutFrame::contiguous(Bytes::from_static(b"whole")).carries_bulk());
        assert!(!OutFrame::new(BytesMut::from(&b"head"[..]), bulk_of(&[b""])).carries_bulk());
        let mut frame = OutFrame::new(BytesMut::from(&b"head"[..]), bulk_of(&[b"one"]));
        assert!(frame.carries_bulk());
        frame.advance(7);
        assert!(!frame.carries_bulk(), "written already");
    }

    #[test]
    fn a_prefix_goes_before_an_unwritten_frame_and_never_into_a_started_one() {
        let bulk: Segments = [Bytes::from_static(b"bulk")].into_iter().collect();
        let mut frame = OutFrame::new(BytesMut::from(&b"head"[..]), bulk.clone());
        assert!(frame.is_unwritten());
        assert!(frame.prepend(b"pad"));
        let mut seen = Vec::new();
        frame.for_each_unwritten(|segment| seen.push(segment.to_vec()));
        assert_eq!(seen, [b"padhead".to_vec(), b"bulk".to_vec()]);
        assert_eq!(frame.parts().0, b"padhead");

        let mut started = OutFrame::new(BytesMut::from(&b"head"[..]), bulk);
        started.advance(1);
        assert!(!started.is_unwritten());
        assert!(!started.prepend(b"pad"));
        assert_eq!(started.remaining(), 7);

        let mut shared = OutFrame::contiguous(Bytes::from_static(b"whole"));
        assert!(shared.prepend(b">"));
        assert_eq!(shared.into_contiguous(), Bytes::from_static(b">whole"));
    }

    #[test]
    fn a_frame_marked_written_has_nothing_left_to_write() {
        let mut head = BytesMut::new();
        head.extend_from_slice(b"head");
        let bulk: Segments = [Bytes::from_static(b"one"), Bytes::from_static(b"two")]
            .into_iter()
            .collect();
        let mut frame = OutFrame::new(head, bulk);
        assert_eq!(frame.remaining(), 10);
        frame.mark_written();
        assert_eq!(frame.remaining(), 0);
        let mut slices = [IoSlice::new(&[]); 4];
        assert_eq!(frame.io_slices(&mut slices), (0, 0));

        let mut shared = OutFrame::contiguous(Bytes::from_static(b"whole"));
        shared.mark_written();
        assert_eq!(shared.remaining(), 0);
    }
}
