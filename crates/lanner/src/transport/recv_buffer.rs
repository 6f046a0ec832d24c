//! The receive buffer of a stream transport, recycled without copies.
//!
//! Frames are cut off the buffer and handed out as `Bytes` that share its allocation, so
//! the allocation can be reused only once every frame cut from it has been dropped. A
//! large frame that is still in use (say, echoed back and being written) when the next one
//! starts would otherwise force a fresh allocation per frame, and for large frames a
//! fresh allocation means page faults on every message. So the buffer keeps one spare
//! allocation and alternates: whichever of the two is free again is reclaimed.

use bytes::BytesMut;

/// A receive buffer with one spare allocation.
#[derive(Debug, Default)]
pub(crate) struct RecvBuffer {
    current: BytesMut,
    spare: Option<BytesMut>,
}

impl RecvBuffer {
    /// The bytes received and not yet cut off as frames.
    pub(crate) fn bytes(&mut self) -> &mut BytesMut {
        &mut self.current
    }

    /// The bytes received and not yet cut off as frames, to look at.
    pub(crate) fn peek(&self) -> &[u8] {
        &self.current
    }

    /// Makes room for at least `additional` more bytes after the received ones. Moves the
    /// received bytes (part of one frame at most, as frames are cut as soon as complete)
    /// only when switching allocations.
    pub(crate) fn make_room(&mut self, additional: usize) {
        if self.current.try_reclaim(additional) {
            return;
        }
        let needed = self.current.len() + additional;
        let next = match self.spare.take() {
            Some(mut spare) => {
                if spare.try_reclaim(needed) {
                    spare
                } else {
                    BytesMut::with_capacity(needed)
                }
            }
            None => BytesMut::with_capacity(needed),
        };
        let mut previous = std::mem::replace(&mut self.current, next);
        self.current.extend_from_slice(&previous);
        previous.clear();
        self.spare = Some(previous);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reuses_an_allocation_once_its_frames_are_dropped() {
        let mut buffer = RecvBuffer::default();
        buffer.make_room(1 << 20);
        buffer.bytes().resize(1 << 20, 7);
        let first_alloc = buffer.bytes().as_ptr();
        let frame = buffer.bytes().split().freeze();

        // The frame is still in use: the next one goes to another allocation.
        buffer.make_room(1 << 20);
        buffer.bytes().resize(1 << 20, 8);
        let second = buffer.bytes().split().freeze();
        assert_ne!(second.as_ptr(), first_alloc);
        drop(frame);

        // The first allocation is free again and is reclaimed for the third frame.
        buffer.make_room(1 << 20);
        assert_eq!(buffer.bytes().as_ptr(), first_alloc);
        assert_eq!(second[0], 8);
    }

    #[test]
    fn keeps_partial_data_when_switching() {
        let mut buffer = RecvBuffer::default();
        buffer.make_room(16);
        buffer.bytes().extend_from_slice(b"header");
        let held = buffer.bytes().split_to(3).freeze();
        buffer.make_room(1 << 16);
        assert_eq!(&buffer.bytes()[..], b"der");
        assert_eq!(&held[..], b"hea");
    }
}
