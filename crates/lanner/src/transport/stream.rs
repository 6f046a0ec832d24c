//! Frames over a byte stream (TCP, Unix sockets, TLS over TCP): vectored writes out, split
//! frames in.
//!
//! [`StreamSource`] and [`StreamSink`] work on any reading and writing half that can be
//! tried without the reactor ([`StreamReadHalf`], [`StreamWriteHalf`]): for plain sockets
//! that is a non-blocking system call straight on the descriptor, for TLS (see
//! [`super::tls`]) a poll of the TLS stream with a waker that does nothing.

use std::io::{self, IoSlice};
use std::os::fd::AsRawFd;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::{Bytes, BytesMut};
use lanner_proto::{FrameSplitter, HANDSHAKE_MAX_FRAME_SIZE, OutFrame};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_util::io::poll_read_buf;

use super::recv_buffer::RecvBuffer;
use super::sys::{recv_nonblocking, send_slices_nonblocking, unsent_bytes};
use super::{FrameSink, FrameSource, Received, RecvError};

/// Room made for reading at a time, so that many small frames arrive in one system call.
const MIN_READ: usize = 64 * 1024;

/// Room left that is still worth reading into: below this (or below what the frame being
/// received needs) room is made again. Small frames are cut off the buffer one after the
/// other until it runs low, instead of making room (and reclaiming the allocation) for
/// every frame.
const MIN_SPARE: usize = 4 * 1024;

/// Most segments handed to one vectored write of a single frame.
const MAX_IOVECS: usize = 8;

/// Most segments handed to one vectored write of a batch of frames.
const MAX_BATCH_IOVECS: usize = 64;

/// Receives frames from a byte stream into a buffer. Each frame is cut off the buffer with
/// `split_to`, so it (and every payload slice of it) is the very memory the kernel wrote
/// into. Once a frame's header is in, room for the whole frame is made, so a large payload
/// is read straight into place (only the first read's part of it may be moved once, when
/// the buffer switches allocation: two allocations are recycled).
#[derive(Debug)]
pub struct StreamSource<R> {
    reader: R,
    buffer: RecvBuffer,
    splitter: FrameSplitter,
    /// Size of the last frame if it was large: room for one like it is made before the
    /// next frame starts, so that a stream of large frames is read straight into place
    /// instead of its first chunk being moved once the header says how large it is.
    expected: usize,
}

impl<R> StreamSource<R> {
    /// Wraps the reading half of a stream. Until told otherwise it accepts only
    /// handshake-sized frames.
    pub fn new(reader: R) -> StreamSource<R> {
        StreamSource {
            reader,
            buffer: RecvBuffer::default(),
            splitter: FrameSplitter::new(HANDSHAKE_MAX_FRAME_SIZE),
            expected: 0,
        }
    }
}

/// The reading half of a byte stream: read through the reactor when waiting
/// ([`AsyncRead`]), and without it while spinning ([`StreamReadHalf::try_read`]).
pub trait StreamReadHalf: AsyncRead + Unpin + Send + 'static {
    /// Reads what has arrived into `buffer`'s spare capacity without waiting and without
    /// registering for wake-ups: `Ok(0)` when the peer closed, `WouldBlock` when nothing is
    /// there. Called while spinning, so it should cost one system call at most.
    fn try_read(&mut self, buffer: &mut BytesMut) -> io::Result<usize>;

    /// See [`FrameSource::stop_watching`]. Does nothing unless the half watches its
    /// socket only on demand.
    fn stop_watching(&mut self) {}

    /// Whether the half itself may hold input already taken from the socket (TLS: records
    /// rustls decrypted and has not handed out, because the last read's buffer was full):
    /// input no readiness of the socket will announce. A hint; false for plain sockets.
    fn holds_input(&self) -> bool {
        false
    }
}

/// Plain sockets are read with `recv(MSG_DONTWAIT)` straight on the descriptor: arriving
/// data is noticed without a trip through the reactor, and the kernel writes it straight
/// into the receive buffer.
impl StreamReadHalf for tokio::net::tcp::OwnedReadHalf {
    #[inline]
    fn try_read(&mut self, buffer: &mut BytesMut) -> io::Result<usize> {
        let stream: &tokio::net::TcpStream = self.as_ref();
        recv_nonblocking(stream.as_raw_fd(), buffer)
    }
}

