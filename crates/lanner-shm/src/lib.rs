//! # lanner-shm: the shared-memory medium
//!
//! Two processes on one host talk through a mapping they share: one
//! single-producer/single-consumer ring of variable-size messages per direction, a
//! doorbell per waiting party, and a loan area per side where payloads are built in place
//! and lent to the peer by reference. Once connected, sending and receiving are plain
//! loads and stores; the kernel is entered only to wake a peer that went to sleep.
//!
//! This crate has no async runtime: it provides the rings ([`ring`]), the loans
//! ([`loans`]), the region layout ([`region`]), doorbells ([`doorbell`]), the offer that
//! hands a region to the peer ([`handoff`]) and the bound on offers clients have not taken
//! yet ([`offers`]), the operating-system plumbing beneath
//! ([`sys`]) and the thread that closes what a peer may have made slow to close
//! ([`closer`]). The `lanner` runtime builds its `shm://` transport on them.
//!
//! ## Trust
//!
//! The peer can write anything into the shared region at any time. Every value read from
//! it is copied out once, then validated; offsets and lengths are bounds-checked against
//! values this side owns; a value is never read twice. The worst a hostile peer can do is
//! break its own connection (a [`RingError`]) or hand us garbage payload bytes.

// The bounds checks on what a peer sends rely on it: record sizes and offsets up to a ring of 2 GiB plus a header are computed in `usize` without
// checked arithmetic, which cannot overflow only with 64 bits. On a narrower target a
// hostile peer could make that arithmetic overflow (a panic, or a wrong bound).
#[cfg(not(target_pointer_width = "64"))]
compile_error!("lanner-shm supports 64-bit targets only (see the comment above this line)");

#[cfg(not(loom))]
pub mod closer;
#[cfg(not(loom))]
pub mod doorbell;
/// The fuzz drivers of the ring's consumer and the loan area's returns (`fuzz/`, and
/// regression tests).
#[cfg(not(loom))]
pub mod fuzzing;
#[cfg(not(loom))]
pub mod handoff;
#[cfg(not(loom))]
pub mod loans;
#[cfg(not(loom))]
pub mod offers;
#[cfg(not(loom))]
pub mod region;
pub mod ring;
#[cfg(not(loom))]
pub mod sys;

#[cfg(not(loom))]
mod area;
#[cfg(not(loom))]
mod bitmap;
#[cfg(not(loom))]
mod blocks;
mod memory;
mod sync;

#[cfg(not(loom))]
pub use loans::{Loan, LoanArea, LoanReceiver};
#[cfg(not(loom))]
pub use region::{Populator, Region, Side};
pub use ring::{Consumer, Producer, Record, Reservation, RingError, Wake};

#[cfg(all(test, not(loom)))]
mod tests;
