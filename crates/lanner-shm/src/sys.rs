//! Operating-system plumbing (Linux only): shared mappings, sealed memory files, descriptor
//! passing over Unix sockets, and what the kernel knows about the peer.
//!
//! Setting up a region takes four calls on each side:
//!
//! * the creator: [`create_sealed_memfd`], [`Mapping::map_shared`], then [`send_with_fds`]
//!   with the memfd (and its doorbells) attached;
//! * the peer: [`recv_with_fds`], [`check_peer_memfd`] on the received memfd, then
//!   [`Mapping::map_shared`].
//!
//! Every receive on a Unix socket here has room for as many descriptors as the kernel
//! passes with one message ([`SCM_MAX_FD`]): a descriptor that finds no room is closed by
//! the kernel on the receiving thread as the call returns, and a peer can pass one whose
//! close blocks (a TCP socket lingering with unsent data). Descriptors received where
//! none belong are closed on the closer thread ([`crate::closer`]).
//!
//! The seals matter: a mapping of a file that shrinks under it raises `SIGBUS` on access, so
//! a memfd is only mapped once the kernel guarantees that nobody can shrink it.
//!
//! Every `unsafe` block sits in a small function of its own with the argument for its
//! soundness next to it. Errors are [`io::Error`]s whose message names the failed step;
//! `WouldBlock` and `Interrupted` from the socket calls come through untouched (and without
//! allocating) so that callers can poll.

use std::ffi::{CString, c_int, c_void};
use std::fmt;
use std::io;
use std::mem::size_of;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::ptr::{self, NonNull};

/// The most descriptors [`send_with_fds`] sends in one message.
pub const MAX_PASSED_FDS: usize = 8;

/// The most descriptors the kernel passes with one message (Linux's `SCM_MAX_FD`); every
/// receive here has room for them all.
pub const SCM_MAX_FD: usize = 253;

/// `SO_PASSRIGHTS` (Linux 6.16; not in `libc` yet): set to 0, the socket refuses
/// descriptors (a sender's `sendmsg` with `SCM_RIGHTS` fails with `EPERM`).
#[cfg(not(target_arch = "sparc64"))]
const SO_PASSRIGHTS: c_int = 83;
/// `SO_PASSRIGHTS` (Linux 6.16; not in `libc` yet), whose number differs on SPARC.
#[cfg(target_arch = "sparc64")]
const SO_PASSRIGHTS: c_int = 0x5c;

/// `SCM_PIDFD` (Linux 6.5): a control message carrying a pidfd, installed in the
/// receiver's table like a passed descriptor.
const SCM_PIDFD: c_int = 4;

// ---------------------------------------------------------------------------------------------
// Mapping

/// A shared read-write mapping of a file descriptor; unmapped on drop.
///
/// The mapping hands out only a raw pointer: it never creates references into the memory,
/// because the peer process may change any byte of it at any time. Users read and write it
/// through raw pointers and atomics.
pub struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: a `Mapping` owns plain shared memory and no thread-affine state; unmapping it from
// another thread is fine. All it hands out is a raw pointer, whose users must synchronize
// their accesses (through atomics), exactly as they must with the peer process.
unsafe impl Send for Mapping {}

// SAFETY: `&Mapping` only gives out the pointer and the length, both immutable; concurrent
// accesses to the memory itself are the users' business, synchronized through atomics.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Maps the first `len` bytes of `fd` shared and read-write
    /// (`mmap(PROT_READ | PROT_WRITE, MAP_SHARED)`).
    ///
    /// Fails with `InvalidInput` if `len` is 0 or the file is shorter than `len` bytes. That
    /// size check only protects against mistakes: a file that can still shrink makes every
    /// access a potential `SIGBUS`, so check a peer's memfd with [`check_peer_memfd`] first.
    pub fn map_shared(fd: BorrowedFd<'_>, len: usize) -> io::Result<Mapping> {
        if len == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "cannot map 0 bytes of a file",
            ));
        }
        let size = file_size(fd)?;
        if size < len as u64 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("cannot map {len} bytes of a file that is only {size} bytes long"),
            ));
        }
        let ptr =
            mmap_shared(fd, len).map_err(|e| annotate(e, format_args!("mmap of {len} bytes")))?;
        Ok(Mapping { ptr, len })
    }

    /// The first byte of the mapping. Valid for reads and writes of [`len`](Self::len)
    /// bytes while `self` lives; the peer may write to it concurrently.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// The length of the mapping in bytes (never 0).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always `false`: [`Mapping::map_shared`] refuses to map 0 bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Faults every page of the mapping in now, writable
    /// (`madvise(MADV_POPULATE_WRITE)`, Linux 5.14), so that first touches later do not
    /// enter the kernel. Allocates the file's pages if they are not yet. Fails with
    /// `EINVAL` on kernels without it; the mapping is unchanged then.
    pub fn populate(&self) -> io::Result<()> {
        self.populate_prefix(self.len)
    }

    /// [`Mapping::populate`] for the first `len` bytes only (all of them if `len` is
    /// larger than the mapping).
    pub fn populate_prefix(&self, len: usize) -> io::Result<()> {
        let len = len.min(self.len);
        // SAFETY: the range is a prefix of this mapping (which starts page-aligned; the
        // kernel rounds the length up to whole pages, all of which belong to the mapping
        // since its own length is rounded up likewise), alive while `self` is borrowed;
        // populating changes no byte of it.
        let ret = unsafe {
            libc::madvise(
                self.ptr.as_ptr().cast::<c_void>(),
                len,
                libc::MADV_POPULATE_WRITE,
            )
        };
        if ret != 0 {
            return Err(annotate(
                io::Error::last_os_error(),
                format_args!("populating {len} bytes of a mapping of {} bytes", self.len),
            ));
        }
        Ok(())
    }

    /// Gives the mapping's pages back while keeping its addresses mapped: the range is
    /// replaced, in one step, by private read-only zero pages that take no memory
    /// (`mmap(MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, PROT_READ)`). This
    /// process's share of the file's memory goes at once; the file itself goes once the
    /// peer lets go of it too. Reads of the range then find zeros; a write faults.
    ///
    /// A failed `MAP_FIXED` may have left the range unmapped: Linux clears the old
    /// mapping's page tables before it allocates the new one, and if that allocation fails
    /// it leaves a gap (`vms_abort_munmap_vmas`; POSIX allows it too). A gap would fault
    /// the readers this keeps the addresses for, and another mapping could take it, which
    /// `Drop` would then unmap. So a failure is followed by mapping zeros into the gap
    /// without replacing anything (`MAP_FIXED_NOREPLACE`); if the range cannot be shown to
    /// be zeros that way (it is still mapped, as the original or as something else: there
    /// is no telling), the process aborts, as it does when the allocator is out of memory.
    ///
    /// # Safety
    /// From this call on, nothing in this process may write to the mapping, or read it
    /// other than by atomic loads that accept a zero (as they must accept any value the
    /// peer writes).
    pub unsafe fn release_pages(&self) {
        #[cfg(test)]
        PAGES_RELEASED.with(|calls| calls.set(calls.get() + 1));
        // SAFETY: MAP_FIXED replaces exactly this mapping's range, which this `Mapping`
        // owns (no other code maps or unmaps it); the caller guarantees nothing writes to
        // it from now on and that its readers accept zeros. On success the range stays
        // mapped, so no access faults, and `Drop` unmaps the replacement as it would have
        // the original.
        if unsafe { self.map_zeros(libc::MAP_FIXED) } {
            return;
        }
        let error = io::Error::last_os_error();
        // SAFETY: as above; the range is this mapping's own.
        unsafe { self.refill_after_failed_release(&error) }
    }

    /// After a failed [`Mapping::release_pages`]: maps zeros into the range if the kernel
    /// left it unmapped, and aborts the process if it cannot show that it did (see
    /// `release_pages`).
    ///
    /// # Safety
    /// As for [`Mapping::release_pages`].
    unsafe fn refill_after_failed_release(&self, error: &io::Error) {
        // SAFETY: MAP_FIXED_NOREPLACE maps nothing over an existing mapping; a gap in this
        // range is this mapping's (nothing else may map it while the `Mapping` lives).
        if unsafe { self.map_zeros(libc::MAP_FIXED_NOREPLACE) } {
            return;
        }
        eprintln!(
            "lanner-shm: replacing a mapping of {} bytes at {:p} with zero pages failed ({error}), \
             and the range may no longer be this mapping: aborting",
            self.len, self.ptr
        );
        std::process::abort();
    }

    /// Maps private read-only zero pages at exactly this mapping's range, with `fixed`
    /// (`MAP_FIXED` or `MAP_FIXED_NOREPLACE`); whether they are there now.
    ///
    /// # Safety
    /// As for [`Mapping::release_pages`].
    unsafe fn map_zeros(&self, fixed: c_int) -> bool {
        let wanted = self.ptr.as_ptr().cast::<c_void>();
        // SAFETY: per the callers: the range is this mapping's, and its readers accept
        // zeros. Anything mapped elsewhere (a kernel before 4.17 takes
        // MAP_FIXED_NOREPLACE as a hint) is unmapped again below.
        let ptr = unsafe {
            libc::mmap(
                wanted,
                self.len,
                libc::PROT_READ,
                fixed | libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return false;
        }
        if ptr != wanted {
            // SAFETY: `ptr` is the mapping just made, of `len` bytes, that nothing uses.
            unsafe { libc::munmap(ptr, self.len) };
            return false;
        }
        true
    }
}