/// See the TCP implementation.
impl StreamReadHalf for tokio::net::unix::OwnedReadHalf {
    #[inline]
    fn try_read(&mut self, buffer: &mut BytesMut) -> io::Result<usize> {
        let stream: &tokio::net::UnixStream = self.as_ref();
        recv_nonblocking(stream.as_raw_fd(), buffer)
    }
}

impl<R> StreamSource<R> {
    fn reserve_for_next_frame(&mut self) -> Result<&mut BytesMut, RecvError> {
        let buffer = self.buffer.bytes();
        let needed = if buffer.is_empty() {
            self.expected
        } else {
            self.splitter.bytes_needed(buffer)?
        };
        let want = needed.saturating_sub(buffer.len());
        if buffer.capacity() - buffer.len() < want.max(MIN_SPARE) {
            self.buffer.make_room(want.max(MIN_READ));
        }
        Ok(self.buffer.bytes())
    }

    fn cut_frame(&mut self) -> Result<Option<Bytes>, RecvError> {
        let frame = self.splitter.split(self.buffer.bytes())?;
        if let Some(frame) = &frame {
            self.expected = if frame.len() > MIN_READ {
                frame.len()
            } else {
                0
            };
        }
        Ok(frame)
    }

    fn closed(&mut self) -> Result<Received, RecvError> {
        let received = self.buffer.bytes().len();
        if received == 0 {
            return Ok(Received::Closed);
        }
        Err(RecvError::Io(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!(
                "the peer closed the connection in the middle of a frame ({received} bytes of it received)"
            ),
        )))
    }
}

impl<R: StreamReadHalf> FrameSource for StreamSource<R> {
    fn try_recv(&mut self) -> Result<Received, RecvError> {
        let mut progress = false;
        loop {
            if let Some(frame) = self.cut_frame()? {
                return Ok(Received::Frame(frame));
            }
            self.reserve_for_next_frame()?;
            match self.reader.try_read(self.buffer.bytes()) {
                Ok(0) => return self.closed(),
                Ok(_) => progress = true,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    return Ok(if progress {
                        Received::Partial
                    } else {
                        Received::Empty
                    });
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e.into()),
            }
        }
    }

    fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Result<Received, RecvError>> {
        let mut progress = false;
        loop {
            if let Some(frame) = self.cut_frame()? {
                return Poll::Ready(Ok(Received::Frame(frame)));
            }
            self.reserve_for_next_frame()?;
            let read = match poll_read_buf(Pin::new(&mut self.reader), cx, self.buffer.bytes()) {
                Poll::Ready(read) => read?,
                Poll::Pending if progress => return Poll::Ready(Ok(Received::Partial)),
                Poll::Pending => return Poll::Pending,
            };
            if read == 0 {
                return Poll::Ready(self.closed());
            }
            progress = true;
        }
    }

    fn set_max_frame_size(&mut self, max_frame_size: u32) {
        self.splitter.set_max_frame_size(max_frame_size);
    }

    fn stop_watching(&mut self) {
        self.reader.stop_watching();
    }

    /// A whole frame in the buffer, or input the read half holds (which may complete one:
    /// see [`StreamReadHalf::holds_input`]), so that a receiver that stops before taking
    /// it wakes the reader rather than leave it where no readiness announces it.
    fn frame_ready(&self) -> bool {
        self.frames_ready(1) == 1 || self.reader.holds_input()
    }

    /// Walks the frame headers in the buffer (a length read per frame).
    fn frames_ready(&self, limit: usize) -> usize {
        let mut buffered = self.buffer.peek();
        let mut ready = 0;
        while ready < limit && !buffered.is_empty() {
            match self.splitter.bytes_needed(buffered) {
                Ok(needed) if needed <= buffered.len() => {
                    buffered = &buffered[needed..];
                    ready += 1;
                }
                _ => break,
            }
        }
        ready
    }
}

