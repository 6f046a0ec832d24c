//! Loans on heap memory: a block lent and given back is free again, bookkeeping survives a
//! hostile peer, and a receiver refuses what lies outside the area.

use crate::loans::{MAX_LENT, heap_loans};

const AREA: usize = 64 * 1024;

#[test]
fn a_lent_payload_reads_in_place_and_its_block_comes_back() {
    let (area, receiver) = heap_loans(AREA);
    let mut loan = area.loan(1000).unwrap();
    loan.as_mut_slice().fill(7);
    let bytes = loan.freeze();
    let offset = area.lend(&bytes).unwrap();
    let received = receiver.take(offset, bytes.len() as u64).unwrap();
    assert_eq!(&received[..], &[7u8; 1000][..]);
    assert_eq!(
        received.as_ptr(),
        bytes.as_ptr(),
        "read in place, not copied"
    );
    assert_eq!((area.lent(), receiver.held()), (1, 1));

    // Dropped here first: the block stays lent until the receiver gives it back.
    drop(bytes);
    assert!(area.loan(AREA).is_none(), "the lent block is not free yet");
    drop(received);
    assert_eq!(receiver.held(), 0);
    area.collect_returns();
    assert_eq!(area.lent(), 0);
    assert!(area.loan(AREA).is_some(), "every block is free again");
}

#[test]
fn a_block_given_back_while_still_held_here_waits_for_this_side() {
    let (area, receiver) = heap_loans(AREA);
    let bytes = area.loan(AREA).unwrap().freeze();
    let offset = area.lend(&bytes[10..20]).unwrap();
    assert_eq!(offset, 10, "a slice is lent at its own offset");
    drop(receiver.take(offset, 10).unwrap());
    area.collect_returns();
    assert!(area.loan(1).is_none(), "still held here");
    drop(bytes);
    assert!(area.loan(AREA).is_some());
}

#[test]
fn a_full_area_makes_no_loan_and_a_dropped_loan_frees_its_block() {
    let (area, _receiver) = heap_loans(AREA);
    assert!(area.loan(0).is_none());
    assert!(area.loan(AREA + 1).is_none());
    let first = area.loan(AREA / 2).unwrap();
    let second = area.loan(AREA / 2).unwrap();
    assert!(area.loan(1).is_none());
    drop(first);
    let third = area.loan(100).unwrap();
    assert!(
        area.loan(AREA / 2).is_none(),
        "only part of the first half is free"
    );
    drop((second, third));
    assert!(area.loan(AREA).is_some());
}

#[test]
fn only_bytes_of_this_area_are_lent() {
    let (area, _receiver) = heap_loans(AREA);
    let elsewhere = bytes::Bytes::from(vec![1u8; 100]);
    assert!(!area.contains(&elsewhere));
    assert_eq!(area.lend(&elsewhere), None);
}

#[test]
fn at_most_max_lent_lendings_are_outstanding() {
    let (area, receiver) = heap_loans(AREA);
    let bytes = area.loan(64).unwrap().freeze();
    let mut held = Vec::new();
    for _ in 0..MAX_LENT {
        let offset = area.lend(&bytes).unwrap();
        held.push(receiver.take(offset, 64).unwrap());
    }
    assert_eq!(area.lend(&bytes), None, "the owner copies instead");
    assert!(receiver.take(0, 64).is_err(), "a receiver refuses one more");
    held.pop();
    assert!(
        area.lend(&bytes).is_some(),
        "a return makes room (read on demand)"
    );
}

#[test]
fn a_receiver_refuses_a_payload_outside_the_area() {
    let (_area, receiver) = heap_loans(AREA);
    assert!(receiver.take(AREA as u64, 1).is_err());
    assert!(receiver.take(1, AREA as u64).is_err());
    assert!(receiver.take(u64::MAX, 2).is_err());
    let empty = receiver.take(AREA as u64, 0).unwrap();
    assert!(empty.is_empty());
    assert_eq!(receiver.held(), 1);
}

