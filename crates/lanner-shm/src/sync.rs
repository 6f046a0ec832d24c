//! Atomics and locks, swapped for loom's checked versions under `--cfg loom`.
//!
//! Reference counts (`Arc`) stay std's: they are not part of the ring protocol that loom
//! checks, and std's `Arc` coerces to trait objects.

pub(crate) use std::sync::Arc;

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
#[cfg(loom)]
pub(crate) use loom::sync::{Mutex, MutexGuard};

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
#[cfg(not(loom))]
pub(crate) use std::sync::{Mutex, MutexGuard};
