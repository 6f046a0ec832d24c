use super::{ring, send, send_to_idle};
use std::sync::atomic::Ordering;

use crate::ring::{Consumer, RingError, hostile_consumer, record_size};

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

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
        let len = (round * 37) % 180;
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
fn the_largest_record_fits_wherever_an_idle_consumer_left_the_ring() {
    let (mut producer, mut consumer, _, _) = ring(256, 1);
    // Three quarters of the ring (three lines), less the header: the consumer may keep
    // the other quarter unreleased.
    assert_eq!(producer.max_record_len(), 184);
    let mut padded = 0;
    for round in 0..40usize {
        // Records of one to three lines move the ring's position by a line or more each
        // round (and may wrap), so the largest record meets every offset.
        let filler = pattern(round * 37 % 180, 0);
        send_to_idle(&mut producer, &mut consumer, &filler, false);
        consumer.try_recv().unwrap().unwrap();
        let max = producer.max_record_len();
        if producer.try_reserve(max).unwrap().is_none() {
            // Only the padding to the ring's end was missing; consuming it makes room.
            assert_eq!(consumer.try_recv().unwrap(), None);
            padded += 1;
        }
        send(&mut producer, &pattern(max, round as u8), false);
        let record = consumer.try_recv().unwrap().unwrap();
        assert_eq!(record.bytes, pattern(max, round as u8), "round {round}");
    }
    assert!(
        (1..40).contains(&padded),
        "{padded} of 40 rounds padded: the offsets did not vary"
    );
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
    // The largest record (760 bytes, 768 with its header) leaves 256 bytes free: not
    // enough for a 256-byte payload (320 bytes in the ring).
    assert_eq!(producer.max_record_len(), 760);
    send(&mut producer, &pattern(760, 1), false);
    assert!(producer.try_reserve(256).unwrap().is_none());
    assert!(producer.prepare_wait(256).unwrap());
    consumer.try_recv().unwrap().unwrap();
    assert_eq!(head(&consumer), 1024);
    assert_eq!(producer_bell.count(), 1);
    assert!(producer.try_reserve(256).unwrap().is_some());
}

#[test]
fn a_full_ring_refuses_then_wakes_the_waiting_producer() {
    let (mut producer, mut consumer, _, producer_bell) = ring(256, 1_000_000);
    // Two records of two lines each (128 bytes: 120 bytes and the header is the most two
    // lines hold, 57 the least) fill the ring.
    send(&mut producer, &pattern(120, 0), false);
    send(&mut producer, &pattern(57, 1), false);
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
    assert!(!consumer.prepare_sleep().unwrap(), "a record is waiting");
    consumer.try_recv().unwrap().unwrap();
    assert!(consumer.prepare_sleep().unwrap());
    send(&mut producer, b"asleep", false);
    assert_eq!(consumer_bell.count(), 1);
    send(&mut producer, b"again", false);
    assert_eq!(consumer_bell.count(), 1, "the first ring cleared the flag");
}