#[test]
fn returns_that_name_no_lent_block_are_ignored() {
    let (area, receiver) = heap_loans(AREA);
    let bytes = area.loan(64).unwrap().freeze();
    let offset = area.lend(&bytes).unwrap();
    // A hostile receiver gives back blocks it never had, and this one twice.
    for bogus in [offset + 64, 5000, AREA as u64 * 4] {
        drop(receiver.take(bogus.min(AREA as u64 - 1), 1));
    }
    let taken = receiver.take(offset, 64).unwrap();
    drop(taken.clone());
    drop(taken);
    drop(receiver.take(offset, 64).unwrap());
    area.collect_returns();
    assert_eq!(area.lent(), 0, "one lending, given back (twice)");
    assert!(area.loan(AREA).is_none(), "held here still");
    drop(bytes);
    assert!(area.loan(AREA).is_some());
}

#[test]
fn an_unsent_lending_is_taken_back() {
    let (area, _receiver) = heap_loans(AREA);
    let bytes = area.loan(64).unwrap().freeze();
    let offset = area.lend(&bytes).unwrap();
    area.unlend(offset);
    assert_eq!(area.lent(), 0);
    drop(bytes);
    assert!(area.loan(AREA).is_some());
}

#[test]
fn a_copy_lent_at_once_comes_back_free_and_an_unsent_one_too() {
    let (area, receiver) = heap_loans(AREA);
    let (mut block, offset) = area.loan_lent(3000).unwrap();
    block.as_mut_slice().fill(5);
    drop(block);
    let received = receiver.take(offset, 3000).unwrap();
    assert_eq!(&received[..], &[5u8; 3000][..]);
    assert!(area.loan(AREA).is_none(), "lent, not free");
    drop(received);
    assert!(
        area.loan(AREA).is_some(),
        "given back: free (returns read on loan)"
    );
    let (unsent_block, unsent) = area.loan_lent(100).unwrap();
    area.unlend(unsent);
    assert_eq!(area.lent(), 0);
    drop(unsent_block);
    assert!(area.loan(AREA).is_some());
    assert_eq!(area.lendings(), 1, "the unsent one does not count");
}

#[test]
fn a_block_being_filled_is_not_freed_by_an_early_return() {
    let (area, receiver) = heap_loans(AREA);
    let (mut block, offset) = area.loan_lent(AREA).unwrap();
    // A hostile peer gives the block back before it was even sent.
    drop(receiver.take(offset, 1).unwrap());
    area.collect_returns();
    assert_eq!(area.lent(), 0, "the early return was read");
    assert!(area.loan(1).is_none(), "still held while it is filled");
    block.as_mut_slice().fill(7);
    drop(block);
    assert!(area.loan(AREA).is_some(), "free once the loan is dropped");
}

#[test]
fn one_collection_takes_at_most_max_lent_returns() {
    // A receiver that keeps publishing returns (ignored when they name no lent block)
    // cannot keep the owner collecting, under the ledger's lock, for as long as it
    // likes: one collection takes at most as many returns as the receiver can owe.
    let (area, receiver) = heap_loans(AREA);
    let bytes = area.loan(64).unwrap().freeze();
    let offset = area.lend(&bytes).unwrap();
    for _ in 0..MAX_LENT {
        drop(receiver.take(AREA as u64 - 1, 1));
    }
    drop(receiver.take(offset, 64).unwrap());
    area.collect_returns();
    assert_eq!(
        area.lent(),
        1,
        "the genuine return waits behind the bogus ones"
    );
    area.collect_returns();
    assert_eq!(
        area.lent(),
        0,
        "the genuine return was read by the next collection (the returns ring must hold \
         more than MAX_LENT returns, or the receiver drops it)"
    );
}

mod hostile_returns {
    //! The loan area against a receiver that gives back whatever it likes, driven by the
    //! `loan_returns` fuzz driver (see [`crate::fuzzing::loan_returns`]).

    use proptest::prelude::*;

    use crate::fuzzing::loan_returns;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn held_blocks_stay_held_and_everything_comes_back(
            ops in proptest::collection::vec(any::<u8>(), 0..1024),
        ) {
            loan_returns(&ops);
        }
    }
}