#[cfg(test)]
thread_local! {
    /// Calls of [`Mapping::release_pages`] on this thread, for tests to count.
    pub(crate) static PAGES_RELEASED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    /// Mappings unmapped (dropped) on this thread, for tests to count.
    pub(crate) static MAPPINGS_UNMAPPED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

impl Drop for Mapping {
    fn drop(&mut self) {
        #[cfg(test)]
        MAPPINGS_UNMAPPED.with(|calls| calls.set(calls.get() + 1));
        munmap(self.ptr, self.len);
    }
}

impl fmt::Debug for Mapping {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Mapping")
            .field("ptr", &self.ptr)
            .field("len", &self.len)
            .finish()
    }
}

fn mmap_shared(fd: BorrowedFd<'_>, len: usize) -> io::Result<NonNull<u8>> {
    // SAFETY: a null address lets the kernel choose a fresh range, so no existing memory of
    // this process is replaced; `fd` is open for the duration of the call (it is borrowed).
    // The result is checked against MAP_FAILED before use.
    let ptr = unsafe {
        libc::mmap(
            ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd.as_raw_fd(),
            0,
        )
    };
    if ptr == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    NonNull::new(ptr.cast::<u8>()).ok_or_else(|| io::Error::other("mmap returned a null pointer"))
}

fn munmap(ptr: NonNull<u8>, len: usize) {
    // SAFETY: `ptr` and `len` describe exactly one mapping made by `mmap_shared` and owned by
    // the `Mapping` being dropped; no other code unmaps it, and `Mapping` never handed out
    // references into it, so nothing safe can observe the memory after this call.
    let ret = unsafe { libc::munmap(ptr.as_ptr().cast::<c_void>(), len) };
    debug_assert_eq!(ret, 0, "munmap failed: {}", io::Error::last_os_error());
}

// ---------------------------------------------------------------------------------------------
// Memory files

/// Creates an anonymous memory file of `len` bytes (`memfd_create` with `MFD_CLOEXEC |
/// MFD_ALLOW_SEALING`, `ftruncate` to `len`), then seals it with `F_SEAL_SHRINK |
/// F_SEAL_GROW | F_SEAL_SEAL` so that no process can change its size afterwards (a peer that
/// could shrink it would make our accesses fault with `SIGBUS`).
///
/// `name` only shows up in `/proc/<pid>/fd` for debugging; it must not contain a NUL byte
/// and is limited to 249 bytes by the kernel.
pub fn create_sealed_memfd(name: &str, len: usize) -> io::Result<OwnedFd> {
    let c_name = CString::new(name).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("memfd name {name:?} contains a NUL byte"),
        )
    })?;
    let size = libc::off_t::try_from(len).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("memfd size {len} does not fit in off_t"),
        )
    })?;
    let fd = memfd_create(&c_name, libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING)
        .map_err(|e| annotate(e, format_args!("memfd_create({name:?})")))?;
    ftruncate(fd.as_fd(), size)
        .map_err(|e| annotate(e, format_args!("ftruncate of memfd to {len} bytes")))?;
    let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
    fcntl_int(fd.as_fd(), libc::F_ADD_SEALS, seals)
        .map_err(|e| annotate(e, format_args!("sealing memfd (F_ADD_SEALS)")))?;
    Ok(fd)
}

/// Checks that `fd`, received from a peer, is safe to map with `len` bytes: it must be a
/// memfd sealed against shrinking whose seals are themselves sealed (`F_SEAL_SHRINK` and
/// `F_SEAL_SEAL`), not sealed against writing, on tmpfs (an ordinary memfd, not a
/// `MFD_HUGETLB` one), and exactly `len` bytes long.
///
/// Why tmpfs only: the seals do not stop `fallocate(FALLOC_FL_PUNCH_HOLE)`. A hole punched
/// in a tmpfs file reads back as zeros, but one punched in a hugetlbfs file faults
/// (`SIGBUS`) once the huge-page pool has no page left to fill it, and a hugetlbfs mapping
/// whose length is not a multiple of the huge page size cannot be unmapped with it.
///
/// Fails with `InvalidData` saying which check failed.
pub fn check_peer_memfd(fd: BorrowedFd<'_>, len: usize) -> io::Result<()> {
    let seals = fcntl_int(fd, libc::F_GET_SEALS, 0).map_err(|e| {
        invalid_data(format!(
            "peer descriptor is not a sealable memfd (F_GET_SEALS failed: {e})"
        ))
    })?;
    if seals & libc::F_SEAL_SHRINK == 0 {
        return Err(invalid_data(
            "peer memfd is not sealed against shrinking (F_SEAL_SHRINK missing)".to_owned(),
        ));
    }
    if seals & libc::F_SEAL_SEAL == 0 {
        return Err(invalid_data(
            "peer memfd's seals are not final (F_SEAL_SEAL missing)".to_owned(),
        ));
    }
    if seals & (libc::F_SEAL_WRITE | libc::F_SEAL_FUTURE_WRITE) != 0 {
        return Err(invalid_data(
            "peer memfd is sealed against writing; it cannot be mapped read-write".to_owned(),
        ));
    }
    let file_system = fstatfs(fd)
        .map_err(|e| annotate(e, format_args!("fstatfs of the peer memfd")))?
        .f_type;
    if file_system != libc::TMPFS_MAGIC {
        return Err(invalid_data(format!(
            "peer memfd is not on tmpfs (file system magic {file_system:#x}; a hugetlbfs \
             memfd, say, could fault under the mapping)"
        )));
    }
    let size = file_size(fd)?;
    if size != len as u64 {
        return Err(invalid_data(format!(
            "peer memfd is {size} bytes long, expected exactly {len}"
        )));
    }
    Ok(())
}

/// The type bits of the file behind `fd` (`st_mode & S_IFMT`, e.g. `libc::S_IFSOCK`).
pub fn file_type(fd: BorrowedFd<'_>) -> io::Result<libc::mode_t> {
    let stat = fstat(fd).map_err(|e| annotate(e, format_args!("fstat")))?;
    Ok(stat.st_mode & libc::S_IFMT)
}

/// The size in bytes of the file behind `fd` (`fstat`).
pub fn file_size(fd: BorrowedFd<'_>) -> io::Result<u64> {
    let stat = fstat(fd).map_err(|e| annotate(e, format_args!("fstat")))?;
    u64::try_from(stat.st_size)
        .map_err(|_| invalid_data(format!("fstat reported a negative size {}", stat.st_size)))
}

fn memfd_create(name: &std::ffi::CStr, flags: libc::c_uint) -> io::Result<OwnedFd> {
    // SAFETY: `name` is a NUL-terminated string that outlives the call; memfd_create only
    // reads it.
    let fd = cvt(unsafe { libc::memfd_create(name.as_ptr(), flags) })?;
    // SAFETY: memfd_create succeeded, so `fd` is a new descriptor that nothing else owns.
    Ok(unsafe { adopt_new_fd(fd) })
}

