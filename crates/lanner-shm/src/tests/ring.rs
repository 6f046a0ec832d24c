//! The ring between an honest producer and consumer: records, padding, the room a
//! producer may use and how space comes back.

use std::sync::atomic::Ordering;

use super::{pattern, ring, send, send_to_idle};
use crate::ring::{RECORD_ALIGN, RECORD_HEADER, SLACK, record_size};

#[test]
fn records_arrive_in_order_with_their_bytes() {
    let (mut producer, mut consumer, _, _) = ring(4096, 64);
    // Around the 8-byte steps, and around the lines a record fills (a payload of 56 takes
    // one whole line with its header, 57 a second one).
    let lens = [0usize, 1, 7, 8, 9, 55, 56, 57, 63, 64, 65, 120, 121, 1000];
    for (i, len) in lens.into_iter().enumerate() {
        send(&mut producer, &pattern(len, i as u8), false);
    }
    for (i, len) in lens.into_iter().enumerate() {
        let record = consumer.try_recv().unwrap().expect("a record");
        assert_eq!(record.bytes, pattern(len, i as u8));
        assert!(!record.more);
    }
    assert_eq!(consumer.try_recv().unwrap(), None);
}

#[test]
fn an_abandoned_reservation_leaves_nothing_the_consumer_takes_for_a_header() {
    let (mut producer, mut consumer, _, _) = ring(4096, 1_000_000);
    // The producer zeroes the header words of several lines ahead at once; a reservation
    // filled across such lines and given up must not leave its bytes where the next
    // record's successor is looked for.
    send(&mut producer, b"first", false);
    // Given up at the end of this block.
    {
        let mut reservation = producer.try_reserve(500).unwrap().expect("room");
        reservation.as_mut_slice().fill(0xff);
    }
    send(&mut producer, b"second", false);
    for expected in [&b"first"[..], b"second"] {
        assert_eq!(
            consumer.try_recv().unwrap().expect("a record").bytes,
            expected
        );
    }
    assert_eq!(consumer.try_recv().unwrap(), None);
}

#[test]
fn fragments_carry_the_more_flag_and_are_copied() {
    let (mut producer, mut consumer, _, _) = ring(4096, 1);
    send(&mut producer, b"first piece", true);
    send(&mut producer, b"last piece", false);
    let first = consumer.try_recv().unwrap().unwrap();
    assert!(first.more);
    assert!(!first.in_place, "a fragment is a copy");
    assert_eq!(first.bytes, &b"first piece"[..]);
    let last = consumer.try_recv().unwrap().unwrap();
    assert!(!last.more);
    assert!(last.in_place);
    drop(last); // the last piece is held in place (in_place_min is 1): let it go
    // Fragments are copied out, so holding them does not pin the ring.
    let mut held = Vec::new();
    let mut cursor = 0;
    for _ in 0..100 {
        send_to_idle(&mut producer, &mut consumer, &pattern(100, cursor), true);
        let record = consumer.try_recv().unwrap().unwrap();
        assert_eq!(record.bytes, pattern(100, cursor));
        cursor = cursor.wrapping_add(1);
        held.push(record.bytes);
    }
    drop(first);
}

#[test]
fn records_wrap_around_the_end_through_padding() {
    let (mut producer, mut consumer, _, _) = ring(256, 16);
    let mut seed = 0u8;
    for round in 0..500usize {
        // Up to the largest record of this ring (120 bytes: two lines).
        let len = (round * 37) % 121;
        send_to_idle(&mut producer, &mut consumer, &pattern(len, seed), false);
        let record = consumer.try_recv().unwrap().expect("a record");
        assert_eq!(record.bytes, pattern(len, seed), "round {round}");
        assert_eq!(
            record.in_place,
            len >= 16,
            "round {round}: in place from 16 bytes"
        );
        seed = seed.wrapping_add(1);
    }
}

#[test]
fn a_producer_never_fills_the_last_line_of_the_ring() {
    // With nothing released, a ring of 256 bytes takes records of 192 bytes in all: the
    // line after them is where the producer stores the zero word that stops the consumer.
    let (mut producer, mut consumer, _, _) = ring(256, 1_000_000);
    for seed in 0..3 {
        send(&mut producer, &pattern(56, seed), false);
    }
    assert!(producer.try_reserve(0).unwrap().is_none(), "a fourth line");
    assert!(
        producer.prepare_wait(0).unwrap(),
        "no room: the producer may sleep"
    );
    let last_line = consumer
        .shared()
        .header(256 - SLACK)
        .load(Ordering::Relaxed);
    assert_eq!(last_line, 0, "the free line holds the zero word");
    for seed in 0..3 {
        assert_eq!(
            consumer.try_recv().unwrap().unwrap().bytes,
            pattern(56, seed)
        );
    }
    assert_eq!(
        consumer.try_recv().unwrap(),
        None,
        "stopped at the free line"
    );

    // The same 192 bytes as a record of two lines and one of a line.
    let (mut producer, _consumer, _, _) = ring(256, 1_000_000);
    send(&mut producer, &pattern(120, 0), false);
    send(&mut producer, &pattern(56, 1), false);
    assert!(producer.try_reserve(0).unwrap().is_none(), "the last line");
}