#[test]
fn held_records_pin_their_space_until_all_before_them_are_released() {
    let (mut producer, mut consumer, _, _) = ring(1024, 64);
    // Four lines each, then one line: 576 bytes of the ring.
    assert_eq!(record_size(200), 256);
    send(&mut producer, &pattern(200, 1), false);
    send(&mut producer, &pattern(200, 2), false);
    send(&mut producer, &pattern(8, 3), false); // copied: released behind the held ones
    let first = consumer.try_recv().unwrap().unwrap().bytes;
    let second = consumer.try_recv().unwrap().unwrap().bytes;
    let small = consumer.try_recv().unwrap().unwrap().bytes;
    assert_eq!(first, pattern(200, 1));
    assert_eq!(small, pattern(8, 3));
    // The largest record does not fit before the end: the rest of the ring is padded.
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
    // Everything is released: the largest record fits once the padding is skipped.
    send_to_idle(&mut producer, &mut consumer, &pattern(max, 4), false);
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

#[test]
fn hostile_positions_and_headers_are_errors_not_panics() {
    let header = |len: u32, flags: u32| {
        let mut bytes = len.to_le_bytes().to_vec();
        bytes.extend_from_slice(&flags.to_le_bytes());
        bytes
    };
    const POSITION: &str = "the producer's position is out of range";
    const PAST: &str = "a record runs past the published data";
    // Tails are whole lines (a record's 64 bytes) unless the case is about the tail: each
    // case is refused for the reason it names, not for a misaligned tail.
    let cases: Vec<(Vec<u8>, u64, &str, &str)> = vec![
        (header(4, 0), 4096 + 64, POSITION, "tail beyond a ring"),
        (header(4, 0), 12, POSITION, "misaligned tail"),
        (
            header(4, 0),
            8,
            POSITION,
            "tail of 8 bytes, not a whole line",
        ),
        (
            header(4, 8),
            64,
            "a record has unknown flags",
            "unknown flag",
        ),
        (header(100, 0), 64, PAST, "record past the published data"),
        (
            header(5000, 0),
            4096,
            PAST,
            "record past the end of the ring",
        ),
        (
            header(0, 1),
            64,
            "a padding record runs past the published data",
            "padding past the published data",
        ),
        (header(u32::MAX, 0), 4096, PAST, "huge length"),
        (
            header(0, 2),
            64,
            "a fragment record is empty",
            "an empty fragment",
        ),
        (
            header(4088, 1),
            4096,
            "a padding record fills the whole ring",
            "padding over the whole ring",
        ),
        (
            header(0, 4),
            64,
            "a prefixed record is empty",
            "an empty prefixed record",
        ),
        (
            [header(4, 4), vec![0, 1, 2, 3]].concat(),
            64,
            "a record's prefix does not fit in it",
            "a prefix of no bytes",
        ),
        (
            [header(4, 4), vec![5, 1, 2, 3]].concat(),
            64,
            "a record's prefix does not fit in it",
            "a prefix longer than its record",
        ),
        (
            [header(4, 6), vec![4, 1, 2, 3]].concat(),
            64,
            "a fragment record is empty",
            "a fragment that is all prefix",
        ),
    ];
    for (contents, tail, error, why) in cases {
        let mut consumer = hostile_consumer(4096, &contents, tail);
        let result = consumer.try_recv();
        assert_eq!(result, Err(RingError(error)), "{why}");
    }
}

#[test]
fn a_tail_that_goes_backwards_is_an_error() {
    let (mut producer, mut consumer, _, _) = ring(1024, 64);
    send(&mut producer, b"12345678", false);
    send(&mut producer, b"12345678", false);
    consumer.try_recv().unwrap().unwrap();
    consumer.try_recv().unwrap().unwrap();
    // Back from 128 to the end of the first record: aligned, only going backwards.
    consumer.shared().tail().store(64, Ordering::Relaxed);
    assert_eq!(
        consumer.try_recv(),
        Err(RingError("the producer's position is out of range"))
    );
}

#[test]
fn a_head_out_of_range_is_an_error_for_the_producer() {
    let (mut producer, consumer, _, _) = ring(1024, 64);
    send(&mut producer, b"12345678", false);
    for (head, why) in [
        (128, "past the tail (64)"),
        (3, "misaligned"),
        (8, "misaligned: 8 bytes, not a whole line"),
    ] {
        consumer.shared().head().store(head, Ordering::Relaxed);
        assert!(producer.prepare_wait(8).is_err(), "{why}");
    }
}

#[test]
fn records_committed_unpublished_appear_together_at_publication() {
    let (mut producer, mut consumer, _, _) = ring(4096, 64);
    for i in 0..3u8 {
        let mut reservation = producer.try_reserve(10).unwrap().expect("room");
        reservation.write(0, &pattern(10, i));
        reservation.commit_unpublished(false);
    }
    assert_eq!(consumer.try_recv().unwrap(), None, "nothing is visible yet");
    assert!(!consumer.has_known_records());
    producer.publish_pending();
    for i in 0..3u8 {
        let record = consumer.try_recv().unwrap().expect("published");
        assert_eq!(record.bytes, pattern(10, i));
        // The first receive learnt of all three.
        assert_eq!(consumer.has_known_records(), i < 2);
    }
    assert_eq!(consumer.try_recv().unwrap(), None);
    // Publishing again with nothing pending changes nothing; a plain commit publishes
    // everything before it too.
    producer.publish_pending();
    let mut reservation = producer.try_reserve(4).unwrap().unwrap();
    reservation.write(0, b"late");
    reservation.commit_unpublished(false);
    send(&mut producer, b"now", false);
    assert_eq!(consumer.try_recv().unwrap().unwrap().bytes, &b"late"[..]);
    assert_eq!(consumer.try_recv().unwrap().unwrap().bytes, &b"now"[..]);
}

#[test]
fn an_empty_fragment_is_an_error_even_in_a_stream_of_them() {
    // A ring full of empty fragments, which add nothing to their message: without the
    // check a consumer would take them lap after lap as the peer republishes.
    // One per line, where records start.
    let fragment: Vec<u8> = [[0, 0, 0, 0, 2, 0, 0, 0].as_slice(), &[0; 56]].concat();
    let contents = fragment.repeat(64);
    let mut consumer = hostile_consumer(4096, &contents, 4096);
    assert_eq!(
        consumer.try_recv(),
        Err(RingError("a fragment record is empty"))
    );
}

#[test]
fn a_lap_published_over_a_held_record_is_an_error() {
    // The producer may write a ring past what the consumer released, not past what it
    // read: a record held in place keeps its space, and every record consumed while it
    // is held waits behind it (bookkeeping that would otherwise grow without bound).
    // The record takes a line: the lap ends a ring past its end.
    let (mut producer, mut consumer, _, _) = ring(4096, 8);
    send(&mut producer, b"12345678", false);
    let held = consumer.try_recv().unwrap().expect("published").bytes;
    consumer.shared().tail().store(64 + 4096, Ordering::Release);
    assert_eq!(
        consumer.try_recv(),
        Err(RingError("the producer's position is out of range"))
    );
    drop(held);

    // Once the record is released, a whole ring past it is fine.
    let (mut producer, mut consumer, _, _) = ring(4096, 8);
    send(&mut producer, b"12345678", false);
    drop(consumer.try_recv().unwrap().expect("published"));
    consumer.shared().tail().store(64 + 4096, Ordering::Release);
    assert!(consumer.try_recv().is_ok());
}

#[test]
fn a_head_past_what_was_published_is_an_error_for_the_producer() {
    // The consumer cannot have released records it never saw: believing it would let
    // the producer overwrite records committed but not published yet.
    let (mut producer, consumer, _, _) = ring(1024, 64);
    send(&mut producer, b"12345678", false);
    let mut reservation = producer.try_reserve(8).unwrap().unwrap();
    reservation.write(0, b"unpublis");
    reservation.commit_unpublished(false);
    // Published up to 64, committed up to 128: a head of 128 (aligned, within the ring)
    // names the unpublished record.
    consumer.shared().head().store(128, Ordering::Relaxed);
    assert!(producer.prepare_wait(8).is_err());
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

#[test]
fn the_arrival_hint_tells_what_was_published_since_the_ring_was_last_found_empty() {
    let (mut producer, mut consumer, _, _) = ring(4096, 64);
    let hint = consumer.arrival_hint();
    assert!(!hint.maybe_arrived(), "nothing published yet");
    send(&mut producer, b"one", false);
    assert!(hint.maybe_arrived());
    send(&mut producer, b"two", false);
    assert_eq!(consumer.try_recv().unwrap().unwrap().bytes, &b"one"[..]);
    assert!(hint.maybe_arrived(), "a record is still waiting");
    assert_eq!(consumer.try_recv().unwrap().unwrap().bytes, &b"two"[..]);
    assert_eq!(consumer.try_recv().unwrap(), None);
    assert!(!hint.maybe_arrived(), "everything was taken");
    // Across the end of the ring (padding, then the record), every publication shows.
    for round in 0..200u8 {
        send_to_idle(&mut producer, &mut consumer, &pattern(100, round), false);
        assert!(hint.maybe_arrived(), "round {round}");
        assert_eq!(
            consumer.try_recv().unwrap().unwrap().bytes,
            pattern(100, round)
        );
        assert_eq!(consumer.try_recv().unwrap(), None);
        assert!(!hint.maybe_arrived(), "round {round}");
    }
}

#[test]
fn a_hostile_position_moves_only_the_hint_and_the_receive_still_refuses_it() {
    // A peer that rewinds its position to where the consumer last found the ring empty
    // makes the hint say nothing arrived; a receive (which pollers still make now and
    // then) reads the position itself and refuses it.
    let (mut producer, mut consumer, _, _) = ring(4096, 64);
    send(&mut producer, b"one", false);
    assert!(consumer.try_recv().unwrap().is_some());
    assert_eq!(consumer.try_recv().unwrap(), None);
    let hint = consumer.arrival_hint();
    send(&mut producer, b"two", false);
    assert!(hint.maybe_arrived());
    let rewind =
        |consumer: &Consumer, to: u64| consumer.shared().tail().store(to, Ordering::Relaxed);
    rewind(&consumer, record_size(3) as u64);
    assert!(!hint.maybe_arrived());
    assert!(consumer.try_recv().unwrap().is_none());
    rewind(&consumer, 0);
    assert_eq!(
        consumer.try_recv(),
        Err(RingError("the producer's position is out of range"))
    );
}
