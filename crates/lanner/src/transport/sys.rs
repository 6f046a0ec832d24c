//! The one system call the runtime makes outside tokio: a non-blocking receive straight
//! into a buffer's spare capacity, used while spinning so that arriving data is noticed
//! without a trip through the reactor (which is what the raw baseline does too).

use std::io;
use std::os::fd::RawFd;

use bytes::{BufMut, BytesMut};

/// Receives up to the buffer's spare capacity from `fd` without blocking. `Ok(0)` means
/// the peer closed; `WouldBlock` means no data now.
pub(crate) fn recv_nonblocking(fd: RawFd, buffer: &mut BytesMut) -> io::Result<usize> {
    let spare = buffer.chunk_mut();
    let len = spare.len();
    let ptr = spare.as_mut_ptr();
    // SAFETY: `ptr` points to `len` writable bytes of the buffer's spare capacity, which
    // stay valid for the duration of the call (nothing else borrows `buffer`); recv writes
    // at most `len` bytes there and does not read them.
    let received = unsafe { libc::recv(fd, ptr.cast(), len, libc::MSG_DONTWAIT) };
    if received < 0 {
        return Err(io::Error::last_os_error());
    }
    let received = received as usize;
    // SAFETY: the kernel initialised exactly `received` (<= len) bytes at the start of the
    // spare capacity.
    unsafe { buffer.advance_mut(received) };
    Ok(received)
}