/// Sends frames on a byte stream with vectored writes straight from the frame's segments
/// (a batch of small frames without bulk payloads, 2 KiB or less in all, is gathered into
/// one segment first).
#[derive(Debug)]
pub struct StreamSink<W> {
    writer: W,
    /// Where a batch of small segments is gathered into one (see [`COALESCE_MAX`]).
    gathered: Vec<u8>,
    /// Frames with a large payload sent alone are preceded by padding that keeps the
    /// kernel's copy of the payload clear of 4 KiB aliasing (TCP; see `page_padding`).
    pads_pages: bool,
}

impl<W> StreamSink<W> {
    /// Wraps the writing half of a stream.
    pub fn new(writer: W) -> StreamSink<W> {
        StreamSink {
            writer,
            gathered: Vec::new(),
            pads_pages: false,
        }
    }

    /// The same sink, sending a frame whose first bulk segment is large and which goes
    /// alone behind PONG frames when its payload's copy into the kernel's page fragments
    /// would alias (see `page_padding`). For TCP, whose sends are copied that way.
    pub fn padding_page_fragments(mut self) -> StreamSink<W> {
        self.pads_pages = true;
        self
    }
}

/// A write of several small frames holding this many bytes or fewer in all is gathered
/// into one buffer first: the kernel's cost per segment (importing the vector, one user
/// copy and one hardened-usercopy check each) is more than copying a few small frames
/// here (null-call throughput at 32 outstanding: +4-5% over TCP, +5-9% over Unix
/// sockets). Only frames without bulk segments are gathered (what marshalling built):
/// a `Bytes` payload, however small, is written from the caller's buffer, and so is a
/// lone frame.
const COALESCE_MAX: usize = 2048;

