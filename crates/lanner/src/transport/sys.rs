//! The two system calls the runtime makes outside tokio, on the hot path of every call: a
//! non-blocking receive straight into a buffer's spare capacity (used while spinning, so
//! arriving data is noticed without a trip through the reactor, as the raw baseline does),
//! and a non-blocking vectored send (the socket almost always has room; tokio's registered
//! path is used only when it is full). TLS uses the same calls under rustls (a receive into
//! rustls's own buffer, a send of its records).

use std::io;
use std::mem::MaybeUninit;
use std::os::fd::RawFd;

use bytes::{BufMut, BytesMut};

/// Receives up to `buffer.len()` bytes from `fd` into `buffer` (which need not be
/// initialised) without blocking. `Ok(0)` means the peer closed (or `buffer` is empty);
/// `WouldBlock` means no data now. The first bytes reported are initialised.
pub(crate) fn recv_uninit_nonblocking(
    fd: RawFd,
    buffer: &mut [MaybeUninit<u8>],
) -> io::Result<usize> {
    // SAFETY: `buffer` is valid for writes of `buffer.len()` bytes for the duration of the
    // call (we hold its only borrow); recv writes at most that many bytes there and does
    // not read them.
    let received = unsafe {
        libc::recv(
            fd,
            buffer.as_mut_ptr().cast(),
            buffer.len(),
            libc::MSG_DONTWAIT,
        )
    };
    if received < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(received as usize)
}

/// Receives up to the buffer's spare capacity from `fd` without blocking. `Ok(0)` means
/// the peer closed; `WouldBlock` means no data now.
pub(crate) fn recv_nonblocking(fd: RawFd, buffer: &mut BytesMut) -> io::Result<usize> {
    // SAFETY: recv writes only initialised bytes into the spare capacity. (`chunk_mut`
    // makes room if there is none, so a full buffer never reads as a closed peer.)
    let spare = unsafe { buffer.chunk_mut().as_uninit_slice_mut() };
    let received = recv_uninit_nonblocking(fd, spare)?;
    // SAFETY: the kernel initialised exactly `received` bytes at the start of the spare
    // capacity.
    unsafe { buffer.advance_mut(received) };
    Ok(received)
}

/// Receives up to `buffer.len()` bytes from `fd` into `buffer` without blocking. `Ok(0)`
/// means the peer closed (or `buffer` is empty); `WouldBlock` means no data now.
pub(crate) fn recv_slice_nonblocking(fd: RawFd, buffer: &mut [u8]) -> io::Result<usize> {
    // SAFETY: the same memory seen as possibly uninitialised; recv writes only
    // initialised bytes into it, so it stays initialised.
    let buffer = unsafe { &mut *(std::ptr::from_mut(buffer) as *mut [MaybeUninit<u8>]) };
    recv_uninit_nonblocking(fd, buffer)
}

/// Sends `slices` on socket `fd` without blocking: `send` for one slice (cheaper in the
/// kernel), `sendmsg` for several. Returns the bytes sent (`WouldBlock` if the socket is
/// full).
#[inline]
pub(crate) fn send_slices_nonblocking(
    fd: RawFd,
    slices: &[std::io::IoSlice<'_>],
) -> io::Result<usize> {
    match slices {
        [one] => send_nonblocking(fd, one),
        _ => send_vectored_nonblocking(fd, slices),
    }
}

/// Sends `slices` on socket `fd` without blocking (`sendmsg` with `MSG_DONTWAIT` and
/// `MSG_NOSIGNAL`: a peer that has gone is an `EPIPE` error, never a SIGPIPE); returns the
/// bytes sent (`WouldBlock` if the socket is full).
pub(crate) fn send_vectored_nonblocking(
    fd: RawFd,
    slices: &[std::io::IoSlice<'_>],
) -> io::Result<usize> {
    // SAFETY: an all-zero msghdr is a valid empty message header.
    let mut message: libc::msghdr = unsafe { std::mem::zeroed() };
    message.msg_iov = slices.as_ptr().cast_mut().cast();
    message.msg_iovlen = slices.len() as _;
    // SAFETY: `IoSlice` is ABI-compatible with `struct iovec` (guaranteed by std on Unix);
    // `message` points at `slices.len()` valid entries whose buffers outlive the call, and
    // sendmsg only reads them. `fd` is a socket the caller keeps open during the call.
    let sent = unsafe { libc::sendmsg(fd, &message, libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL) };
    if sent < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(sent as usize)
}

/// Sends one buffer on socket `fd` without blocking (`send` with `MSG_DONTWAIT` and
/// `MSG_NOSIGNAL`): cheaper in the kernel than `sendmsg` for a frame that is one segment.
pub(crate) fn send_nonblocking(fd: RawFd, bytes: &[u8]) -> io::Result<usize> {
    // SAFETY: `bytes` is a valid readable buffer of `bytes.len()` bytes for the duration of
    // the call, and send only reads it. `fd` is a socket the caller keeps open.
    let sent = unsafe {
        libc::send(
            fd,
            bytes.as_ptr().cast(),
            bytes.len(),
            libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
        )
    };
    if sent < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(sent as usize)
}

/// Shuts down the sending side of socket `fd` (the peer reads the end of the stream once
/// what was sent before has arrived). A socket already disconnected has nothing to shut
/// down: not an error.
pub(crate) fn shutdown_writes(fd: RawFd) -> io::Result<()> {
    // SAFETY: `fd` is a socket the caller keeps open for the call.
    if unsafe { libc::shutdown(fd, libc::SHUT_WR) } < 0 {
        let error = io::Error::last_os_error();
        if error.raw_os_error() != Some(libc::ENOTCONN) {
            return Err(error);
        }
    }
    Ok(())
}

/// Bytes written to socket `fd` that its peer has not taken yet (for TCP: not yet
/// acknowledged; for a Unix socket: not yet read), as `SIOCOUTQ` reports them; None if
/// the system cannot say.
pub(crate) fn unsent_bytes(fd: RawFd) -> Option<usize> {
    let mut unsent: libc::c_int = 0;
    // SAFETY: TIOCOUTQ (SIOCOUTQ) writes one int to the pointer it is given, which points
    // at a live, writable int. `fd` is a socket the caller keeps open during the call.
    let result = unsafe { libc::ioctl(fd, libc::TIOCOUTQ, &mut unsent) };
    (result == 0).then(|| usize::try_from(unsent).unwrap_or(0))
}
