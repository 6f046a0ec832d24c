//! How records become visible without a shared tail: the header word is the arrival flag,
//! the first header of a batch is withheld until publication, the producer zeroes the word
//! where the next record will start before each header, and the arrival hint watches the
//! word where the consumer found nothing.

use std::collections::BTreeSet;
use std::sync::atomic::Ordering;

use super::{FLAG_MORE, FLAG_PADDING, FLAG_WRITTEN, pattern, ring, send, send_to_idle, word};
use crate::ring::{Consumer, Producer, RECORD_ALIGN, RECORD_HEADER, record_size};

/// The header word at data offset `offset`, as the consumer would load it.
fn header_at(consumer: &Consumer, offset: usize) -> u64 {
    consumer.shared().header(offset).load(Ordering::Relaxed)
}

/// Reserves and fills a record of `payload`, committed unpublished.
fn commit_unpublished(producer: &mut Producer, payload: &[u8]) {
    let mut reservation = producer.try_reserve(payload.len()).unwrap().expect("room");
    reservation.write(0, payload);
    reservation.commit_unpublished(false);
}

#[test]
fn records_committed_unpublished_stay_invisible_until_published() {
    let (mut producer, mut consumer, _, _) = ring(4096, 64);
    let hint = consumer.arrival_hint();
    assert_eq!(consumer.try_recv().unwrap(), None);
    for i in 0..3u8 {
        commit_unpublished(&mut producer, &pattern(10, i));
    }
    // The later records' headers are in place already: only the first one's is withheld,
    // and the consumer cannot pass it.
    assert_eq!(header_at(&consumer, 0), 0, "the first header is withheld");
    assert_ne!(header_at(&consumer, 64), 0, "the second header is written");
    assert!(!consumer.has_known_records());
    assert!(!hint.maybe_arrived());
    assert_eq!(consumer.try_recv().unwrap(), None, "nothing is visible yet");
    producer.publish_pending();
    assert!(
        !consumer.has_known_records(),
        "known once the first header, which counts the rest, is read"
    );
    assert!(hint.maybe_arrived());
    for i in 0..3u8 {
        let record = consumer.try_recv().unwrap().expect("published");
        assert_eq!(record.bytes, pattern(10, i));
        assert_eq!(consumer.has_known_records(), i < 2, "record {i}");
    }
    assert_eq!(consumer.try_recv().unwrap(), None);
    // Publishing again with nothing pending changes nothing; a plain commit publishes
    // everything before it too.
    producer.publish_pending();
    assert!(!consumer.has_known_records());
    commit_unpublished(&mut producer, b"late");
    assert!(!consumer.has_known_records());
    assert!(!hint.maybe_arrived());
    send(&mut producer, b"now", false);
    assert!(hint.maybe_arrived());
    assert_eq!(consumer.try_recv().unwrap().unwrap().bytes, &b"late"[..]);
    assert!(consumer.has_known_records(), "published with the first");
    assert_eq!(consumer.try_recv().unwrap().unwrap().bytes, &b"now"[..]);
}

#[test]
fn records_published_one_by_one_are_looked_for_only_while_they_come_back_to_back() {
    let (mut producer, mut consumer, _, _) = ring(4096, 64);
    let take = |consumer: &mut Consumer, expected: &[u8]| {
        let record = consumer.try_recv().unwrap().expect("a record");
        assert_eq!(record.bytes, expected);
    };
    // One at a time, as in a ping-pong: the next record's line is not looked at, even
    // when a record waits there (false when unsure).
    send(&mut producer, b"a", false);
    take(&mut consumer, b"a");
    assert_eq!(consumer.try_recv().unwrap(), None);
    send(&mut producer, b"b", false);
    send(&mut producer, b"c", false);
    take(&mut consumer, b"b");
    assert!(
        !consumer.has_known_records(),
        "the first of a run, after runs of one"
    );
    // The second record of a run: they come back to back, so the next one is looked for.
    take(&mut consumer, b"c");
    assert!(!consumer.has_known_records(), "nothing there");
    send(&mut producer, b"d", false);
    assert!(consumer.has_known_records(), "found where it will be");
    take(&mut consumer, b"d");
    assert_eq!(consumer.try_recv().unwrap(), None);
    // That run was three records: the next run's first record looks too.
    send(&mut producer, b"e", false);
    send(&mut producer, b"f", false);
    take(&mut consumer, b"e");
    assert!(consumer.has_known_records());
    take(&mut consumer, b"f");
    assert_eq!(consumer.try_recv().unwrap(), None);
    // A run of one ends the looking again.
    send(&mut producer, b"g", false);
    take(&mut consumer, b"g");
    assert_eq!(consumer.try_recv().unwrap(), None);
    send(&mut producer, b"h", false);
    send(&mut producer, b"i", false);
    take(&mut consumer, b"h");
    assert!(!consumer.has_known_records());
}