/// The writing half of a byte stream: written without the reactor first
/// ([`StreamWriteHalf::try_write_vectored`]), through it ([`AsyncWrite`]) only when full.
///
/// [`StreamSink`] flushes ([`AsyncWrite::poll_flush`]) after the last byte of every frame
/// and reports the frame sent only once the flush is done, so a half that buffers (TLS)
/// has the frame on the socket by then; for plain sockets the flush does nothing.
pub trait StreamWriteHalf: AsyncWrite + Unpin + Send + 'static {
    /// Writes as much of `slices` as goes now, without waiting and without registering for
    /// wake-ups; `WouldBlock` when nothing goes.
    fn try_write_vectored(&mut self, slices: &[IoSlice<'_>]) -> io::Result<usize>;

    /// See [`FrameSink::stop_watching`]. Does nothing unless the half watches its socket
    /// only on demand.
    fn stop_watching(&mut self) {}

    /// See [`FrameSink::unsent`]. None by default.
    fn unsent(&self) -> Option<usize> {
        None
    }
}

/// Plain sockets are written with a non-blocking `send`/`sendmsg` straight on the
/// descriptor (the socket almost always has room).
impl StreamWriteHalf for tokio::net::tcp::OwnedWriteHalf {
    #[inline]
    fn try_write_vectored(&mut self, slices: &[IoSlice<'_>]) -> io::Result<usize> {
        let stream: &tokio::net::TcpStream = self.as_ref();
        send_slices_nonblocking(stream.as_raw_fd(), slices)
    }

    fn unsent(&self) -> Option<usize> {
        let stream: &tokio::net::TcpStream = self.as_ref();
        unsent_bytes(stream.as_raw_fd())
    }
}

/// See the TCP implementation.
impl StreamWriteHalf for tokio::net::unix::OwnedWriteHalf {
    #[inline]
    fn try_write_vectored(&mut self, slices: &[IoSlice<'_>]) -> io::Result<usize> {
        let stream: &tokio::net::UnixStream = self.as_ref();
        send_slices_nonblocking(stream.as_raw_fd(), slices)
    }

    fn unsent(&self) -> Option<usize> {
        let stream: &tokio::net::UnixStream = self.as_ref();
        unsent_bytes(stream.as_raw_fd())
    }
}

impl<W: StreamWriteHalf> StreamSink<W> {
    /// One vectored write of as many of `frames` (from the first unwritten one) as
    /// [`MAX_BATCH_IOVECS`] segments hold; advances the frames by what went. Ready(Ok(true))
    /// once every frame is written.
    fn poll_write_batch(
        &mut self,
        cx: &mut Context<'_>,
        frames: &mut [OutFrame],
    ) -> Poll<io::Result<bool>> {
        let Some(first) = frames.iter().position(|frame| frame.remaining() > 0) else {
            return Poll::Ready(Ok(true));
        };
        let frames = &mut frames[first..];
        let mut slices = [IoSlice::new(&[]); MAX_BATCH_IOVECS];
        let (mut count, mut bytes, mut whole) = (0, 0, 0);
        let mut bulk = false;
        for frame in frames.iter() {
            bulk |= frame.carries_bulk();
            let (filled, length) = frame.io_slices(&mut slices[count..]);
            count += filled;
            bytes += length;
            if length < frame.remaining() {
                break;
            }
            whole += 1;
            if count == MAX_BATCH_IOVECS {
                break;
            }
        }
        if whole > 1 && !bulk && bytes <= COALESCE_MAX {
            self.gathered.clear();
            for slice in &slices[..count] {
                self.gathered.extend_from_slice(slice);
            }
            slices[0] = IoSlice::new(&self.gathered);
            count = 1;
        }
        let written = loop {
            match self.writer.try_write_vectored(&slices[..count]) {
                Ok(written) => break written,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    break ready!(
                        Pin::new(&mut self.writer).poll_write_vectored(cx, &slices[..count])
                    )?;
                }
                Err(e) => return Poll::Ready(Err(e)),
            }
        };
        if written == 0 {
            return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
        }
        let all = written == bytes && whole == frames.len();
        let mut left = written;
        for frame in frames.iter_mut() {
            let step = left.min(frame.remaining());
            frame.advance(step);
            left -= step;
            if left == 0 {
                break;
            }
        }
        Poll::Ready(Ok(all))
    }
}

impl<W: StreamWriteHalf> FrameSink for StreamSink<W> {
    /// Writes the frames with vectored writes of up to 64 segments,
    /// several frames per write (one write, of one gathered segment, for a batch of small
    /// frames), then flushes the half once (a no-op on plain sockets).
    fn poll_send_batch(
        &mut self,
        cx: &mut Context<'_>,
        frames: &mut [OutFrame],
    ) -> Poll<io::Result<()>> {
        if let [frame] = frames {
            return self.poll_send(cx, frame);
        }
        while !ready!(self.poll_write_batch(cx, frames))? {}
        Pin::new(&mut self.writer).poll_flush(cx)
    }

    fn stop_watching(&mut self) {
        self.writer.stop_watching();
    }

    fn unsent(&self) -> Option<usize> {
        self.writer.unsent()
    }

    /// Writes with [`StreamWriteHalf::try_write_vectored`] (for sockets a vectored `sendmsg`
    /// straight on the socket, which almost always has room); only when it is full does the
    /// write go through the reactor, which registers the waker for when room appears. A
    /// sink [`StreamSink::padding_page_fragments`] puts padding before a frame first if it
    /// needs it. Once the whole frame is written the half is flushed (a no-op on plain sockets); a flush
    /// that cannot finish now is Pending, and the next call with the same (now empty)
    /// frame finishes it.
    fn poll_send(&mut self, cx: &mut Context<'_>, frame: &mut OutFrame) -> Poll<io::Result<()>> {
        if self.pads_pages {
            super::page_padding::pad(frame);
        }
        loop {
            let mut slices = [IoSlice::new(&[]); MAX_IOVECS];
            let (count, bytes) = frame.io_slices(&mut slices);
            if count == 0 {
                return Pin::new(&mut self.writer).poll_flush(cx);
            }
            let written = match self.writer.try_write_vectored(&slices[..count]) {
                Ok(written) => written,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    ready!(Pin::new(&mut self.writer).poll_write_vectored(cx, &slices[..count]))?
                }
                Err(e) => return Poll::Ready(Err(e)),
            };
            if written == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            if written == bytes && count < MAX_IOVECS {
                // Everything was written (the common case): no need to look again.
                frame.mark_written();
                return Pin::new(&mut self.writer).poll_flush(cx);
            }
            frame.advance(written);
        }
    }
}

#[cfg(test)]
#[path = "stream_batch_tests.rs"]
mod batch_tests;

#[cfg(test)]
#[path = "stream_source_tests.rs"]
mod source_tests;
