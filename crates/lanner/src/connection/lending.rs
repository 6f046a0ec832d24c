//! This side's loan area (shared-memory transports: see [`crate::Loan`]), kept until the
//! connection lets go of its transport. The area lies in the connection's shared region,
//! so keeping it for as long as proxies keep an ended connection would keep the region's
//! memory (megabytes) that long.

use std::sync::{Mutex, MutexGuard, PoisonError};

use lanner_shm::LoanArea;

/// The loan area while the transport is held; afterwards, only how many payloads it lent.
pub(super) struct Lending(Mutex<Held>);

struct Held {
    area: Option<LoanArea>,
    /// Payloads lent before the area was let go.
    lent_before_release: u64,
}

impl Lending {
    /// Loans come from `area`, if the transport has one.
    pub(super) fn new(area: Option<LoanArea>) -> Lending {
        Lending(Mutex::new(Held {
            area,
            lent_before_release: 0,
        }))
    }

    fn held(&self) -> MutexGuard<'_, Held> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A buffer of `len` bytes, in the area if it is still held and has room. The area is
    /// taken out of the lock first: a loan in ordinary memory (no area, or no room) is
    /// allocated and zeroed, which concurrent loans need not wait for.
    pub(super) fn loan(&self, len: usize) -> crate::Loan {
        let area = self.held().area.clone();
        crate::Loan::new(area.as_ref(), len)
    }

    /// Payloads sent by reference so far (see [`crate::Traffic::payloads_lent`]).
    pub(super) fn payloads_lent(&self) -> u64 {
        let held = self.held();
        held.area
            .as_ref()
            .map_or(held.lent_before_release, LoanArea::lendings)
    }

    /// Lets go of the area: loans made from now on are ordinary memory. Loans made
    /// before keep their blocks (and the region) until they are dropped.
    pub(super) fn release(&self) {
        let mut held = self.held();
        if let Some(area) = held.area.take() {
            held.lent_before_release = area.lendings();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_released_area_lends_no_more_and_remembers_what_it_lent() {
        let (area, _receiver) = lanner_shm::loans::heap_loans(64 * 1024);
        let lending = Lending::new(Some(area.clone()));
        assert!(lending.loan(4096).is_shared());
        assert_eq!(lending.payloads_lent(), area.lendings());
        let before = lending.payloads_lent();
        lending.release();
        assert!(!lending.loan(4096).is_shared());
        assert_eq!(lending.payloads_lent(), before);
        lending.release();
        assert_eq!(lending.payloads_lent(), before);
    }
}