#[test]
fn the_largest_record_fits_wherever_an_idle_consumer_left_the_ring() {
    for capacity in [256usize, 1024, 4096] {
        let (mut producer, mut consumer, _, _) = ring(capacity, 1);
        // Three quarters of the ring (the consumer may keep the other quarter
        // unreleased), less the line kept free after the record and the header.
        let max = producer.max_record_len();
        assert_eq!(max, capacity / 4 * 3 - SLACK - RECORD_HEADER);
        let ring_start = consumer.shared().range_ptr(0, 0).addr();
        let mut position = 0;
        for (round, offset) in (0..capacity).step_by(RECORD_ALIGN).enumerate() {
            // Empty records (a line each, copied) bring the ring's position to `offset`.
            while position != offset {
                send_to_idle(&mut producer, &mut consumer, b"", false);
                consumer.try_recv().unwrap().unwrap();
                position = (position + RECORD_ALIGN) % capacity;
            }
            if producer.try_reserve(max).unwrap().is_none() {
                // Only the padding to the ring's end was missing; consuming it makes room.
                assert_eq!(consumer.try_recv().unwrap(), None);
            }
            send(&mut producer, &pattern(max, round as u8), false);
            let record = consumer.try_recv().unwrap().unwrap();
            assert_eq!(record.bytes, pattern(max, round as u8), "offset {offset}");
            assert!(record.in_place);
            // From where it does not fit before the end, it starts at 0 after padding.
            let start = record.bytes.as_ptr().addr() - ring_start - RECORD_HEADER;
            let fits = offset + record_size(max) <= capacity;
            assert_eq!(start, if fits { offset } else { 0 }, "offset {offset}");
            position = (start + record_size(max)) % capacity;
        }
    }
}

#[test]
fn consumed_space_is_given_back_a_quarter_ring_at_a_time() {
    let (mut producer, mut consumer, _, producer_bell) = ring(1024, 1_000_000);
    let head = |consumer: &crate::Consumer| consumer.shared().head().load(Ordering::Relaxed);
    // Records of a line (64 bytes) in the ring: three of them stay below a quarter (256
    // bytes).
    for _ in 0..3 {
        send(&mut producer, &pattern(8, 0), false);
        consumer.try_recv().unwrap().unwrap();
    }
    assert_eq!(head(&consumer), 0, "192 bytes consumed: not given back yet");
    send(&mut producer, &pattern(8, 0), false);
    consumer.try_recv().unwrap().unwrap();
    assert_eq!(
        head(&consumer),
        256,
        "a quarter consumed: given back at once"
    );
    // A producer waiting for room is woken by the release that crosses the threshold.
    // The largest record (696 bytes, 704 with its header) leaves 320 bytes unused, 256
    // of them free for records: not enough for a 256-byte payload (320 bytes in the
    // ring).
    assert_eq!(producer.max_record_len(), 696);
    send(&mut producer, &pattern(696, 1), false);
    assert!(producer.try_reserve(256).unwrap().is_none());
    assert!(producer.prepare_wait(256).unwrap());
    consumer.try_recv().unwrap().unwrap();
    assert_eq!(head(&consumer), 960);
    assert_eq!(producer_bell.count(), 1);
    assert!(producer.try_reserve(256).unwrap().is_some());
}

#[test]
fn a_full_ring_refuses_then_wakes_the_waiting_producer() {
    let (mut producer, mut consumer, _, producer_bell) = ring(256, 1_000_000);
    // A record of two lines (120 bytes and the header is the most they hold) and one of a
    // line fill the ring: the last line stays free.
    send(&mut producer, &pattern(120, 0), false);
    send(&mut producer, &pattern(56, 1), false);
    assert!(producer.try_reserve(8).unwrap().is_none());
    assert!(
        producer.prepare_wait(8).unwrap(),
        "no room: the producer may sleep"
    );
    assert_eq!(producer_bell.count(), 0);
    // The first record's 128 bytes are more than the quarter ring kept unreleased.
    consumer.try_recv().unwrap().unwrap();
    assert_eq!(
        producer_bell.count(),
        1,
        "releasing space rings the producer's bell"
    );
    consumer.try_recv().unwrap().unwrap();
    assert_eq!(
        producer_bell.count(),
        1,
        "the flag was cleared by the first ring"
    );
    assert!(!producer.prepare_wait(8).unwrap(), "room now: do not sleep");
    send(&mut producer, &pattern(8, 2), false);
}

#[test]
fn the_consumer_is_woken_only_when_it_sleeps() {
    let (mut producer, mut consumer, consumer_bell, _) = ring(4096, 64);
    send(&mut producer, b"awake", false);
    assert_eq!(consumer_bell.count(), 0);
    assert!(!consumer.prepare_sleep(), "a record is waiting");
    consumer.try_recv().unwrap().unwrap();
    assert!(consumer.prepare_sleep());
    send(&mut producer, b"asleep", false);
    assert_eq!(consumer_bell.count(), 1);
    send(&mut producer, b"again", false);
    assert_eq!(consumer_bell.count(), 1, "the first ring cleared the flag");
}