fn ftruncate(fd: BorrowedFd<'_>, size: libc::off_t) -> io::Result<()> {
    // SAFETY: ftruncate takes no pointers; `fd` is open for the duration of the call.
    cvt(unsafe { libc::ftruncate(fd.as_raw_fd(), size) }).map(drop)
}

/// `fcntl` with an integer argument (or none, for the `F_GET*` commands).
fn fcntl_int(fd: BorrowedFd<'_>, cmd: c_int, arg: c_int) -> io::Result<c_int> {
    // SAFETY: callers pass only commands whose argument is an integer or unused
    // (F_ADD_SEALS, F_GET_SEALS, F_GETFL, ...), so no memory is read or written through
    // `arg`; `fd` is open for the duration of the call.
    cvt(unsafe { libc::fcntl(fd.as_raw_fd(), cmd, arg) })
}

fn fstatfs(fd: BorrowedFd<'_>) -> io::Result<libc::statfs> {
    let mut stat = std::mem::MaybeUninit::<libc::statfs>::uninit();
    // SAFETY: `stat` is valid for writes of one `struct statfs`, which fstatfs fills on
    // success; `fd` is open for the duration of the call.
    cvt(unsafe { libc::fstatfs(fd.as_raw_fd(), stat.as_mut_ptr()) })?;
    // SAFETY: fstatfs returned 0, so it initialized the whole struct.
    Ok(unsafe { stat.assume_init() })
}

fn fstat(fd: BorrowedFd<'_>) -> io::Result<libc::stat> {
    let mut stat = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: `stat` is valid for writes of one `struct stat`, which fstat fills on success.
    cvt(unsafe { libc::fstat(fd.as_raw_fd(), stat.as_mut_ptr()) })?;
    // SAFETY: fstat returned 0, so it initialized the whole struct.
    Ok(unsafe { stat.assume_init() })
}

// ---------------------------------------------------------------------------------------------
// Descriptor passing

/// Sends `data` (non-empty) with `fds` attached as one `SCM_RIGHTS` control message over a
/// connected Unix stream socket (`sendmsg` with `MSG_NOSIGNAL`, so a closed peer gives
/// `BrokenPipe` instead of killing the process).
///
/// Returns the number of bytes sent, which may be short like `send(2)`; the descriptors go
/// with the first byte, so after a short send the rest of `data` goes with plain writes.
/// Works on blocking and non-blocking sockets: `WouldBlock` comes back untouched, and then
/// nothing (neither bytes nor descriptors) was sent. `EINTR` is retried.
///
/// Fails with `InvalidInput` if `data` is empty or `fds` holds more than
/// [`MAX_PASSED_FDS`] descriptors.
pub fn send_with_fds(
    socket: BorrowedFd<'_>,
    data: &[u8],
    fds: &[BorrowedFd<'_>],
) -> io::Result<usize> {
    send_with_fd_limit(socket, data, fds, MAX_PASSED_FDS)
}

/// [`send_with_fds`] passing up to `max_fds` (≤ [`SCM_MAX_FD`]) descriptors: the tests
/// send as many as a peer can.
fn send_with_fd_limit(
    socket: BorrowedFd<'_>,
    data: &[u8],
    fds: &[BorrowedFd<'_>],
    max_fds: usize,
) -> io::Result<usize> {
    if data.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "send_with_fds needs at least one byte of data to carry the descriptors",
        ));
    }
    if fds.len() > max_fds.min(SCM_MAX_FD) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "cannot pass {} descriptors in one message (at most {max_fds})",
                fds.len()
            ),
        ));
    }
    let mut control = ControlBuffer::new();
    let control_len = if fds.is_empty() {
        0
    } else {
        control.encode_rights(fds)
    };
    let mut iov = libc::iovec {
        iov_base: data.as_ptr().cast_mut().cast::<c_void>(),
        iov_len: data.len(),
    };
    let mut msg = empty_msghdr();
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    if control_len > 0 {
        msg.msg_control = control.as_mut_ptr();
        msg.msg_controllen = control_len as _;
    }
    loop {
        // SAFETY: `msg` points at one iovec covering exactly `data` and, if any, at the first
        // `control_len` (≤ its size) bytes of `control`; all of them live until the call
        // returns, and sendmsg only reads through them.
        let ret = unsafe { libc::sendmsg(socket.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) };
        match cvt_size(ret) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(annotate_socket(e, "sendmsg with descriptors")),
            Ok(sent) => return Ok(sent),
        }
    }
}

/// Receives into `buf` and collects any descriptors passed with the bytes (`recvmsg` with
/// `MSG_CMSG_CLOEXEC`, room for [`SCM_MAX_FD`] descriptors).
///
/// Returns the number of bytes read and the descriptors; 0 bytes means end of file.
/// `WouldBlock` comes back untouched; `EINTR` is retried. If the control data was truncated
/// (the kernel could not install every descriptor: this process's table is full) or holds
/// anything but `SCM_RIGHTS` (a socket option such as `SO_PASSCRED` is on), the descriptors
/// that did arrive are closed on the closer thread and the call fails with `InvalidData`;
/// the bytes read with them are lost, so treat the connection as broken.
///
/// Fails with `InvalidInput` if `buf` is empty (a 0-byte read would look like end of file).
pub fn recv_with_fds(socket: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<(usize, Vec<OwnedFd>)> {
    recv_with_fd_room(socket, buf, SCM_MAX_FD, 0)
}

/// Receives into `buf` without ever blocking, whatever the socket's flags
/// (`MSG_DONTWAIT`), on a socket over which the peer must pass no descriptor. `Ok(0)` is
/// end of file.
///
/// It is a `recvmsg` with room for [`SCM_MAX_FD`] descriptors, not a plain `recv`: a
/// descriptor the peer passed anyway lands in this process's table (a plain `recv` would
/// have the kernel close it on this thread, which blocks for as long as the peer made its
/// close linger). Any that came are closed on the closer thread and the call fails with
/// `InvalidData`: the peer broke the protocol, so end the connection.
pub fn recv_nonblocking(socket: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<usize> {
    let (read, fds) = recv_with_fd_room(socket, buf, SCM_MAX_FD, libc::MSG_DONTWAIT)?;
    if fds.is_empty() {
        return Ok(read);
    }
    let count = fds.len();
    crate::closer::close_later(fds);
    Err(invalid_data(format!(
        "the peer passed {count} file descriptor(s) over a socket that takes none \
         (a protocol violation; closed on the closer thread)"
    )))
}

/// [`recv_with_fds`] with room for only `max_fds` (≤ [`SCM_MAX_FD`]) descriptors (the tests
/// use a small room to provoke truncation), and `flags` added to `MSG_CMSG_CLOEXEC`.
fn recv_with_fd_room(
    socket: BorrowedFd<'_>,
    buf: &mut [u8],
    max_fds: usize,
    flags: c_int,
) -> io::Result<(usize, Vec<OwnedFd>)> {
    assert!(max_fds <= SCM_MAX_FD, "control buffer too small");
    if buf.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "recv_with_fds needs a non-empty buffer (0 bytes read means end of file)",
        ));
    }
    let mut control = ControlBuffer::new();
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast::<c_void>(),
        iov_len: buf.len(),
    };
    let mut msg = empty_msghdr();
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr();
    // Room for other control messages too (credentials, a security label, a pidfd: a
    // peer sharing the socket can turn on the options that add them), so that they do
    // not crowd the descriptors out; the tests' small rooms leave none.
    msg.msg_controllen = if max_fds == SCM_MAX_FD {
        CONTROL_SPACE
    } else {
        cmsg_space(max_fds * size_of::<RawFd>())
    } as _;
    let read = loop {
        // SAFETY: `msg` points at one iovec covering exactly `buf` (valid for writes) and at
        // the first `msg_controllen` (≤ its size) bytes of `control`; all live until the call
        // returns. The kernel writes at most those lengths and updates `msg`'s lengths.
        let ret =
            unsafe { libc::recvmsg(socket.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC | flags) };
        match cvt_size(ret) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(annotate_socket(e, "recvmsg with descriptors")),
            Ok(read) => break read,
        }
    };
    // SAFETY: recvmsg just succeeded on `msg`, whose control pointer still points at the
    // live, cmsghdr-aligned `control`, now holding `msg_controllen` bytes of kernel-written
    // control messages.
    let (fds, foreign) = unsafe { take_received_fds(&msg) };
    if msg.msg_flags & libc::MSG_CTRUNC != 0 {
        let closed = fds.len();
        crate::closer::close_later(fds);
        return Err(invalid_data(format!(
            "received descriptors were truncated (room for {max_fds}, or this process's \
             descriptor table is full); closed the {closed} that arrived"
        )));
    }
    if foreign {
        let closed = fds.len();
        crate::closer::close_later(fds);
        return Err(invalid_data(format!(
            "received a control message other than SCM_RIGHTS; closed the {closed} \
             descriptors that arrived"
        )));
    }
    Ok((read, fds))
}