#[test]
fn an_unpublished_record_after_padding_hides_the_previous_lap() {
    // The record starts at offset 0, over a header of the lap before: the padding's zero
    // word hides that one, and the record's own header is withheld.
    let (mut producer, mut consumer, _, _) = ring(256, 1_000_000);
    send(&mut producer, &pattern(120, 0), false);
    send(&mut producer, &pattern(56, 1), false);
    consumer.try_recv().unwrap().unwrap();
    consumer.try_recv().unwrap().unwrap();
    assert_ne!(header_at(&consumer, 0), 0, "the first lap's header");
    // At 192: two lines do not fit before the end; padding first (published at once).
    commit_unpublished(&mut producer, &pattern(100, 2));
    assert_eq!(header_at(&consumer, 0), 0);
    assert_ne!(header_at(&consumer, 192), 0, "the padding is published");
    assert_eq!(
        consumer.try_recv().unwrap(),
        None,
        "the padding, then nothing"
    );
    assert!(!consumer.has_known_records());
    producer.publish_pending();
    assert_eq!(consumer.try_recv().unwrap().unwrap().bytes, pattern(100, 2));
    assert_eq!(consumer.try_recv().unwrap(), None);
}

/// A payload of `len` bytes whose first word on every line of the ring it covers (at
/// payload offset `64 k - 8`) is a well-formed header: an empty record, a record of a
/// line, padding, or a fragment, cut short at the payload's end.
fn decoy(len: usize, seed: usize) -> Vec<u8> {
    let mut payload = pattern(len, seed as u8);
    let headers = [
        word(0, FLAG_WRITTEN),
        word(56, FLAG_WRITTEN),
        word(0, FLAG_PADDING | FLAG_WRITTEN),
        word(1, FLAG_MORE | FLAG_WRITTEN),
    ];
    let mut at = RECORD_ALIGN - RECORD_HEADER;
    let mut kind = seed;
    while at < len {
        let bytes = headers[kind % headers.len()].to_le_bytes();
        let end = len.min(at + bytes.len());
        payload[at..end].copy_from_slice(&bytes[..end - at]);
        at += RECORD_ALIGN;
        kind += 1;
    }
    payload
}

