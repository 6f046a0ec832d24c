//! The owner's table of the blocks allocated in its loan area, indexed by first granule:
//! lending and freeing a block each touch one entry, allocating one entry and the block's
//! granules' back pointers (two bytes per granule of the block).

/// One allocated block.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Block {
    /// Its length in granules (an area has at most 16 Ki granules); 0: no block starts
    /// at this entry.
    pub(crate) granules: u16,
    /// This side still holds the loan (or bytes frozen from it).
    pub(crate) held_here: bool,
    /// Lendings of this block not given back yet (at most `MAX_LENT`).
    pub(crate) lent: u16,
}

/// Blocks by first granule.
#[derive(Debug)]
pub(crate) struct Blocks {
    entries: Vec<Block>,
    /// For each granule, the first granule of the block that last held it: where the
    /// block of any granule starts, in one step (see [`Blocks::containing`]). Stale for
    /// granules no block holds now, which the entry it names tells.
    starts: Vec<u16>,
}

impl Blocks {
    /// A table for an area of `granules` granules (at most `u16::MAX`).
    pub(crate) fn new(granules: usize) -> Blocks {
        assert!(granules <= usize::from(u16::MAX), "{granules} granules");
        Blocks {
            entries: vec![Block::default(); granules],
            starts: vec![0; granules],
        }
    }

    /// Records a block of `granules` granules starting at `first` (free until now).
    pub(crate) fn insert(&mut self, first: usize, granules: usize, held_here: bool, lent: u16) {
        let start = u16::try_from(first).expect("an area has at most 16 Ki granules");
        self.entries[first] = Block {
            granules: u16::try_from(granules).expect("an area has at most 16 Ki granules"),
            held_here,
            lent,
        };
        self.starts[first..first + granules].fill(start);
    }

    /// The block starting at `first`, if one does.
    pub(crate) fn get_mut(&mut self, first: usize) -> Option<&mut Block> {
        self.entries
            .get_mut(first)
            .filter(|block| block.granules > 0)
    }

    /// Forgets the block starting at `first`; returns it.
    pub(crate) fn remove(&mut self, first: usize) -> Option<Block> {
        let block = *self.get_mut(first)?;
        self.entries[first] = Block::default();
        Some(block)
    }

    /// The first granule of the block that holds `granule`, if one does. One step, not a
    /// walk back to the block's start: the peer names the granules (returning what it was
    /// lent), and could name the last of a large block a thousand times per collection.
    pub(crate) fn containing(&self, granule: usize) -> Option<usize> {
        let first = usize::from(*self.starts.get(granule)?);
        let block = self.entries[first];
        // A granule whose block was freed names a start where no block, or another block
        // that does not reach it, may start now.
        (block.granules > 0 && granule < first + usize::from(block.granules)).then_some(first)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_are_found_by_any_of_their_granules() {
        let mut blocks = Blocks::new(100);
        blocks.insert(10, 5, true, 0);
        blocks.insert(15, 1, false, 1);
        assert_eq!(blocks.containing(9), None);
        assert_eq!(blocks.containing(10), Some(10));
        assert_eq!(blocks.containing(14), Some(10));
        assert_eq!(blocks.containing(15), Some(15));
        assert_eq!(blocks.containing(16), None);
        assert_eq!(blocks.containing(1000), None);
        assert_eq!(blocks.get_mut(11), None);
        assert_eq!(blocks.remove(10).map(|b| b.granules), Some(5));
        assert_eq!(blocks.containing(12), None);
        assert_eq!(blocks.remove(10), None);
    }

    #[test]
    fn granules_of_freed_blocks_name_no_block() {
        let mut blocks = Blocks::new(100);
        blocks.insert(0, 100, true, 0);
        assert_eq!(blocks.containing(99), Some(0));
        assert!(blocks.remove(0).is_some());
        assert_eq!(blocks.containing(99), None);
        // A shorter block where the freed one started, and one in its middle.
        blocks.insert(0, 10, true, 0);
        blocks.insert(50, 10, false, 1);
        assert_eq!(blocks.containing(5), Some(0));
        assert_eq!(blocks.containing(40), None);
        assert_eq!(blocks.containing(59), Some(50));
        assert_eq!(blocks.containing(60), None);
        assert_eq!(blocks.containing(99), None);
    }
}