/// Takes ownership of every descriptor in the `SCM_RIGHTS` (and `SCM_PIDFD`) messages of
/// `msg`; the flag says whether any other kind of control message (a pidfd included) was
/// present.
///
/// # Safety
///
/// `msg` must have just been filled by a successful `recvmsg`: `msg_control` points at a
/// live buffer, aligned for `cmsghdr`, of at least `msg_controllen` bytes of control messages
/// written by the kernel, and no descriptor in them has been taken before.
#[allow(
    clippy::unnecessary_cast,
    reason = "msg_controllen and cmsg_len are not size_t on every libc"
)]
unsafe fn take_received_fds(msg: &libc::msghdr) -> (Vec<OwnedFd>, bool) {
    let mut fds = Vec::new();
    let mut foreign = false;
    let end = msg.msg_control as usize + msg.msg_controllen as usize;
    // SAFETY: per the contract `msg` describes a valid control buffer; CMSG_FIRSTHDR returns
    // its start, or null if it cannot hold a header.
    let mut cmsg = unsafe { libc::CMSG_FIRSTHDR(msg) };
    while !cmsg.is_null() {
        // SAFETY: CMSG_FIRSTHDR/CMSG_NXTHDR return only aligned headers that lie entirely
        // inside the buffer, which the kernel initialized.
        let header = unsafe { *cmsg };
        let rights = header.cmsg_type == libc::SCM_RIGHTS;
        if header.cmsg_level == libc::SOL_SOCKET && (rights || header.cmsg_type == SCM_PIDFD) {
            foreign |= !rights;
            // SAFETY: `cmsg` is a valid header, so its data starts inside the buffer.
            let data = unsafe { libc::CMSG_DATA(cmsg) };
            let payload = (header.cmsg_len as usize).saturating_sub(cmsg_len(0));
            let room = end.saturating_sub(data as usize);
            let count = payload.min(room) / size_of::<RawFd>();
            for i in 0..count {
                // SAFETY: descriptor `i` lies inside the buffer (bounded by both the header's
                // length and the buffer's end); the data is not necessarily aligned for
                // c_int, hence the unaligned read.
                let fd = unsafe { data.cast::<RawFd>().add(i).read_unaligned() };
                // SAFETY: the kernel installed `fd` into our table for this message, and per
                // the contract nobody has taken it yet.
                fds.push(unsafe { adopt_new_fd(fd) });
            }
        } else {
            foreign = true;
        }
        // SAFETY: `cmsg` is a valid header of `msg`'s buffer; CMSG_NXTHDR bounds-checks the
        // next one against msg_controllen and returns null past the end.
        cmsg = unsafe { libc::CMSG_NXTHDR(msg, cmsg) };
    }
    (fds, foreign)
}

/// Room for one `SCM_RIGHTS` message of [`SCM_MAX_FD`] descriptors and other control
/// messages besides (see [`CONTROL_SPACE`]), aligned for `cmsghdr` as `CMSG_FIRSTHDR`
/// requires.
#[repr(C)]
union ControlBuffer {
    header: libc::cmsghdr,
    bytes: [u8; CONTROL_SPACE],
}

/// The control room of a receive: [`SCM_MAX_FD`] descriptors, and 512 bytes for the
/// messages a socket option adds before them (credentials take 32, a pidfd 24, a
/// security label what its name needs).
const CONTROL_SPACE: usize = cmsg_space(SCM_MAX_FD * size_of::<RawFd>()) + 512;

impl ControlBuffer {
    fn new() -> ControlBuffer {
        ControlBuffer {
            bytes: [0; CONTROL_SPACE],
        }
    }

    fn as_mut_ptr(&mut self) -> *mut c_void {
        ptr::from_mut(self).cast::<c_void>()
    }

    /// Writes one `SCM_RIGHTS` message carrying `fds` (at most [`SCM_MAX_FD`]) at the
    /// start of the buffer; returns the control length to send.
    fn encode_rights(&mut self, fds: &[BorrowedFd<'_>]) -> usize {
        assert!(fds.len() <= SCM_MAX_FD, "too many descriptors");
        let payload = fds.len() * size_of::<RawFd>();
        self.header.cmsg_len = cmsg_len(payload) as _;
        self.header.cmsg_level = libc::SOL_SOCKET;
        self.header.cmsg_type = libc::SCM_RIGHTS;
        let data = cmsg_len(0);
        // SAFETY: every bit pattern is a valid `[u8; CONTROL_SPACE]`, so viewing the union
        // as bytes is sound; the header written above stays in place, before `data`.
        let bytes = unsafe { &mut self.bytes };
        let room = bytes[data..data + payload].chunks_exact_mut(size_of::<RawFd>());
        for (chunk, fd) in room.zip(fds) {
            chunk.copy_from_slice(&fd.as_raw_fd().to_ne_bytes());
        }
        cmsg_space(payload)
    }
}

/// `CMSG_SPACE(bytes)`: the control-buffer room for a message with `bytes` of data.
const fn cmsg_space(bytes: usize) -> usize {
    // SAFETY: CMSG_SPACE is pure arithmetic on its argument and touches no memory.
    unsafe { libc::CMSG_SPACE(bytes as libc::c_uint) as usize }
}

/// `CMSG_LEN(bytes)`: the `cmsg_len` of a message with `bytes` of data.
const fn cmsg_len(bytes: usize) -> usize {
    // SAFETY: CMSG_LEN is pure arithmetic on its argument and touches no memory.
    unsafe { libc::CMSG_LEN(bytes as libc::c_uint) as usize }
}

fn empty_msghdr() -> libc::msghdr {
    // SAFETY: msghdr is a plain C struct of integers and raw pointers (plus, on some libcs,
    // padding integers), for which all-zero bytes is a valid value: no buffers, no flags.
    unsafe { std::mem::zeroed() }
}

// ---------------------------------------------------------------------------------------------
// The peer

/// Kernel-verified identity of the process at the other end of a Unix socket
/// (`SO_PEERCRED`), as of when the connection was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerCredentials {
    /// The peer's process id.
    pub pid: i32,
    /// The peer's effective user id.
    pub uid: u32,
    /// The peer's effective group id.
    pub gid: u32,
}

/// This process's own credentials, in the form [`peer_credentials`] reports a peer's
/// (for in-process connections, whose peer is this process).
pub fn process_credentials() -> PeerCredentials {
    // SAFETY: geteuid and getegid take no arguments, touch no memory and cannot fail.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    PeerCredentials {
        pid: i32::try_from(std::process::id()).unwrap_or(i32::MAX),
        uid,
        gid,
    }
}

/// Asks the kernel who is at the other end of the connected Unix socket `socket`
/// (`getsockopt(SO_PEERCRED)`).
pub fn peer_credentials(socket: BorrowedFd<'_>) -> io::Result<PeerCredentials> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `cred` is valid for writes of `len` bytes and `len` for a read and write;
    // getsockopt writes at most `len` bytes and stores the length it wrote.
    let ret = unsafe {
        libc::getsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            ptr::from_mut(&mut cred).cast::<c_void>(),
            &mut len,
        )
    };
    cvt(ret).map_err(|e| annotate(e, format_args!("getsockopt(SO_PEERCRED)")))?;
    if len as usize != size_of::<libc::ucred>() {
        return Err(invalid_data(format!(
            "SO_PEERCRED returned {len} bytes, expected {}",
            size_of::<libc::ucred>()
        )));
    }
    Ok(PeerCredentials {
        pid: cred.pid,
        uid: cred.uid,
        gid: cred.gid,
    })
}

