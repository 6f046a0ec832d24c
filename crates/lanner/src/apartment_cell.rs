//! State that is not `Sync`, owned by an apartment object.
//!
//! An apartment runs its object's calls one at a time ([`crate::Object::in_apartment`]),
//! so while one of them is polled nothing else of that object runs anywhere. An
//! [`ApartmentCell`] turns that guarantee into plain `&mut` access to state with no lock
//! and no `Sync` bound: a `Vec`, a `RefCell`-style structure, a non-thread-safe library
//! handle that is `Send`. It is the Rust rendering of COM's single-threaded apartment
//! objects, whose state needed no locking: the object itself still satisfies the
//! interface's `Send + Sync` bound (the cell makes it so), and the cell checks, each time
//! it is opened, that the caller is the call its apartment is running.

use std::cell::UnsafeCell;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use crate::context::CallContext;
use crate::error::{Error, ErrorKind};

/// State of an apartment object, reachable only from the call its apartment is running.
///
/// ```
/// use std::sync::Arc;
///
/// use lanner::{ApartmentCell, Object};
///
/// #[lanner::interface]
/// pub trait Log {
///     async fn append(&self, line: String) -> Result<u64, lanner::Error>;
/// }
///
/// #[derive(Default)]
/// struct Journal {
///     lines: ApartmentCell<Vec<String>>, // no Mutex: calls run one at a time
/// }
///
/// impl Log for Journal {
///     async fn append(&self, line: String) -> Result<u64, lanner::Error> {
///         Ok(self.lines.with(|lines| {
///             lines.push(line);
///             lines.len() as u64
///         }))
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lanner::Error> {
/// let server = lanner::Server::new();
/// let journal = Journal::default();
/// server.publish("journal", Object::new(LogStub::new(Arc::new(journal))).in_apartment());
/// # let _listening = server.listen("mem://apartment-cell-doc").await?;
/// # let log: LogProxy = lanner::connect("mem://apartment-cell-doc/journal").await?;
/// # assert_eq!(log.append("first".to_owned()).await?, 1);
/// # assert_eq!(log.append("second".to_owned()).await?, 2);
/// # Ok(())
/// # }
/// ```
///
/// The cell belongs to the first apartment that opens it, until that apartment is gone
/// (its object dropped): then the next apartment to open it takes it (the same state
/// published again in an apartment of its own). Opening it anywhere else (a
/// free-threaded object, another apartment that exists, a task the method spawned,
/// outside any call) is an error, and so is opening it again inside
/// [`ApartmentCell::with`]; the closure cannot hold the state across an `.await`, so every
/// opening sees a consistent state.
/// Outside calls, [`ApartmentCell::get_mut`] and [`ApartmentCell::into_inner`] give it
/// back to whoever owns the cell exclusively.
pub struct ApartmentCell<T> {
    value: UnsafeCell<T>,
    /// The id of the apartment the cell belongs to (0: none yet).
    owner: AtomicUsize,
    /// The state is lent out by [`ApartmentCell::with`] right now.
    lent: AtomicBool,
}

// SAFETY: the value is only reached (a) through `&mut self` or by value, which is
// exclusive, or (b) inside `try_with`, which requires that the calling thread is polling a
// call of the apartment the cell belongs to, and that the value is not lent out already.
// The cell passes to another apartment only once its owner no longer exists, and an
// apartment that no longer exists runs no call (each call it runs holds it), so two
// apartments never reach the value at once. An apartment polls one of its object's calls
// at a time (its busy flag, under its mutex, is held from the start of a call to its end;
// calls the stub refused, and every call while the server is overloaded, are polled apart:
// a generated stub refuses those, a ready answer that runs none of the object's code, but
// a hand-written stub that ignores `route` could run the object's code there), and a call's context is current only on the thread polling it, during
// the poll; so at most one thread at a time passes that check, once. Whatever the
// apartment does, the `lent` flag (an acquire swap, a release store when the borrow ends)
// admits one borrow at a time and orders one borrow's accesses before the next's. The
// value moves between threads from one call to the next, hence `T: Send`.
unsafe impl<T: Send> Sync for ApartmentCell<T> {}

impl<T> ApartmentCell<T> {
    /// A cell holding `value`, not yet owned by an apartment.
    pub const fn new(value: T) -> ApartmentCell<T> {
        ApartmentCell {
            value: UnsafeCell::new(value),
            owner: AtomicUsize::new(0),
            lent: AtomicBool::new(false),
        }
    }

    /// Runs `f` with the state. Panics if called anywhere but in a call run by the
    /// apartment the cell belongs to, or inside another `with` on this cell (see
    /// [`ApartmentCell::try_with`]); a panic in a method is answered to its caller as an
    /// internal error.
    pub fn with<R>(&self, f: impl FnOnce(&mut T) -> R) -> R {
        match self.try_with(f) {
            Ok(result) => result,
            Err(error) => panic!("{}", error.message()),
        }
    }

    /// Runs `f` with the state, or says why it may not: `Internal` outside the
    /// cell's apartment, or inside another `with` on this cell.
    pub fn try_with<R>(&self, f: impl FnOnce(&mut T) -> R) -> Result<R, Error> {
        let here = CallContext::current_apartment().ok_or_else(|| {
            refused("an ApartmentCell is reachable only from a call its apartment object runs (serve the object with Object::in_apartment)")
        })?;
        let mut owner = 0;
        loop {
            match self
                .owner
                .compare_exchange(owner, here, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => break,
                Err(now) if now == here => break,
                // Its apartment is gone: taken over (retried if another took it first).
                Err(now) if !crate::apartment::exists(now) => owner = now,
                Err(_) => {
                    return Err(refused(
                        "this ApartmentCell belongs to another apartment's object",
                    ));
                }
            }
        }
        if self.lent.swap(true, Ordering::Acquire) {
            return Err(refused(
                "this ApartmentCell is already open (ApartmentCell::with inside with)",
            ));
        }
        let _return = Return(&self.lent);
        // SAFETY: see the `Sync` impl: this thread runs the apartment's only running call,
        // and `lent` makes this the only borrow of the value until `_return` drops.
        let value = unsafe { &mut *self.value.get() };
        Ok(f(value))
    }

    /// The state, through exclusive ownership of the cell.
    pub fn get_mut(&mut self) -> &mut T {
        self.value.get_mut()
    }

    /// The state, taking the cell apart.
    pub fn into_inner(self) -> T {
        self.value.into_inner()
    }
}

impl<T: Default> Default for ApartmentCell<T> {
    fn default() -> Self {
        ApartmentCell::new(T::default())
    }
}

impl<T> fmt::Debug for ApartmentCell<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ApartmentCell").finish_non_exhaustive()
    }
}

/// Marks the state returned when a `with` ends, even by a panic.
struct Return<'a>(&'a AtomicBool);

impl Drop for Return<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

fn refused(message: &str) -> Error {
    Error::new(ErrorKind::Internal, message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outside_any_call_the_cell_is_closed_but_its_owner_has_it() {
        let mut cell = ApartmentCell::new(vec![1]);
        let error = cell.try_with(|v| v.len()).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Internal);
        assert!(error.message().contains("in_apartment"), "{error}");
        cell.get_mut().push(2);
        assert_eq!(cell.into_inner(), vec![1, 2]);
    }

    #[test]
    #[should_panic(expected = "reachable only from a call")]
    fn with_panics_outside_its_apartment() {
        ApartmentCell::new(0).with(|v| *v += 1);
    }
}
