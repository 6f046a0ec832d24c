//! Recycled buffers for messages' fixed header and inline data.
//!
//! Every request and every response needs one small buffer (the fixed header plus the
//! inline arguments or result), allocated when the message is built and freed once it is
//! written. A call therefore paid a `malloc` and a `free` on each side. Written buffers go
//! back to a short per-thread list instead, and the next message built on that thread
//! takes one from there: a thread-local access instead of the allocator. Buffers that grew
//! past [`MAX_POOLED`] (large inline data) are freed as before, and the list is bounded,
//! so a thread that writes what others built holds at most [`POOL_LEN`] buffers.

use std::cell::RefCell;

use bytes::BytesMut;

/// Capacity of a fresh buffer: enough for the fixed header and a handful of small
/// arguments without reallocating.
pub(crate) const INITIAL_CAPACITY: usize = 128;

/// Buffers with more capacity than this are not kept.
const MAX_POOLED: usize = 1024;

/// Buffers kept per thread, at most.
const POOL_LEN: usize = 16;

thread_local! {
    static POOL: RefCell<Vec<BytesMut>> = const { RefCell::new(Vec::new()) };
}

/// An empty buffer with room for at least [`INITIAL_CAPACITY`] bytes.
pub(crate) fn take() -> BytesMut {
    POOL.try_with(|pool| pool.borrow_mut().pop())
        .ok()
        .flatten()
        .unwrap_or_else(|| BytesMut::with_capacity(INITIAL_CAPACITY))
}

/// Gives back a buffer whose contents are written (and no longer needed). Kept if it has
/// room for a fresh message and is not too large; freed otherwise.
pub(crate) fn give_back(mut buffer: BytesMut) {
    buffer.clear();
    // Kept if it has room for a fresh message: what is left after its written part, or
    // else its whole allocation reclaimed from the start (possible only when nothing else
    // shares it). A buffer that grew large is freed.
    if buffer.capacity() > MAX_POOLED || !buffer.try_reclaim(INITIAL_CAPACITY) {
        return;
    }
    // During thread teardown the pool may be gone: the buffer is then simply freed.
    let _ = POOL.try_with(|pool| {
        let mut pool = pool.borrow_mut();
        if pool.len() < POOL_LEN {
            pool.push(buffer);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_given_back_buffer_is_reused_from_its_start() {
        let mut buffer = take();
        buffer.extend_from_slice(&[1; 100]);
        let address = buffer.as_ptr();
        // Partly consumed, as a writer leaves it.
        bytes::Buf::advance(&mut buffer, 60);
        give_back(buffer);
        let again = take();
        assert_eq!(again.as_ptr(), address);
        assert!(again.is_empty());
        assert!(again.capacity() >= INITIAL_CAPACITY);
    }

    #[test]
    fn shared_or_large_buffers_are_not_kept() {
        let mut large = BytesMut::with_capacity(MAX_POOLED * 2);
        large.extend_from_slice(b"x");
        let large_address = large.as_ptr();
        give_back(large);

        let mut shared = BytesMut::with_capacity(INITIAL_CAPACITY);
        shared.extend_from_slice(&[2; 64]);
        let shared_address = shared.as_ptr();
        let other_half = shared.split_off(32);
        give_back(shared);

        for _ in 0..POOL_LEN + 1 {
            let buffer = take();
            assert_ne!(buffer.as_ptr(), large_address);
            assert_ne!(buffer.as_ptr(), shared_address);
        }
        assert_eq!(&other_half[..], &[2; 32]);
    }

    #[test]
    fn the_pool_is_bounded() {
        let buffers: Vec<_> = (0..POOL_LEN * 2)
            .map(|_| BytesMut::with_capacity(INITIAL_CAPACITY))
            .collect();
        for buffer in buffers {
            give_back(buffer);
        }
        POOL.with(|pool| assert!(pool.borrow().len() <= POOL_LEN));
    }
}