/// Sends `data` without ever blocking, whatever the socket's flags (`MSG_DONTWAIT`), and
/// without raising `SIGPIPE` if the peer is gone (`MSG_NOSIGNAL`).
pub fn send_nonblocking(socket: BorrowedFd<'_>, data: &[u8]) -> io::Result<usize> {
    // SAFETY: `data` is valid for reads of `data.len()` bytes for the duration of the call.
    let ret = unsafe {
        libc::send(
            socket.as_raw_fd(),
            data.as_ptr().cast(),
            data.len(),
            libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
        )
    };
    cvt_size(ret)
}

/// Makes the kernel refuse descriptors passed to `socket` (`SO_PASSRIGHTS` set to 0,
/// Linux 6.16): a peer's `sendmsg` with `SCM_RIGHTS` then fails with `EPERM`, and none can
/// reach the socket's queue any more (those queued before stay). Sockets accepted from a
/// listener that refuses them refuse them too. Returns `false`, having changed nothing, on
/// a kernel without the option; every receive here copes with descriptors anyway (see the
/// module's docs).
pub fn refuse_passed_descriptors(socket: BorrowedFd<'_>) -> io::Result<bool> {
    let off: c_int = 0;
    // SAFETY: `off` is a live c_int and its size is passed as the option length;
    // setsockopt only reads it.
    let ret = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            SO_PASSRIGHTS,
            ptr::from_ref(&off).cast::<c_void>(),
            size_of::<c_int>() as libc::socklen_t,
        )
    };
    match cvt(ret) {
        Ok(_) => Ok(true),
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOPROTOOPT | libc::EINVAL)) => Ok(false),
        Err(e) => Err(annotate(e, format_args!("setsockopt(SO_PASSRIGHTS, 0)"))),
    }
}

/// The domain (`SO_DOMAIN`, e.g. `libc::AF_UNIX`) and type (`SO_TYPE`, e.g.
/// `libc::SOCK_STREAM`) of the socket `socket`. Fails with the system's error as is:
/// `ENOTSOCK` ("not a socket") on a descriptor that is not one.
pub fn socket_domain_and_type(socket: BorrowedFd<'_>) -> io::Result<(c_int, c_int)> {
    let domain = getsockopt_int(socket, libc::SO_DOMAIN)?;
    let kind = getsockopt_int(socket, libc::SO_TYPE)?;
    Ok((domain, kind))
}

/// An integer socket option at level `SOL_SOCKET`.
fn getsockopt_int(socket: BorrowedFd<'_>, option: c_int) -> io::Result<c_int> {
    let mut value: c_int = 0;
    let mut len = size_of::<c_int>() as libc::socklen_t;
    // SAFETY: `value` is valid for writes of `len` bytes and `len` for a read and write;
    // getsockopt writes at most `len` bytes and stores the length it wrote.
    let ret = unsafe {
        libc::getsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            option,
            ptr::from_mut(&mut value).cast::<c_void>(),
            &mut len,
        )
    };
    cvt(ret)?;
    if len as usize != size_of::<c_int>() {
        return Err(invalid_data(format!(
            "the socket option returned {len} bytes, expected {}",
            size_of::<c_int>()
        )));
    }
    Ok(value)
}

/// Shuts both directions of a socket down, for every descriptor of it: the peer sees end
/// of file at once, even while other descriptors of the socket are still open here.
pub fn shutdown(socket: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: shutdown takes a descriptor number and no memory.
    let ret = unsafe { libc::shutdown(socket.as_raw_fd(), libc::SHUT_RDWR) };
    cvt(ret).map(drop)
}

/// `SIOCOUTQ` (not in `libc`): Linux defines it as `TIOCOUTQ`.
const SIOCOUTQ: libc::Ioctl = libc::TIOCOUTQ;

/// How much of what this side sent on the stream socket `socket` its peer has not read
/// yet (`ioctl(SIOCOUTQ)`); 0 once the peer has read it all or closed its end (its
/// receive queue is freed with it), even after `socket` was shut down.
///
/// On a Unix stream socket the kernel counts the memory charged for the messages in the
/// peer's receive queue, not their bytes: on Linux 6.18 a 16-byte message with
/// descriptors attached counts 768, one more byte behind it 1536. Descriptors attached
/// to messages not read yet are "in flight", charged to the sender's user (see
/// `docs/decisions.md`, "Offers a client never takes"): 0 here means none of ours are.
pub fn unread_by_peer(socket: BorrowedFd<'_>) -> io::Result<usize> {
    let mut queued: c_int = 0;
    // SAFETY: SIOCOUTQ writes one c_int through its argument, which points at `queued`,
    // live and writable for the duration of the call.
    let ret = unsafe { libc::ioctl(socket.as_raw_fd(), SIOCOUTQ, ptr::from_mut(&mut queued)) };
    cvt(ret).map_err(|e| annotate(e, format_args!("ioctl(SIOCOUTQ)")))?;
    usize::try_from(queued).map_err(|_| invalid_data(format!("SIOCOUTQ reported {queued} bytes")))
}

/// This process's soft limit on open descriptors (`RLIMIT_NOFILE`), `u64::MAX` if
/// unlimited. The kernel also refuses to pass descriptors (`sendmsg` fails with
/// `ETOOMANYREFS`) once the sending user has more than this many in flight, unless the
/// sender is privileged (`CAP_SYS_RESOURCE` or `CAP_SYS_ADMIN`).
pub fn open_files_limit() -> io::Result<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `limit` is a live `struct rlimit`, valid for the one write getrlimit makes.
    let ret = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, ptr::from_mut(&mut limit)) };
    cvt(ret).map_err(|e| annotate(e, format_args!("getrlimit(RLIMIT_NOFILE)")))?;
    Ok(if limit.rlim_cur == libc::RLIM_INFINITY {
        u64::MAX
    } else {
        limit.rlim_cur
    })
}

// ---------------------------------------------------------------------------------------------
// Helpers shared with `doorbell`

/// Wraps a descriptor that the kernel has just created in, or installed into, this process.
///
/// # Safety
///
/// `fd` must be a descriptor fresh from a syscall (memfd_create, eventfd, pipe2, a received
/// `SCM_RIGHTS`) that nothing else owns or will close.
pub(crate) unsafe fn adopt_new_fd(fd: RawFd) -> OwnedFd {
    debug_assert!(fd >= 0);
    // SAFETY: per the contract `fd` is open and unowned, so the `OwnedFd` becomes its only
    // owner and closes it exactly once.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

/// Turns a C return value into a result, reading `errno` before anything can change it.
pub(crate) fn cvt(ret: c_int) -> io::Result<c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// [`cvt`] for the `ssize_t` returned by read, write, send and recv.
pub(crate) fn cvt_size(ret: isize) -> io::Result<usize> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret.unsigned_abs())
    }
}

/// Prefixes `err`'s message with what was being done, keeping its kind.
pub(crate) fn annotate(err: io::Error, what: fmt::Arguments<'_>) -> io::Error {
    io::Error::new(err.kind(), format!("{what}: {err}"))
}

/// [`annotate`], except that `WouldBlock` and `Interrupted` pass through untouched (and
/// without allocating) for callers that poll.
fn annotate_socket(err: io::Error, what: &str) -> io::Error {
    match err.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => err,
        _ => annotate(err, format_args!("{what}")),
    }
}

fn invalid_data(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message)
}

/// Helpers for tests (this crate's and the `lanner` runtime's) of code that must cope with
/// what a hostile peer passes; not for anything else.
pub mod testing {
    use std::io::Write;
    use std::time::Duration;

    use super::*;

    /// A TCP socket whose final close blocks for about `linger` (`SO_LINGER` set, and data
    /// queued for a peer that reads nothing), with that peer, which must stay open meanwhile.
    /// A hostile peer can pass us such a socket.
    ///
    /// # Panics
    ///
    /// If a loopback TCP connection cannot be made, or the option cannot be set.
    pub fn lingering_tcp_socket(linger: Duration) -> (OwnedFd, std::net::TcpStream) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut sender = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (reader, _) = listener.accept().unwrap();
        sender.set_nonblocking(true).unwrap();
        let chunk = vec![0u8; 1 << 16];
        while sender.write(&chunk).is_ok() {}
        let option = libc::linger {
            l_onoff: 1,
            l_linger: linger.as_secs() as libc::c_int,
        };
        // SAFETY: `option` is a live `struct linger` and its size is passed as the length;
        // setsockopt only reads it.
        let ret = unsafe {
            libc::setsockopt(
                sender.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_LINGER,
                ptr::from_ref(&option).cast(),
                size_of::<libc::linger>() as libc::socklen_t,
            )
        };
        assert_eq!(ret, 0, "SO_LINGER: {}", io::Error::last_os_error());
        (sender.into(), reader)
    }

    /// Whether this process runs under valgrind, which runs one thread at a time and holds
    /// the turn through a close that blocks: a lingering close on another thread then
    /// stalls the test's thread too, and timings say nothing.
    pub fn under_valgrind() -> bool {
        std::env::var_os("LD_PRELOAD")
            .is_some_and(|preload| preload.to_string_lossy().contains("vgpreload"))
    }
}

