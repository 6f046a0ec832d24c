//! Which granules of a loan area are in use: one bit each, first fit.

/// A set of `len` granules, each free or used.
#[derive(Debug, Clone)]
pub(crate) struct Bitmap {
    words: Vec<u64>,
    len: usize,
    /// No word before this one has a free granule: searches start here.
    first_not_full: usize,
    /// Granules in use.
    used: usize,
}

impl Bitmap {
    /// `len` granules, all free.
    pub(crate) fn new(len: usize) -> Bitmap {
        Bitmap {
            words: vec![0; len.div_ceil(64)],
            len,
            first_not_full: 0,
            used: 0,
        }
    }

    /// The first run of `count` free granules (lowest index first: recently freed blocks,
    /// likely still cached, are reused before cold ones), if there is one. Walks whole
    /// words: a 64 KiB loan in 256-byte granules looks at a handful of them, not 256 bits.
    pub(crate) fn find_free_run(&self, count: usize) -> Option<usize> {
        if count == 0 || count > self.len {
            return None;
        }
        // The run being measured starts at `start`; everything from `start` to `index`
        // is free.
        let mut start = self.first_not_full * 64;
        let mut index = start;
        while index < self.len {
            let offset = index % 64;
            // The bits from `index` to the end of its word (bits past `len` are never set).
            let rest = self.words[index / 64] >> offset;
            if rest == 0 {
                index += 64 - offset;
            } else {
                let used = index + rest.trailing_zeros() as usize;
                if used >= self.len {
                    break;
                }
                if used - start >= count {
                    return Some(start);
                }
                index = used + (rest >> (used - index)).trailing_ones() as usize;
                start = index;
            }
            if index.min(self.len) - start >= count {
                return Some(start);
            }
        }
        (self.len.saturating_sub(start) >= count).then_some(start)
    }

    /// Marks `start..start + count` used (`true`) or free, a word at a time. The range
    /// must be all free (to mark used) or all used (to mark free).
    pub(crate) fn set(&mut self, start: usize, count: usize, used: bool) {
        if used {
            self.used += count;
        } else {
            self.used -= count;
            self.first_not_full = self.first_not_full.min(start / 64);
        }
        let end = start + count;
        let mut index = start;
        while index < end {
            let offset = index % 64;
            let bits = (64 - offset).min(end - index);
            let mask = if bits == 64 {
                u64::MAX
            } else {
                ((1u64 << bits) - 1) << offset
            };
            if used {
                self.words[index / 64] |= mask;
            } else {
                self.words[index / 64] &= !mask;
            }
            index += bits;
        }
        while self.words.get(self.first_not_full) == Some(&u64::MAX) {
            self.first_not_full += 1;
        }
    }

    /// Granules free.
    pub(crate) fn free(&self) -> usize {
        self.len - self.used
    }

    /// Granules in use, counted bit by bit.
    #[cfg(test)]
    pub(crate) fn count_used(&self) -> usize {
        let counted = self.words.iter().map(|w| w.count_ones() as usize).sum();
        assert_eq!(counted, self.used, "the running count agrees");
        counted
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn runs_are_found_first_fit_and_across_words() {
        let mut bitmap = Bitmap::new(200);
        assert_eq!(bitmap.find_free_run(200), Some(0));
        assert_eq!(bitmap.find_free_run(201), None);
        assert_eq!(bitmap.find_free_run(0), None);
        bitmap.set(0, 70, true);
        assert_eq!(bitmap.find_free_run(1), Some(70));
        bitmap.set(100, 1, true);
        assert_eq!(bitmap.find_free_run(30), Some(70));
        assert_eq!(bitmap.find_free_run(31), Some(101));
        assert_eq!(bitmap.find_free_run(100), None);
        bitmap.set(0, 70, false);
        assert_eq!(bitmap.find_free_run(100), Some(0));
        assert_eq!(bitmap.count_used(), 1);
    }

    proptest! {
        /// Against a model: a run found is free and the first one; none found means none
        /// exists.
        #[test]
        fn find_free_run_matches_a_model(
            len in 1usize..300,
            ops in proptest::collection::vec((any::<bool>(), 0usize..300, 1usize..80), 0..40),
            wanted in 1usize..100,
        ) {
            let mut bitmap = Bitmap::new(len);
            let mut model = vec![false; len];
            for (used, start, count) in ops {
                let start = start % len;
                let count = count.min(len - start);
                // One granule at a time, and only those that change: `set` takes ranges
                // that are all free or all used.
                for (index, granule) in model.iter_mut().enumerate().skip(start).take(count) {
                    if *granule != used {
                        bitmap.set(index, 1, used);
                        *granule = used;
                    }
                }
            }
            prop_assert_eq!(bitmap.count_used(), model.iter().filter(|u| **u).count());
            let first = (0..len.saturating_sub(wanted - 1))
                .find(|&s| s + wanted <= len && model[s..s + wanted].iter().all(|u| !u));
            prop_assert_eq!(bitmap.find_free_run(wanted), first);
        }
    }
}