#[test]
fn payload_bytes_shaped_like_headers_are_never_taken_for_records() {
    // Records of one to six lines, in batches, lap after lap: records start in the middle
    // of earlier laps' records, on lines that held one of their decoy headers. The word
    // the producer zeroes ahead of each record is what stops the consumer there.
    let lens = [0usize, 56, 57, 120, 200, 300, 350];
    for in_place_min in [1, 1_000_000] {
        let (mut producer, mut consumer, _, _) = ring(1024, in_place_min);
        let hint = consumer.arrival_hint();
        let ring_start = consumer.shared().range_ptr(0, 0).addr();
        let mut starts = BTreeSet::new();
        let mut seed = 0usize;
        for round in 0..300usize {
            let mut sent = Vec::new();
            let count = 1 + round % 3;
            for k in 0..count {
                let len = lens[(round * 5 + k * 3) % lens.len()];
                let payload = decoy(len, seed);
                seed += 1;
                let Some(mut reservation) = producer.try_reserve(len).unwrap() else {
                    break;
                };
                reservation.write(0, &payload);
                // A batch: the last record publishes it, or `publish_pending` if the
                // ring had no room for it.
                if k + 1 == count {
                    reservation.commit(false);
                } else {
                    reservation.commit_unpublished(false);
                }
                sent.push(payload);
            }
            producer.publish_pending();
            for (i, payload) in sent.iter().enumerate() {
                let record = consumer.try_recv().unwrap().expect("a record sent");
                assert_eq!(&record.bytes[..], &payload[..], "round {round}, record {i}");
                if record.in_place {
                    starts.insert(record.bytes.as_ptr().addr() - ring_start - RECORD_HEADER);
                }
            }
            // Padding the producer published before finding no room may follow them.
            assert_eq!(consumer.try_recv().unwrap(), None, "round {round}");
            assert!(!consumer.has_known_records(), "round {round}");
            assert!(!hint.maybe_arrived(), "round {round}");
        }
        if in_place_min == 1 {
            // Of the 16 lines (in-place records only: not the empty ones).
            assert!(
                starts.len() >= 12,
                "records started on the lines {starts:?}"
            );
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
    assert!(
        hint.maybe_arrived(),
        "true until the consumer finds the ring empty"
    );
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
fn the_arrival_hint_stays_true_after_a_record_is_taken_though_a_lap_zeroes_its_word() {
    // The consumer finds the ring empty at 0, takes the record published there, and the
    // next ones, without finding it empty again. The fourth record's zero word lands on
    // offset 0 again while it waits: the hint must not read that word.
    let (mut producer, mut consumer, _, _) = ring(256, 1_000_000);
    let hint = consumer.arrival_hint();
    assert_eq!(consumer.try_recv().unwrap(), None);
    for seed in 0..3 {
        send(&mut producer, &pattern(56, seed), false);
        consumer.try_recv().unwrap().unwrap();
    }
    send(&mut producer, &pattern(56, 3), false);
    assert_eq!(
        header_at(&consumer, 0),
        0,
        "zeroed ahead of the fourth record"
    );
    assert!(hint.maybe_arrived(), "the fourth record waits");
    assert_eq!(consumer.try_recv().unwrap().unwrap().bytes, pattern(56, 3));
    assert_eq!(consumer.try_recv().unwrap(), None);
    assert!(!hint.maybe_arrived());
}

#[test]
fn a_hostile_header_moves_only_the_hint_and_the_receive_still_refuses_it() {
    // The peer controls the word the hint loads: it can make pollers look (garbage, which
    // the receive refuses) or not look (a header it takes back before the consumer saw
    // it), and nothing else.
    let (mut producer, mut consumer, _, _) = ring(4096, 64);
    send(&mut producer, b"one", false);
    assert!(consumer.try_recv().unwrap().is_some());
    assert_eq!(consumer.try_recv().unwrap(), None);
    let hint = consumer.arrival_hint();
    let at = record_size(3);
    send(&mut producer, b"two", false);
    assert!(hint.maybe_arrived());
    consumer.shared().header(at).store(0, Ordering::Relaxed);
    assert!(!hint.maybe_arrived(), "taken back");
    assert_eq!(consumer.try_recv().unwrap(), None);
    let garbage = word(3, 0x100 | FLAG_WRITTEN);
    consumer
        .shared()
        .header(at)
        .store(garbage, Ordering::Relaxed);
    assert!(hint.maybe_arrived());
    assert_eq!(
        consumer.try_recv(),
        Err(crate::RingError("a record has unknown flags"))
    );
}

#[test]
fn a_batch_count_that_lies_only_makes_the_receiver_look_again() {
    // A batch's first header counts the records after it (the flags' upper half). A
    // hostile count makes the consumer expect records that are not there: its next
    // receive finds nothing, and the record that does follow is taken as usual.
    let (mut producer, mut consumer, _, _) = ring(4096, 64);
    send(&mut producer, b"one", false);
    let header = consumer.shared().header(0);
    let lying = header.load(Ordering::Relaxed) | u64::from(u16::MAX) << 48;
    header.store(lying, Ordering::Release);
    assert_eq!(consumer.try_recv().unwrap().unwrap().bytes, &b"one"[..]);
    assert!(consumer.has_known_records(), "what the header claimed");
    assert_eq!(consumer.try_recv().unwrap(), None);
    send(&mut producer, b"xyz", false);
    assert_eq!(consumer.try_recv().unwrap().unwrap().bytes, &b"xyz"[..]);
}