#[cfg(test)]
mod tests {
    use std::fs::File;
    use std::io::{Read, Write};
    use std::os::fd::AsFd;
    use std::os::unix::net::UnixStream;

    use super::*;

    const LEN: usize = 4096;

    fn write_byte(mapping: &Mapping, offset: usize, value: u8) {
        assert!(offset < mapping.len());
        // SAFETY: `offset` is inside the live mapping; nothing else accesses it concurrently.
        unsafe { mapping.as_ptr().add(offset).write_volatile(value) }
    }

    fn read_byte(mapping: &Mapping, offset: usize) -> u8 {
        assert!(offset < mapping.len());
        // SAFETY: `offset` is inside the live mapping; nothing else accesses it concurrently.
        unsafe { mapping.as_ptr().add(offset).read_volatile() }
    }

    /// A memfd of `len` bytes with the given seals, made directly with libc.
    fn memfd_with_seals(len: usize, seals: c_int) -> OwnedFd {
        let fd = memfd_create(c"unsealed", libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING).unwrap();
        ftruncate(fd.as_fd(), len as libc::off_t).unwrap();
        if seals != 0 {
            fcntl_int(fd.as_fd(), libc::F_ADD_SEALS, seals).unwrap();
        }
        fd
    }

    /// A non-blocking pipe: (read end, write end).
    fn pipe() -> (File, OwnedFd) {
        let mut fds = [0 as c_int; 2];
        // SAFETY: `fds` is valid for writes of two c_ints, which pipe2 fills on success.
        cvt(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) }).unwrap();
        // SAFETY: pipe2 succeeded, so both are new descriptors that nothing else owns.
        unsafe { (File::from(adopt_new_fd(fds[0])), adopt_new_fd(fds[1])) }
    }

    /// True if every write end of the pipe has been closed (a read sees end of file).
    fn all_writers_closed(read_end: &mut File) -> bool {
        let mut byte = [0u8; 1];
        match read_end.read(&mut byte) {
            Ok(0) => true,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => false,
            other => panic!("unexpected pipe read result {other:?}"),
        }
    }

    /// [`all_writers_closed`], waiting up to 5 s for the closer thread to close them.
    fn all_writers_closed_soon(read_end: &mut File) -> bool {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while !all_writers_closed(read_end) {
            if std::time::Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        true
    }

    fn is_cloexec(fd: BorrowedFd<'_>) -> bool {
        fcntl_int(fd, libc::F_GETFD, 0).unwrap() & libc::FD_CLOEXEC != 0
    }

    #[test]
    fn two_mappings_of_one_memfd_share_memory() {
        let fd = create_sealed_memfd("lanner-test", LEN).unwrap();
        assert!(is_cloexec(fd.as_fd()));
        assert_eq!(file_size(fd.as_fd()).unwrap(), LEN as u64);
        let a = Mapping::map_shared(fd.as_fd(), LEN).unwrap();
        let b = Mapping::map_shared(fd.as_fd(), LEN).unwrap();
        assert_eq!((a.len(), a.is_empty()), (LEN, false));
        assert_ne!(a.as_ptr(), b.as_ptr());
        for offset in [0, 1, 2047, LEN - 1] {
            write_byte(&a, offset, offset as u8 ^ 0x5a);
        }
        for offset in [0, 1, 2047, LEN - 1] {
            assert_eq!(read_byte(&b, offset), offset as u8 ^ 0x5a);
        }
        drop(a);
        write_byte(&b, 7, 42);
        assert_eq!(read_byte(&b, 7), 42);
    }

    #[test]
    fn mapping_is_send_and_sync() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<Mapping>();
    }

    #[test]
    fn map_shared_rejects_zero_length_and_short_files() {
        let fd = create_sealed_memfd("lanner-test", LEN).unwrap();
        let err = Mapping::map_shared(fd.as_fd(), 0).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
        let err = Mapping::map_shared(fd.as_fd(), LEN + 1).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
        assert!(err.to_string().contains("only 4096 bytes"), "{err}");
    }

    /// Pages of `mapping` resident in memory (`mincore`).
    fn resident_pages(mapping: &Mapping) -> usize {
        let page = 4096;
        let mut flags = vec![0u8; mapping.len().div_ceil(page)];
        // SAFETY: the range is exactly the live, page-aligned mapping; `flags` has one byte
        // per page of it, which is what mincore writes.
        let ret = unsafe {
            libc::mincore(
                mapping.as_ptr().cast::<c_void>(),
                mapping.len(),
                flags.as_mut_ptr(),
            )
        };
        assert_eq!(ret, 0, "mincore: {}", io::Error::last_os_error());
        flags.iter().filter(|&&flag| flag & 1 != 0).count()
    }

    #[test]
    fn populating_a_mapping_makes_every_page_resident() {
        let len = 64 * 4096;
        let fd = create_sealed_memfd("lanner-test", len).unwrap();
        let mapping = Mapping::map_shared(fd.as_fd(), len).unwrap();
        assert_eq!(
            resident_pages(&mapping),
            0,
            "a fresh memfd has no pages yet"
        );
        mapping.populate().unwrap();
        assert_eq!(resident_pages(&mapping), 64);
        // The other side's mapping of the same file finds the pages there.
        let other = Mapping::map_shared(fd.as_fd(), len).unwrap();
        assert_eq!(resident_pages(&other), 64);
        other.populate().unwrap();
    }

    #[test]
    fn released_pages_read_as_zeros_and_leave_the_file_to_its_other_mappings() {
        let len = 16 * 4096;
        let fd = create_sealed_memfd("lanner-test", len).unwrap();
        let mapping = Mapping::map_shared(fd.as_fd(), len).unwrap();
        mapping.populate().unwrap();
        write_byte(&mapping, 5, 9);
        let other = Mapping::map_shared(fd.as_fd(), len).unwrap();
        let address = mapping.as_ptr();
        // SAFETY: nothing writes to `mapping` from here on; it is only read below.
        unsafe { mapping.release_pages() };
        assert_eq!(mapping.as_ptr(), address, "the addresses stay mapped");
        assert_eq!(resident_pages(&mapping), 0, "no page is held any more");
        assert_eq!(read_byte(&mapping, 5), 0);
        assert_eq!(read_byte(&mapping, len - 1), 0);
        assert_eq!(read_byte(&other, 5), 9, "the file keeps its contents");
        assert_eq!(resident_pages(&other), 16);
        drop(mapping);
        drop(other);
    }

    #[test]
    fn a_range_a_failed_release_left_unmapped_is_mapped_to_zeros_again() {
        let len = 16 * 4096;
        let fd = create_sealed_memfd("lanner-test", len).unwrap();
        let mapping = Mapping::map_shared(fd.as_fd(), len).unwrap();
        write_byte(&mapping, 5, 9);
        // What Linux leaves when MAP_FIXED fails after clearing the old mapping: a gap.
        // SAFETY: nothing reads or writes the range until it is mapped again below.
        assert_eq!(unsafe { libc::munmap(mapping.as_ptr().cast(), len) }, 0);
        let error = io::Error::from_raw_os_error(libc::ENOMEM);
        // SAFETY: nothing writes to `mapping` from here on; it is only read below.
        unsafe { mapping.refill_after_failed_release(&error) };
        assert_eq!(resident_pages(&mapping), 0, "mapped again, holding no page");
        assert_eq!(read_byte(&mapping, 5), 0, "the range is zeros");
        assert_eq!(read_byte(&mapping, len - 1), 0);
        drop(mapping);
    }

    #[test]
    fn sealed_memfd_cannot_change_size() {
        let fd = create_sealed_memfd("lanner-test", LEN).unwrap();
        for size in [0, LEN as libc::off_t - 1, LEN as libc::off_t + 1] {
            let err = ftruncate(fd.as_fd(), size).unwrap_err();
            assert_eq!(err.raw_os_error(), Some(libc::EPERM));
        }
        let err = fcntl_int(fd.as_fd(), libc::F_ADD_SEALS, libc::F_SEAL_WRITE).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EPERM));
        assert_eq!(file_size(fd.as_fd()).unwrap(), LEN as u64);
    }

    #[test]
    fn create_sealed_memfd_rejects_nul_in_name() {
        let err = create_sealed_memfd("a\0b", LEN).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
    }

    #[test]
    fn check_peer_memfd_accepts_sealed_memfd_of_exact_size() {
        let fd = create_sealed_memfd("lanner-test", LEN).unwrap();
        check_peer_memfd(fd.as_fd(), LEN).unwrap();
    }

    #[test]
    fn check_peer_memfd_rejects_wrong_size() {
        let fd = create_sealed_memfd("lanner-test", LEN).unwrap();
        for len in [LEN - 1, LEN + 1, 2 * LEN] {
            let err = check_peer_memfd(fd.as_fd(), len).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::InvalidData);
            assert!(err.to_string().contains("expected exactly"), "{err}");
        }
    }

    #[test]
    fn check_peer_memfd_rejects_missing_seals() {
        let cases = [
            (0, "F_SEAL_SHRINK missing"),
            (
                libc::F_SEAL_GROW | libc::F_SEAL_SEAL,
                "F_SEAL_SHRINK missing",
            ),
            (
                libc::F_SEAL_SHRINK | libc::F_SEAL_GROW,
                "F_SEAL_SEAL missing",
            ),
            (
                libc::F_SEAL_SHRINK | libc::F_SEAL_SEAL | libc::F_SEAL_WRITE,
                "sealed against writing",
            ),
        ];
        for (seals, expected) in cases {
            let fd = memfd_with_seals(LEN, seals);
            let err = check_peer_memfd(fd.as_fd(), LEN).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::InvalidData);
            assert!(
                err.to_string().contains(expected),
                "seals {seals:#x}: {err}"
            );
        }
        // Without MFD_ALLOW_SEALING the kernel presets F_SEAL_SEAL and nothing else.
        let fd = memfd_create(c"no-sealing", libc::MFD_CLOEXEC).unwrap();
        ftruncate(fd.as_fd(), LEN as libc::off_t).unwrap();
        let err = check_peer_memfd(fd.as_fd(), LEN).unwrap_err();
        assert!(err.to_string().contains("F_SEAL_SHRINK missing"), "{err}");
    }

    #[test]
    fn check_peer_memfd_rejects_a_hugetlbfs_memfd() {
        // Sealed and of the right size, like an honest region; creating it and sizing it
        // takes no page from the huge-page pool (none is touched).
        let len = 2 << 20;
        let flags = libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING | libc::MFD_HUGETLB;
        let fd = match memfd_create(c"huge", flags) {
            Ok(fd) => fd,
            // A kernel without hugetlbfs cannot be handed such a memfd either.
            Err(e) => return eprintln!("no hugetlbfs memfd here ({e}); nothing to refuse"),
        };
        ftruncate(fd.as_fd(), len as libc::off_t).unwrap();
        let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
        fcntl_int(fd.as_fd(), libc::F_ADD_SEALS, seals).unwrap();
        let err = check_peer_memfd(fd.as_fd(), len).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
        assert!(err.to_string().contains("not on tmpfs"), "{err}");
    }

    #[test]
    fn check_peer_memfd_rejects_regular_file() {
        let path = std::env::temp_dir().join(format!(
            "lanner-shm-test-{}-{:?}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
        ));
        let result = File::create_new(&path).and_then(|mut file| {
            file.write_all(&[0; LEN])?;
            Ok(check_peer_memfd(file.as_fd(), LEN))
        });
        std::fs::remove_file(&path).unwrap();
        let err = result.unwrap().unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
    }

    #[test]
    fn passed_memfd_and_doorbells_work_on_the_other_side() {
        let (a, b) = UnixStream::pair().unwrap();
        let memfd = create_sealed_memfd("lanner-test", LEN).unwrap();
        let mine = Mapping::map_shared(memfd.as_fd(), LEN).unwrap();
        let (near, far) = UnixStream::pair().unwrap();
        let fds = [memfd.as_fd(), far.as_fd(), far.as_fd()];
        assert_eq!(send_with_fds(a.as_fd(), b"hello", &fds).unwrap(), 5);

        let mut buf = [0u8; 16];
        let (read, received) = recv_with_fds(b.as_fd(), &mut buf).unwrap();
        assert_eq!(&buf[..read], b"hello");
        assert_eq!(received.len(), 3);
        assert!(received.iter().all(|fd| is_cloexec(fd.as_fd())));

        let mut received = received.into_iter();
        let their_memfd = received.next().unwrap();
        check_peer_memfd(their_memfd.as_fd(), LEN).unwrap();
        let theirs = Mapping::map_shared(their_memfd.as_fd(), LEN).unwrap();
        write_byte(&theirs, 100, 0xab);
        assert_eq!(read_byte(&mine, 100), 0xab);

        for (i, fd) in received.enumerate() {
            let socket = UnixStream::from(fd);
            (&socket).write_all(&[i as u8]).unwrap();
            let mut byte = [0u8; 1];
            (&near).read_exact(&mut byte).unwrap();
            assert_eq!(byte[0], i as u8);
        }
    }

    #[test]
    fn data_without_descriptors_arrives_alone() {
        let (a, b) = UnixStream::pair().unwrap();
        assert_eq!(send_with_fds(a.as_fd(), b"xy", &[]).unwrap(), 2);
        let mut buf = [0u8; 4];
        let (read, fds) = recv_with_fds(b.as_fd(), &mut buf).unwrap();
        assert_eq!((&buf[..read], fds.len()), (&b"xy"[..], 0));
    }

    #[test]
    fn send_with_fds_rejects_empty_data_and_too_many_fds() {
        let (a, _b) = UnixStream::pair().unwrap();
        let err = send_with_fds(a.as_fd(), b"", &[]).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
        let fds = [a.as_fd(); MAX_PASSED_FDS + 1];
        let err = send_with_fds(a.as_fd(), b"x", &fds).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
        // The maximum itself is fine.
        send_with_fds(a.as_fd(), b"x", &fds[..MAX_PASSED_FDS]).unwrap();
    }

    #[test]
    fn recv_with_fds_sees_end_of_file_and_rejects_empty_buffer() {
        let (a, b) = UnixStream::pair().unwrap();
        let err = recv_with_fds(b.as_fd(), &mut []).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
        drop(a);
        let mut buf = [0u8; 4];
        let (read, fds) = recv_with_fds(b.as_fd(), &mut buf).unwrap();
        assert_eq!((read, fds.len()), (0, 0));
    }

    #[test]
    fn would_block_passes_through_untouched() {
        let (a, b) = UnixStream::pair().unwrap();
        a.set_nonblocking(true).unwrap();
        b.set_nonblocking(true).unwrap();
        let err = recv_with_fds(b.as_fd(), &mut [0u8; 4]).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EAGAIN));
        // Fill the socket, then a send with descriptors would block.
        let chunk = [0u8; 4096];
        while (&a).write(&chunk).is_ok() {}
        let err = send_with_fds(a.as_fd(), b"x", &[b.as_fd()]).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EAGAIN));
    }

    #[test]
    fn truncated_descriptors_are_all_closed() {
        let (a, b) = UnixStream::pair().unwrap();
        let (mut read_end, write_end) = pipe();
        // Three copies of the write end; room for only two (CMSG_SPACE of one fd holds two).
        let fds = [write_end.as_fd(); 3];
        send_with_fds(a.as_fd(), b"x", &fds).unwrap();
        drop(write_end);
        assert!(!all_writers_closed(&mut read_end), "copies are in flight");
        let err = recv_with_fd_room(b.as_fd(), &mut [0u8; 4], 1, 0).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
        assert!(err.to_string().contains("truncated"), "{err}");
        assert!(
            err.to_string().contains("closed the 2 that arrived"),
            "{err}"
        );
        assert!(
            all_writers_closed_soon(&mut read_end),
            "a received copy leaked"
        );
    }

    #[test]
    fn credentials_messages_are_rejected_and_descriptors_closed() {
        // With SO_PASSCRED the kernel adds an SCM_CREDENTIALS message (a peer sharing the
        // socket could turn it on): the call must fail and nothing may stay open.
        let (a, b) = UnixStream::pair().unwrap();
        let on: c_int = 1;
        // SAFETY: `on` is a live c_int and its size is passed as the option length.
        let ret = unsafe {
            libc::setsockopt(
                b.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_PASSCRED,
                ptr::from_ref(&on).cast::<c_void>(),
                size_of::<c_int>() as libc::socklen_t,
            )
        };
        cvt(ret).unwrap();
        let (mut read_end, write_end) = pipe();
        send_with_fds(a.as_fd(), b"x", &[write_end.as_fd()]).unwrap();
        drop(write_end);
        let err = recv_with_fds(b.as_fd(), &mut [0u8; 4]).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
        assert!(err.to_string().contains("other than SCM_RIGHTS"), "{err}");
        assert!(
            all_writers_closed_soon(&mut read_end),
            "a received copy leaked"
        );
    }

    #[test]
    fn as_many_descriptors_as_the_kernel_passes_are_received() {
        // The kernel passes up to SCM_MAX_FD with one message; every one must land in our
        // table (one that finds no room is closed inside the kernel, on this thread).
        let (a, b) = UnixStream::pair().unwrap();
        let (mut read_end, write_end) = pipe();
        let fds = [write_end.as_fd(); SCM_MAX_FD];
        send_with_fd_limit(a.as_fd(), b"x", &fds, SCM_MAX_FD).unwrap();
        drop(write_end);
        let (read, fds) = recv_with_fds(b.as_fd(), &mut [0u8; 4]).unwrap();
        assert_eq!((read, fds.len()), (1, SCM_MAX_FD));
        drop(fds);
        assert!(all_writers_closed(&mut read_end), "a received copy leaked");
    }

    #[test]
    fn recv_nonblocking_refuses_descriptors_and_closes_them_on_the_closer_thread() {
        let (a, b) = UnixStream::pair().unwrap();
        let (passed, witness) = UnixStream::pair().unwrap();
        send_with_fds(a.as_fd(), b"x", &[passed.as_fd()]).unwrap();
        drop(passed);
        let paused = crate::closer::pause();
        let err = recv_nonblocking(b.as_fd(), &mut [0u8; 4]).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
        assert!(err.to_string().contains("1 file descriptor(s)"), "{err}");
        // Not closed on this thread (a plain recv has the kernel close it as it returns)...
        assert!(
            !crate::tests::closed_soon_within(&witness, 20),
            "the passed descriptor was closed by the receive"
        );
        drop(paused);
        // ... but on the closer thread.
        assert!(
            crate::tests::closed_soon(&witness),
            "the passed descriptor leaked"
        );
        // Bytes alone still come through.
        (&a).write_all(b"yz").unwrap();
        assert_eq!(recv_nonblocking(b.as_fd(), &mut [0u8; 4]).unwrap(), 2);
        let err = recv_nonblocking(b.as_fd(), &mut [0u8; 4]).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::WouldBlock);
    }

    #[test]
    fn recv_nonblocking_returns_at_once_when_passed_a_lingering_socket() {
        // The close of this socket blocks for about 2 s; a plain recv would take that long.
        let (a, b) = UnixStream::pair().unwrap();
        let (lingering, reader) = testing::lingering_tcp_socket(std::time::Duration::from_secs(2));
        send_with_fds(a.as_fd(), b"x", &[lingering.as_fd()]).unwrap();
        drop(lingering);
        // Kept from the closer thread until the close no longer lingers: under valgrind,
        // which runs one thread at a time, its blocked close would stall this one too.
        let paused = crate::closer::pause();
        let started = std::time::Instant::now();
        let err = recv_nonblocking(b.as_fd(), &mut [0u8; 4]).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
        let took = started.elapsed();
        assert!(
            took < std::time::Duration::from_millis(500),
            "the receive took {took:?}"
        );
        // The reader's close resets the connection: the lingering close returns at once.
        drop(reader);
        drop(paused);
    }

    #[test]
    fn refusing_descriptors_makes_the_sender_fail_with_eperm() {
        let (a, b) = UnixStream::pair().unwrap();
        if !refuse_passed_descriptors(b.as_fd()).unwrap() {
            return eprintln!("no SO_PASSRIGHTS on this kernel (before Linux 6.16)");
        }
        let err = send_with_fds(a.as_fd(), b"x", &[a.as_fd()]).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::PermissionDenied, "{err}");
        // Bytes alone still pass, and the other direction still takes descriptors.
        send_with_fds(a.as_fd(), b"x", &[]).unwrap();
        assert_eq!(recv_nonblocking(b.as_fd(), &mut [0u8; 4]).unwrap(), 1);
        send_with_fds(b.as_fd(), b"x", &[b.as_fd()]).unwrap();
        assert_eq!(recv_with_fds(a.as_fd(), &mut [0u8; 4]).unwrap().1.len(), 1);
    }

    #[test]
    fn socket_domain_and_type_tell_unix_streams_from_others() {
        let (a, _b) = UnixStream::pair().unwrap();
        assert_eq!(
            socket_domain_and_type(a.as_fd()).unwrap(),
            (libc::AF_UNIX, libc::SOCK_STREAM)
        );
        let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        assert_eq!(
            socket_domain_and_type(udp.as_fd()).unwrap(),
            (libc::AF_INET, libc::SOCK_DGRAM)
        );
        let fd = create_sealed_memfd("lanner-test", LEN).unwrap();
        let err = socket_domain_and_type(fd.as_fd()).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ENOTSOCK), "{err}");
    }

    #[test]
    fn unread_by_peer_counts_until_the_peer_reads_or_closes() {
        let (ours, theirs) = UnixStream::pair().unwrap();
        assert_eq!(unread_by_peer(ours.as_fd()).unwrap(), 0);
        let (passed, _writer) = pipe();
        send_with_fds(ours.as_fd(), b"offer", &[passed.as_fd()]).unwrap();
        let one = unread_by_peer(ours.as_fd()).unwrap();
        assert!(one > 0, "an unread message counts");
        send_with_fds(ours.as_fd(), b"x", &[]).unwrap();
        assert!(unread_by_peer(ours.as_fd()).unwrap() > one);
        // Read in turn: not taken until both are.
        let (len, fds) = recv_with_fds(theirs.as_fd(), &mut [0; 5]).unwrap();
        assert_eq!((len, fds.len()), (5, 1));
        assert!(unread_by_peer(ours.as_fd()).unwrap() > 0);
        recv_with_fds(theirs.as_fd(), &mut [0; 1]).unwrap();
        assert_eq!(unread_by_peer(ours.as_fd()).unwrap(), 0);
        // Not read, but the peer closed its end, after ours was shut down.
        let (ours, theirs) = UnixStream::pair().unwrap();
        send_with_fds(ours.as_fd(), b"offer", &[passed.as_fd()]).unwrap();
        shutdown(ours.as_fd()).unwrap();
        assert!(
            unread_by_peer(ours.as_fd()).unwrap() > 0,
            "shutdown releases nothing"
        );
        drop(theirs);
        assert_eq!(unread_by_peer(ours.as_fd()).unwrap(), 0);
    }

    #[test]
    fn the_open_files_limit_covers_the_descriptors_open_now() {
        let limit = open_files_limit().unwrap();
        let open = std::fs::read_dir("/proc/self/fd").unwrap().count() as u64;
        assert!(limit >= open, "{limit} < {open}");
    }

    #[test]
    fn peer_credentials_name_this_process() {
        let (a, _b) = UnixStream::pair().unwrap();
        let creds = peer_credentials(a.as_fd()).unwrap();
        assert_eq!(creds, process_credentials());
        // SAFETY: getuid and getgid take no arguments and cannot fail.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        assert_eq!(
            creds,
            PeerCredentials {
                pid: std::process::id() as i32,
                uid,
                gid
            }
        );
    }

    #[test]
    fn peer_credentials_fail_on_a_non_socket() {
        let fd = create_sealed_memfd("lanner-test", LEN).unwrap();
        assert!(peer_credentials(fd.as_fd()).is_err());
    }
}
