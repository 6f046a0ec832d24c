//! The ring against a model: a queue of messages, with received in-place records held and
//! released in random order.

use std::collections::VecDeque;

use bytes::Bytes;
use proptest::prelude::*;

use super::ring;
use crate::ring::{Producer, Reservation};

#[derive(Debug, Clone)]
enum Op {
    /// A record of `len` bytes; `aligned`: reserved with `try_reserve_aligned` (the byte
    /// to align, the residue).
    Send {
        len: usize,
        more: bool,
        aligned: Option<(usize, usize)>,
    },
    /// Room for a record of `len` bytes, filled with ones and given up: nothing arrives.
    Abandon(usize),
    Recv,
    Release(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0usize..700, any::<bool>(), proptest::option::of((any::<usize>(), 0usize..64)))
            .prop_map(|(len, more, aligned)| Op::Send { len, more, aligned }),
        1 => (0usize..700).prop_map(Op::Abandon),
        4 => Just(Op::Recv),
        2 => any::<usize>().prop_map(Op::Release),
    ]
}

/// Room for a record of `len` bytes, aligned as `aligned` says (see [`Op::Send`]).
fn reserve(
    producer: &mut Producer,
    len: usize,
    aligned: Option<(usize, usize)>,
) -> Option<Reservation<'_>> {
    match aligned {
        Some((at, residue)) => producer.try_reserve_aligned(len, at, residue).unwrap(),
        None => producer.try_reserve(len).unwrap(),
    }
}

fn payload(len: usize, seed: u64) -> Vec<u8> {
    (0..len)
        .map(|i| (seed.wrapping_mul(0x9e37_79b9).wrapping_add(i as u64) % 251) as u8)
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn the_ring_behaves_like_a_queue(
        // 256 bytes (four lines: records of one or two, and the free line) to 2 KiB.
        capacity_log in 8u32..12,
        in_place_min in 0usize..400,
        ops in proptest::collection::vec(op(), 1..300),
    ) {
        let capacity = 1usize << capacity_log;
        let (mut producer, mut consumer, _, _) = ring(capacity, in_place_min);
        let mut in_flight: VecDeque<(Vec<u8>, bool)> = VecDeque::new();
        let mut held: Vec<(Bytes, Vec<u8>)> = Vec::new();
        let mut seed = 0u64;
        for op in ops {
            match op {
                Op::Send { len, more, aligned } => {
                    let len = len.min(producer.max_record_len());
                    // The prefix needs room: records that large go unaligned.
                    let aligned = aligned
                        .filter(|_| len + crate::ring::ALIGNMENT <= producer.max_record_len())
                        .map(|(at, residue)| (at % (len + 1), residue));
                    // A fragment carries at least one byte.
                    let more = more && len > 0;
                    let bytes = payload(len, seed);
                    seed += 1;
                    let mut reservation = reserve(&mut producer, len, aligned);
                    if reservation.is_none() && in_flight.is_empty() && held.is_empty() {
                        // Refusing is right only while records take space. With none sent
                        // and unread, or held, the consumer gives back what it read (lazily:
                        // at its next look) and then the record must fit.
                        prop_assert_eq!(consumer.try_recv().unwrap(), None);
                        reservation = reserve(&mut producer, len, aligned);
                        prop_assert!(reservation.is_some(), "an empty ring refused {} bytes", len);
                    }
                    if let Some(mut reservation) = reservation {
                        reservation.write(0, &bytes);
                        reservation.commit(more);
                        in_flight.push_back((bytes, more));
                    }
                }
                Op::Abandon(len) => {
                    let len = len.min(producer.max_record_len());
                    if let Some(mut reservation) = reserve(&mut producer, len, None) {
                        reservation.as_mut_slice().fill(0xff);
                    }
                }
                Op::Recv => {
                    let record = consumer.try_recv().unwrap();
                    match (record, in_flight.pop_front()) {
                        (None, None) => {}
                        (Some(record), Some((expected, more))) => {
                            prop_assert_eq!(&record.bytes[..], &expected[..]);
                            prop_assert_eq!(record.more, more);
                            held.push((record.bytes, expected));
                        }
                        (got, expected) => prop_assert!(false, "got {:?}, expected {:?}", got, expected),
                    }
                }
                Op::Release(index) => {
                    if !held.is_empty() {
                        let (bytes, expected) = held.swap_remove(index % held.len());
                        prop_assert_eq!(&bytes[..], &expected[..], "held bytes changed");
                    }
                }
            }
        }
        // Drain, release everything: the whole ring must be free again.
        while let Some((expected, _)) = in_flight.pop_front() {
            let record = consumer.try_recv().unwrap().expect("a sent record");
            prop_assert_eq!(&record.bytes[..], &expected[..]);
        }
        prop_assert_eq!(consumer.try_recv().unwrap(), None);
        for (bytes, expected) in held.drain(..) {
            prop_assert_eq!(&bytes[..], &expected[..]);
        }
        // A maximal record may need padding first; after that it must fit.
        let max = producer.max_record_len();
        if producer.try_reserve(max).unwrap().is_none() {
            prop_assert_eq!(consumer.try_recv().unwrap(), None);
            prop_assert!(producer.try_reserve(max).unwrap().is_some(), "space leaked");
        }
    }
}