#[test]
fn held_records_pin_their_space_until_all_before_them_are_released() {
    let (mut producer, mut consumer, _, _) = ring(1024, 64);
    // Four lines each: the first is taken and let go at once (`head` moves to 256), then
    // two held ones and a copied one of a line: 576 bytes of the ring, up to 832.
    assert_eq!(record_size(200), 256);
    send(&mut producer, &pattern(200, 0), false);
    drop(consumer.try_recv().unwrap().unwrap());
    send(&mut producer, &pattern(200, 1), false);
    send(&mut producer, &pattern(200, 2), false);
    send(&mut producer, &pattern(8, 3), false); // copied: released behind the held ones
    let first = consumer.try_recv().unwrap().unwrap().bytes;
    let second = consumer.try_recv().unwrap().unwrap().bytes;
    let small = consumer.try_recv().unwrap().unwrap().bytes;
    assert_eq!(first, pattern(200, 1));
    assert_eq!(small, pattern(8, 3));
    // The largest record does not fit before the end: the rest of the ring is padded,
    // and the record does not fit at its start either.
    let max = producer.max_record_len();
    assert!(producer.try_reserve(max).unwrap().is_none());
    drop(second);
    assert!(
        producer.try_reserve(200).unwrap().is_none(),
        "the second record's space is behind the first, still held"
    );
    let first_copy = first.clone();
    drop(first);
    assert!(
        producer.try_reserve(200).unwrap().is_none(),
        "a clone still holds it"
    );
    drop(first_copy);
    // Everything is released: the largest record fits.
    send_to_idle(&mut producer, &mut consumer, &pattern(max, 4), false);
    assert_eq!(consumer.try_recv().unwrap().unwrap().bytes, pattern(max, 4));
}

#[test]
fn records_consumed_behind_a_held_one_take_one_entry_together() {
    let (mut producer, mut consumer, _, _) = ring(4096, 64);
    send(&mut producer, &pattern(100, 1), false);
    let held = consumer.try_recv().unwrap().unwrap().bytes;
    // 50 one-line records behind the held one (two lines): 3,328 bytes of the 4,096,
    // none of them given back while the first is held.
    for seed in 0..50 {
        send(&mut producer, &pattern(8, seed), false);
        assert_eq!(
            consumer.try_recv().unwrap().unwrap().bytes,
            pattern(8, seed)
        );
    }
    assert_eq!(
        consumer.held_entries(),
        2,
        "the held record, and all after it"
    );
    drop(held);
    assert_eq!(consumer.held_entries(), 0);
    // Everything is given back: the largest record fits once the consumer is idle.
    let max = producer.max_record_len();
    send_to_idle(&mut producer, &mut consumer, &pattern(max, 4), false);
}

#[test]
fn a_consumer_dropped_before_its_records_keeps_the_memory_alive() {
    let (mut producer, mut consumer, _, _) = ring(1024, 16);
    send(&mut producer, &pattern(100, 9), false);
    let held = consumer.try_recv().unwrap().unwrap().bytes;
    drop(consumer);
    drop(producer);
    assert_eq!(held, pattern(100, 9));
}

/// An aligned reservation puts the chosen byte of the message where it was asked to
/// (modulo a cache line), whatever came before it and across the end of the ring, and
/// the consumer gets the message alone, copied or in place.
#[test]
fn an_aligned_record_places_its_byte_and_arrives_without_its_prefix() {
    use crate::ring::ALIGNMENT;

    for in_place_min in [1, 10_000] {
        let (mut producer, mut consumer, _, _) = ring(4096, in_place_min);
        for round in 0..200usize {
            // Records of assorted sizes move the ring's position about.
            let filler = pattern(round * 7 % 90, round as u8);
            send_to_idle(&mut producer, &mut consumer, &filler, false);
            assert_eq!(consumer.try_recv().unwrap().unwrap().bytes, filler);
            let message = pattern(300 + round % 50, round as u8 ^ 0x55);
            let (align_at, residue) = (round % 60, round * 13 % ALIGNMENT);
            let mut reservation = match producer
                .try_reserve_aligned(message.len(), align_at, residue)
                .unwrap()
            {
                Some(reservation) => reservation,
                None => {
                    // Padding first: the consumer skips it, then there is room.
                    assert_eq!(consumer.try_recv().unwrap(), None);
                    producer
                        .try_reserve_aligned(message.len(), align_at, residue)
                        .unwrap()
                        .expect("room in a drained ring")
                }
            };
            assert_eq!(
                (reservation.message_offset() + align_at) % ALIGNMENT,
                residue,
                "round {round}"
            );
            reservation.write(0, &message);
            reservation.commit(false);
            let record = consumer.try_recv().unwrap().expect("the aligned record");
            assert_eq!(record.bytes, message, "round {round}");
            assert_eq!(record.in_place, in_place_min == 1);
        }
    }
}
