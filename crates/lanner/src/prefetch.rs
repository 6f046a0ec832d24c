//! Asking the cache for a line before it is read.
//!
//! The only unsafe code here is the prefetch instruction itself. It is a hint: it reads
//! nothing in the program's sense, cannot fault, and a line that is not there in time
//! (or an address that is stale, or not mapped at all) costs nothing but the hint.

/// Asks for the cache line holding `address`, to be read soon by this thread. Any
/// address will do, even one that no longer points at anything (see the module docs).
#[inline(always)]
pub(crate) fn prefetch_line(address: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `_mm_prefetch` needs SSE, which every x86_64 CPU has. PREFETCHT0 accesses
    // no memory as far as the program is concerned and never faults, whatever the
    // address.
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(address.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = address;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_address_may_be_asked_for() {
        let line = [7u8; 64];
        prefetch_line(line.as_ptr());
        // Nothing there, and once something was: a hint only, so neither faults.
        prefetch_line(std::ptr::null());
        let gone = Box::new([0u8; 64]);
        let stale = gone.as_ptr();
        drop(gone);
        prefetch_line(stale);
        assert_eq!(line[0], 7);
    }
}
