//! Which granules of a loan area are in use: one bit each, first fit.

/// A set of `len` granules, each free or used.
#[derive(Debug, Clone)]
pub(crate) struct Bitmap {
    words: Vec<u64>,
    len: usize,
}

impl Bitmap {
    /// `len` granules, all free.
    pub(crate) fn new(len: usize) -> Bitmap {
        Bitmap {
            words: vec![0; len.div_ceil(64)],
            len,
        }
    }

    fn used(&self, index: usize) -> bool {
        self.words[index / 64] & (1 << (index % 64)) != 0
    }

    /// The first run of `count` free granules (lowest index first: recently freed blocks,
    /// likely still cached, are reused before cold ones), if there is one.
    pub(crate) fn find_free_run(&self, count: usize) -> Option<usize> {
        if count == 0 || count > self.len {
            return None;
        }
        let mut start = 0;
        while start + count <= self.len {
            // Skip whole words in use.
            if start % 64 == 0 && self.words[start / 64] == u64::MAX {
                start += 64;
                continue;
            }
            match (start..start + count).find(|&index| self.used(index)) {
                None => return Some(start),
                Some(used) => start = used + 1,
            }
        }
        None
    }

    /// Marks `start..start + count` used (`true`) or free.
    pub(crate) fn set(&mut self, start: usize, count: usize, used: bool) {
        for index in start..start + count {
            let bit = 1u64 << (index % 64);
            if used {
                self.words[index / 64] |= bit;
            } else {
                self.words[index / 64] &= !bit;
            }
        }
    }

    /// Granules in use.
    #[cfg(test)]
    pub(crate) fn count_used(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
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
                bitmap.set(start, count, used);
                model[start..start + count].fill(used);
            }
            let first = (0..len.saturating_sub(wanted - 1))
                .find(|&s| s + wanted <= len && model[s..s + wanted].iter().all(|u| !u));
            prop_assert_eq!(bitmap.find_free_run(wanted), first);
        }
    }
}
