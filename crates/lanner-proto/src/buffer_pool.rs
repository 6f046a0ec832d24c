//! A small per-thread pool of header buffers, so that a message's header and inline data
//! do not cost an allocation and a free per message. A buffer returns to the pool when the
//! frame that owned it has been written and dropped; the pool is bounded, so memory stays
//! bounded whatever the traffic.

use std::cell::RefCell;

use bytes::BytesMut;

/// Capacity of a pooled buffer: a header plus a handful of small arguments.
pub(crate) const BUFFER_CAPACITY: usize = 128;

/// Largest buffer taken back (one that grew for large inline data is freed instead).
const MAX_POOLED_CAPACITY: usize = 4096;

/// Buffers kept per thread.
const POOL_SIZE: usize = 16;

thread_local! {
    static POOL: RefCell<Vec<BytesMut>> = const { RefCell::new(Vec::new()) };
}

/// An empty buffer with room for at least [`BUFFER_CAPACITY`] bytes.
pub(crate) fn take() -> BytesMut {
    POOL.try_with(|pool| pool.borrow_mut().pop())
        .ok()
        .flatten()
        .unwrap_or_else(|| BytesMut::with_capacity(BUFFER_CAPACITY))
}

/// Returns a buffer to this thread's pool (or frees it if the pool is full or the buffer
/// is unusual).
pub(crate) fn give_back(mut buffer: BytesMut) {
    buffer.clear();
    // Reclaims the space in front of a buffer that was advanced while being written.
    if !buffer.try_reclaim(BUFFER_CAPACITY) || buffer.capacity() > MAX_POOLED_CAPACITY {
        return;
    }
    let _ = POOL.try_with(|pool| {
        let mut pool = pool.borrow_mut();
        if pool.len() < POOL_SIZE {
            pool.push(buffer);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::{Buf, BufMut};

    #[test]
    fn a_returned_buffer_is_reused_empty_and_whole() {
        let mut buffer = take();
        buffer.put_slice(&[1; 100]);
        buffer.advance(60);
        let address = buffer.as_ptr() as usize - 60;
        give_back(buffer);
        let again = take();
        assert!(again.is_empty());
        assert!(again.capacity() >= BUFFER_CAPACITY);
        assert_eq!(again.as_ptr() as usize, address);
    }

    #[test]
    fn large_buffers_are_not_kept() {
        let mut big = BytesMut::with_capacity(1 << 20);
        big.put_slice(b"x");
        let address = big.as_ptr() as usize;
        give_back(big);
        assert_ne!(take().as_ptr() as usize, address);
    }
}
