//! Splitting a byte stream into frames, for stream transports (TCP, Unix sockets).

use bytes::{Bytes, BytesMut};

use crate::error::FrameError;
use crate::frame::{HEADER_LEN, read_header};

/// Cuts complete frames off the front of a receive buffer. The cut frame is the buffer's
/// own memory (`split_to`), so a payload handed to the callee is not copied.
#[derive(Debug, Clone, Copy)]
pub struct FrameSplitter {
    max_frame_size: u32,
}

impl FrameSplitter {
    /// A splitter that rejects frames larger than `max_frame_size`.
    pub fn new(max_frame_size: u32) -> FrameSplitter {
        FrameSplitter { max_frame_size }
    }

    /// Changes the limit (after the handshake raises it from the handshake limit).
    pub fn set_max_frame_size(&mut self, max_frame_size: u32) {
        self.max_frame_size = max_frame_size;
    }

    /// The limit in force.
    pub fn max_frame_size(&self) -> u32 {
        self.max_frame_size
    }

    /// Returns the next complete frame, `Ok(None)` if more bytes are needed, or an error if
    /// the header is malformed or announces a frame over the limit. An oversized frame is
    /// rejected from its header alone, before any memory is reserved for it.
    pub fn split(&self, buf: &mut BytesMut) -> Result<Option<Bytes>, FrameError> {
        let Some(len) = self.frame_len(buf)? else {
            return Ok(None);
        };
        if buf.len() < len {
            return Ok(None);
        }
        Ok(Some(buf.split_to(len).freeze()))
    }

    /// How many bytes the buffer must hold before the next frame is complete: the header
    /// size until the header is there, then the whole frame's length.
    pub fn bytes_needed(&self, buf: &[u8]) -> Result<usize, FrameError> {
        Ok(self.frame_len(buf)?.unwrap_or(HEADER_LEN))
    }

    fn frame_len(&self, buf: &[u8]) -> Result<Option<usize>, FrameError> {
        if buf.len() < HEADER_LEN {
            return Ok(None);
        }
        let header = read_header(buf)?;
        if header.len > self.max_frame_size {
            return Err(FrameError::TooLarge {
                len: u64::from(header.len),
                max: self.max_frame_size,
            });
        }
        Ok(Some(header.len as usize))
    }
}
