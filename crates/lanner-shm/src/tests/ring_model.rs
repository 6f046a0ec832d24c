//! The ring against a model: a queue of messages, with received in-place records held and
//! released in random order, batches published at once, reservations given up or only
//! looked at, and payloads whose every line starts with a word shaped like a valid header
//! (so that a stale word taken for a header shows as a wrong record, not as an error).

use std::collections::VecDeque;

use bytes::Bytes;
use proptest::prelude::*;

use super::{FLAG_MORE, FLAG_PADDING, FLAG_WRITTEN, ring, word};
use crate::ring::{ALIGNMENT, Producer, RECORD_ALIGN, Reservation};

#[derive(Debug, Clone)]
enum Op {
    /// A record of `len` bytes; `aligned`: reserved with `try_reserve_aligned` (the byte
    /// to align, the residue); `publish`: committed and published, else committed into
    /// the pending batch.
    Send {
        len: usize,
        more: bool,
        aligned: Option<(usize, usize)>,
        publish: bool,
    },
    /// Room for a record of `len` bytes, filled with decoy headers and given up: nothing
    /// arrives.
    Abandon {
        len: usize,
        aligned: Option<(usize, usize)>,
    },
    /// Room for a record of `len` bytes asked for and dropped unwritten (as a sender
    /// waiting for room looks).
    Look(usize),
    /// The pending batch published.
    Publish,
    Recv,
    Release(usize),
}

fn op() -> impl Strategy<Value = Op> {
    let aligned = proptest::option::of((any::<usize>(), 0usize..64));
    prop_oneof![
        4 => (0usize..700, any::<bool>(), aligned.clone(), any::<bool>())
            .prop_map(|(len, more, aligned, publish)| Op::Send { len, more, aligned, publish }),
        2 => (0usize..700, aligned).prop_map(|(len, aligned)| Op::Abandon { len, aligned }),
        1 => (0usize..700).prop_map(Op::Look),
        1 => Just(Op::Publish),
        4 => Just(Op::Recv),
        2 => any::<usize>().prop_map(Op::Release),
    ]
}

/// `len` and `aligned` made valid for `producer`: records too large for the alignment
/// prefix go unaligned, and the byte to align lies within the record.
fn fitted(
    producer: &Producer,
    len: usize,
    aligned: Option<(usize, usize)>,
) -> (usize, Option<(usize, usize)>) {
    let len = len.min(producer.max_record_len());
    let aligned = aligned
        .filter(|_| len + ALIGNMENT <= producer.max_record_len())
        .map(|(at, residue)| (at % (len + 1), residue));
    (len, aligned)
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

/// Fills `message` (which starts at `offset` in the ring's data area) with bytes that
/// differ from record to record (`seed`), and puts a word that reads as a valid header
/// (an empty record, a full line, padding, a fragment) wherever a line starts.
fn decoys(message: &mut [u8], offset: usize, seed: usize) {
    let headers = [
        word(0, FLAG_WRITTEN),
        word(56, FLAG_WRITTEN),
        word(0, FLAG_PADDING | FLAG_WRITTEN),
        word(1, FLAG_MORE | FLAG_WRITTEN),
    ];
    for (i, byte) in message.iter_mut().enumerate() {
        *byte = (i as u8).wrapping_mul(7).wrapping_add(seed as u8);
    }
    let mut at = (RECORD_ALIGN - offset % RECORD_ALIGN) % RECORD_ALIGN;
    let mut kind = seed;
    while at < message.len() {
        let header = headers[kind % headers.len()].to_le_bytes();
        let end = message.len().min(at + header.len());
        message[at..end].copy_from_slice(&header[..end - at]);
        at += RECORD_ALIGN;
        kind += 1;
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn the_ring_behaves_like_a_queue(
        // 256 bytes (four lines: records of one or two, and the free line) to 2 KiB.
        capacity_log in 8u32..12,
        in_place_min in 0usize..400,
        ops in proptest::collection::vec(op(), 1..300),
    ) {
        let capacity = 1usize << capacity_log;
        let (mut producer, mut consumer, _, _) = ring(capacity, in_place_min);
        // Committed and not received yet, in order; the first `published` of them are
        // visible to the consumer.
        let mut in_flight: VecDeque<(Vec<u8>, bool)> = VecDeque::new();
        let mut published = 0usize;
        let mut held: Vec<(Bytes, Vec<u8>)> = Vec::new();
        let mut seed = 0usize;
        for op in ops {
            match op {
                Op::Send { len, more, aligned, publish } => {
                    let (len, aligned) = fitted(&producer, len, aligned);
                    // A fragment carries at least one byte.
                    let more = more && len > 0;
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
                    match reservation {
                        Some(mut reservation) => {
                            let mut bytes = vec![0; len];
                            decoys(&mut bytes, reservation.message_offset(), seed);
                            reservation.write(0, &bytes);
                            if publish {
                                reservation.commit(more);
                            } else {
                                reservation.commit_unpublished(more);
                            }
                            in_flight.push_back((bytes, more));
                            if publish {
                                published = in_flight.len();
                            }
                        }
                        // Unpublished records cannot be consumed: a sender publishes
                        // before it waits for room.
                        None => {
                            producer.publish_pending();
                            published = in_flight.len();
                        }
                    }
                }
                Op::Abandon { len, aligned } => {
                    let (len, aligned) = fitted(&producer, len, aligned);
                    seed += 1;
                    if let Some(mut reservation) = reserve(&mut producer, len, aligned) {
                        let offset = reservation.message_offset();
                        decoys(reservation.as_mut_slice(), offset, seed);
                    }
                }
                Op::Look(len) => {
                    let len = len.min(producer.max_record_len());
                    let _looked = producer.try_reserve(len).unwrap();
                }
                Op::Publish => {
                    producer.publish_pending();
                    published = in_flight.len();
                }
                Op::Recv => match consumer.try_recv().unwrap() {
                    None => prop_assert_eq!(published, 0, "a published record did not arrive"),
                    Some(record) => {
                        let (expected, more) = in_flight.pop_front().expect("a record never sent");
                        prop_assert_eq!(&record.bytes[..], &expected[..]);
                        prop_assert_eq!(record.more, more);
                        published = published.saturating_sub(1);
                        held.push((record.bytes, expected));
                    }
                },
                Op::Release(index) => {
                    if !held.is_empty() {
                        let (bytes, expected) = held.swap_remove(index % held.len());
                        prop_assert_eq!(&bytes[..], &expected[..], "held bytes changed");
                    }
                }
            }
        }
        // Publish, drain, release everything: the whole ring must be free again.
        producer.publish_pending();
        while let Some((expected, _)) = in_flight.pop_front() {
            let record = consumer.try_recv().unwrap().expect("a sent record");
            prop_assert_eq!(&record.bytes[..], &expected[..]);
            held.push((record.bytes, expected));
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
