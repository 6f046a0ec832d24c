//! Loans: a buffer for a bulk payload, in memory the peer can read in place when the
//! connection allows it.
//!
//! On a `shm://` connection each side has a *loan area* in the memory it shares with the
//! peer. [`crate::ObjectRef::loan`] takes a block there; you fill it, freeze it into
//! [`Bytes`] and pass it as a `Bytes` argument (or return it as a `Bytes` result): the
//! transport then sends only its offset, and the peer's method receives `Bytes` over that
//! very memory. The payload is written once, by you, where it is read: no copy into the
//! ring, none out of it (seed papers: VIA's registered memory, J-RPC's sender-managed
//! areas).
//!
//! ```ignore
//! let mut loan = store.object().loan(chunk.len());
//! file.read_exact(&mut loan)?;            // built in shared memory
//! store.put(key, loan.freeze()).await?;   // sent by reference
//! ```
//!
//! On other transports, on a connection that has ended (it lets go of its area), or when
//! the area has no room (blocks come back once the peer drops what it received and you
//! drop your `Bytes`), a loan is ordinary memory and the payload travels as it would have
//! anyway ([`Loan::is_shared`] tells which). So code that loans works on every transport
//! and never waits for a loan.
//!
//! A block is held until your last clone of the frozen `Bytes` is dropped *and* the peer
//! dropped every copy it received: a peer that keeps payloads for long keeps your area
//! full, and later loans are then ordinary memory. The area is as large as one of the
//! connection's rings ([`crate::ConnectionOptions::shm_ring_size`], 4 MiB by default).
//! The peer maps the whole area: it can read (and, being able to write the shared memory,
//! change) what you write in a loan as soon as you write it, whether you send it or not;
//! as with everything in memory shared with a process, put in a loan only what that
//! process may see. A fresh loan is zeroed, as ordinary memory is (a peer that writes the
//! area could still change it).

use std::ops::{Deref, DerefMut};

use bytes::{Bytes, BytesMut};

/// A buffer for one bulk payload: fill it, then [`Loan::freeze`] it and pass the `Bytes`
/// to a call. See the [module docs](crate::loan).
#[derive(Debug)]
pub struct Loan {
    memory: Memory,
}

#[derive(Debug)]
enum Memory {
    Shared(lanner_shm::Loan),
    Private(BytesMut),
}

impl Loan {
    /// A zeroed loan from `area` if it has room, else ordinary zeroed memory. (A block of
    /// the area holds what its last loan left there: zeroed, as ordinary memory is, so
    /// that a payload filled in part carries no earlier one's bytes.)
    pub(crate) fn new(area: Option<&lanner_shm::LoanArea>, len: usize) -> Loan {
        let memory = match area.and_then(|area| area.loan(len)) {
            Some(mut shared) => {
                shared.as_mut_slice().fill(0);
                Memory::Shared(shared)
            }
            None => Memory::Private(BytesMut::zeroed(len)),
        };
        Loan { memory }
    }

    /// Whether the buffer is in memory shared with the peer (a payload frozen from it is
    /// sent by reference, not copied, unless it is under a kilobyte or the peer holds too
    /// many lendings already).
    pub fn is_shared(&self) -> bool {
        matches!(self.memory, Memory::Shared(_))
    }

    /// The payload, to send (or keep: while any clone lives, a shared block stays taken).
    pub fn freeze(self) -> Bytes {
        match self.memory {
            Memory::Shared(shared) => shared.freeze(),
            Memory::Private(private) => private.freeze(),
        }
    }
}

impl Deref for Loan {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match &self.memory {
            Memory::Shared(shared) => shared.as_ref(),
            Memory::Private(private) => private,
        }
    }
}

impl DerefMut for Loan {
    fn deref_mut(&mut self) -> &mut [u8] {
        match &mut self.memory {
            Memory::Shared(shared) => shared.as_mut_slice(),
            Memory::Private(private) => private,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_an_area_a_loan_is_ordinary_zeroed_memory() {
        let mut loan = Loan::new(None, 5);
        assert!(!loan.is_shared());
        assert_eq!(&loan[..], &[0; 5]);
        loan.copy_from_slice(b"hello");
        assert_eq!(&loan.freeze()[..], b"hello");
    }

    #[test]
    fn a_loan_from_an_area_is_shared_until_the_area_is_full() {
        let (area, _receiver) = lanner_shm::loans::heap_loans(4096);
        let mut first = Loan::new(Some(&area), 4096);
        assert!(first.is_shared());
        first.fill(3);
        let second = Loan::new(Some(&area), 1);
        assert!(!second.is_shared(), "the area is full: ordinary memory");
        let frozen = first.freeze();
        assert!(area.contains(&frozen));
        assert_eq!(&frozen[..], &[3; 4096][..]);
        drop(frozen);
        assert!(Loan::new(Some(&area), 4096).is_shared());
    }
}
